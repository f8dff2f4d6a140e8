"""What a person changed between two iterations, so the loop never takes it for the agent's work.

When an iteration is over (the agent's processes ended with their pid namespace or container, the
gates that ran its code are done, the loop wrote and committed what it does), nothing of the agent
runs until the next iteration starts.  Whatever changes in the project in that gap (while the loop
waits out a usage limit, say) is a person's: an editor saving ``tasks.json``, ``git commit``,
``git checkout -- ralph/prd.md``.  Once the next iteration has run, the loop can no longer tell
that change from the agent's: it would undo it and blame the agent.  So it looks in the gap:
:func:`take` at the end of an iteration, :func:`changes` at the start of the next.  A change stops
the run before the agent starts, leaving the project exactly as the person made it.  When the next
iteration starts right away (the loop waited for nothing and ran nothing in between), the gap has no
width: the status taken at the end is the start's too (:meth:`PersonChanges.look`), one git call
less; a change a person makes then is one made just after the look, which no look could tell from the
agent's.  The status at the end is the loop's shared one (:class:`ralph.gitutil.StatusShare`): the read-back's
(the ``git-clean`` validator's) when nothing the loop did since could have changed the tree, a new one otherwise.  Before a wait (a usage limit) the state is taken, digests included (:meth:`PersonChanges.waiting`),
and the next look compares.

What the state covers: ``HEAD`` and the branch, every path ``git status`` lists (with a digest of
its content, so a second edit of a file already modified counts), and the loop's own inputs even
when git ignores them (the task list, ``prd.md``, ``prompt.md``, the agent CLIs' project settings,
the config).  The ``.ralph-active`` marker and the progress log are the loop's to write between
iterations and are left out.  During an iteration the loop cannot tell a person's edit from the
agent's (in direct mode both write the same files): that is why ``ralph init`` refuses while a run
holds the project's lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ralph import safeio
from ralph.gitutil import TreeStatus, tree_status

__all__ = ["PersonChanges", "TreeState", "changes", "describe", "take"]

MARKER = ".ralph-active"


@dataclass(frozen=True)
class TreeState:
    """The project as the loop left it: ``HEAD`` and a digest per path that matters."""

    head: str
    files: tuple[tuple[str, str], ...]


def take(
    project_dir: Path, watched: Iterable[Path], skipped: Iterable[Path] = (), status: TreeStatus | None = None
) -> TreeState:
    """The state of ``project_dir`` now: ``HEAD``, each path ``git status`` lists and each ``watched`` one
    (one git call; none when the caller passes the ``status`` it took just now)."""
    skip = {MARKER, *(_rel(path, project_dir) for path in skipped)}
    status = status or tree_status(project_dir)
    head = f"{status.head} {status.branch}"
    paths = {*status.tracked, *status.untracked}
    paths.update(rel for rel in (_rel(path, project_dir) for path in watched) if rel)
    files = tuple(sorted((rel, _digest(project_dir, rel)) for rel in paths if rel not in skip))
    return TreeState(head, files)


class PersonChanges:
    """The state at the end of each iteration, compared at the start of the next (see the module)."""

    def __init__(
        self, project_dir: Path, watched: Callable[[], list[Path]], skipped: Callable[[], list[Path]],
        status: Callable[[], TreeStatus] | None = None,
    ) -> None:
        self.project_dir = project_dir
        self.status = status or (lambda: tree_status(project_dir))
        """How :meth:`iteration_over` reads the tree (the loop's shared status, :class:`ralph.gitutil.StatusShare`:
        the read-back's when the loop changed nothing since)."""
        self.watched = watched
        self.skipped = skipped
        self.left: TreeState | None = None
        """The project as the last iteration left it, taken when the loop is about to wait (None: no wait yet)."""
        self._status: TreeStatus | None = None
        """The status :meth:`iteration_over` took, until :meth:`look` or :meth:`waiting` (the gap has no width)."""

    def iteration_over(self) -> None:
        """The loop is done with an iteration: what it left is the state the next one must start from (its
        ``git status`` now; the digests only when the loop waits, :meth:`waiting`)."""
        self._status = self.status()
        self.left = None

    def waiting(self) -> None:
        """The loop is about to wait (a usage limit) right after :meth:`iteration_over`: the state it left is
        taken now, and :meth:`look` looks again and compares."""
        status, self._status = self._status, None
        self.left = take(self.project_dir, self.watched(), self.skipped(), status)

    def look(self) -> tuple[TreeStatus, list[str]]:
        """At an iteration's start: the project's ``git status`` and what changed since :meth:`iteration_over`.

        Called right after it (nothing waited, nothing ran in between: the engine's next step), the status it
        took is now's and the gap is empty; after :meth:`waiting`, one git call and the comparison."""
        status, self._status = self._status, None
        if status is not None:
            return status, []
        status = tree_status(self.project_dir)
        return status, self.since_last_iteration(status)

    def since_last_iteration(self, status: TreeStatus | None = None) -> list[str]:
        """What changed since :meth:`waiting` (empty: nothing, or no wait yet); ``status``: the
        project's ``git status`` taken just now, when the caller has it."""
        if self.left is None:
            return []
        return changes(self.left, take(self.project_dir, self.watched(), self.skipped(), status))


def changes(before: TreeState, now: TreeState) -> list[str]:
    """What differs between two states, one short item each (``HEAD`` first, then paths); empty: nothing."""
    found = []
    if before.head != now.head:
        found.append("HEAD (a commit or a checkout)")
    old, new = dict(before.files), dict(now.files)
    for rel in sorted(old.keys() | new.keys()):
        if old.get(rel, _CLEAN) != new.get(rel, _CLEAN):
            found.append(rel)
    return found


def describe(found: list[str], iteration: int) -> str:
    """The reason the run stops with, naming what changed (up to five items) and what to do."""
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        f"stopped before iteration {iteration}: {shown} changed after iteration {iteration - 1} ended, while no agent "
        "was running, so a person changed it, not the agent; the run stops here so that nothing undoes the change or "
        "counts it against the agent: commit it (or undo it) and `ralph run` again to go on with it"
    )


_CLEAN = "as committed"


def _rel(path: Path, project_dir: Path) -> str:
    try:
        return Path(path).relative_to(project_dir).as_posix()
    except ValueError:
        return ""


def _digest(project_dir: Path, rel: str) -> str:
    """The content's digest, read without following links; what else is there when it is not a regular file."""
    path = project_dir / rel
    what = safeio.kind(path, project_dir)
    if what in ("file", "hardlink"):
        try:
            return hashlib.sha256(safeio.read_bytes(path, project_dir)).hexdigest()
        except (OSError, safeio.UnsafePath):
            return "unreadable"
    if what == "absent":
        return "absent"
    if what == "symlink":
        try:
            return "symlink to " + safeio.read_link(path, project_dir)
        except OSError:
            return "symlink"
    return what
