"""Check 2 (seed 000 §5b): review invariants of the task state.  Skipped in skip-review mode."""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """passes=true <-> approved, changes_requested needs feedback, reviewCount within cap + 1."""
    if context.skip_review or context.tasks is None or not context.policy.uses_review:
        return []
    violations = []
    for story in context.tasks.userStories:
        status = "null" if story.reviewStatus is None else story.reviewStatus
        if story.passes and story.reviewStatus != "approved":
            violations.append(
                Violation(
                    "invariants",
                    f"Story {story.id} has passes=true but reviewStatus is '{status}', not 'approved'. "
                    "Only review iterations may approve stories. Set passes back to false or complete "
                    "the review cycle.",
                    story.id,
                    undoable=True,
                )
            )
        if story.reviewStatus == "approved" and not story.passes:
            violations.append(
                Violation(
                    "invariants",
                    f"Story {story.id} has reviewStatus 'approved' but passes=false: these fields must be "
                    "in sync (approved stories pass).",
                    story.id,
                    undoable=True,
                )
            )
        if story.reviewStatus == "changes_requested" and not story.reviewFeedback.strip():
            violations.append(
                Violation(
                    "invariants",
                    f"Story {story.id} has reviewStatus 'changes_requested' but empty reviewFeedback: "
                    "a review that requests changes must explain what needs fixing.",
                    story.id,
                    undoable=True,
                )
            )
        if story.reviewCount > context.review_cap + 1:
            violations.append(
                Violation(
                    "invariants",
                    f"Story {story.id} has reviewCount {story.reviewCount}, above the review cap "
                    f"({context.review_cap}) + 1: the count looks corrupted.",
                    story.id,
                    undoable=True,
                )
            )
    return violations
