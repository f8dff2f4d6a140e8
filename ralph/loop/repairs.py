"""After an iteration: read the task list back, and undo what an iteration may not do.

The loop never trusts the agent's account of its work: it parses the file itself, runs the
validators and the whitelist (:mod:`ralph.loop.listcheck`, derived from the policy's table)
against the pre-iteration list, and repairs what it finds (an unparseable file goes back to
the last good text; illegal state transitions and every other change outside the whitelist
are undone), noting each repair in the progress log.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ralph.contracts import Selection, Violation
from ralph.tasks import TaskList

if TYPE_CHECKING:
    from ralph.loop.records import IterationRecord
    from ralph.loop.runcontext import RunContext


class TaskListRepairs:
    """Reads the task list after an iteration and repairs it; accepts it when nothing needs undoing."""

    def __init__(self, context: RunContext) -> None:
        self.taskfile = context.taskfile
        self.validate = context.checks.validate
        self.notes = context.notes
        self.emit = context.emit
        self.policy = context.policy
        self.status = context.status

    def read_back(
        self, record: IterationRecord, selection: Selection, before: TaskList, before_raw: str | None, run_dir: Path
    ) -> tuple[TaskList, list[Violation]]:
        """The task list as the iteration left it (repaired where needed) and every violation found."""
        raw, after, error = self.taskfile.read()
        violations = self.validate(raw, after, selection.mode, before, parse_error=error, story_id=selection.story_id,
                                   tree_status=self.status.get)  # the agent's processes are gone: shared
        if after is None:
            after = self._restore_unparseable(record, raw, before, before_raw, run_dir)
            violations = [v for v in violations if v.check != "schema"] + [
                Violation("schema", f"{error}. The loop restored the task list from before the iteration.")
            ]
        elif any(v.undoable for v in violations):
            after = self._undo(record, before, after, raw, violations, selection, before_raw)
        else:
            self.taskfile.accept(raw)
        return after, violations

    def _undo(
        self,
        record: IterationRecord,
        before: TaskList,
        after: TaskList,
        raw: str | None,
        violations: list[Violation],
        selection: Selection,
        before_raw: str | None = None,
    ) -> TaskList:
        """Undo what the whitelist found, and restore the state fields of every story with an undoable violation."""
        from ralph.loop.listcheck import CHECK, check_list

        listed = check_list(before, after, selection.story_id, self.taskfile.trusted, policy=self.policy, mode=selection.mode)
        repaired = listed.apply(before, after) if listed.needed else after.model_copy(deep=True)
        ids = {v.story_id for v in violations if v.undoable and v.story_id and v.check != CHECK}
        for story in repaired.userStories:
            if story.id in ids:
                self.policy.restore_state(story, before.story(story.id))
                record.undone.append(story.id)
        # text the person owns goes back: render against the pre-iteration text, not the agent's
        self.taskfile.write(repaired, before_raw if listed.needed and before_raw is not None else raw)
        _, reread, _ = self.taskfile.read()
        repaired = reread if reread is not None else repaired
        lines = [v.message for v in violations if v.undoable]
        parts = []
        if record.undone:
            parts.append(f"the loop undid illegal review-field changes on {', '.join(sorted(set(record.undone)))}")
        if listed.needed:
            parts.append("the loop undid changes to the task list that an iteration may not make")
            self.emit(
                "task_list_restored",
                iteration=record.number,
                fields=sorted((listed.top_level or {}).keys()) if listed.top_level is not None else [],
                reinserted=listed.reinsert,
                reverted=listed.revert_text,
                reverted_fields=listed.revert_fields,
                dropped=listed.drop,
                reordered=listed.reorder,
                reasons=[v.message for v in listed.violations],
            )
        self.notes.note(record, "; ".join(parts) + ": " + " ".join(lines))
        if record.undone:
            self.emit("transition_undone", iteration=record.number, stories=sorted(set(record.undone)), reasons=lines)
        return repaired

    def _restore_unparseable(
        self, record: IterationRecord, raw: str | None, before: TaskList, before_raw: str | None, run_dir: Path
    ) -> TaskList:
        """Keep the unparseable text in the run directory and write the pre-iteration list back."""
        if raw is not None:
            (run_dir / f"iteration-{record.number:03d}.tasks-invalid.json").write_text(raw, encoding="utf-8")
        self.taskfile.write(before, before_raw)
        self.notes.note(record, "the task list did not validate; the loop restored the previous version")
        self.emit("tasks_restored", iteration=record.number)
        return before
