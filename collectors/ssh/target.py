"""One SSH target ([[ssh]] in the config), shared by every collector that reads it.

One paramiko connection per target is kept and reused across cycles (a channel per
command), with keepalives, a cap on concurrent channels, connect timeouts, one deadline
for the whole of each command (agent/core/deadline.py: its channel closed from outside when
it passes), and reconnection with exponential backoff after a failure. Host keys are verified
against known_hosts; unknown keys are refused unless `host_key_policy = "accept-new"`,
which records first-seen keys in db2vtop's own known_hosts file. Remote commands are
only ever built from argv with shlex quoting; scripts travel on stdin, not argv.
"""

from __future__ import annotations

import logging
import select
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from db2vtop.agent.core.deadline import Deadline, DeadlineError, deadline
from db2vtop.agent.core.files import append_private, make_private_dir
from db2vtop.agent.core.paths import state_dir
from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.ssh.config import SSHConfig

log = logging.getLogger(__name__)

MAX_OUTPUT_BYTES = 64 * 2**20
BACKOFF_START_S, BACKOFF_MAX_S = 1.0, 60.0


class SSHError(CollectorError):
    """Any failure to run a command on a target; the message says what to do."""


class SSHHostKeyError(SSHError):
    pass


class SSHAuthError(SSHError):
    pass


class SSHConnectError(SSHError):
    pass


class SSHTimeoutError(SSHError):
    pass


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: bytes
    stderr: bytes
    seconds: float

    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")


def command(*argv: str) -> str:
    """The only way a remote command line is built: every word quoted for sh."""
    return shlex.join(argv)


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as ssh-keygen -lf prints it


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """OpenSSH's StrictHostKeyChecking=accept-new: record unknown keys, never replace known ones."""

    def __init__(self, known_hosts: Path):
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        make_private_dir(self.known_hosts.parent)
        entry = paramiko.hostkeys.HostKeyEntry([hostname], key)
        with append_private(self.known_hosts) as f:  # 0600 from the start, never through a link
            f.write(entry.to_line())
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("ssh: recorded new host key %s %s for %s in %s", key.get_name(), fingerprint(key), hostname,
                    self.known_hosts)


class _Reject(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts: list[Path]):
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        files = ", ".join(str(p) for p in self.known_hosts)
        raise SSHHostKeyError(
            f"unknown host key for {hostname} ({key.get_name()} {fingerprint(key)}), not in {files}; verify it and "
            f"add it (ssh-keyscan), or set host_key_policy = \"accept-new\" to record first-seen keys")


class SSHTarget:
    """Runs commands on one host. Thread-safe; blocking (collectors call it via run_blocking)."""

    def __init__(self, cfg: SSHConfig, accept_new_file: Path | None = None):
        self.cfg = cfg
        self.name = cfg.name
        self.known_hosts = cfg.known_hosts or Path.home() / ".ssh" / "known_hosts"
        self.accept_new_file = accept_new_file or state_dir() / "known_hosts"
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self._sessions = threading.BoundedSemaphore(cfg.max_sessions)
        self._backoff = 0.0
        self._retry_at = 0.0
        self._last_error = ""
        self.connects = 0

    @property
    def where(self) -> str:
        return f"{self.cfg.user}@{self.cfg.host}:{self.cfg.port}"

    def _connect(self) -> paramiko.SSHClient:
        now = time.monotonic()
        if now < self._retry_at:
            raise SSHConnectError(f"ssh {self.where}: not connected; next attempt in {self._retry_at - now:.0f}s "
                                  f"(after: {self._last_error})")
        client = paramiko.SSHClient()
        files = [self.known_hosts]
        if self.known_hosts.exists():
            client.load_host_keys(str(self.known_hosts))
        if self.cfg.host_key_policy == "accept-new":
            files.append(self.accept_new_file)
            if self.accept_new_file.exists():
                client.get_host_keys().load(str(self.accept_new_file))
            client.set_missing_host_key_policy(_AcceptNew(self.accept_new_file))
        else:
            client.set_missing_host_key_policy(_Reject(files))
        password = None
        try:
            ref = self.cfg.password()
            if ref is not None:
                password = ref.resolve(self.cfg.user)
            client.connect(
                self.cfg.host, port=self.cfg.port, username=self.cfg.user, password=password,
                key_filename=str(self.cfg.key_file) if self.cfg.key_file else None,
                look_for_keys=self.cfg.key_file is None and password is None, allow_agent=True,
                timeout=self.cfg.connect_timeout, banner_timeout=self.cfg.connect_timeout,
                auth_timeout=self.cfg.connect_timeout, channel_timeout=self.cfg.connect_timeout)
        except (SSHError, SecretError, paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            err = self._explain(e, password is not None)
            self._backoff = min(max(self._backoff * 2, BACKOFF_START_S), BACKOFF_MAX_S)
            self._retry_at = time.monotonic() + self._backoff
            self._last_error = str(err)
            raise err from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(max(1, int(self.cfg.keepalive)))
        self._backoff = 0.0
        self.connects += 1
        log.info("ssh: connected to %s (%s)", self.where, self.name)
        return client

    def _explain(self, e: BaseException, with_password: bool) -> SSHError:
        """A connect failure as a message that says what happened and what to do."""
        if isinstance(e, SSHError):
            return e
        if isinstance(e, paramiko.BadHostKeyException):
            # the name known_hosts files hold it under, as paramiko (and OpenSSH) write it
            name = self.cfg.host if self.cfg.port == 22 else f"[{self.cfg.host}]:{self.cfg.port}"
            held = self._holding(name, e.expected_key)
            return SSHHostKeyError(
                f"ssh {self.where}: host key mismatch: the server offered {e.key.get_name()} {fingerprint(e.key)} "
                f"but {held} has {fingerprint(e.expected_key)}; this may be a man-in-the-middle attack. "
                f"If the key changed legitimately, remove the old entry: ssh-keygen -R {shlex.quote(name)} "
                f"-f {shlex.quote(str(held))}")
        if isinstance(e, paramiko.AuthenticationException):
            how = "password" if with_password else (
                f"key {self.cfg.key_file}" if self.cfg.key_file else "agent and default keys")
            return SSHAuthError(f"ssh {self.where}: authentication failed ({how}): {e}")
        if isinstance(e, SecretError):
            return SSHAuthError(f"ssh {self.where}: {e}")
        return SSHConnectError(f"ssh {self.where}: cannot connect: {type(e).__name__}: {e}")

    def _holding(self, hostname: str, key: paramiko.PKey) -> Path:
        """The known_hosts file that holds `key` for `hostname`: the user's, or db2vtop's own where
        accept-new recorded it (the fix-it must name the file the entry is in)."""
        files = [self.known_hosts]
        if self.cfg.host_key_policy == "accept-new":
            files.insert(0, self.accept_new_file)
        for path in files:
            try:
                entry = paramiko.HostKeys(str(path)).lookup(hostname) if path.exists() else None
            except (OSError, paramiko.SSHException, ValueError):
                continue
            if entry is not None and key in entry.values():
                return path
        return self.known_hosts

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            c = self._client
            t = c.get_transport() if c else None
            if t is None or not t.is_active():
                if c is not None:
                    c.close()
                self._client = None
                self._client = self._connect()
                t = self._client.get_transport()
            assert t is not None
            return t

    def _drop(self, transport: paramiko.Transport) -> None:
        with self._lock:
            if self._client is not None and self._client.get_transport() is transport:
                self._client.close()
                self._client = None

    def run(self, argv: list[str] | tuple[str, ...], *, stdin: bytes | None = None, timeout: float | None = None,
            max_output: int = MAX_OUTPUT_BYTES) -> Result:
        """Run argv (quoted with shlex) and return its exit status and output.

        Raises SSHTimeoutError when the command outlives `timeout` (default: the target's
        command_timeout) and SSHError when the connection fails or drops.
        """
        return self.run_line(command(*argv), stdin=stdin, timeout=timeout, max_output=max_output, what=argv[0])

    def run_line(self, line: str, *, stdin: bytes | None = None, timeout: float | None = None,
                 max_output: int = MAX_OUTPUT_BYTES, what: str | None = None) -> Result:
        """Send `line` as the remote command exactly as given, for a login shell that is not sh.

        The ONTAP clustershell parses its own syntax (`;` between commands, double quotes,
        `|` inside values), which sh quoting would break. Callers build `line` only from
        constants and validated names; everything else goes through run().
        """
        what = what or line.split(" ", 1)[0]
        d = deadline(self.cfg.command_timeout if timeout is None else timeout, f"ssh {self.where}: {what}")
        try:
            with d:
                return self._run_within(d, line, stdin, max_output, what)
        except DeadlineError:
            raise SSHTimeoutError(f"ssh {self.where}: {what} timed out after {d.spent()}") from None

    def _run_within(self, d: Deadline, line: str, stdin: bytes | None, max_output: int, what: str) -> Result:
        """One command under its deadline: the wait for a session slot, the channel, the exec request (a
        server may accept it and never answer), stdin, every byte of output and the exit status. When the
        deadline passes the watchdog closes the channel (not the connection the target's other commands
        share), which ends whichever of these waits is under way."""
        started = time.monotonic()
        if not self._sessions.acquire(timeout=d.left()):
            raise SSHTimeoutError(f"ssh {self.where}: {what} timed out after {d.spent()} waiting for one of the "
                                  f"target's {self.cfg.max_sessions} sessions (max_sessions), all busy")
        try:
            transport = self._transport()
            try:
                chan = transport.open_session(timeout=min(self.cfg.connect_timeout, d.left()))
            except (paramiko.SSHException, OSError, EOFError) as e:
                if d.expired:
                    raise
                self._drop(transport)
                raise SSHConnectError(f"ssh {self.where}: connection lost: {e}") from None
            d.guard(chan)
            try:
                chan.exec_command(line)
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()
                out, err = self._read(chan, d, max_output, what)
                rc = chan.recv_exit_status()
            except (paramiko.SSHException, OSError, EOFError) as e:
                if d.expired:  # the deadline closed the channel: the with block says so
                    raise
                self._drop(transport)
                raise SSHConnectError(f"ssh {self.where}: connection lost while running {what}: {e}") from None
            finally:
                chan.close()
        finally:
            self._sessions.release()
        if rc == -1 and not d.expired:
            self._drop(transport)
            raise SSHConnectError(f"ssh {self.where}: {what} ended without an exit status (connection dropped)")
        return Result(rc, out, err, time.monotonic() - started)

    def _read(self, chan: paramiko.Channel, d: Deadline, max_output: int, what: str) -> tuple[bytes, bytes]:
        """Drain stdout and stderr together (so neither pipe can fill and block the command)."""
        out, err = bytearray(), bytearray()
        while True:
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            if len(out) + len(err) > max_output:
                raise SSHError(f"ssh {self.where}: {what} printed more than {max_output} bytes; stopped")
            done = chan.closed or (chan.eof_received and chan.exit_status_ready())
            if done and not chan.recv_ready() and not chan.recv_stderr_ready():
                return bytes(out), bytes(err)
            left = d.at - time.monotonic()
            if left <= 0:
                raise SSHTimeoutError(f"ssh {self.where}: {what} timed out after {d.spent()}")
            select.select([chan], [], [], min(left, 0.5))

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
