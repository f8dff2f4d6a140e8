"""The checks of a task list: the validators' violations and the policy's whitelist's.

The loop reads the list back after an iteration (:mod:`ralph.loop.repairs`) and a Stop hook
checks it mid-iteration (:mod:`ralph.loop.hookbridge`); both go through :class:`TaskChecks`,
which builds the policy's snapshot of the pre-iteration list once per iteration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.contracts import ValidationContext

if TYPE_CHECKING:
    from collections.abc import Callable

    from ralph.gitutil import TreeStatus
    from ralph.contracts import Selection, Snapshot, Violation
    from ralph.loop.runcontext import RunContext
    from ralph.tasks import TaskList


class TaskChecks:
    """Validates a task list against the iteration's snapshot (the run context's policy, plugins, task file)."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.snapshot_of: tuple[TaskList, Snapshot] | None = None
        """The current iteration's pre-iteration list and its snapshot (built on the first check, not on every Stop)."""

    def begin(self, before: TaskList) -> Snapshot:
        """A new iteration starts from ``before``: its snapshot, built anew (``before`` may be the last
        iteration's list, changed in place since)."""
        self.snapshot_of = (before, self.context.policy.snapshot(before))
        return self.snapshot_of[1]

    def validate(
        self,
        raw: str | None,
        tasks: TaskList | None,
        mode: str | None,
        before: TaskList | None,
        check_git: bool = True,
        parse_error: str | None = None,
        story_id: str | None = None,
        tree_status: Callable[[], TreeStatus] | None = None,
    ) -> list[Violation]:
        """The validators' violations, and with the pre-iteration list (``before``) the policy's whitelist's.

        ``tree_status``: the shared status (:class:`ralph.gitutil.StatusShare`), only where the agent's processes
        are gone (the read-back after an iteration; never a Stop hook's check)."""
        context = self.context
        validation = ValidationContext(
            project_dir=context.project_dir,
            tasks_path=context.tasks_path,
            raw=raw,
            tasks=tasks,
            parse_error=parse_error,
            policy=context.policy,
            mode=mode,  # type: ignore[arg-type]
            snapshot=self.snapshot(before) if before is not None else None,
            review_cap=context.config.review_cap,
            check_git=check_git and not context.cancel.is_set(),  # stopped by the person: not the agent's to commit
            story_id=story_id,
            before=before,
            tree_status=tree_status,
        )
        violations = context.host.validate(validation)
        if before is not None and tasks is not None and mode is not None:
            from ralph.loop.listcheck import check_list

            listed = check_list(before, tasks, story_id, context.taskfile.trusted, policy=context.policy, mode=mode)
            violations += listed.violations
        return violations

    def snapshot(self, before: TaskList) -> Snapshot:
        """The policy's snapshot of ``before`` (:meth:`Policy.snapshot`), built once per iteration (its pre-iteration list is never mutated) rather than per Stop.

        Each call gets its own shallow copy of the cached dict, so a validator that changes its
        snapshot changes no other call's; the values (:class:`StoryState`) are frozen.
        """
        cached = self.snapshot_of  # one read: hook threads and the loop thread may both replace it
        if cached is None or cached[0] is not before:
            cached = self.snapshot_of = (before, self.context.policy.snapshot(before))
        return dict(cached[1])

    def stop_checks(self, selection: Selection, before: TaskList) -> list[Violation]:
        """A Stop hook's checks: the task list on disk now against the iteration's snapshot."""
        raw, tasks, error = self.context.taskfile.read()
        return self.validate(raw, tasks, selection.mode, before, parse_error=error, story_id=selection.story_id)
