"""Small filesystem helpers shared by the CLI, ``ralph init`` and the loop.

Stdlib only, cheap to import.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

__all__ = ["atomic_write_text", "atomic_write_bytes"]


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same directory, then ``os.replace``.

    A reader sees either the old content or the new one, never a half-written file, and a
    crash leaves the old file untouched (at worst a stray ``.<name>.*.tmp`` is removed on the
    way out). An existing file keeps its permission bits; a new one gets the usual
    ``0o666 & ~umask``. If ``path`` is a symlink, the file it points to is replaced, not the
    link. The parent directory must exist.
    """
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path | str, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`).

    The text is encoded as is: no newline translation, so ``"\\n"`` stays ``"\\n"`` on every
    platform.
    """
    atomic_write_bytes(path, text.encode(encoding))
