"""The opening of a run: what the loop settles in the repository under the lock, and how it says so.

:func:`prepare_repository` keeps the marker out of git, stashes (or refuses) the user's
uncommitted work, archives old failure branches, gets onto the task list's branch and
decides about state an earlier run left.  :func:`announce` emits ``run_started`` and the
events that tell the user what was found and done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.errors import UsageError
from ralph.loop.activestate import MARKER_NAME

if TYPE_CHECKING:
    from ralph.config import RalphConfig
    from ralph.contracts import Check
    from ralph.loop.gates import GateKeeper
    from ralph.loop.taskfile import TaskFile


@dataclass
class Opening:
    """What the repository's preparation found and did, for the announcement and the summary."""

    stash_ref: str | None = None
    stash_message: str | None = None
    saved_work: bytes = b""
    """The stashed work as a patch, written to the run directory when it exists."""
    archived_state: Path | None = None
    continued_state: str | None = None
    """Set when the state of a previous, normally ended run is continued without asking."""
    branch_note: str | None = None
    archived_branches: list[tuple[str, str]] = field(default_factory=list)

    def keep_saved_work(self, run_dir: Path) -> None:
        """Copy the stashed work into ``run_dir`` (outside the agent's reach) and say where."""
        if not self.saved_work:
            return
        from ralph.loop.savedwork import record_saved_work

        self.stash_message = (self.stash_message or "") + "; " + record_saved_work(
            run_dir, "stash", self.saved_work, "your uncommitted work at run start (also stashed)"
        )


def uncommitted_warning(project_dir: Path, config: RalphConfig) -> Check | None:
    """A warning when the project has uncommitted changes ``ralph run`` would refuse to start over
    (``dirty_start = "refuse"``), for ``--dry-run`` and ``ralph doctor``; None otherwise."""
    from ralph.contracts import Check
    from ralph.gitutil import dirty_paths

    dirty = dirty_paths(project_dir) if config.dirty_start == "refuse" else []
    if not dirty:
        return None
    shown = ", ".join(line[3:] for line in dirty[:5]) + (" ..." if len(dirty) > 5 else "")
    return Check(
        None, f"uncommitted changes ({shown}): `ralph run` will refuse to start until you commit or stash them",
        'commit or stash them (or set dirty_start = "stash")',
    )


def prepare_repository(
    project_dir: Path, config: RalphConfig, taskfile: TaskFile, keeper: GateKeeper, rerun: str | None
) -> Opening:
    """Keep the marker out of git, deal with the user's uncommitted work and earlier state.

    ``rerun`` is ``resume`` or ``fresh`` (None: ask on a terminal, else refuse).
    """
    from ralph.gitutil import dirty_paths, ensure_excluded, head as head_of, stash_user_work, work_patch

    opening = Opening()
    ensure_excluded(project_dir, MARKER_NAME)
    dirty = dirty_paths(project_dir)
    if dirty:
        shown = "\n".join(f"  {line}" for line in dirty[:15])
        if config.dirty_start == "refuse":
            left = set((keeper.last_run.previous() or {}).get("left_uncommitted") or [])
            if left and {line[3:] for line in dirty} <= left:
                from ralph.loop.finish import LEFT_UNCOMMITTED_FIX

                raise UsageError(
                    f"the last `ralph run` here ended with changes its agent left uncommitted (an iteration that failed "
                    f"or was stopped commits nothing); ralph will not run over them:\n{shown}\n"
                    f"{LEFT_UNCOMMITTED_FIX}"
                )
            raise UsageError(
                f"the project has uncommitted changes; ralph will not run over them:\n{shown}\n"
                "commit or stash them yourself, or set dirty_start = \"stash\" in [tool.ralph] "
                "(or RALPH_DIRTY_START=stash) to let ralph stash them under a named stash"
            )
        name = f"ralph: your uncommitted work before the run of {time.strftime('%Y-%m-%d %H:%M:%S')}"
        base = head_of(project_dir)
        # a copy outside the agent's reach (rule 6): `git stash clear` or `git gc` cannot lose it
        opening.saved_work = work_patch(project_dir, base) if base else b""
        opening.stash_ref = stash_user_work(project_dir, name)
        opening.stash_message = (
            f"your uncommitted work was stashed as {opening.stash_ref} ({name!r}); "
            f"get it back with `git stash pop {opening.stash_ref}`"
        )
    from ralph.loop.start import archive_failure_branches, checkout_work_branch

    opening.archived_branches = archive_failure_branches(project_dir)
    _, listed, _ = taskfile.read()
    if listed is not None:
        opening.branch_note = checkout_work_branch(project_dir, listed.branchName, taskfile.path)
    pending = keeper.ledger.pending()
    previous_end = keeper.last_run.previous()
    if pending and rerun is None and _ended_cleanly_unchanged(previous_end, taskfile):
        # a run that ended normally and a task list nobody changed since: just go on
        opening.continued_state = f"{len(pending)} stor{'y' if len(pending) == 1 else 'ies'} ({(previous_end or {}).get('reason')})"
        pending = []
    if pending:
        choice = rerun if rerun is not None else _ask_rerun(pending, previous_end)
        if choice == "fresh":
            opening.archived_state = keeper.ledger.archive()
    keeper.last_run.clear()
    return opening


def _ask_rerun(pending: list[Path], previous_end: dict[str, Any] | None) -> str:
    """Resume or start fresh: the person's answer on a terminal; without one, refuse with the flags."""
    import sys

    if not sys.stdin.isatty():
        names = ", ".join(p.stem for p in pending[:5])
        why = (
            "the task list changed since that run ended"
            if previous_end
            else "that run did not end normally (it crashed or was killed)"
        )
        raise UsageError(
            f"state of an earlier run exists for {names} and {why}; pass --resume to continue "
            "with it or --fresh to archive it and start over"
        )
    import click

    return str(click.prompt(
        f"An earlier run left state for {len(pending)} stor{'y' if len(pending) == 1 else 'ies'}. "
        "Resume with it, or start fresh (archiving it)?",
        type=click.Choice(["resume", "fresh"]),
        default="resume",
    ))


def _ended_cleanly_unchanged(previous_end: dict[str, Any] | None, taskfile: TaskFile) -> bool:
    """True when the previous run reached its end and the task list is byte for byte what it left."""
    if not previous_end or "tasks_sha256" not in previous_end:
        return False
    return bool(previous_end["tasks_sha256"] == taskfile.sha256())


def announce(
    emit: Callable[..., None],
    opening: Opening,
    run_started: dict[str, Any],
    checks: list[Check],
    builtin_prompt_in: str | None,
) -> None:
    """Emit ``run_started`` (with ``run_started``'s fields) and what the opening found and did.

    ``builtin_prompt_in``: the ralph directory (as shown) when the run uses the built-in prompt.
    """
    emit("run_started", **run_started)
    warnings = [check for check in checks if check.ok is None]
    if warnings:
        emit("preflight_warnings", warnings=[{"what": c.what, "fix": c.fix} for c in warnings])
    if opening.stash_message:
        emit("user_work_stashed", stash=opening.stash_ref, message=opening.stash_message)
    if opening.archived_state:
        emit("earlier_state_archived", path=str(opening.archived_state))
    if opening.continued_state:
        emit("earlier_state_continued", stories=opening.continued_state)
    if builtin_prompt_in is not None:
        emit("builtin_prompt", ralph_dir=builtin_prompt_in)
    if opening.branch_note:
        emit("work_branch", message=opening.branch_note)
    if opening.archived_branches:
        emit("failure_branches_archived", branches=[{"from": a, "to": b} for a, b in opening.archived_branches])
