"""Check 2.5 (seed 000 §5b): state-field transitions must be legal for the iteration mode.

The rules are the active policy's transition table.  In a loop (``context.before`` set) the
loop applies the policy's whole whitelist itself, the same derived checks with the selected
story known, so this validator adds nothing there; outside a loop (the Stop hook answered from
``.ralph-active``) it judges the snapshot.  Without a snapshot the check is skipped with a
warning (Check 2 still runs).  A policy may judge nothing here (``Policy.judged_outside_a_loop``:
skip-review, the seeds' Check 2.5 off).
"""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """The policy's transition violations between the snapshot and the current state."""
    if context.tasks is None or context.before is not None or not context.policy.judged_outside_a_loop:
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
