"""Check 2 (seed 000 §5b): the invariants of the task state, as the active policy states them.

The review policy's: passes=true <-> approved, changes_requested needs feedback, reviewCount
within cap + 1 (``Policy.invariant_violations``); skip-review states none (the seeds: Check 2 off).
"""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """The policy's invariant violations of the current task list."""
    if context.tasks is None:
        return []
    return context.policy.invariant_violations(context.tasks, context.review_cap)
