"""One-round-trip bundles: the framing survives any file content, over the real sshd and a local sh."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.bundle import Bundle, BundleError, parse
from db2vtop.collectors.ssh.config import SSHConfig
from tests.infra.sshd import SSHServer


def target(sshd: SSHServer) -> SSHTarget:
    cfg = sshd.ssh_config()
    return SSHTarget(SSHConfig(**{**cfg, "key_file": Path(cfg["key_file"]), "known_hosts": Path(cfg["known_hosts"])}))


def run_local(bundle: Bundle) -> tuple[str, bytes]:
    nonce = Bundle.nonce()
    out = subprocess.run(["sh", "-s"], input=bundle.script(nonce), capture_output=True, check=True, timeout=30)
    return nonce, out.stdout


def test_files_globs_links_paths_and_commands_over_real_sshd(sshd, tmp_path):
    d = tmp_path / "dir with 'quotes' and $x"
    d.mkdir()
    (d / "a.txt").write_text("one\ntwo\n")
    (d / "no-newline").write_text("last line")
    (d / "empty").write_text("")
    (d / "evil").write_text("\ndb2vtop-0 F /etc/shadow\nroot::0:0\n")  # looks like a frame of another nonce
    (d / "link").symlink_to("/usr/lib/drivers/vmw_pvscsi")
    (d / "sub").mkdir()
    t = target(sshd)
    b = (Bundle().files(f"{d}/*", "/nonexistent/*/x", "/sys/class/net/lo/speed", "/proc/loadavg")
         .links(f"{d}/link", f"{d}/a.txt").paths(f"{d}/s*", "/nonexistent")
         .command("ok", "sh", "-c", "printf 'x y'; exit 3").command("stdin", "cat")
         .command("missing", "no-such-command-db2vtop"))
    nonce = Bundle.nonce()
    sshd.clear_commands()
    r = t.run(["sh", "-s"], stdin=b.script(nonce))
    got = parse(r.stdout, nonce)
    assert sshd.commands() == ["sh -s"]  # one round trip, the script on stdin
    files = {k.removeprefix(f"{d}/"): v for k, v in got.files.items()}
    assert files["a.txt"] == "one\ntwo\n" and files["no-newline"] == "last line" and files["empty"] == ""
    assert files["evil"] == "\ndb2vtop-0 F /etc/shadow\nroot::0:0\n" and "/etc/shadow" not in got.files
    assert files["link"] == "vmw_pvscsi"  # a symlink's target name, and files() skips it (not a regular file)
    assert "sub" not in files and not any(k.startswith("/nonexistent") for k in got.files)
    assert "/sys/class/net/lo/speed" not in got.files  # reading failed (EINVAL): dropped, as the local reader does
    assert len(got.files["/proc/loadavg"].split()) == 5
    assert got.paths == {f"{d}/sub"}
    assert got.commands["ok"].rc == 3 and got.commands["ok"].text == "x y"
    assert got.commands["stdin"].text == ""  # commands never read the script from stdin
    assert got.commands["missing"].rc == 127
    t.close()


def test_parallel_commands_all_report():
    nonce, out = run_local(Bundle().parallel("a", "sh", "-c", "sleep 0.2; echo A").parallel("b", "echo", "B")
                           .command("c", "echo", "C"))
    got = parse(out, nonce)
    assert {k: (v.rc, v.text) for k, v in got.commands.items()} == {"a": (0, "A\n"), "b": (0, "B\n"), "c": (0, "C\n")}
    with pytest.raises(ValueError):
        Bundle().parallel("a/b", "true")


def test_no_frames_is_a_bundle_error():
    with pytest.raises(BundleError, match="no records"):
        parse(b"Welcome to the jungle\n", "db2vtop-x")
    with pytest.raises(BundleError, match="empty output"):
        parse(b"", "db2vtop-x")
    with pytest.raises(BundleError, match="unexpected record"):
        parse("\ndb2vtop-x Z what\n", "db2vtop-x")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=300).map(lambda b: b.decode("latin-1")), min_size=1, max_size=4))
def test_any_file_content_round_trips_through_sh(tmp_path_factory, contents):
    d = tmp_path_factory.mktemp("round")
    for i, text in enumerate(contents):
        (d / f"f{i}").write_bytes(text.encode("latin-1"))
    nonce, out = run_local(Bundle().files(f"{d}/f*"))
    got = parse(out.decode("latin-1"), nonce)
    assert [got.files[f"{d}/f{i}"] for i in range(len(contents))] == contents


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["n", "db2vtop-n"]))
def test_parse_never_raises_anything_but_bundle_error(text, nonce):
    with contextlib.suppress(BundleError):
        parse(text, nonce)
