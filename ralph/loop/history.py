"""Each story's past as a policy sees it when it selects (``Policy.select_next``).

Built on demand, story by story: this run's iteration records and the story's state file
(failed gate attempts, kept across runs until the story is approved).  A policy that never
asks costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ralph.contracts import GateAttempt, StoryHistory

if TYPE_CHECKING:
    from ralph.loop.gates import GateKeeper
    from ralph.loop.records import IterationRecord


class StoryHistories:
    """``histories(story_id) -> StoryHistory`` over the loop's records and the gate keeper's ledger."""

    def __init__(self, records: Sequence[IterationRecord], keeper: GateKeeper) -> None:
        self.records = records
        self.keeper = keeper

    def __call__(self, story_id: str) -> StoryHistory:
        """What the loop knows of ``story_id``'s past."""
        iterations: dict[str, int] = {}
        for record in self.records:
            if record.story_id == story_id:
                iterations[record.mode] = iterations.get(record.mode, 0) + 1
        state = self.keeper.state(story_id)
        attempts = tuple(
            GateAttempt(a.gate, a.exit_code, a.timed_out, a.error_hash) for a in state.attempts
        )
        return StoryHistory(story_id, iterations, failures=state.iteration, stuck=state.stuck_count, attempts=attempts)
