"""The log of incomplete sessions (seed 001): one line per iteration that ended without moving its
story on, ``incomplete:<story>:<epoch seconds>:<reason>``, appended to ``sessions.log`` in the
project's state directory (outside the project, so the agent cannot write it; kept across runs,
for a person or a script deciding what to resume).

"Moved on" is the loop's own reading, not the agent's claim: the story's state fields (the policy's,
``Policy.state_of``; without one ``passes``, ``reviewStatus`` and ``reviewCount``) after the iteration
(its gates and the loop's undoing included) differ from before it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ralph.contracts import Policy
    from ralph.loop.records import IterationRecord
    from ralph.tasks import TaskList

__all__ = ["LOG_NAME", "incomplete_reason", "log_incomplete"]

LOG_NAME = "sessions.log"
_SEEDS_FIELDS = ("passes", "reviewStatus", "reviewCount")


def incomplete_reason(record: IterationRecord, interrupted: bool, failed_gate: str | None) -> str:
    """Why the iteration ended with its story where it was, in one word (no ``:``): ``interrupted``,
    ``timeout``, ``usage_limit``, ``rate_limit``, ``context_overflow``, ``agent_exit_N``,
    ``gate_failed_NAME``, ``undone`` (the loop undid what it did) or ``end_turn`` (the agent stopped)."""
    if interrupted:
        return "interrupted"
    if record.timed_out:
        return "timeout"
    if record.usage_limit:
        return "usage_limit"
    if record.rate_limit:
        return "rate_limit"
    if record.context_overflow:
        return "context_overflow"
    if record.exit_code not in (0, None):
        return f"agent_exit_{record.exit_code}"
    if failed_gate:
        return "gate_failed_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in failed_gate)
    if record.violations:
        return "undone"
    return "end_turn"


def log_incomplete(
    state_dir: Path, record: IterationRecord, before: TaskList, after: TaskList, interrupted: bool,
    failed_gate: str | None, policy: Policy | None = None,
) -> str | None:
    """Append the iteration's line when its story did not move on; the line, or None."""
    story_id = record.story_id
    if story_id is None:
        return None
    old, new = before.story(story_id), after.story(story_id)
    if old is not None and new is not None:
        state_of = policy.state_of if policy is not None else (lambda story: story.state(_SEEDS_FIELDS))
        if state_of(old) != state_of(new):
            return None
    line = f"incomplete:{story_id}:{int(time.time())}:{incomplete_reason(record, interrupted, failed_gate)}"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(state_dir / LOG_NAME, "a", encoding="utf-8") as log:
            log.write(line + "\n")
    except OSError:
        return None  # a full disk must not stop the loop: the run's events say the same
    return line
