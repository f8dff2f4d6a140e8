"""The ``review`` policy: implement -> fresh-context review -> review-fix (seed 000 §6).

Mode priority is Review-Fix > Review > Implement.  Only a review iteration
may approve a story; the review cap forces approval with
``[AUTO-APPROVED AT CAP]`` so a story cannot cycle for ever.

:data:`TRANSITIONS` is the whole rule set (Check 2.5): the loop derives every check of
the task list from it (``ralph.transitions``).  What is left here is wording.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ralph.api import IterationMode, Policy, StoryState, Violation, hookimpl
from ralph.api.policies import (
    AUTO_APPROVED_PREFIX,
    ModeRules,
    Selection,
    StateChange,
    Transition,
    diff_text,
    fmt,
    story_line,
)
from ralph.api.text import strip_controls

if TYPE_CHECKING:
    from ralph.api import Story, TaskList

__all__ = ["EVERY_MODE", "INITIAL", "ReviewPolicy", "TABLE", "TRANSITIONS", "Transition"]

INITIAL = StoryState(False, None, 0)
"""A new story's review state (``initial_state`` holds it with ``reviewFeedback``)."""

_COUNTED = ("passes", "reviewStatus", "reviewCount")


def _kept(old: Any, new: Any, *names: str) -> bool:
    """``new`` has ``old``'s value in each of ``names`` (a field ``old`` does not carry counts as kept)."""
    return all(getattr(old, name, getattr(new, name)) == getattr(new, name) for name in names)


def _same_state(old: Any, new: Any) -> bool:
    return _kept(old, new, *_COUNTED, "reviewFeedback")


def _submitted(old: Any, new: Any) -> bool:
    return old.reviewStatus is None and new.reviewStatus == "needs_review" and _kept(old, new, "passes", "reviewCount", "reviewFeedback")


def _approved(old: Any, new: Any) -> bool:
    return old.reviewStatus == "needs_review" and new.passes and new.reviewStatus == "approved" and new.reviewCount == old.reviewCount + 1


def _rejected(old: Any, new: Any) -> bool:
    return (
        old.reviewStatus == "needs_review" and not new.passes and new.reviewStatus == "changes_requested"
        and new.reviewCount == old.reviewCount + 1 and bool(new.reviewFeedback.strip())
    )


def _resubmitted(old: Any, new: Any) -> bool:
    return (
        old.reviewStatus == "changes_requested" and new.reviewStatus == "needs_review"
        and _kept(old, new, "passes", "reviewCount") and not new.reviewFeedback.strip()
    )


TRANSITIONS: dict[IterationMode, tuple[Transition, ...]] = {
    "implement": (
        Transition("no change (stuck or unfinished)", _same_state, ("document the blocker",)),
        Transition(
            "submit for review", _submitted,
            ('set the story\'s `reviewStatus` to `"needs_review"`', "leave `passes` at `false`",
             "never set `passes: true`"),
        ),
    ),
    "review": (
        Transition(
            "approve", _approved,
            ("increase the story's `reviewCount` by exactly 1", "**Approve**", '`reviewStatus: "approved"`',
             "`passes: true`", "`notes`", "**Auto-approve at cap**", f"`{AUTO_APPROVED_PREFIX}`"),
        ),
        Transition(
            "request changes", _rejected,
            ("increase the story's `reviewCount` by exactly 1", "**Changes requested**",
             '`reviewStatus: "changes_requested"`', "`passes: false`", "`reviewFeedback`"),
        ),
    ),
    "review-fix": (
        Transition("no change (stuck or unfinished)", _same_state, ("document the blocker",)),
        Transition(
            "resubmit for review", _resubmitted,
            ("Clear `reviewFeedback`", 'set `reviewStatus` to `"needs_review"`',
             "Leave `passes` at `false` and `reviewCount` unchanged", "never set `passes: true`"),
        ),
    ),
}
"""Check 2.5 as a table: the legal transitions of the selected story per mode."""

TABLE: dict[str, ModeRules] = {
    "implement": ModeRules(TRANSITIONS["implement"], split=True),
    "review": ModeRules(TRANSITIONS["review"]),
    "review-fix": ModeRules(TRANSITIONS["review-fix"]),
}
"""The whitelist per mode: the transitions above, ``notes`` of the selected story, and splits in implement."""

EVERY_MODE: tuple[str, ...] = (
    "New stories start with `passes: false`, `reviewStatus: null`, `reviewCount: 0`",
    "Never touch the review fields of other stories",
    "leave the working tree clean",
    "One story per iteration",
)
"""Rules every mode's prompt states: new stories' initial state and other stories' review fields
(Check 2.5, all modes), committed work (Check 3), one story per iteration."""

IMPLEMENT = "Implement iterations cannot set passes=true or approve stories. Only review iterations may approve."
FIX = "Review-fix iterations cannot approve stories. Story {id} must go back to needs_review for re-review."


def _first(tasks: TaskList, status: str) -> Story | None:
    matching = [s for s in tasks.userStories if s.reviewStatus == status and not s.failed and not s.waiting]
    return min(matching, key=lambda s: s.priority) if matching else None


class ReviewPolicy(Policy):
    """Every story passes a fresh-context review before it counts as done."""

    name = "review"
    description = "implement -> review -> review-fix, with a review cap (default)"
    uses_review = True
    table = TABLE
    reopen_mode = "review-fix"

    @property
    def cap(self) -> int:
        return self.settings.config.review_cap

    def select(self, tasks: TaskList) -> Selection | None:
        from ralph.api.policies import first_ready

        story = _first(tasks, "changes_requested")
        if story is not None:
            return Selection("review-fix", story.id, "a review requested changes")
        story = _first(tasks, "needs_review")
        if story is not None:
            return Selection("review", story.id, "a story awaits its fresh-context review")
        open_stories = [s for s in tasks.userStories if not s.passes and s.reviewStatus is None]
        ready = first_ready(tasks, open_stories)
        if ready is not None:
            return Selection("implement", ready.id, "highest-priority open story with its dependencies met")
        return None

    def is_complete(self, tasks: TaskList) -> bool:
        return all(s.passes and s.reviewStatus == "approved" for s in tasks.userStories)

    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        story = tasks.story(selection.story_id or "")
        lines = [
            f"- Mode: **{selection.mode}**",
            story_line(selection.story_id, story),
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
            quoted = "\n".join(f"  > {line}" for line in strip_controls(story.reviewFeedback).splitlines() or [""])
            lines.append(f"- Review feedback (the review iteration's words, quoted):\n\n{quoted}")
        return "\n".join(lines)

    # -- the workflow's other rules -------------------------------------------------------------

    def invariant_violations(self, tasks: TaskList, review_cap: int) -> list[Violation]:
        """passes=true <-> approved, changes_requested needs feedback, reviewCount within cap + 1."""
        violations = []
        for story in tasks.userStories:
            status = "null" if story.reviewStatus is None else story.reviewStatus
            if story.passes and story.reviewStatus != "approved":
                violations.append(Violation(
                    "invariants",
                    f"Story {story.id} has passes=true but reviewStatus is '{status}', not 'approved'. "
                    "Only review iterations may approve stories. Set passes back to false or complete "
                    "the review cycle.",
                    story.id, undoable=True,
                ))  # fmt: skip
            if story.reviewStatus == "approved" and not story.passes:
                violations.append(Violation(
                    "invariants",
                    f"Story {story.id} has reviewStatus 'approved' but passes=false: these fields must be "
                    "in sync (approved stories pass).",
                    story.id, undoable=True,
                ))  # fmt: skip
            if story.reviewStatus == "changes_requested" and not story.reviewFeedback.strip():
                violations.append(Violation(
                    "invariants",
                    f"Story {story.id} has reviewStatus 'changes_requested' but empty reviewFeedback: "
                    "a review that requests changes must explain what needs fixing.",
                    story.id, undoable=True,
                ))  # fmt: skip
            if story.reviewCount > review_cap + 1:
                violations.append(Violation(
                    "invariants",
                    f"Story {story.id} has reviewCount {story.reviewCount}, above the review cap "
                    f"({review_cap}) + 1: the count looks corrupted.",
                    story.id, undoable=True,
                ))  # fmt: skip
        return violations

    def reopen(self, story: Any) -> None:
        """An approved story whose final tree failed a gate is approved no more (:meth:`send_back` then asks for
        changes, as after a review-fix)."""
        story.passes = False

    def story_state(self, story: Any) -> str:
        """``approved`` (``approved (at cap)`` when auto-approved), ``done`` (passes without an approval),
        ``failed``, ``waiting for a person``, else the review status (``open`` before the first submission)."""
        if story.passes and story.reviewStatus == "approved":
            return "approved (at cap)" if story.reviewFeedback.startswith(AUTO_APPROVED_PREFIX) else "approved"
        if story.passes:
            return "done"
        if story.failed or story.waiting:
            return "failed" if story.failed else "waiting for a person"
        return str(story.reviewStatus or "open")

    def send_back(self, story: Any, mode: str, gate: str, old: Any | None) -> list[str]:
        """An implemented story loses ``needs_review``; a fixed one goes back to ``changes_requested``."""
        if mode == "implement" and story.reviewStatus == "needs_review":
            story.reviewStatus = None
            return ["reviewStatus needs_review → null"]
        if mode == "review-fix" and story.reviewStatus != "changes_requested":
            story.reviewStatus = "changes_requested"
            story.reviewFeedback = (
                f"[ralph {gate} gate] the {gate} gate failed after the fix; see the loop's state for the verbatim output."
            )
            return ["reviewStatus → changes_requested"]
        return []

    def unselectable_reason(self, tasks: TaskList) -> str:
        """Blocked stories, and stories that pass without an approval (the review policy never selects those)."""
        from ralph.api.policies import blocked_reason

        parts: list[str] = []
        waiting = [s for s in tasks.userStories if not s.passes and not s.failed]
        if waiting:
            parts.append(blocked_reason(tasks, waiting))
        unapproved = [s for s in tasks.userStories if s.passes and s.reviewStatus != "approved"]
        if unapproved:
            ids = ", ".join(s.id for s in unapproved[:8]) + (" ..." if len(unapproved) > 8 else "")
            states = sorted({str(s.reviewStatus).replace("None", "null") for s in unapproved})
            parts.append(
                f"{ids} {'has' if len(unapproved) == 1 else 'have'} passes=true but no approval (reviewStatus "
                f"{', '.join(states)}): the review policy only reviews stories whose reviewStatus is \"needs_review\" "
                "- set that to have them reviewed, or run with --skip-review to accept passes=true as done"
            )
        return "; ".join(parts) if parts else super().unselectable_reason(tasks)

    def describe_changes(self, mode: str, changes: list[StateChange]) -> list[Violation]:
        """The seeds' wording of Check 2.5 (seed 000 §5b)."""
        existing = [c.story_id for c in changes if c.kind in ("selected", "other")]
        out: list[Violation] = []
        for change in changes:
            if change.legal:
                continue
            sid = change.story_id
            if change.kind == "new":
                out.append(_new_story(change, mode))
            elif change.kind == "undecided":
                out.append(Violation(
                    "transitions",
                    "Review iteration made no decision: the reviewed story must get reviewCount incremented "
                    'by 1 and either reviewStatus "approved" with passes=true, or "changes_requested" with '
                    "reviewFeedback." if mode == "review" else
                    f"A {mode} iteration must change the state of story {sid}.",
                ))  # fmt: skip
            elif mode == "implement":
                out.extend(_implement(change))
            elif mode == "review":
                out.append(_review(change, existing))
            else:
                out.append(_review_fix(change))
        return out


def _counted_diffs(change: StateChange) -> tuple[tuple[str, Any, Any], ...]:
    """The diffs the seeds' messages name: passes, reviewStatus and reviewCount (reviewFeedback alone else)."""
    counted = tuple(d for d in change.diffs if d[0] in _COUNTED)
    return counted or change.diffs


def _not_selected(change: StateChange) -> str:
    return f" It is not this iteration's story ({change.selected})." if change.selected else ""


def _new_story(change: StateChange, mode: str) -> Violation:
    story = change.new
    found = f"passes={fmt(story.passes)}, reviewStatus={fmt(story.reviewStatus)}, reviewCount={story.reviewCount}"
    if story.reviewFeedback:
        found += f", reviewFeedback={fmt(story.reviewFeedback)}"
    return Violation(
        "transitions",
        f"New story {story.id} added in {'an' if mode == 'implement' else 'a'} {mode} iteration must start at "
        f"passes=false, reviewStatus=null, reviewCount=0 (found {found}).",
        story.id,
        undoable=True,
    )


def _implement(change: StateChange) -> list[Violation]:
    prefix = f"{IMPLEMENT} Story {change.story_id} had illegal transition:"
    if change.kind == "other" and change.transition is not None and change.selected is None:
        details = ["a second story set to needs_review (one story per iteration)"]
    elif change.kind == "other" and change.selected is not None:
        details = [f"{diff_text(_counted_diffs(change))}; it is not this iteration's story ({change.selected})"]
    else:
        details = [diff_text((d,)) for d in _counted_diffs(change)]
    return [Violation("transitions", f"{prefix} {detail}.", change.story_id, undoable=True) for detail in details]


def _review(change: StateChange, existing: list[str | None]) -> Violation:
    sid = change.story_id
    if change.kind == "other":
        ids = ", ".join(str(i) for i in existing)
        return Violation(
            "transitions",
            f"Review iteration made illegal transition on story {sid}: review fields of more than one story "
            f"changed ({ids}); a review iteration evaluates exactly one story.{_not_selected(change)}",
            sid,
            undoable=True,
        )
    old, story = change.old, change.new
    problems = []
    if story.reviewCount != old.reviewCount + 1:
        problems.append(f"reviewCount {old.reviewCount} → {story.reviewCount} (must increase by exactly 1)")
    if old.reviewStatus != "needs_review":
        problems.append(f"the story was {fmt(old.reviewStatus)}, not awaiting review")
    approved = story.reviewStatus == "approved" and story.passes
    rejected = story.reviewStatus == "changes_requested" and not story.passes and story.reviewFeedback.strip()
    if not (approved or rejected):
        problems.append(
            f"verdict reviewStatus={fmt(story.reviewStatus)}, passes={fmt(story.passes)}: must be "
            '"approved" with passes=true, or "changes_requested" with passes=false and non-empty reviewFeedback'
        )
    if not problems:
        problems.append(diff_text(change.diffs))
    return Violation(
        "transitions", f"Review iteration made illegal transition on story {sid}: {'; '.join(problems)}.", sid, undoable=True
    )


def _review_fix(change: StateChange) -> Violation:
    counted = tuple(d for d in change.diffs if d[0] in _COUNTED)
    resubmit = counted == (("reviewStatus", "changes_requested", "needs_review"),)
    if resubmit and change.kind == "selected" and change.new.reviewFeedback.strip():
        detail = "reviewFeedback must be cleared when resubmitting"
    else:
        detail = diff_text(_counted_diffs(change))
    return Violation(
        "transitions",
        f"{FIX.format(id=change.story_id)} Illegal transition: {detail}.{_not_selected(change)}",
        change.story_id,
        undoable=True,
    )


@hookimpl(trylast=True)
def ralph_register_policies(register):  # type: ignore[no-untyped-def]
    """Register the review policy."""
    register(ReviewPolicy)
