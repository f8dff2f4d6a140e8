"""The loop's own index: what "committed" and "clean" mean during a run, whatever the repository's index says.

``git status`` compares the work tree with the index, and the index is a file the agent can write: a flag
(``git update-index --assume-unchanged`` / ``--skip-worktree``) or an entry forged with an edited file's stat
data and the committed blob's id makes an edited file look unchanged.  During a run the loop therefore never
asks the repository's index: each status is taken against an index of its own (``GIT_INDEX_FILE`` in the run
directory, which the agent cannot write), made from ``HEAD`` by the loop (``git read-tree``: no flag, no stat
data, so git hashes every tracked file it compares), and the person's ``.git/index`` is left alone.  The index
holds nothing but that commit's tree, so it is kept only while it is that: made anew when what ``HEAD`` is read
from changed, when the file is not as the loop left it (its ``lstat``, ctime included), when the status reports
another ``HEAD`` than the one it was made from, and for every status taken while an agent process may run.

What the person's index holds at the run's start, before any agent ran, is kept in memory:

- the paths it marks skip-worktree (a sparse checkout): such a path is not reported while it is as it was
  at the start (absent, or the same ``lstat``, ctime included, which no process can set back); once it
  changes it is compared like any other file.  Flags added later are never read.
- the gitlinks (submodules) of ``HEAD``: a gitlink that is new or points elsewhere is named
  (:attr:`TreeStatus.gitlinks`), never looked into: the loop cannot vouch for work in a nested repository
  the agent made (and running git there would run what its config names).  A submodule that was there at
  the start, populated, has its own metadata protected like the project's (:func:`ralph.gitutil.protect`)
  and its work tree compared the same way, against an index of the loop's made from the recorded commit:
  an uncommitted change or a commit not recorded in the project counts as uncommitted, but what already
  differed at the start (the person's) while it is as it was then.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

from ralph import safeio
from ralph.gitutil import (STATUS_ARGS, add_config, TreeStatus, common_dir, git, git_dir, parse_status, person_content_config, protect,
                           unprotect)

__all__ = ["PrivateIndex"]

GITLINK_MODE = b"\x00\x00\xe0\x00"
"""Mode 160000 as the index stores it (big-endian): absent from the file, there is no gitlink."""

PRIVATE_CONFIG = (("core.splitIndex", "false"), ("index.sparse", "false"))
"""For the loop's index: written whole (no shared index in the ``.git`` directory), never made sparse."""


def _has_entries(path: Path) -> bool:
    """``path`` is something other than an empty directory or nothing."""
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is not None
    except NotADirectoryError:
        return True
    except OSError:
        return os.path.lexists(path)


def _lstat_key(path: Path) -> tuple[int, ...] | None:
    """What a write to ``path`` changes (None: absent)."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class PrivateIndex:
    """The loop's index for one repository of a run (see the module); :meth:`start` before any agent runs."""

    def __init__(self, project_dir: Path, directory: Path, name: str = "index") -> None:
        self.project_dir = Path(project_dir)
        self.path = Path(directory) / name
        self.sparse: dict[str, tuple[int, ...] | None] = {}
        """Skip-worktree paths of the person's index at the start, with their ``lstat`` key then."""
        self.gitlinks: dict[str, str] = {}
        """``HEAD``'s gitlinks at the start: path -> commit."""
        self.submodules: dict[str, PrivateIndex] = {}
        """The populated ones among them, each compared with an index of its own."""
        self.unpopulated: set[str] = set()
        """The others: named once anything is in their directory (git would list none of it)."""
        self._env: dict[str, str] = {"GIT_INDEX_FILE": str(self.path)}
        self.baseline: dict[str, object] = {}
        """A submodule's: what differed from the recorded commit at the run's start (the person's), with its
        ``lstat`` key then (its HEAD for ``""``): not reported while it is so."""
        self._head: str | None = None
        self._dirs: tuple[Path, Path] | None = None
        self._made: tuple[str, object, tuple[int, ...] | None, dict[str, str]] | None = None
        """The index as the loop last made it: the commit, the key of what ``HEAD`` is read from then, the
        index file's ``lstat`` key right after, its gitlinks (None: make it anew next time)."""

    def env(self) -> dict[str, str]:
        """The environment of the git calls on this index."""
        return self._env

    def start(self, content: list[tuple[str, str]] | None = None) -> PrivateIndex:
        """Record the run-start facts (the person's skip-worktree paths, ``HEAD``'s gitlinks, the content
        settings of the person's global config, :func:`ralph.gitutil.person_content_config`; ``content``: those,
        already read) and protect the submodules' metadata; returns self."""
        if content is None:
            content = person_content_config()
        self._env = {"GIT_INDEX_FILE": str(self.path)}
        add_config(self._env, [*PRIVATE_CONFIG, *content])
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._dirs = (git_dir(self.project_dir), common_dir(self.project_dir))
        listed = git(self.project_dir, "ls-files", "-t", "-z", binary=True).stdout
        for record in os.fsdecode(listed).split("\0"):
            if record.startswith("S "):
                self.sparse[record[2:]] = _lstat_key(self.project_dir / record[2:])
        self._build("HEAD")
        self.gitlinks = self._gitlinks()
        for number, (path, commit) in enumerate(sorted(self.gitlinks.items())):
            inner = self.project_dir / path
            if os.path.lexists(inner / ".git") and not os.path.islink(inner):
                protect(inner)
                sub = PrivateIndex(inner, self.path.parent, f"submodule-{number}.index")
                sub.gitlinks = {"": commit}
                sub._env = {**self._env, "GIT_INDEX_FILE": str(sub.path)}
                sub.baseline = {name: sub._now(name) for _, name in sub.submodule_status()}  # the person's, as it is
                self.submodules[path] = sub
            else:
                self.unpopulated.add(path)
        return self

    def stop(self) -> None:
        """The run ended: the submodules are no longer protected."""
        for sub in self.submodules.values():
            unprotect(sub.project_dir)

    def _build(self, tree: str) -> bool:
        """The index made anew from ``tree`` (the empty tree when ``tree`` does not resolve); False then."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        env = self.env()
        made = git(self.project_dir, "read-tree", tree, env=env, check=False, tree_unchanged=True)
        if made.returncode == 0:
            return True
        git(self.project_dir, "read-tree", "--empty", env=env, tree_unchanged=True)
        return False

    def _gitlinks(self) -> dict[str, str]:
        """The gitlinks the index holds: path -> commit (no git call when it has none)."""
        try:
            with open(self.path, "rb") as handle:
                if GITLINK_MODE not in handle.read():
                    return {}
        except FileNotFoundError:
            return {}
        out = os.fsdecode(git(self.project_dir, "ls-files", "-s", "-z", env=self.env(), binary=True).stdout)
        found = {}
        for record in out.split("\0"):
            meta, _, path = record.partition("\t")
            fields = meta.split(" ")
            if len(fields) == 3 and fields[0] == "160000":
                found[path] = fields[1]
        return found

    def _head_key(self) -> object:
        """What says which commit ``HEAD`` is, without git: ``HEAD``'s bytes and the ``lstat`` of the ref it
        names and of ``packed-refs`` (None: cannot tell).  Only decides whether the index is made anew: the
        status checks that its ``HEAD`` is the index's commit either way."""
        if self._dirs is None:
            return None
        gdir, cdir = self._dirs
        try:
            head = safeio.read_bytes(gdir / "HEAD", gdir)
        except OSError:
            return None
        name = os.fsdecode(head[5:].strip()) if head.startswith(b"ref: ") else ""
        if ".." in name.split("/"):
            return None
        refs = (_lstat_key(cdir / name), _lstat_key(gdir / name)) if name else ()
        return head, _lstat_key(cdir / "packed-refs"), refs

    def status(self, while_agent_runs: bool = False) -> TreeStatus:
        """The work tree against ``HEAD`` as the loop's own index sees it: one git call while ``HEAD`` and the
        index are as the loop last made it, two when it is made anew (read-tree, status); more with gitlinks.

        ``while_agent_runs``: an agent process may write meanwhile (a Stop hook's check): the index is made
        anew and not kept for a later status."""
        made, self._made = self._made, None
        key = None if while_agent_runs else self._head_key()
        reused = made is not None and key is not None and made[1] == key and _lstat_key(self.path) == made[2]
        if not reused:
            self._build("HEAD")
        status = parse_status(git(self.project_dir, *STATUS_ARGS, env=self.env(), binary=True).stdout)
        if reused and made is not None and status.head != made[0]:  # HEAD moved all the same: made anew
            reused = False
            self._build("HEAD")
            status = parse_status(git(self.project_dir, *STATUS_ARGS, env=self.env(), binary=True).stdout)
        now = made[3] if reused and made is not None else self._gitlinks()
        if key is not None and key == self._head_key():
            self._made = (status.head, key, _lstat_key(self.path), now)
        if self.sparse:
            status = self._without_sparse(status)
        if not self.gitlinks and not self.submodules:
            return replace(status, gitlinks=tuple(sorted(now))) if now else status
        moved = sorted(path for path, commit in now.items()
                       if self.gitlinks.get(path) != commit or (path in self.unpopulated and _has_entries(self.project_dir / path)))
        tracked, codes, untracked = list(status.tracked), list(status.codes), list(status.untracked)
        for path, sub in self.submodules.items():
            if path in now and path not in moved:
                inner = sub.submodule_status(keep=not while_agent_runs)
                for code, name in inner:
                    (untracked if code == "??" else tracked).append(f"{path}/{name}" if name else path)
                    if code != "??":
                        codes.append(code)
        return replace(status, tracked=tracked, codes=tuple(codes), untracked=untracked, gitlinks=tuple(moved))

    def submodule_status(self, keep: bool = True) -> list[tuple[str, str]]:
        """A submodule's work tree against the commit the project records for it: ``(XY, path)`` of each change
        (``??``: untracked; path ``""``: its HEAD is not that commit, or the commit is not in it), but what is
        as it was at the run's start (:attr:`baseline`).  Its index is made once and again only when its file
        changed (it is the recorded commit's tree, nothing else); ``keep=False``: not kept (an agent runs)."""
        commit = self.gitlinks[""]
        self._head = None
        try:
            made, self._made = self._made, None
            if made is None or _lstat_key(self.path) != made[2]:
                if not self._build(commit):
                    return [change for change in [(".M", "")] if not self._as_at_start(change[1])]
                made = (commit, None, _lstat_key(self.path), {})
            status = parse_status(git(self.project_dir, *STATUS_ARGS, env=self.env(), binary=True).stdout)
            self._made = made if keep else None
        except subprocess.CalledProcessError:
            return [change for change in [(".M", "")] if not self._as_at_start(change[1])]
        self._head = status.head
        # the work tree against the recorded commit; how the submodule's own HEAD differs is the line for it
        found = [("." + code[1], path) for code, path in zip(status.codes, status.tracked) if code[1] != "."]
        found += [("??", path) for path in status.untracked]
        if status.head != commit:
            found.insert(0, (".M", ""))
        return [change for change in found if not self._as_at_start(change[1])]

    def _now(self, path: str) -> object:
        """What :attr:`baseline` keeps of ``path`` (``""``: the submodule's HEAD), as it is now."""
        return self._head if path == "" else _lstat_key(self.project_dir / path)

    def _as_at_start(self, path: str) -> bool:
        return path in self.baseline and self.baseline[path] == self._now(path)

    def _without_sparse(self, status: TreeStatus) -> TreeStatus:
        """``status`` without the run-start skip-worktree paths that are as they were then."""
        kept = [(code, path) for code, path in zip(status.codes, status.tracked)
                if path not in self.sparse or _lstat_key(self.project_dir / path) != self.sparse[path]]
        if len(kept) == len(status.tracked):
            return status
        return replace(status, tracked=[path for _, path in kept], codes=tuple(code for code, _ in kept))
