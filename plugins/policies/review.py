"""The ``review`` policy: implement -> fresh-context review -> review-fix (seed 000 §6).

Mode priority is Review-Fix > Review > Implement.  Only a review iteration
may approve a story; the review cap forces approval with
``[AUTO-APPROVED AT CAP]`` so a story cannot cycle for ever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ralph.api import AUTO_APPROVED_PREFIX, IterationMode, Policy, Selection, Snapshot, StoryState, Violation, hookimpl

if TYPE_CHECKING:
    from ralph.api import Story, TaskList

INITIAL = StoryState(False, None, 0)


@dataclass(frozen=True)
class Transition:
    """One legal change of the selected story in a mode (Check 2.5), and how the prompt teaches it.

    ``allows(old, new)`` says whether the story may go from state ``old`` (before the
    iteration) to ``new`` (the story after it); ``prompt`` lists phrases the rendered prompt
    of that mode must contain (compared with whitespace collapsed).  The checks below and
    this table must agree exactly; ``tests/test_prompt_modes.py`` proves both directions.
    """

    name: str
    allows: Callable[[StoryState, Story], bool]
    prompt: tuple[str, ...]


def _same_state(old: StoryState, new: Story) -> bool:
    return new.state() == old


TRANSITIONS: dict[IterationMode, tuple[Transition, ...]] = {
    "implement": (
        Transition("no change (stuck or unfinished)", _same_state, ("document the blocker",)),
        Transition(
            "submit for review",
            lambda old, new: old.reviewStatus is None
            and new.state() == StoryState(old.passes, "needs_review", old.reviewCount),
            ('set the story\'s `reviewStatus` to `"needs_review"`', "leave `passes` at `false`",
             "never set `passes: true`"),
        ),
    ),
    "review": (
        Transition(
            "approve",
            lambda old, new: old.reviewStatus == "needs_review" and new.passes and new.reviewStatus == "approved"
            and new.reviewCount == old.reviewCount + 1,
            ("increase the story's `reviewCount` by exactly 1", "**Approve**", '`reviewStatus: "approved"`',
             "`passes: true`", "`notes`", "**Auto-approve at cap**", f"`{AUTO_APPROVED_PREFIX}`"),
        ),
        Transition(
            "request changes",
            lambda old, new: old.reviewStatus == "needs_review" and not new.passes
            and new.reviewStatus == "changes_requested" and new.reviewCount == old.reviewCount + 1
            and bool(new.reviewFeedback.strip()),
            ("increase the story's `reviewCount` by exactly 1", "**Changes requested**",
             '`reviewStatus: "changes_requested"`', "`passes: false`", "`reviewFeedback`"),
        ),
    ),
    "review-fix": (
        Transition("no change (stuck or unfinished)", _same_state, ("document the blocker",)),
        Transition(
            "resubmit for review",
            lambda old, new: old.reviewStatus == "changes_requested"
            and new.state() == StoryState(old.passes, "needs_review", old.reviewCount)
            and not new.reviewFeedback.strip(),
            ("Clear `reviewFeedback`", 'set `reviewStatus` to `"needs_review"`',
             "Leave `passes` at `false` and `reviewCount` unchanged", "never set `passes: true`"),
        ),
    ),
}
"""Check 2.5 as a table: the legal transitions of the selected story per mode."""

EVERY_MODE: tuple[str, ...] = (
    "New stories start with `passes: false`, `reviewStatus: null`, `reviewCount: 0`",
    "Never touch the review fields of other stories",
    "leave the working tree clean",
    "One story per iteration",
)
"""Rules every mode's prompt states: new stories' initial state and other stories' review fields
(Check 2.5, all modes), committed work (Check 3), one story per iteration."""


def _first(tasks: TaskList, status: str) -> Story | None:
    matching = [s for s in tasks.userStories if s.reviewStatus == status and not s.failed]
    return min(matching, key=lambda s: s.priority) if matching else None


class ReviewPolicy(Policy):
    """Every story passes a fresh-context review before it counts as done."""

    name = "review"
    description = "implement -> review -> review-fix, with a review cap (default)"
    uses_review = True

    @property
    def cap(self) -> int:
        return self.settings.config.review_cap

    def select(self, tasks: TaskList) -> Selection | None:
        from ralph.api import ready_stories

        story = _first(tasks, "changes_requested")
        if story is not None:
            return Selection("review-fix", story.id, "a review requested changes")
        story = _first(tasks, "needs_review")
        if story is not None:
            return Selection("review", story.id, "a story awaits its fresh-context review")
        open_stories = [s for s in tasks.userStories if not s.passes and s.reviewStatus is None]
        ready = ready_stories(tasks, open_stories)
        if ready:
            return Selection("implement", ready[0].id, "highest-priority open story with its dependencies met")
        return None

    def is_complete(self, tasks: TaskList) -> bool:
        return all(s.passes and s.reviewStatus == "approved" for s in tasks.userStories)

    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        story = tasks.story(selection.story_id or "")
        title = f"{story.id} - {story.title}" if story else str(selection.story_id)
        lines = [
            f"- Mode: **{selection.mode}**",
            f"- Story: **{title}**",
            f"- Review cap: {self.cap}",
        ]
        if selection.mode == "implement":
            lines.append(
                "- Implement this story only. When done and committed, set its reviewStatus to "
                '"needs_review". Do NOT set passes=true or approve it: a fresh-context review does that.'
            )
        elif selection.mode == "review" and story is not None:
            number = story.reviewCount + 1
            lines.append(
                f"- This is review number {number} of this story: set reviewCount to {number}, then approve "
                "(with notes) or request changes (with reviewFeedback). Do not fix code yourself."
            )
            if number >= self.cap:
                lines.append(
                    f"- This review reaches the cap of {self.cap}: if issues remain, approve anyway and put "
                    f"them in reviewFeedback prefixed with {AUTO_APPROVED_PREFIX}."
                )
        elif selection.mode == "review-fix" and story is not None:
            lines.append(
                "- Address every item of this review feedback, then clear reviewFeedback and set "
                'reviewStatus back to "needs_review". Do not change passes or reviewCount.'
            )
            lines.append(f"- Review feedback:\n\n  > {story.reviewFeedback}")
        return "\n".join(lines)

    def transition_violations(self, mode: IterationMode, before: Snapshot, tasks: TaskList) -> list[Violation]:
        check = {"implement": _implement, "review": _review, "review-fix": _review_fix}[mode]
        return check(before, tasks)


def _changed(before: Snapshot, tasks: TaskList) -> list[tuple[Story, StoryState | None]]:
    """Stories whose review fields differ from the snapshot (new stories with ``None``)."""
    changed = []
    for story in tasks.userStories:
        old = before.get(story.id)
        # the comparison ``old != story.state()`` makes (a frozen dataclass compares its fields as a
        # tuple), without building a StoryState for each of the list's stories on every Stop
        if old is None or (old.passes, old.reviewStatus, old.reviewCount) != (
            story.passes, story.reviewStatus, story.reviewCount
        ):
            changed.append((story, old))
    return changed


def _diffs(old: StoryState, story: Story) -> list[tuple[str, object, object]]:
    new = story.state()
    return [
        (name, getattr(old, name), getattr(new, name))
        for name in ("passes", "reviewStatus", "reviewCount")
        if getattr(old, name) != getattr(new, name)
    ]


def _fmt(value: object) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, str) else str(value)


def _new_story_violation(story: Story, mode: str) -> Violation | None:
    if story.state() == INITIAL:
        return None
    return Violation(
        "transitions",
        f"New story {story.id} added in {'an' if mode == 'implement' else 'a'} {mode} iteration must start at passes=false, "
        f"reviewStatus=null, reviewCount=0 (found passes={_fmt(story.passes)}, "
        f"reviewStatus={_fmt(story.reviewStatus)}, reviewCount={story.reviewCount}).",
        story.id,
        undoable=True,
    )


def _implement(before: Snapshot, tasks: TaskList) -> list[Violation]:
    violations: list[Violation] = []
    submitted = 0
    for story, old in _changed(before, tasks):
        if old is None:
            if (v := _new_story_violation(story, "implement")) is not None:
                violations.append(v)
            continue
        diffs = _diffs(old, story)
        legal_submit = diffs == [("reviewStatus", None, "needs_review")]
        if legal_submit and submitted == 0:
            submitted += 1
            continue
        for name, a, b in diffs:
            if legal_submit:
                detail = "a second story set to needs_review (one story per iteration)"
            else:
                detail = f"{name} {_fmt(a)} → {_fmt(b)}"
            violations.append(
                Violation(
                    "transitions",
                    "Implement iterations cannot set passes=true or approve stories. Only review "
                    f"iterations may approve. Story {story.id} had illegal transition: {detail}.",
                    story.id,
                    undoable=True,
                )
            )
            if legal_submit:
                break
    return violations


def _review(before: Snapshot, tasks: TaskList) -> list[Violation]:
    changed = _changed(before, tasks)
    violations: list[Violation] = []
    existing = [(s, old) for s, old in changed if old is not None]
    for story, old in changed:
        if old is None and (v := _new_story_violation(story, "review")) is not None:
            violations.append(v)
    if not existing:
        return violations + [
            Violation(
                "transitions",
                "Review iteration made no decision: the reviewed story must get reviewCount incremented "
                'by 1 and either reviewStatus "approved" with passes=true, or "changes_requested" with '
                "reviewFeedback.",
            )
        ]
    if len(existing) > 1:
        ids = ", ".join(s.id for s, _ in existing)
        for story, _ in existing:
            violations.append(
                Violation(
                    "transitions",
                    f"Review iteration made illegal transition on story {story.id}: review fields of more "
                    f"than one story changed ({ids}); a review iteration evaluates exactly one story.",
                    story.id,
                    undoable=True,
                )
            )
        return violations
    story, old = existing[0]
    assert old is not None
    problems = []
    if story.reviewCount != old.reviewCount + 1:
        problems.append(f"reviewCount {old.reviewCount} → {story.reviewCount} (must increase by exactly 1)")
    if old.reviewStatus != "needs_review":
        problems.append(f"the story was {_fmt(old.reviewStatus)}, not awaiting review")
    approved = story.reviewStatus == "approved" and story.passes
    rejected = story.reviewStatus == "changes_requested" and not story.passes and story.reviewFeedback.strip()
    if not (approved or rejected):
        problems.append(
            f"verdict reviewStatus={_fmt(story.reviewStatus)}, passes={_fmt(story.passes)}: must be "
            '"approved" with passes=true, or "changes_requested" with passes=false and non-empty reviewFeedback'
        )
    if problems:
        violations.append(
            Violation(
                "transitions",
                f"Review iteration made illegal transition on story {story.id}: {'; '.join(problems)}.",
                story.id,
                undoable=True,
            )
        )
    return violations


def _review_fix(before: Snapshot, tasks: TaskList) -> list[Violation]:
    violations: list[Violation] = []
    resubmitted = 0
    for story, old in _changed(before, tasks):
        if old is None:
            if (v := _new_story_violation(story, "review-fix")) is not None:
                violations.append(v)
            continue
        diffs = _diffs(old, story)
        legal = diffs == [("reviewStatus", "changes_requested", "needs_review")] and resubmitted == 0
        if legal and not story.reviewFeedback.strip():
            resubmitted += 1
            continue
        detail = (
            "reviewFeedback must be cleared when resubmitting"
            if legal
            else "; ".join(f"{name} {_fmt(a)} → {_fmt(b)}" for name, a, b in diffs)
        )
        violations.append(
            Violation(
                "transitions",
                "Review-fix iterations cannot approve stories. Story "
                f"{story.id} must go back to needs_review for re-review. Illegal transition: {detail}.",
                story.id,
                undoable=True,
            )
        )
    return violations


@hookimpl(trylast=True)
def ralph_register_policies(register):  # type: ignore[no-untyped-def]
    """Register the review policy."""
    register(ReviewPolicy)
