"""Small filesystem helpers shared by the CLI, ``ralph init`` and the loop.

Stdlib only, cheap to import.  Files under the project go through :mod:`ralph.safeio`
(no symlink followed anywhere below the project); these helpers protect the last component.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write_text", "atomic_write_bytes", "private_dir"]


def atomic_write_bytes(path: Path | str, data: bytes, sync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same directory, then a rename.

    A reader sees either the old content or the new one, never a half-written file, and a
    crash leaves the old file untouched (at worst a stray ``.<name>.*.tmp`` is removed on the
    way out). An existing file keeps its permission bits; a new one gets the usual
    ``0o666 & ~umask``. If ``path`` is a symlink (or a hard link), the link itself is replaced:
    the file it points to is never written (the path is never resolved). The parent directory
    must exist; it is used as given (for no symlink anywhere below a root, use
    :func:`ralph.safeio.write_bytes`).  ``sync=False``: without ``fsync`` (see there).
    """
    from ralph.safeio import write_bytes

    path = os.path.abspath(path)
    write_bytes(path, os.path.dirname(path), data, sync=sync)


def atomic_write_text(path: Path | str, text: str, encoding: str = "utf-8", sync: bool = True) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`).

    The text is encoded as is: no newline translation, so ``"\\n"`` stays ``"\\n"`` on every
    platform.
    """
    atomic_write_bytes(path, text.encode(encoding), sync)


def private_dir(path: Path) -> Path:
    """``path`` as a directory of this user only, mode 0700, made with its parents when missing.

    A link, a file or another user's directory in its place is removed, never followed (a link there
    would make its target the private directory: writable where the directory is shared)."""
    import shutil
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()):
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
        info = None
    if info is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path
