"""The ``skip-review`` policy: implement iterations set passes=true directly.

Its table allows one thing: the selected story's ``passes`` going to true (with its
``notes``), or a split of that story.  Every other change, to any story, is undone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ralph.api import Policy, hookimpl
from ralph.api.policies import ModeRules, Selection, Transition, story_line

if TYPE_CHECKING:
    from ralph.api import TaskList

_OTHERS = ("reviewStatus", "reviewCount", "reviewFeedback")


def _unchanged(old: Any, new: Any) -> bool:
    return all(getattr(old, name, getattr(new, name)) == getattr(new, name) for name in ("passes", *_OTHERS))


def _done(old: Any, new: Any) -> bool:
    return not old.passes and new.passes is True and all(
        getattr(old, name, getattr(new, name)) == getattr(new, name) for name in _OTHERS
    )


TABLE = {
    "implement": ModeRules(
        (
            Transition("no change (stuck or unfinished)", _unchanged),
            Transition("done", _done, ("set `passes: true` yourself", "`reviewStatus` stays `null`")),
        ),
        split=True,
    ),
}
"""The whitelist: implement only; the selected story's ``passes`` and ``notes``, or its split."""


class SkipReviewPolicy(Policy):
    """No review cycle: for low-stakes work where speed matters more than review."""

    name = "skip-review"
    description = "implement only; stories are done when the implementing iteration says so"
    uses_review = False
    table = TABLE
    judged_outside_a_loop = False  # the seeds: Check 2.5 is off without review (in a loop TABLE applies)

    def select(self, tasks: TaskList) -> Selection | None:
        from ralph.api.policies import first_ready

        story = first_ready(tasks, [s for s in tasks.userStories if not s.passes])
        return Selection("implement", story.id, "highest-priority open story") if story is not None else None

    def is_complete(self, tasks: TaskList) -> bool:
        return all(s.passes for s in tasks.userStories)

    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        story = tasks.story(selection.story_id or "")
        return "\n".join(
            [
                "- Mode: **implement** (skip-review: no review cycle in this run)",
                story_line(selection.story_id, story),
                "- When the story is implemented and verifyCommands pass, set passes=true, write what "
                "you did in notes, and leave reviewStatus null and reviewCount 0.",
            ]
        )


@hookimpl(trylast=True)
def ralph_register_policies(register):  # type: ignore[no-untyped-def]
    """Register the skip-review policy."""
    register(SkipReviewPolicy)
