"""What a failed hard gate does at once: the story sent back, and (``on_gate_failure = "rollback"``)
the iteration's work rolled back, a copy of it saved in the run directory first.

The agent's verdict does not count when a hard gate fails: the policy undoes it
(:meth:`Policy.send_back`; the review policy: an implemented story loses ``needs_review``,
a fixed one goes back to ``changes_requested``; skip-review: ``passes`` goes back to false).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ralph.contracts import GateResult, Selection
    from ralph.loop.gates import GateLoop
    from ralph.loop.records import IterationRecord
    from ralph.tasks import TaskList


def send_back(
    loop: GateLoop, record: IterationRecord, selection: Selection, tasks: TaskList, result: GateResult,
    before: TaskList | None = None, log: str | None = None,
) -> TaskList:
    """Put the story back as the policy says (persisted when it changed); emits ``gate_failed``.

    ``before`` is the task list before the iteration (the policy may restore the story's state from it);
    ``log`` where the gate's whole output is kept (the event carries its excerpt and that path).
    """
    from ralph.loop.gateoutput import excerpt

    shown, left_out = excerpt(result.output)
    story = tasks.story(selection.story_id or "")
    assert story is not None
    old = before.story(story.id) if before is not None else None
    changed = loop.policy.send_back(story, selection.mode, result.gate, old)
    loop.emit(
        "gate_failed",
        iteration=record.number,
        story=story.id,
        gate=result.gate,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        sent_back=changed,
        excerpt=shown,
        left_out=left_out,
        log=log,
    )
    if changed:
        loop.persist_tasks(
            tasks,
            record,
            f"the {result.gate} gate failed for {story.id}; the loop set it back ({'; '.join(changed)})",
        )
    return tasks


def roll_back(
    loop: GateLoop, project_dir: Path, record: IterationRecord, checkpoint: str, untracked_before: set[str]
) -> TaskList:
    """Undo the iteration's work back to ``checkpoint`` (a copy saved first); returns the task list read back."""
    from ralph.gitutil import rollback

    saved = save_work(loop, project_dir, record, checkpoint, f"iteration {record.number}'s work, rolled back after a failed gate")
    removed = rollback(project_dir, checkpoint, untracked_before)
    loop.emit("rollback", iteration=record.number, to=checkpoint, removed=removed, saved=saved)
    raw, tasks, _ = loop.taskfile.read()
    assert tasks is not None
    loop.taskfile.accept(raw)
    return tasks


def save_work(loop: GateLoop, project_dir: Path, record: IterationRecord, base: str, what: str) -> str | None:
    """Copy the tree's changes against ``base`` into the run directory before the loop discards them."""
    from ralph.gitutil import work_patch
    from ralph.loop.savedwork import record_saved_work

    patch = work_patch(project_dir, base)
    if not patch or loop.run_dir is None:
        return None
    where = record_saved_work(loop.run_dir, "rollback", patch, what)
    loop.emit("work_saved", iteration=record.number, what=what, where=where)
    return where
