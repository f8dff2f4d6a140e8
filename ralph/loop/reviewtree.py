"""A review changes no code (Trust boundary rule 4): after an iteration of a mode the gates do not
follow (a review), the loop compares the work tree with the one the iteration started from.

The comparison is by content, as git trees: every file that is not ignored, tracked or not, is
hashed into a tree through an index of the loop's own in the run directory (the project's
``.git/index`` is the agent's to forge: a stat-clean entry with another blob hides a change from
``git status``).  Commits do not matter, only what the tree holds: a change that was committed
and reverted is no change.

Anything but the task list and the progress log that differs is undone: a copy of the iteration's
work is saved in the run directory, the run's branch goes back to the iteration's checkpoint (the
agent's commits dropped), each changed path is put back as it was (through :mod:`ralph.safeio`:
no link followed), and the task list and progress log stay as the agent left them.  Then the
iteration's verdict is not accepted: the selected story's review fields go back to what they were
before it (:meth:`ReviewFreeze.reject_verdict`), noted in the progress log and committed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ralph import safeio
from ralph.agenttext import name
from ralph.contracts import Violation
from ralph.errors import UsageError
from ralph.gitutil import git

if TYPE_CHECKING:
    from ralph.contracts import Policy, Selection
    from ralph.loop.progressnotes import ProgressNotes
    from ralph.loop.records import IterationRecord
    from ralph.loop.taskfile import TaskFile
    from ralph.tasks import TaskList

CHECK = "review-changed-code"
MAX_KEPT_BYTES = 4 * 1024 * 1024
"""An ignored test file larger than this is compared but not kept (it is removed when changed)."""
INDEX_NAME = "worktree.index"
GATED_MODES = ("implement", "review-fix")
"""The modes after which the gates run; every other mode changes no code (the same tuple as :mod:`ralph.loop.gates`)."""


def changes_code(mode: str) -> bool:
    """Whether an iteration of ``mode`` may change the project's code (the gates check it afterwards)."""
    return mode in GATED_MODES


class WorkTree:
    """The work tree as a git tree id, hashed through a private index (kept for its stat cache)."""

    def __init__(self, project_dir: Path, index: Path) -> None:
        self.project_dir = project_dir
        self.index = index

    def tree(self) -> str:
        """The tree of every file git does not ignore, as it is on disk now."""
        env = {"GIT_INDEX_FILE": str(self.index)}
        # the project's .gitignore files count (the person's), a per-user ignore file the agent could write does not
        added = git(self.project_dir, "-c", "core.excludesFile=/dev/null", "add", "-A", "--ignore-errors", "--", ".",
                    env=env, check=False)
        written = git(self.project_dir, "write-tree", env=env, check=False)
        if written.returncode != 0:
            raise UsageError(
                f"the loop could not read the work tree to check that a review changed no code: "
                f"{(written.stderr or added.stderr).strip()}"
            )
        return written.stdout.strip()

    def ignored_tests(self) -> dict[str, tuple[str, bytes | None]]:
        """Test code and configuration git ignores (an ignored ``conftest.py`` decides a test run as much as
        a tracked one): each path's SHA-256 and its bytes (None when larger than :data:`MAX_KEPT_BYTES`);
        one that is not a regular file reached without links counts by its kind."""
        import hashlib

        from ralph.testintegrity.export import ignored_test_files
        from ralph.testintegrity.paths import TestRules

        found: dict[str, tuple[str, bytes | None]] = {}
        for path in ignored_test_files(self.project_dir, TestRules()):
            try:
                data = safeio.read_bytes(self.project_dir / path, self.project_dir)
            except OSError:
                found[path] = (f"not a regular file: {safeio.kind(self.project_dir / path, self.project_dir)}", None)
                continue
            found[path] = (hashlib.sha256(data).hexdigest(), data if len(data) <= MAX_KEPT_BYTES else None)
        return found

    def changed(self, before: str, after: str) -> list[str]:
        """Paths that differ between two trees (added, removed, changed, mode changed)."""
        if before == after:
            return []
        out = git(self.project_dir, "diff-tree", "-r", "-z", "--no-renames", "--name-only", before, after,
                  binary=True, check=False).stdout
        return [os.fsdecode(raw) for raw in out.split(b"\0") if raw]


@dataclass
class Undone:
    """What :meth:`ReviewFreeze.after_iteration` found and undid."""

    paths: list[str] = field(default_factory=list)
    saved: str | None = None


class ReviewFreeze:
    """Takes the tree before a review iteration; afterwards undoes its code changes and its verdict."""

    def __init__(
        self, project_dir: Path, taskfile: TaskFile, notes: ProgressNotes, emit: Callable[..., None],
        policy: Policy | None = None,
    ) -> None:
        self.project_dir = project_dir
        self.policy = policy
        """Whose state fields hold a story's verdict (None: the task model's review fields)."""
        self.taskfile = taskfile
        self.notes = notes
        self.emit = emit
        self.worktree: WorkTree | None = None
        self.before: str | None = None
        """The tree the running review iteration started from (None: not a review iteration)."""
        self.ignored_before: dict[str, tuple[str, bytes | None]] = {}
        """The ignored test code as the running review iteration found it."""

    def before_iteration(self, run_dir: Path, mode: str) -> None:
        """Before an iteration: remember its tree when it is one that changes no code."""
        self.before = None
        if changes_code(mode):
            return
        if self.worktree is None:
            self.worktree = WorkTree(self.project_dir, run_dir / INDEX_NAME)
        self.before = self.worktree.tree()
        self.ignored_before = self.worktree.ignored_tests()

    def allowed(self) -> set[str]:
        """What a review may change: the task list and the progress log (paths relative to the project)."""
        paths = {self.taskfile.path, self.notes.progress()}
        allowed = set()
        for path in paths:
            try:
                allowed.add(path.relative_to(self.project_dir).as_posix())
            except ValueError:
                continue
        return allowed

    def after_iteration(self, record: IterationRecord, checkpoint: str | None, run_dir: Path) -> list[Violation]:
        """Undo every change but the task list's and the progress log's; a violation naming them, or none."""
        if self.before is None or self.worktree is None:
            return []
        before, self.before = self.before, None
        changed = [p for p in self.worktree.changed(before, self.worktree.tree()) if p not in self.allowed()]
        ignored = self._ignored_changes()
        if not changed and not ignored:
            return []
        undone = Undone(changed + ignored, self._save(record, checkpoint, run_dir))
        self._undo(before, changed, checkpoint)
        self._put_back_ignored(ignored)
        left = [p for p in self.worktree.changed(before, self.worktree.tree()) if p not in self.allowed()]
        left += self._ignored_changes()
        if left:
            raise UsageError(
                f"iteration {record.number} ({record.mode}) changed code, which a review may not do, and the loop "
                f"could not undo {', '.join(name(p) for p in left[:5])}: put them back by hand "
                f"({undone.saved or 'no copy could be saved'})"
            )
        changed = undone.paths
        self.emit("review_changes_undone", iteration=record.number, story=record.story_id, paths=changed[:50],
                  saved=undone.saved)
        shown = ", ".join(name(p) for p in changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        return [Violation(
            CHECK,
            f"The {record.mode} iteration changed {shown}. A review changes no code: the loop undid it (a copy "
            "is saved outside the project) and did not accept the iteration's verdict. Review only: what "
            "needs fixing goes into reviewFeedback, and a review-fix iteration changes the code.",
            record.story_id,
        )]

    def _ignored_changes(self) -> list[str]:
        """Ignored test files that differ from what the iteration found (added, removed, changed)."""
        assert self.worktree is not None
        now = self.worktree.ignored_tests()
        before = self.ignored_before
        return sorted(p for p in set(before) | set(now) if p not in now or p not in before or now[p][0] != before[p][0])

    def _put_back_ignored(self, paths: list[str]) -> None:
        """Each changed ignored test file back as it was (its bytes), or removed when it was not there."""
        for path in paths:
            data = self.ignored_before.get(path, ("", None))[1]
            target = self.project_dir / path
            try:
                if data is None:
                    safeio.remove(target, self.project_dir)
                else:
                    safeio.write_bytes(target, self.project_dir, data, parents=True, replace_dir=True)
            except OSError:
                continue  # behind a link: reported by the check that follows

    def _save(self, record: IterationRecord, checkpoint: str | None, run_dir: Path) -> str | None:
        from ralph.gitutil import work_patch
        from ralph.loop.savedwork import record_saved_work

        if not checkpoint:
            return None
        patch = work_patch(self.project_dir, checkpoint)
        if not patch:
            return None
        what = f"iteration {record.number}'s changes to the code ({record.mode}: undone)"
        where = record_saved_work(run_dir, "review", patch, what)
        self.emit("work_saved", iteration=record.number, what=what, where=where)
        return where

    def _undo(self, before: str, changed: list[str], checkpoint: str | None) -> None:
        """Drop the iteration's commits (the tree stays) and put each changed path back as ``before`` has it."""
        if checkpoint:  # the index as the checkpoint has it, the work tree untouched
            git(self.project_dir, "reset", "-q", "--mixed", checkpoint)
        for path in sorted(changed, key=lambda p: (-p.count("/"), p)):
            self._put_back(before, path)

    def _put_back(self, tree: str, path: str) -> None:
        """``path`` as ``tree`` has it (absent there: removed); never through a link on the way."""
        target = self.project_dir / path
        listed = git(self.project_dir, "ls-tree", "-z", tree, "--", path, binary=True, check=False).stdout
        entry = listed.split(b"\0")[0] if listed else b""
        if not entry:
            try:
                safeio.remove(target, self.project_dir)
            except OSError:
                return  # behind a link: reported by the check that follows
            parent = target.parent
            while parent != self.project_dir and safeio.remove_empty_dir(parent, self.project_dir):
                parent = parent.parent
            return
        meta, _, _ = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind != "blob":
            return  # a submodule's commit: not the loop's to write
        data = git(self.project_dir, "cat-file", "blob", sha, binary=True).stdout
        try:
            if mode == "120000":
                safeio.remove(target, self.project_dir)
                safeio.symlink(os.fsdecode(data), target, self.project_dir)
            else:
                safeio.write_bytes(target, self.project_dir, data, parents=True, replace_dir=True,
                                   mode=0o755 if mode == "100755" else 0o644)
        except OSError:
            return

    def reject_verdict(self, record: IterationRecord, selection: Selection, before: TaskList, after: TaskList) -> TaskList:
        """The selected story's state fields (the policy's; the review fields) back to what they were before the
        iteration: written, noted, committed."""
        from ralph.tasks import REVIEW_FIELDS

        fields = tuple(self.policy.state_fields) if self.policy is not None else REVIEW_FIELDS
        story = after.story(selection.story_id or "")
        old = before.story(selection.story_id or "")
        if story is None or old is None:
            self.notes.note(record, "the loop undid the review's changes to the code", subject="review changed code: undone")
            return after
        repaired = after.model_copy(deep=True)
        target = repaired.story(story.id)
        assert target is not None
        changed = [f for f in fields if getattr(target, f, None) != getattr(old, f, None)]
        if self.policy is not None:
            self.policy.restore_state(target, old)
        else:
            for field_name in fields:
                setattr(target, field_name, getattr(old, field_name))
        if changed:
            raw, _, _ = self.taskfile.read()
            self.taskfile.write(repaired, raw)
            record.undone.append(story.id)
        _, reread, _ = self.taskfile.read()
        repaired = reread if reread is not None else repaired
        verdict = f"; its verdict was not accepted ({', '.join(changed)} of {story.id} back as before)" if changed else ""
        self.notes.note(record, f"the {record.mode} iteration changed code; the loop undid it{verdict}",
                        subject="review changed code: undone")
        if changed:
            self.emit("transition_undone", iteration=record.number, stories=[story.id],
                      reasons=[f"the {record.mode} iteration changed code"])
        return repaired
