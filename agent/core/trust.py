"""Files db2vtop takes decisions and secrets from, trusted only as OpenSSH trusts its own.

A config decides where the secrets it names are sent (a url, verify_tls = false), and a `*_file`
secret is the secret: whoever can write either, or replace it, has the secret. So, as OpenSSH does
for ~/.ssh/config and its keys, such a file must be owned by the effective user or root and not
writable by group or others, and so must every directory above it (a directory others can write
lets them rename another file over it), unless that directory is sticky (/tmp: only a file's owner
can replace it there). Symbolic links are resolved: the directories the path names are checked and
so are the ones the link leads to, and the file checked is the one the links end at.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple

_KEEP = "keep it, and each directory above it, owned by this user or root and writable by no one else"


class Distrust(NamedTuple):
    why: str  # "<path> is owned by uid 65534, ..."
    fix: str  # what the user can do about it


def untrusted(path: Path) -> Distrust | None:
    """Why `path` cannot be trusted (its owner, its mode, a directory others can replace it through),
    or None. A file that cannot be looked at is for the caller's read to report."""
    euid = os.geteuid()
    try:
        real = Path(os.path.realpath(path))
        st = os.stat(real)
    except OSError:
        return None
    shown = str(path) if real == Path(os.path.abspath(path)) else f"{path} (a link to {real})"
    if st.st_uid not in (0, euid):
        return Distrust(f"{shown} is owned by uid {st.st_uid}, not by this user (uid {euid}) or root", _KEEP)
    if st.st_mode & 0o022:
        return Distrust(f"{shown} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})",
                        f"run: chmod go-w {real}")
    for d in _directories(Path(os.path.abspath(path)), real):
        try:
            ds = os.stat(d)
        except OSError:
            continue
        if ds.st_uid not in (0, euid):
            return Distrust(f"{shown} is in {d}, owned by uid {ds.st_uid}, who can replace it", _KEEP)
        if ds.st_mode & 0o022 and not ds.st_mode & stat.S_ISVTX:
            return Distrust(f"{shown} is in {d}, which group or others can write (mode "
                            f"{stat.S_IMODE(ds.st_mode):o}): they can replace it", _KEEP)
    return None


def _directories(named: Path, real: Path) -> list[Path]:
    """Every directory above the path as named and above the file its links end at, outermost first."""
    out: list[Path] = []
    for p in (named, real):
        for d in reversed(p.parents):
            if d not in out:
                out.append(d)
    return out
