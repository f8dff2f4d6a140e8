"""Git metadata the agent must not touch: fingerprinted at run start, checked before every host git call.

``.git/config``, ``.git/commondir``, ``.git/hooks/``, ``.git/info/`` and
``.git/objects/info/alternates`` decide which programs git runs (fsmonitor,
hooks, filters) and which repository it reads.  The loop copies them when the
run starts (contents, modes, symlink targets); :meth:`GitMetadata.changes`
compares the current state (a stat comparison first, contents only when the
stat differs) and :meth:`GitMetadata.restore` puts the copy back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

WATCHED_FILES = ("config", "config.worktree", "commondir", "gitdir", "objects/info/alternates",
                 "objects/info/http-alternates")
WATCHED_DIRS = ("hooks", "info")
UNWATCHED = ("info/refs",)
"""Written by git itself in a watched directory and deciding nothing git runs or reads as config:
``info/refs`` (``git update-server-info``, which ``git gc`` and ``git repack`` run)."""
MAX_FILE_BYTES = 4 * 1024 * 1024
RACY_NS = 2_000_000_000
"""A directory changed this recently is listed again on the next check (timestamps are coarse)."""


@dataclass(frozen=True)
class Entry:
    """One path as it was: kind (file, dir, link, absent), content digest, bytes, mode, stat key."""

    kind: str
    digest: str = ""
    data: bytes = b""
    mode: int = 0
    key: tuple[int, ...] = ()


def _stat_key(info: os.stat_result) -> tuple[int, ...]:
    # ctime cannot be set from user space: a write that restores mtime still changes it
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode)


def _entry(path: Path, previous: Entry | None = None, info: os.stat_result | None = None) -> Entry:
    """``path`` as it is now; ``previous`` itself when its stat key is unchanged (nothing read or hashed again).

    ``info``: ``path``'s ``lstat``, when the caller has it already."""
    if info is None:
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return Entry("absent")
    key = _stat_key(info)
    if previous is not None and previous.key == key and previous.kind != "dir":
        return previous
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path).encode()
        return Entry("link", hashlib.sha256(target).hexdigest(), target, 0, key)
    if stat.S_ISDIR(info.st_mode):
        return Entry("dir", "", b"", stat.S_IMODE(info.st_mode), key)
    if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_FILE_BYTES:
        data = path.read_bytes()
        return Entry("file", hashlib.sha256(data).hexdigest(), data, stat.S_IMODE(info.st_mode), key)
    return Entry("other", f"{info.st_mode}:{info.st_size}", b"", stat.S_IMODE(info.st_mode), key)


def _same(a: Entry, b: Entry) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "dir":
        return a.mode == b.mode
    return a.digest == b.digest and a.mode == b.mode


class GitMetadata:
    """The watched metadata of one repository (its git dir and, for a worktree, the common dir)."""

    def __init__(self, project_dir: Path, git_dir: Path, common_dir: Path) -> None:
        self.project_dir = project_dir
        self.dotgit = self._dotgit(project_dir)
        self.bases = list(dict.fromkeys([git_dir, common_dir]))
        self._roots = self._roots_of()
        self._listed: dict[Path, tuple[tuple[int, int, int], list[Path]]] = {}
        """Each watched directory's children as last listed, by the directory's (inode, mtime, ctime)."""
        self.entries: dict[Path, Entry] = self._scan({})

    @staticmethod
    def _dotgit(project_dir: Path) -> Path | None:
        for directory in (project_dir, *project_dir.parents):
            candidate = directory / ".git"
            if os.path.lexists(candidate):
                return candidate
        return None

    def _roots_of(self) -> list[Path]:
        roots = [base / name for base in self.bases for name in WATCHED_FILES]
        roots += [base / name for base in self.bases for name in WATCHED_DIRS]
        if self.dotgit is not None:
            roots.append(self.dotgit)
        return roots

    def _scan(self, previous: dict[Path, Entry]) -> dict[Path, Entry]:
        """Every watched path as it is now: one ``lstat`` each; a file read and hashed only when its stat
        changed, a directory listed again only when it changed (or changed within the last seconds)."""
        entries: dict[Path, Entry] = {}
        for root in self._roots:
            if root == self.dotgit:
                entries[root] = self._dotgit_entry(root)
                continue
            entry = _entry(root, previous.get(root))
            entries[root] = entry
            if entry.kind == "dir" and root.name in WATCHED_DIRS:
                skipped = {root.parent / name for name in UNWATCHED}
                self._walk(root, entry, skipped, previous, entries)
        return entries

    def _walk(self, directory: Path, entry: Entry, skipped: set[Path], previous: dict[Path, Entry],
              entries: dict[Path, Entry]) -> None:
        key = (entry.key[0], entry.key[2], entry.key[3])  # inode, mtime, ctime: a name added or removed changes them
        listed = self._listed.get(directory)
        if listed is None or listed[0] != key:
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                names = []
            children = [child for name in names if (child := directory / name) not in skipped]
            if time.time_ns() - max(entry.key[2], entry.key[3]) > RACY_NS:
                self._listed[directory] = (key, children)
            else:  # changed this recently: a change in the same clock tick would keep the times
                self._listed.pop(directory, None)
        else:
            children = listed[1]
        for child in children:
            found = _entry(child, previous.get(child))
            if found.kind == "absent":
                continue  # gone since the listing: not an entry (as os.walk would not list it)
            entries[child] = found
            if found.kind == "dir":
                self._walk(child, found, skipped, previous, entries)

    @staticmethod
    def _dotgit_entry(path: Path) -> Entry:
        """``.git`` itself: the same directory (inode), or the same gitfile contents."""
        try:
            info = path.lstat()
        except FileNotFoundError:
            return Entry("absent")
        if stat.S_ISDIR(info.st_mode):
            return Entry("dir", f"inode:{info.st_dev}:{info.st_ino}", b"", 0, ())
        return _entry(path)

    def changes(self) -> list[Path]:
        """Watched paths that differ from the run-start copy (added, removed or changed)."""
        current = self._scan(self.entries)
        changed = [p for p, e in current.items() if p not in self.entries or not _same(e, self.entries[p])]
        if self.dotgit is not None and self.entries[self.dotgit].digest != current[self.dotgit].digest:
            changed.append(self.dotgit)
        changed += [p for p in self.entries if p not in current]
        return sorted(set(changed), key=lambda p: (len(p.parts), str(p)))

    def restore(self, changed: list[Path]) -> list[Path]:
        """Put the run-start copy of ``changed`` back; returns what could not be restored."""
        failed = []
        for path in sorted(changed, key=lambda p: len(p.parts)):
            original = self.entries.get(path, Entry("absent"))
            try:
                self._restore_one(path, original)
            except OSError:
                failed.append(path)
        return failed

    def _restore_one(self, path: Path, original: Entry) -> None:
        if path == self.dotgit and original.kind == "dir" and path.is_dir() and not path.is_symlink():
            return  # a different .git directory cannot be put back from here
        current = path.lstat() if os.path.lexists(path) else None
        if current is not None and not (stat.S_ISDIR(current.st_mode) and original.kind == "dir"):
            if stat.S_ISDIR(current.st_mode):
                shutil.rmtree(path)
            else:
                path.unlink()
        if original.kind == "absent":
            return
        if original.kind == "dir":
            path.mkdir(exist_ok=True)
            os.chmod(path, original.mode)
            for child in list(path.iterdir()):
                if child not in self.entries or self.entries[child].kind == "absent":
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            for child, entry in self.entries.items():
                if child.parent == path and not os.path.lexists(child):
                    self._restore_one(child, entry)
        elif original.kind == "link":
            os.symlink(original.data.decode(), path)
        elif original.kind == "file":
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, original.mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(original.data)
            os.chmod(path, original.mode)
        self.entries[path] = _entry(path) if path != self.dotgit else self._dotgit_entry(path)
        if original.kind == "dir":
            self.entries.update({p: _entry(p) for p in list(self.entries) if path in p.parents})

    def name(self, path: Path) -> str:
        """``path`` as the user knows it (relative to the project when inside it)."""
        try:
            return str(path.relative_to(self.project_dir))
        except ValueError:
            return str(path)


# -- the layout: nothing in the git directory that git would write (or read) through ------------------

LAYOUT_SKIPPED = ("hooks", "modules", "lfs")
"""Not looked into: ``hooks/`` (fingerprinted above, and never run by the loop's git), submodules' and
Git LFS's stores (the loop's git writes neither)."""


def discover(project_dir: Path) -> list[Path]:
    """The git directories git uses from ``project_dir`` (its git dir, and the common dir of a worktree),
    each once: a linked worktree's git dir inside its common dir (``<common>/worktrees/<id>``) is covered
    by the common dir and not listed apart; empty when there is none (see :func:`git_and_common_dir`)."""
    found = git_and_common_dir(project_dir)
    if found is None:
        return []
    gitdir, common = found
    if common == gitdir or common in gitdir.parents:
        return [common]
    return [gitdir, common]


def git_and_common_dir(project_dir: Path) -> tuple[Path, Path] | None:
    """The git dir and the common dir git uses from ``project_dir`` (the same path but in a linked
    worktree); None when there is none.

    Found the way git finds them (``.git`` in the folder or a parent: a directory, or a ``gitdir:``
    file; then ``commondir``), without running git.
    """
    start = Path(os.path.realpath(project_dir))
    for directory in (start, *start.parents):
        candidate = directory / ".git"
        try:
            info = os.stat(candidate)  # git follows a symlinked .git (the fingerprint watches .git itself)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            gitdir = Path(os.path.realpath(candidate))
        elif stat.S_ISREG(info.st_mode):
            try:
                line = candidate.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return None
            if not line.startswith("gitdir:"):
                return None
            gitdir = Path(os.path.realpath(directory / line[len("gitdir:"):].strip()))
        else:
            return None
        common = gitdir
        try:
            text = (gitdir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
            common = Path(os.path.realpath(gitdir / text)) if text else gitdir
        except OSError:
            pass
        return gitdir, common
    return None


def _classify(rel: str, info: os.stat_result) -> str | None:
    """Why git must not meet this entry, or None."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode) and info.st_nlink > 1 and not rel.startswith("objects/"):
        return f"a file with {info.st_nlink} hard links"  # (clone --local hard-links objects: git never writes them)
    return None  # a regular file, a directory, a socket (the fsmonitor daemon's)


def _descend(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in LAYOUT_SKIPPED:
        return False
    # loose objects: git writes a new one under a random name and never into an existing one
    return not (len(parts) == 2 and parts[0] == "objects" and len(parts[1]) == 2)


class GitLayout:
    """Symlinks, fifos, devices and hard links in git directories: git writes reflogs, ``COMMIT_EDITMSG``,
    ``FETCH_HEAD`` ... in place, following such an entry to a file outside the repository, and reads refs
    and the index through them.

    Every check stats each directory; a directory is listed again only when it changed (inode, mtime,
    ctime) or changed within the last seconds.
    """

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        self._listed: dict[str, tuple[tuple[int, int, int], list[tuple[str, str]], list[tuple[str, str]]]] = {}

    def problems(self) -> list[tuple[Path, str]]:
        """``(path, what it is)`` of every entry git must not meet, outermost first."""
        found: list[tuple[str, str]] = []
        for root in self.roots:
            self._scan(str(root), "", found)
        return [(Path(path), what) for path, what in found]

    def _scan(self, path: str, rel: str, found: list[tuple[str, str]]) -> None:
        try:
            info = os.lstat(path)
        except OSError:
            return
        if not stat.S_ISDIR(info.st_mode):
            return
        key = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        listed = self._listed.get(path)
        if listed is None or listed[0] != key:
            subdirs: list[tuple[str, str]] = []
            bad: list[tuple[str, str]] = []
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        entry_rel = f"{rel}/{entry.name}" if rel else entry.name
                        if not rel and entry.name in LAYOUT_SKIPPED:
                            continue
                        entry_info = entry.stat(follow_symlinks=False)
                        what = _classify(entry_rel, entry_info)
                        if what is not None:
                            bad.append((entry.path, what))
                        elif stat.S_ISDIR(entry_info.st_mode) and _descend(entry_rel):
                            subdirs.append((entry.path, entry_rel))
            except OSError:
                return
            listed = (key, subdirs, bad)
            if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) > RACY_NS:
                self._listed[path] = listed
        found += listed[2]
        for sub, sub_rel in listed[1]:
            self._scan(sub, sub_rel, found)
