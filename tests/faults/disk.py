"""A small file system the fault tests fill, free and make read-only.

Where mount is allowed (root, as on the test machine), a tmpfs of a few MiB is mounted on a
directory of the test's own and unmounted at the end: the disk really fills (ENOSPC) and really
becomes read-only (EROFS). Where it is not, the disk-full case falls back to RLIMIT_FSIZE set
on the agent process from outside (a write that would grow a file fails with EFBIG, as a full
disk fails it; CPython ignores SIGXFSZ), and the read-only case to a directory the agent's
user cannot write (mode 555, for a user other than root). DB2VTOP_FAULTS_NO_MOUNT=1 forces the
fallbacks, to check them on a machine that can mount.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path


class SmallFs:
    def __init__(self, path: Path, mounted: bool):
        self.path = path
        self.mounted = mounted
        self._filler = path / ".filler"
        self._limited: list[int] = []

    def fill(self, pids: tuple[int, ...] = ()) -> None:
        """No more room: a filler file takes every free block (or the processes' file size limit drops)."""
        if not self.mounted:
            for pid in pids:
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
                self._limited.append(pid)
            return
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (2**16, 512):  # big blocks, then the last small ones
                try:
                    while os.write(fd, b"\0" * size):
                        pass
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
        finally:
            os.close(fd)

    def free(self) -> None:
        for pid in self._limited:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        self._limited.clear()
        if self._filler.exists():
            self._filler.unlink()

    def read_only(self) -> None:
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True, capture_output=True)
        else:
            self.path.chmod(0o555)


def _can_mount() -> bool:
    return os.geteuid() == 0 and os.environ.get("DB2VTOP_FAULTS_NO_MOUNT") != "1"


@contextlib.contextmanager
def small_fs(base: Path, mib: int = 32) -> Iterator[SmallFs]:
    path = base / "fs"
    path.mkdir()
    mounted = False
    if _can_mount():
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "tmpfs", str(path)],
                           capture_output=True, text=True)
        mounted = r.returncode == 0
    fs = SmallFs(path, mounted)
    try:
        yield fs
    finally:
        try:
            fs.free()
        finally:  # never leave a mount behind, whatever failed
            if mounted:
                subprocess.run(["umount", "-l", str(path)], capture_output=True)
            else:
                path.chmod(0o755)


def read_only_is_real() -> bool:
    """Whether a read-only directory really stops this process's writes: a mount, or a user other than root."""
    return _can_mount() or os.geteuid() != 0
