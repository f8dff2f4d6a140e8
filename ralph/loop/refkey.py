"""A stat key of everything ``git for-each-ref`` reads to list the refs and their tips' object types.

The ref guard reads every ref after the agent's session and after the gates' (:mod:`ralph.loop.personrefs`).
Git's answer is a function of files only: ``packed-refs``, the loose refs and the directories under ``refs/``
(of the git directory and of a worktree's common directory, both also when a linked worktree's git
directory is inside the common one: its per-worktree refs, ``refs/worktree/`` and ``refs/bisect/``, are its own), the config that names the ref storage, and, for
the object type of each tip, the loose object's file and directory and the pack directory's files; the guard's
own reads of the person's other worktrees (:mod:`ralph.loop.worktreerefs`) add their ``HEAD`` and ``refs/``.  When none
of them changed since the last read, the answer is the last one, and the guard reuses it instead of starting
git again.

"Changed" is decided on ``lstat``: device, inode, size, mode, link count, mtime and **ctime** of every one of
those entries (a missing one counted as missing).  A process cannot set ctime: any write, rename, link,
``chmod`` or ``utime`` sets it to the current time, so a ref moved in place with its size and mtime kept
still changes the key.  Because timestamps are coarse, an entry changed within the last seconds gives no key
(git reads again, as git itself treats a "racy" index entry).  There is no key either (git is always asked)
when the layout is anything but plain: a reftable, a symlink, fifo or other odd entry anywhere in what is
keyed, borrowed objects (``objects/info/alternates``), a ref whose tip object is missing, or more entries
than :data:`MAX_ENTRIES`, or a symbolic ref to something outside ``refs/`` (``ref: HEAD`` resolves through a
file the key leaves out): every loose ref's first bytes are read for that.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

RACY_NS = 2_000_000_000
"""An entry changed this recently gives no key (a change in the same clock tick would keep its times)."""
MAX_ENTRIES = 4000
"""More entries than this (a repository with very many loose refs or packs): no key, git reads every time."""
KEYED_FILES = ("packed-refs", "config", "config.worktree")
"""Files of each git directory in the key beside ``refs/`` (the config names the ref storage)."""

Key = tuple[tuple[object, ...], ...]


def _now() -> int:
    return time.time_ns()


class NoKey(Exception):
    """The layout is not plain (or something changed just now): git must be asked."""


class TooMany(NoKey):
    """More entries than :data:`MAX_ENTRIES`: not worth keying (the walk would cost more than git)."""


def _info(path: str, *, absent_ok: bool = True) -> tuple[object, ...]:
    """``path``'s stat key; ``(path, "absent")`` when it is not there; NoKey for anything racy."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        if absent_ok:
            return (path, "absent")
        raise NoKey(path) from None
    except OSError:
        raise NoKey(path) from None
    if _now() - max(info.st_mtime_ns, info.st_ctime_ns) <= RACY_NS:
        raise NoKey(path)
    return (path, info.st_dev, info.st_ino, info.st_size, info.st_mode, info.st_nlink, info.st_mtime_ns,
            info.st_ctime_ns)


def _tree(top: str, out: list[tuple[object, ...]], refs: bool = True) -> None:
    """Every directory and regular file under ``top`` (``top`` itself included); NoKey for anything else (and,
    ``refs``, for a symbolic ref out of ``refs/``)."""
    entry = _info(top)
    out.append(entry)
    if entry[1] == "absent":
        return
    if not stat.S_ISDIR(entry[4]):  # type: ignore[arg-type]
        raise NoKey(top)
    try:
        names = sorted(os.listdir(top))
    except OSError:
        raise NoKey(top) from None
    for name in names:
        path = os.path.join(top, name)
        info = _info(path, absent_ok=False)
        if len(out) >= MAX_ENTRIES:
            raise TooMany(top)
        if stat.S_ISDIR(info[4]):  # type: ignore[arg-type]
            _tree(path, out, refs)
        elif stat.S_ISREG(info[4]):  # type: ignore[arg-type]
            out.append(info)
            if refs:
                _within_refs(path)
        else:
            raise NoKey(path)


def _within_refs(path: str) -> None:
    """NoKey when the loose ref at ``path`` is a symbolic ref to a name outside ``refs/``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise NoKey(path) from None
    try:
        head = os.read(fd, 16)
    finally:
        os.close(fd)
    if head.startswith(b"ref:") and not head[4:].lstrip(b" \t").startswith(b"refs/"):
        raise NoKey(path)


def ref_key(project_dir: Path, tips: Iterable[str], others: Iterable[tuple[Path, bool]] = ()) -> Key:
    """The key of the refs of the repository git finds from ``project_dir`` and of the objects ``tips``; NoKey
    when there is none (see the module).  The git directories are found again each time (a ``.git`` swapped for
    another directory, a gitfile or a link gives other roots, or other inodes).

    ``others``: the git directories of other worktrees whose refs the guard reads from their files
    (:mod:`ralph.loop.worktreerefs`), each with whether its ``refs/`` tree is keyed too (besides its ``HEAD``)."""
    from ralph.gitmeta import git_and_common_dir

    found = git_and_common_dir(project_dir)
    if found is None:
        raise NoKey(str(project_dir))
    # both, also when the git dir is inside the common dir (a linked worktree's <common>/worktrees/<id>):
    # its per-worktree refs (refs/worktree/, refs/bisect/) are listed by git from there
    roots = list(dict.fromkeys(found))
    out: list[tuple[object, ...]] = [tuple(str(root) for root in roots)]
    for root in roots:
        base = str(root)
        if _info(os.path.join(base, "reftable"))[1] != "absent":  # git's own format: not keyed here
            raise NoKey(os.path.join(base, "reftable"))
        for name in KEYED_FILES:
            out.append(_info(os.path.join(base, name)))
        _tree(os.path.join(base, "refs"), out)
    for git_dir, with_refs in others:
        out.append(_info(os.path.join(str(git_dir), "HEAD")))
        if with_refs:
            _tree(os.path.join(str(git_dir), "refs"), out)
    objects = os.path.join(str(found[1]), "objects")
    if _info(os.path.join(objects, "info", "alternates"))[1] != "absent":
        raise NoKey("alternates")
    _tree(os.path.join(objects, "pack"), out, refs=False)
    for sha in sorted(set(tips)):
        if len(sha) not in (40, 64) or not all(c in "0123456789abcdef" for c in sha):
            raise NoKey(sha)  # a missing tip ("") or a name git did not give
        loose = os.path.join(objects, sha[:2])
        out.append(_info(loose))
        out.append(_info(os.path.join(loose, sha[2:])))
    return tuple(out)
