"""A copy of a repository's object store, file by file, outside the project (for :mod:`ralph.loop.personrefs`).

Git objects are named by their content: a loose object (``objects/ab/cdef...``) or a pack
(``objects/pack/pack-<hash>.pack`` with its ``.idx``) never changes once written, so keeping a
copy up to date is copying the files not copied yet.  That costs one directory listing per fan-out
folder and no git process, which is why the loop can do it before every iteration.

The object store is the agent's to write: every directory and file is opened relative to its
parent's descriptor with ``O_NOFOLLOW`` (a link planted among the objects is never followed, so no
host file is read), only regular files are copied, and each copy is written to a temporary name and
renamed into place.  What git then reads from the copy is checked by git (a fetch verifies the
objects it transfers).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

_LOOSE_DIR = re.compile(r"[0-9a-f]{2}")
_LOOSE_FILE = re.compile(r"[0-9a-f]{38}([0-9a-f]{24})?")
_PACK_FILE = re.compile(r"pack-[0-9a-f]{40}([0-9a-f]{24})?\.(pack|rev|idx)")
_PACK_ORDER = {"pack": 0, "rev": 1, "idx": 2}
"""A pack's files in the order they are copied: git uses a pack once its ``.idx`` is there."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)


class ObjectCopy:
    """Copies the object files of ``source`` (a git ``objects`` directory) into ``target``, each once."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self.copied: set[str] = set()
        """Object files (relative paths) known to be in the copy."""

    def update(self) -> int:
        """Copy the object files not copied yet; returns how many were copied."""
        try:
            root = os.open(self.source, _DIR_FLAGS)
        except OSError:
            return 0
        copied = 0
        try:
            for name in sorted(_names(root)):
                if _LOOSE_DIR.fullmatch(name):
                    copied += self._folder(root, name, lambda entry: bool(_LOOSE_FILE.fullmatch(entry)), lambda entry: 0)
            copied += self._folder(root, "pack", lambda entry: bool(_PACK_FILE.fullmatch(entry)),
                                   lambda entry: _PACK_ORDER[entry.rsplit(".", 1)[1]])
        finally:
            os.close(root)
        return copied

    def _folder(self, root: int, folder: str, wanted, order) -> int:  # type: ignore[no-untyped-def]
        try:
            fd = os.open(folder, _DIR_FLAGS, dir_fd=root)
        except OSError:
            return 0  # absent, or a link: nothing copied from it
        copied = 0
        try:
            names = [n for n in _names(fd) if wanted(n) and f"{folder}/{n}" not in self.copied]
            for name in sorted(names, key=lambda n: (n.rsplit(".", 1)[0], order(n))):
                relative = f"{folder}/{name}"
                if (self.target / relative).exists() or self._copy(fd, name, self.target / folder):
                    self.copied.add(relative)
                    copied += 1
        finally:
            os.close(fd)
        return copied

    @staticmethod
    def _copy(dir_fd: int, name: str, folder: Path) -> bool:
        """Copy the regular file ``name`` (never through a link) into ``folder``; False when it is not one."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            folder.mkdir(parents=True, exist_ok=True)
            temporary = folder / f".{name}.{os.getpid()}.tmp"
            with open(temporary, "wb") as out:
                while chunk := os.read(fd, 1 << 20):
                    out.write(chunk)
            os.chmod(temporary, 0o444)
            os.replace(temporary, folder / name)
            return True
        finally:
            os.close(fd)


def _names(dir_fd: int) -> list[str]:
    return [entry.name for entry in os.scandir(dir_fd)]
