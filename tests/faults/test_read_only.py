"""A store whose file system went read-only (or whose directory cannot be made): every command that
writes says so in one line and exits 2; `run` does not start its command; readers still read.

As root, permissions stop nothing, so the directory is a tmpfs remounted read-only (tests/faults/disk.py).
"""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.faults.disk import read_only_is_real, small_fs

pytestmark = pytest.mark.skipif(not read_only_is_real(), reason="as root without mount, nothing is read-only")

REASONS = ("Read-only file system", "Permission denied")


def one_line(r) -> str:
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert any(why in err for why in REASONS), err
    return err


def test_every_writer_says_it_in_one_line_and_exits_2(tmp_path):
    with small_fs(tmp_path, 8) as fs:
        store = fs.path / "m.db"
        assert run_cli("agent", "--store", str(store), "--once").returncode == 0
        fs.read_only()
        flag = tmp_path / "the-benchmark-ran"
        for args in (("agent", "--store", str(store), "--duration", "2"),
                     ("mark", "--store", str(store), "run 1 start"),
                     ("watch", "--store", str(store)),
                     ("run", "bench", "--store", str(store), "--", "touch", str(flag))):
            r = run_cli(*args)
            assert r.returncode == 2, (args, r.stderr)
            err = one_line(r)
            assert str(store) in err, err
        assert not flag.exists()  # the begin could not be marked: the command was never started
        r = run_cli("agent", "--store", str(fs.path / "new" / "m.db"), "--once")
        assert r.returncode == 2 and "cannot create the directory" in one_line(r)
        r = run_cli("query", "--store", str(store), "-m", "guest_cpu", "--since", "1h")
        assert r.returncode == 0 and '"guest_cpu"' in r.stdout, r.stderr
