"""A hostile SSH server: paramiko's server side on 127.0.0.1, relaying every exec request to `sh -c` on
this machine as sshd does (stdin, stdout, stderr, exit status), except the commands that match
`silent`: those it accepts and never answers, neither success nor failure, while the connection and
its other channels go on working. OpenSSH's sshd cannot be made to do that; a compromised or wedged
server can (the reply is the server's to send, and nothing in the protocol makes it send one).

Keys are made with ssh-keygen as tests/infra/sshd.py makes them; `known_hosts` holds the server's key for
the client.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import threading
from pathlib import Path

import paramiko

_REPLIES = (99, 100)  # SSH_MSG_CHANNEL_SUCCESS, SSH_MSG_CHANNEL_FAILURE


class _Transport(paramiko.Transport):
    """Drops the reply to the requests of the channels in `silent` (the client's channel ids)."""

    silent: set[int]

    def _send_user_message(self, data: paramiko.Message) -> None:
        raw = data.asbytes()
        if raw and raw[0] in _REPLIES and int.from_bytes(raw[1:5], "big") in self.silent:
            return
        super()._send_user_message(data)


class _Server(paramiko.ServerInterface):
    def __init__(self, owner: HostileSSH, transport: _Transport):
        self.owner, self.transport = owner, transport

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL if key == self.owner.client_public else paramiko.AUTH_FAILED

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        line = command.decode("utf-8", "replace")
        self.owner.commands.append(line)
        if re.search(self.owner.silent, line):
            self.transport.silent.add(channel.remote_chanid)  # accepted, and never answered
            self.owner.unanswered += 1
            return True
        threading.Thread(target=_relay, args=(channel, line), daemon=True).start()
        return True


def _relay(chan: paramiko.Channel, line: str) -> None:
    p = subprocess.Popen(["sh", "-c", line], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def feed() -> None:
        try:
            while data := chan.recv(65536):
                p.stdin.write(data)
        except (OSError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError):
                p.stdin.close()

    def errors() -> None:
        while chunk := p.stderr.read1(65536):
            chan.sendall_stderr(chunk)

    helpers = [threading.Thread(target=feed, daemon=True), threading.Thread(target=errors, daemon=True)]
    for t in helpers:
        t.start()
    try:
        while chunk := p.stdout.read1(65536):
            chan.sendall(chunk)
        helpers[1].join()
        chan.send_exit_status(p.wait())
        chan.shutdown_write()
    except (OSError, EOFError, paramiko.SSHException):
        p.kill()
    finally:
        chan.close()


class HostileSSH:
    def __init__(self, root: Path, silent: str):
        self.root, self.silent = root, silent
        self.commands: list[str] = []
        self.unanswered = 0
        root.mkdir(parents=True, exist_ok=True)
        self.host_key_file, self.client_key = root / "host_key", root / "client_key"
        for key in (self.host_key_file, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(self.host_key_file))
        self.client_public = paramiko.Ed25519Key.from_private_key_file(str(self.client_key))
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self.known_hosts = root / "known_hosts"
        key = self.host_key
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {key.get_name()} {key.get_base64()}\n")
        self._transports: list[_Transport] = []
        self._stop = threading.Event()

    def __enter__(self) -> HostileSSH:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()
        for t in self._transports:
            t.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            t = _Transport(conn)
            t.silent = set()
            t.add_server_key(self.host_key)
            self._transports.append(t)
            try:
                t.start_server(server=_Server(self, t))
            except (paramiko.SSHException, EOFError, OSError):
                t.close()
