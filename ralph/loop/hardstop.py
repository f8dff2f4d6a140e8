"""Tier 3 of escalation, the hard stop: a story that keeps failing is marked failed, its work kept on a
``wip/ralph-fail-*`` branch (and a copy in the run directory), and the working branch reset to before the
story's work unless other stories changed since.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.loop.sendback import save_work
from ralph.loop.storystate import truncate

if TYPE_CHECKING:
    from ralph.loop.gates import GateLoop
    from ralph.loop.records import IterationRecord
    from ralph.loop.storystate import StoryAttempts
    from ralph.tasks import Story, TaskList


@dataclass
class FailedStory:
    """A story stopped at tier 3, for the end-of-run report."""

    story_id: str
    attempts: int
    max_attempts: int
    last_gate: str | None
    branch: str | None
    error: str
    stuck: bool
    quality_warnings: int
    reset: str


class HardStop:
    """Stops stories at tier 3 and remembers which, for the end-of-run report."""

    def __init__(self, loop: GateLoop, project_dir: Path) -> None:
        self.loop = loop
        self.project_dir = project_dir
        self.failed: list[FailedStory] = []
        """The stories stopped so far, in order."""

    def stop(self, record: IterationRecord, story_id: str, state: StoryAttempts, tasks: TaskList) -> TaskList:
        """Keep the work on a failure branch, reset the working branch, mark the story failed; returns the list."""
        from ralph.gitutil import branch_failed_work

        loop = self.loop
        stuck = state.stuck_count >= 3
        branch = f"wip/ralph-fail-{re.sub(r'[^A-Za-z0-9._-]', '_', story_id)}-{time.strftime('%Y%m%d-%H%M%S')}"
        last = state.attempts[-1] if state.attempts else None
        error = next((line.strip() for line in (last.output if last else "").splitlines() if line.strip()), "")
        message = (
            f"Ralph Loop failed: {story_id}\n\nIterations: {state.iteration}/{state.max_iterations}\n"
            f"Last gate: {state.last_gate}\nError hash: {state.error_hash}\nStuck: {'yes' if stuck else 'no'}\n"
            f"Strategy shifts: {state.strategy_shifts}\n\n"
            + (f"Last output (verbatim, cut):\n{truncate(last.output, 60)}\n" if last else "")
        )
        if state.start_commit:
            save_work(loop, self.project_dir, record, state.start_commit,
                      f"{story_id}'s work before the tier-3 reset (also on {branch})")
        tip = branch_failed_work(self.project_dir, branch, message)
        reset = self._reset(state.start_commit, story_id, tasks)
        raw, current, _ = loop.taskfile.read()
        if current is None or current.story(story_id) is None:
            current = tasks
        story = current.story(story_id)
        assert story is not None
        story.failed = True
        story.failureReason = (
            f"stopped after {state.iteration} failed attempts at the {state.last_gate} gate"
            f"{' (stuck: same error ' + str(state.stuck_count) + 'x)' if stuck else ''}; work kept on {branch}"
        )
        loop.taskfile.accept(raw)
        loop.persist_tasks(current, record, f"{story_id} stopped (tier 3): {story.failureReason}")
        self.failed.append(
            FailedStory(story_id, state.iteration, state.max_iterations, state.last_gate, branch, error[:300], stuck,
                        state.quality_warnings, reset)
        )
        loop.emit("story_failed", iteration=record.number, story=story_id, branch=branch, tip=tip, reset=reset,
                  stuck=stuck, error=error[:300])
        return current

    def _reset(self, start_commit: str | None, story_id: str, tasks: TaskList) -> str:
        """Reset the working branch to the story's start unless other stories changed since; says what it did."""
        from ralph.gitutil import git

        if not start_commit:
            return "not reset: no start commit recorded"
        others_changed = self._others_changed_since(start_commit, story_id, tasks)
        if others_changed:
            return f"not reset: other stories changed since {start_commit[:8]} ({', '.join(others_changed)})"
        git(self.project_dir, "reset", "-q", "--hard", start_commit)
        return f"reset to {start_commit[:8]}"

    def _others_changed_since(self, commit: str, story_id: str, tasks: TaskList) -> list[str]:
        """Other stories whose state (the policy's state fields) differs from the task file at ``commit``."""
        from ralph.errors import TaskListError
        from ralph.gitutil import show_file

        taskfile = self.loop.taskfile
        raw = show_file(self.project_dir, commit, taskfile.path)
        if raw is None:
            return []
        try:
            then = taskfile.store.parse(raw, taskfile.path)
        except TaskListError:
            return []
        fields = self.loop.policy.state_fields

        def state(story: Story) -> tuple[object, ...]:
            return tuple(getattr(story, name, None) for name in fields)

        before = {s.id: state(s) for s in then.userStories}
        return [
            s.id for s in tasks.userStories
            if s.id != story_id and s.id in before and before[s.id] != state(s)
        ]
