"""A real OpenSSH sshd (Debian's openssh-server) on 127.0.0.1 for tests.

It runs as the test user with generated host and client keys. A ForceCommand wrapper
appends every command line sshd receives to `commands.log` and then runs it with
`sh -c`, so tests can assert on exactly what reached the remote side (quoting, one
round trip per cycle, no secret in argv). `shims/` is first on the remote PATH: tests
put vendor-CLI stand-ins there (db2, ONTAP, esxtop) where no real peer can exist.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHServer:
    def __init__(self, root: Path):
        self.root = root
        self.user = getpass.getuser()
        self.port = 0
        self.shims = root / "shims"
        self.client_key = root / "client_key"
        self.host_key = root / "host_key"
        self.known_hosts = root / "known_hosts"
        self.commands_log = root / "commands.log"
        self.log = root / "sshd.log"
        self.proc: subprocess.Popen | None = None

    def setup(self) -> None:
        if not os.access(SSHD, os.X_OK):
            raise RuntimeError(f"{SSHD} is missing; run tests/infra/install-deps.sh (Debian openssh-server)")
        self.shims.mkdir(parents=True, exist_ok=True)
        for key in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        shutil.copy(f"{self.client_key}.pub", self.root / "authorized_keys")
        wrapper = self.root / "logcmd"
        wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$SSH_ORIGINAL_COMMAND" >> {self.commands_log}\n'
                           'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
        wrapper.chmod(0o755)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory

    def write_config(self) -> Path:
        cfg = self.root / "sshd_config"
        cfg.write_text(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {self.root}/sshd.pid
AuthorizedKeysFile {self.root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers {self.user}
UsePAM no
StrictModes no
MaxSessions 20
MaxStartups 50
ClientAliveInterval 0
SetEnv PATH={self.shims}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
ForceCommand {self.root}/logcmd
""")
        return cfg

    def start(self) -> None:
        self.port = self.port or free_port()
        cfg = self.write_config()
        subprocess.run([SSHD, "-t", "-f", str(cfg)], check=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sshd exited: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        else:
            raise RuntimeError("sshd did not start listening")
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill_sessions(self) -> None:
        """Drop every open connection (kill the per-connection sshd children), keep listening."""
        if self.proc is None:
            return
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        for pid in out.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    def commands(self) -> list[str]:
        return self.commands_log.read_text().splitlines() if self.commands_log.exists() else []

    def clear_commands(self) -> None:
        self.commands_log.unlink(missing_ok=True)

    def shim(self, name: str, script: str) -> Path:
        """Install an executable stand-in on the remote PATH."""
        path = self.shims / name
        path.write_text(script)
        path.chmod(0o755)
        return path

    def ssh_config(self, **overrides: object) -> dict[str, object]:
        """Keys of an [[ssh]] config section that reach this server."""
        return {"name": "test", "host": "127.0.0.1", "port": self.port, "user": self.user,
                "key_file": str(self.client_key), "known_hosts": str(self.known_hosts), **overrides}
