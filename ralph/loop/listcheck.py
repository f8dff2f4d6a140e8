"""The task list as a whole, checked after every iteration (DESIGN.md, Trust boundary rule 1).

Compared with the trusted state before the iteration:

- the non-story fields (``project``, ``branchName``, ``description``, ``verifyCommands``
  and any other top-level key) may not change at all: they are the person's, read once
  when the run started;
- no story may disappear;
- another story's title, description and acceptance criteria may not change (its
  priority and ``dependsOn`` may);
- the selected story may be narrowed only as a split: every acceptance criterion it
  drops must appear in a story added in the same iteration, and its title or
  description change only in such an iteration;
- a story the agent adds needs a safe id (:data:`ralph.ralphfiles.STORY_ID_PATTERN`).

Anything else is undone (:meth:`ListCheck.apply`), like an illegal review transition.
Pure functions on the model: no I/O, so the loop's Stop-hook answers can use them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ralph.contracts import Violation
from ralph.ralphfiles import story_id_problem
from ralph.tasks import Story, TaskList

CHECK = "task-list"
"""The ``Violation.check`` of every finding here."""

TEXT_FIELDS = ("title", "description", "acceptanceCriteria")
"""What defines a story's scope: only its own split may narrow it."""

PROPOSE = (
    "It is the person's to change between runs: if it should change, write the proposal in "
    "progress.txt and leave the task list's value as it was."
)


def top_level(tasks: TaskList) -> dict[str, Any]:
    """Every field of the task list except the stories (extra keys included)."""
    return tasks.model_dump(exclude={"userStories"})


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _short(value: Any, limit: int = 120) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


@dataclass
class ListCheck:
    """What an iteration did to the task list beyond the review fields, and how to undo it."""

    violations: list[Violation] = field(default_factory=list)
    top_level: dict[str, Any] | None = None
    """The trusted non-story fields to put back (None: they are unchanged)."""
    reinsert: list[str] = field(default_factory=list)
    """Stories of the snapshot that disappeared."""
    revert_text: list[str] = field(default_factory=list)
    """Stories whose title/description/criteria go back to the snapshot's."""
    drop: list[str] = field(default_factory=list)
    """Added stories with unsafe ids."""

    @property
    def needed(self) -> bool:
        """Does the task list need repairing?"""
        return bool(self.top_level is not None or self.reinsert or self.revert_text or self.drop)

    def apply(self, before: TaskList, after: TaskList) -> TaskList:
        """``after`` with every finding undone (a new object; neither argument changes)."""
        stories: list[dict[str, Any]] = []
        old = {story.id: story for story in before.userStories}
        dropped = set(self.drop)
        for story in after.userStories:
            if story.id in dropped:
                continue
            data = story.model_dump()
            if story.id in self.revert_text and story.id in old:
                for name in TEXT_FIELDS:
                    data[name] = getattr(old[story.id], name)
            stories.append(data)
        present = {data["id"] for data in stories}
        order = [story.id for story in before.userStories]
        for story_id in self.reinsert:
            if story_id in present:
                continue
            # back where it was: after the nearest earlier snapshot story still present
            index = order.index(story_id)
            position = 0
            for earlier in reversed(order[:index]):
                found = next((i for i, data in enumerate(stories) if data["id"] == earlier), None)
                if found is not None:
                    position = found + 1
                    break
            stories.insert(position, old[story_id].model_dump())
            present.add(story_id)
        top = self.top_level if self.top_level is not None else top_level(after)
        return TaskList.model_validate({**top, "userStories": stories})


def check_list(
    before: TaskList, after: TaskList, selected: str | None, trusted_top: dict[str, Any] | None = None
) -> ListCheck:
    """Compare ``after`` with ``before`` (the pre-iteration list); ``selected`` is the iteration's story.

    ``trusted_top`` is the non-story part taken when the run started (default: ``before``'s).
    """
    result = ListCheck()
    trusted = trusted_top if trusted_top is not None else top_level(before)
    current = top_level(after)
    if current != trusted:
        changed = sorted(k for k in set(trusted) | set(current) if trusted.get(k, None) != current.get(k, None))
        for key in changed:
            was = _short(trusted[key]) if key in trusted else "(absent)"
            now = _short(current[key]) if key in current else "(removed)"
            result.violations.append(
                Violation(
                    CHECK,
                    f"The task list's {key} was changed from {was} to {now}; the loop restored it. {PROPOSE}",
                    undoable=True,
                )
            )
        result.top_level = trusted

    old = {story.id: story for story in before.userStories}
    new = {story.id: story for story in after.userStories}
    added = [story for story in after.userStories if story.id not in old]
    for story_id in old:
        if story_id not in new:
            result.reinsert.append(story_id)
            result.violations.append(
                Violation(
                    CHECK,
                    f"Story {story_id} was removed from the task list; the loop put it back. Stories are never "
                    "deleted by an iteration (split the selected story instead, keeping every criterion).",
                    story_id,
                    undoable=True,
                )
            )
    for story in added:
        problem = story_id_problem(story.id)
        if problem:
            result.drop.append(story.id)
            result.violations.append(
                Violation(CHECK, f"A story was added with an unsafe id: {problem}. The loop removed it.", story.id, undoable=True)
            )
    new_criteria = [_norm(c) for story in added if story.id not in result.drop for c in story.acceptanceCriteria]
    for story_id, before_story in old.items():
        after_story = new.get(story_id)
        if after_story is None:
            continue
        if before_story.title == after_story.title and before_story.description == after_story.description and before_story.acceptanceCriteria == after_story.acceptanceCriteria:
            continue
        changed_fields = [name for name in TEXT_FIELDS if getattr(before_story, name) != getattr(after_story, name)]
        if story_id != selected:
            result.revert_text.append(story_id)
            result.violations.append(
                Violation(
                    CHECK,
                    f"Story {story_id}'s {', '.join(changed_fields)} changed, but it is not this iteration's story: "
                    "the loop restored them (only priority and dependsOn of other stories may change).",
                    story_id,
                    undoable=True,
                )
            )
            continue
        problem = _narrowing_problem(before_story, after_story, new_criteria)
        if problem:
            result.revert_text.append(story_id)
            result.violations.append(Violation(CHECK, f"Story {story_id}: {problem} The loop restored it.", story_id, undoable=True))
    return result


def _narrowing_problem(was: Story, now: Story, new_criteria: list[str]) -> str | None:
    """Why this change of the selected story is not a legal split, or None when it is."""
    kept = {_norm(c) for c in now.acceptanceCriteria}
    dropped = [c for c in was.acceptanceCriteria if _norm(c) not in kept]
    missing = [c for c in dropped if not any(_norm(c) in added for added in new_criteria)]
    if missing:
        shown = "; ".join(repr(c) for c in missing[:3]) + (" ..." if len(missing) > 3 else "")
        return (
            f"acceptance criteria were dropped without moving them to a story added in this iteration ({shown}). "
            "A story may only be narrowed by splitting it: every criterion it loses goes to a new story."
        )
    if (was.title != now.title or was.description != now.description) and not new_criteria:
        return (
            "its title or description changed although no story was split off. The story's scope is the "
            "person's: change it only as part of a split."
        )
    return None
