"""Keep a gate's agent sessions and commands (a reviewer, the agent's tests) from changing the project.

The gate runner takes the snapshot right before a gate first starts one of them (a gate that starts
nothing costs no git call).  Before the session: the HEAD commit, a commit object of the working tree's tracked
changes (``git stash create``, which touches nothing; only when there are any), and
the untracked files with their contents, from one ``git status --porcelain=v2``.  After it: if anything differs, put it all back — HEAD and
the tracked files as they were (including the implementer's uncommitted work),
new untracked files removed, changed or deleted untracked files restored — and
say what was changed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ralph import safeio
from ralph.gitutil import TreeStatus, git, tree_status

MAX_UNTRACKED_BYTES = 4 * 1024 * 1024
"""Untracked files larger than this are not kept in memory (their change is still reported)."""


def _untracked(project: Path) -> list[str]:
    out = git(project, "ls-files", "-z", "--others", "--exclude-standard", check=False).stdout
    return [p for p in out.split("\0") if p]


def _digest(project: Path, name: str) -> str | None:
    """The SHA-256 of an untracked file; None when absent or not a regular file reached without links."""
    try:
        return hashlib.sha256(safeio.read_bytes(project / name, project)).hexdigest()
    except OSError:
        return None


@dataclass
class TreeSnapshot:
    """The project as it was before a read-only session."""

    project: Path
    head: str
    stash: str | None
    status: TreeStatus
    untracked: dict[str, str | None] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)
    unstashed: dict[str, str | None] = field(default_factory=dict)
    """Tracked paths the status lists that ``git stash create`` leaves out (a file in a submodule, an edit the
    repository's index hides from git: the status is the loop's own, :mod:`ralph.privateindex`), with digests."""

    @classmethod
    def take(cls, project: Path) -> TreeSnapshot:
        """Record ``project``'s tree now: HEAD, uncommitted changes (as a stash commit), untracked files.

        One git call on a clean tree (the status); ``git stash create`` only when tracked files differ
        from HEAD (with none it makes nothing)."""
        status = tree_status(project)
        stash = None
        if status.tracked:
            stash = git(project, "stash", "create", check=False).stdout.strip() or None
        snapshot = cls(project, status.head, stash, status)
        if status.tracked and stash is None:
            snapshot.unstashed = {name: _digest(project, name) for name in status.tracked}
        for name in status.untracked:
            snapshot.untracked[name] = _digest(project, name)
            try:  # a symlink's target (a host file) is never read, so never written back into the project
                data = safeio.read_bytes(project / name, project)
            except OSError:
                continue
            if len(data) <= MAX_UNTRACKED_BYTES:
                snapshot.contents[name] = data
        return snapshot

    def changes(self) -> list[str]:
        """What differs now, in words (empty: nothing changed).

        One git call when the snapshot's tree was clean and HEAD did not move (the status: a tracked file
        that differs from HEAD differs from the snapshot); otherwise also ``git diff`` against the
        snapshot's commit, which holds the uncommitted work as it was."""
        project = self.project
        found: list[str] = []
        now = tree_status(project)
        if now.head != self.head:
            found.append(f"HEAD moved from {self.head[:10]} to {now.head[:10]}")
        if self.stash is None and now.head == self.head:
            tracked = [name for name in now.tracked
                       if name not in self.unstashed or _digest(project, name) != self.unstashed[name]]
        else:
            base = self.stash or self.head
            tracked = git(project, "diff", "--name-only", "-z", "--no-ext-diff", base, "--", ".",
                          check=False).stdout.split("\0")
        found += [f"changed {name}" for name in tracked if name and name not in self.untracked]
        found += [f"created {name}" for name in now.untracked if name not in self.untracked]
        listed = set(now.untracked)
        for name, digest in self.untracked.items():
            if name not in listed:
                found.append(f"deleted {name}")
            elif _digest(project, name) != digest:
                found.append(f"changed {name}")
        return found

    def restore(self) -> None:
        """Put the project back as it was when the snapshot was taken."""
        project = self.project
        if self.head:
            git(project, "reset", "-q", "--hard", self.head)
        if self.stash:
            git(project, "stash", "apply", "-q", self.stash, check=False)
            # a stash apply stages nothing we want staged: leave the index as HEAD plus the work
        for name in _untracked(project):
            if name not in self.untracked:
                try:
                    safeio.remove(project / name, project)
                except OSError:
                    pass  # under a symlinked folder: reported by changes(), never followed
        for name, data in self.contents.items():
            if _digest(project, name) != self.untracked.get(name):
                try:
                    safeio.write_bytes(project / name, project, data, parents=True, replace_dir=True)
                except OSError:
                    pass
