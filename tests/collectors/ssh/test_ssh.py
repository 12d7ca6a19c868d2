"""The SSH layer against a real OpenSSH sshd on 127.0.0.1."""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest

from db2vtop.collectors.ssh import SSHAuthError, SSHConnectError, SSHError, SSHHostKeyError, SSHTarget, SSHTimeoutError
from db2vtop.collectors.ssh.config import SSHConfig
from tests.infra.sshd import SSHServer, free_port


def target(sshd: SSHServer, tmp_path: Path | None = None, **overrides) -> SSHTarget:
    cfg = sshd.ssh_config(**overrides)
    for key in ("key_file", "known_hosts"):
        if cfg.get(key) is not None:
            cfg[key] = Path(cfg[key])
    accept_new = tmp_path / "accepted_hosts" if tmp_path else None
    return SSHTarget(SSHConfig(**cfg), accept_new_file=accept_new)


def accepted_logins(sshd: SSHServer) -> int:
    return sshd.log.read_text().count("Accepted publickey")


def test_runs_real_commands_over_one_reused_connection(sshd):
    t = target(sshd)
    before = accepted_logins(sshd)
    for _ in range(5):
        r = t.run(["cat", "/proc/loadavg"])
        assert r.rc == 0 and len(r.text().split()) == 5
    assert t.connects == 1 and accepted_logins(sshd) - before == 1
    t.close()


def test_arguments_arrive_quoted_never_interpreted(sshd, tmp_path):
    canary = tmp_path / "pwned"
    argv = ["printf", "%s|", "a b", f"$(touch {canary})", "'q'", ";echo x", "`id`", "*", "", "tab\there"]
    t = target(sshd)
    r = t.run(argv)
    assert r.text() == f"a b|$(touch {canary})|'q'|;echo x|`id`|*||tab\there|"
    assert not canary.exists()
    assert sshd.commands()[-1] == shlex.join(argv)
    assert t.run(["printf", "%s", "two\nlines"]).text() == "two\nlines"
    t.close()


def test_exit_status_stderr_and_a_script_on_stdin(sshd):
    t = target(sshd)
    r = t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.rc, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
    sshd.clear_commands()
    r = t.run(["sh", "-s"], stdin=b"SECRET=hunter2\necho from-stdin $((1+2))\n")
    assert r.rc == 0 and r.text() == "from-stdin 3\n"
    assert sshd.commands() == ["sh -s"]  # what sshd received: the script, and its secret, went on stdin
    t.close()


def test_large_stdout_and_stderr_together_do_not_deadlock(sshd):
    t = target(sshd)
    r = t.run(["sh", "-c", "head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2"])
    assert len(r.stdout) == 3_000_000 and len(r.stderr) == 3_000_000
    with pytest.raises(SSHError, match="more than 1000000 bytes"):
        t.run(["head", "-c", "2000000", "/dev/zero"], max_output=1_000_000)
    t.close()


def test_unknown_host_key_is_refused_by_default(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(SSHHostKeyError) as e:
        target(sshd, known_hosts=str(empty)).run(["true"])
    msg = str(e.value)
    assert "unknown host key" in msg and "SHA256:" in msg and "accept-new" in msg and str(empty) in msg


def test_accept_new_records_first_seen_keys_in_its_own_file(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    t = target(sshd, tmp_path, known_hosts=str(empty), host_key_policy="accept-new")
    assert t.run(["true"]).rc == 0
    recorded = (tmp_path / "accepted_hosts").read_text()
    host_key = Path(f"{sshd.host_key}.pub").read_text().split()[1]
    assert f"[127.0.0.1]:{sshd.port}" in recorded and host_key in recorded
    assert empty.read_text() == ""  # the user's own known_hosts is never written
    again = target(sshd, tmp_path, known_hosts=str(empty), host_key_policy="accept-new")
    assert again.run(["true"]).rc == 0
    assert (tmp_path / "accepted_hosts").read_text() == recorded
    t.close()
    again.close()


def test_a_changed_host_key_is_refused_even_with_accept_new(sshd, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "known_hosts"
    kind, key = Path(f"{other}.pub").read_text().split()[:2]
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")
    for policy in ("reject", "accept-new"):
        with pytest.raises(SSHHostKeyError) as e:
            target(sshd, tmp_path, known_hosts=str(wrong), host_key_policy=policy).run(["true"])
        assert "host key mismatch" in str(e.value) and "man-in-the-middle" in str(e.value)
        assert "ssh-keygen -R" in str(e.value)


def test_a_changed_host_key_names_the_file_that_holds_the_old_one(sshd, tmp_path):
    """A key accept-new recorded lives in db2vtop's own file: the fix-it names that file, not known_hosts."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    t = target(sshd, tmp_path, known_hosts=str(empty), host_key_policy="accept-new")
    assert t.run(["true"]).rc == 0
    t.close()
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = Path(f"{other}.pub").read_text().split()[:2]
    recorded = tmp_path / "accepted_hosts"
    recorded.write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")  # as if the server's key had changed since
    with pytest.raises(SSHHostKeyError) as e:
        target(sshd, tmp_path, known_hosts=str(empty), host_key_policy="accept-new").run(["true"])
    assert f"but {recorded} has SHA256:" in str(e.value)
    assert str(e.value).endswith(f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {recorded}")


def test_authentication_failure_is_clear(sshd, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with pytest.raises(SSHAuthError, match=r"authentication failed \(key .*stranger\)"):
        target(sshd, key_file=str(stranger)).run(["true"])


def test_a_hung_command_times_out_and_the_connection_stays_usable(sshd):
    t = target(sshd)
    with pytest.raises(SSHTimeoutError, match=r"sleep timed out after 1s \(the whole call\)"):
        t.run(["sleep", "30"], timeout=1)
    assert t.run(["echo", "ok"]).text() == "ok\n"
    assert t.connects == 1
    t.close()


def test_a_dropped_connection_is_recovered(sshd):
    t = target(sshd)
    assert t.run(["true"]).rc == 0
    sshd.kill_sessions()
    time.sleep(0.2)
    results = []
    for _ in range(2):
        try:
            results.append(t.run(["echo", "back"]).text())
            break
        except SSHConnectError as e:
            results.append(str(e))
    assert results[-1] == "back\n" and t.connects == 2
    t.close()


def test_server_down_backs_off_then_recovers(tmp_path):
    server = SSHServer(tmp_path / "late")
    server.setup()
    server.port = free_port()
    t = target(server)  # its known_hosts file appears only when the server starts
    with pytest.raises(SSHConnectError, match="cannot connect"):
        t.run(["true"])
    with pytest.raises(SSHConnectError, match="next attempt in"):
        t.run(["true"])  # inside the backoff window: no connection attempt
    server.start()
    try:
        time.sleep(1.1)
        assert t.run(["echo", "up"]).text() == "up\n"
    finally:
        t.close()
        server.stop()


def test_concurrent_channels_are_capped_per_target(sshd, tmp_path):
    gauge = tmp_path / "gauge"
    gauge.mkdir()
    sshd.shim("concurrency", f"""#!/bin/sh
touch {gauge}/$$
ls {gauge} | wc -l >> {tmp_path}/seen
sleep 0.3
rm {gauge}/$$
""")
    t = target(sshd, max_sessions=2)
    errors = []

    def one():
        try:
            t.run(["concurrency"])
        except SSHError as e:
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    seen = [int(x) for x in (tmp_path / "seen").read_text().split()]
    assert len(seen) == 6 and max(seen) == 2
    t.close()
