"""Files db2vtop creates: never through a symbolic link, private to the user that runs it.

Every file the agent creates or truncates (the store and its writer lock, spool segments,
cursor and lock, logs, the config template) is opened with O_NOFOLLOW: a link planted in a
shared directory cannot make the agent truncate or overwrite another file. A file made here
is 0600 whatever the umask (an existing one of ours is brought back to it), and the
directories db2vtop makes for its own files are 0700.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import IO

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def open_private(path: Path | str, flags: int, mode: int = 0o600) -> int:
    """os.open that never follows a final symbolic link and only opens a regular file; a file it
    may create or truncate ends up with `mode` (when it is ours)."""
    try:
        fd = os.open(path, flags | NOFOLLOW, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link; db2vtop does not write through links", str(path)) \
                from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", str(path))
        if flags & (os.O_CREAT | os.O_TRUNC) and stat.S_IMODE(st.st_mode) != mode and st.st_uid == os.geteuid():
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_private(path: Path | str) -> IO[str]:
    """A text file opened for appending (a log), created 0600."""
    return os.fdopen(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a", encoding="utf-8")


def make_private_dir(path: Path) -> None:
    """mkdir -p where every directory made is 0700 (a missing parent too); existing ones are left."""
    missing = []
    p = Path(path)
    while not p.exists() and p != p.parent:
        if p.is_symlink():  # a dangling link: do not create through it
            raise OSError(errno.ELOOP, "is a symbolic link; db2vtop does not write through links", str(p))
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)  # the umask may have taken bits away, never added


def write_private(path: Path, data: bytes, durable: bool = False) -> None:
    """Replace `path` atomically with `data`: a new 0600 file renamed over it (a link at `path` is
    replaced, never followed). `durable`: on disk before the rename, and the rename too, when this returns."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
