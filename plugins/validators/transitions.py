"""Check 2.5 (seed 000 §5b): review-field transitions must be legal for the iteration mode.

The rules belong to the active policy; this validator asks it.  Without a
trusted snapshot the check is skipped with a warning (Check 2 still runs).
"""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """The policy's transition violations between the snapshot and the current state."""
    if context.skip_review or context.tasks is None:
        return []
    if context.snapshot is None or context.mode is None:
        return [
            Violation(
                "transitions",
                "Warning: no pre-iteration snapshot or iteration mode; transition check (2.5) skipped.",
                severity="warning",
            )
        ]
    return context.policy.transition_violations(context.mode, context.snapshot, context.tasks)
