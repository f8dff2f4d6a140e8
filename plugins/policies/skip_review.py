"""The ``skip-review`` policy: implement iterations set passes=true directly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.api import IterationMode, Policy, Selection, Snapshot, Violation, hookimpl

if TYPE_CHECKING:
    from ralph.api import TaskList


class SkipReviewPolicy(Policy):
    """No review cycle: for low-stakes work where speed matters more than review."""

    name = "skip-review"
    description = "implement only; stories are done when the implementing iteration says so"
    uses_review = False

    def select(self, tasks: TaskList) -> Selection | None:
        from ralph.api import ready_stories

        ready = ready_stories(tasks, [s for s in tasks.userStories if not s.passes])
        return Selection("implement", ready[0].id, "highest-priority open story") if ready else None

    def is_complete(self, tasks: TaskList) -> bool:
        return all(s.passes for s in tasks.userStories)

    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        story = tasks.story(selection.story_id or "")
        title = f"{story.id} - {story.title}" if story else str(selection.story_id)
        return "\n".join(
            [
                "- Mode: **implement** (skip-review: no review cycle in this run)",
                f"- Story: **{title}**",
                "- When the story is implemented and verifyCommands pass, set passes=true, write what "
                "you did in notes, and leave reviewStatus null and reviewCount 0.",
            ]
        )

    def transition_violations(self, mode: IterationMode, before: Snapshot, tasks: TaskList) -> list[Violation]:
        return []  # seed 000 §5b: Check 2.5 is skipped entirely in skip-review mode


@hookimpl(trylast=True)
def ralph_register_policies(register):  # type: ignore[no-untyped-def]
    """Register the skip-review policy."""
    register(SkipReviewPolicy)
