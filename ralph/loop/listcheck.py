"""The task list after an iteration, against the list before it: a whitelist (docs/design.md, trust boundary rule 4).

What an iteration may change is what the policy declares for its mode (``Policy.table``, a
:class:`~ralph.contracts.ModeRules` per mode):

- the selected story's state fields, as one of the mode's transitions allows (judged by
  :mod:`ralph.transitions`, reported as ``transitions``, the seeds' Check 2.5);
- the selected story's other fields the mode lists (``notes``);
- in a mode that may split (``implement``), a split of the selected story: it keeps some of its
  acceptance criteria (its title and description may change then), and every criterion it drops
  goes, word for word (whitespace aside), to new stories that hold nothing else, with safe ids,
  ``dependsOn`` naming stories of the list, the policy's initial state.

Everything else is undone (:meth:`ListCheck.apply`) and reported here (``task-list``): the
non-story fields (restored from the run's trusted copy), removed stories (put back), the
stories' order, any field of another story, a field of the selected story the mode does not
list, the fields only the loop or only a person sets (``ralph.tasks.LOOP_FIELDS``,
``PERSON_FIELDS``) in any story, new stories that are not a legal split, copies of a story.
Pure functions on the model: no I/O, so the loop's Stop-hook answers use them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ralph.agenttext import name as shown_name, quote, safe_data
from ralph.contracts import ModeRules, Violation
from ralph.ralphfiles import story_id_problem
from ralph import tasks as model
from ralph.tasks import REVIEW_FIELDS, TEXT_FIELDS, Story, TaskList

if TYPE_CHECKING:
    from ralph.contracts import Policy

__all__ = ["CHECK", "TEXT_FIELDS", "ListCheck", "check_list", "top_level"]

CHECK = "task-list"
"""The ``Violation.check`` of every finding here but the state fields' (``transitions``)."""

PROPOSE = (
    "It is the person's to change between runs: if it should change, write the proposal in "
    "progress.txt and leave the task list's value as it was."
)

DEFAULT_RULES = ModeRules((), split=True)
"""Without a policy (unit use): ``notes`` and a split of the selected story; state fields left to the caller."""

_ABSENT = object()


def top_level(tasks: TaskList) -> dict[str, Any]:
    """Every field of the task list except the stories (extra keys included)."""
    return tasks.model_dump(exclude={"userStories"})


def _norm(text: str) -> str:
    return " ".join(text.split())


def _short(value: Any, limit: int = 120) -> str:
    shown = json.dumps(safe_data(value), ensure_ascii=False, default=str)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _fields(story: Story) -> dict[str, Any]:
    """A story's fields and extra keys, by name."""
    return {**story.__dict__, **(story.__pydantic_extra__ or {})}


def _default(name: str) -> Any:
    """A field's value on a story that does not set it (``_ABSENT`` for an extra key)."""
    info = Story.model_fields.get(name)
    return _ABSENT if info is None else info.get_default(call_default_factory=True)


def _names(fields: list[str]) -> str:
    return ", ".join(shown_name(field_name) for field_name in fields)  # a story's extra keys are the agent's to name


def _them(fields: list[str]) -> str:
    return "it" if len(fields) == 1 else "them"


@dataclass
class ListCheck:
    """What an iteration did to the task list beyond its whitelist, and how to undo it."""

    violations: list[Violation] = field(default_factory=list)
    top_level: dict[str, Any] | None = None
    """The trusted non-story fields to put back (None: they are unchanged)."""
    reinsert: list[str] = field(default_factory=list)
    """Stories of the snapshot that disappeared."""
    revert_text: list[str] = field(default_factory=list)
    """Stories with fields that go back (``revert_fields`` says which)."""
    revert_fields: dict[str, list[str]] = field(default_factory=dict)
    """Per story, the fields that go back to the pre-iteration value (an added story's: to the default)."""
    drop: list[str] = field(default_factory=list)
    """Added stories that are removed (unsafe id, not a legal split, a mode that adds none)."""
    copies: list[str] = field(default_factory=list)
    """Ids that appear more than once: only the first story with the id is kept."""
    reorder: bool = False
    """The stories' order changed: it goes back."""

    @property
    def needed(self) -> bool:
        """Does the task list need repairing?"""
        return bool(
            self.top_level is not None or self.reinsert or self.revert_fields or self.drop or self.copies or self.reorder
        )

    def _revert(self, story_id: str, names: list[str]) -> None:
        fields = self.revert_fields.setdefault(story_id, [])
        fields.extend(name for name in names if name not in fields)
        if story_id not in self.revert_text:
            self.revert_text.append(story_id)

    def apply(self, before: TaskList, after: TaskList) -> TaskList:
        """``after`` with every finding undone (a new object; neither argument changes)."""
        old = {story.id: story for story in before.userStories}
        dropped = {sid for sid in self.drop if sid not in old}
        kept: list[dict[str, Any]] = []
        seen: set[str] = set()
        for story in after.userStories:
            if story.id in dropped or story.id in seen:
                continue
            seen.add(story.id)
            data = story.model_dump()
            names = self.revert_fields.get(story.id)
            if names:
                previous = old[story.id].model_dump() if story.id in old else {}
                for name in names:
                    value = previous.get(name, _ABSENT) if story.id in old else _default(name)
                    if value is _ABSENT:
                        data.pop(name, None)
                    else:
                        data[name] = value
            kept.append(data)
        # the existing stories in their order (the removed ones back in place), each followed by the
        # stories added right after it
        present = {data["id"]: data for data in kept}
        following: dict[str | None, list[dict[str, Any]]] = {}
        anchor: str | None = None
        for data in kept:
            if data["id"] in old:
                anchor = data["id"]
            else:
                following.setdefault(anchor, []).append(data)
        stories = list(following.get(None, []))
        for story in before.userStories:
            found = present.get(story.id)
            stories.append(found if found is not None else story.model_dump())
            stories.extend(following.get(story.id, []))
        top = self.top_level if self.top_level is not None else top_level(after)
        return TaskList.model_validate({**top, "userStories": stories})


def check_list(
    before: TaskList,
    after: TaskList,
    selected: str | None,
    trusted_top: dict[str, Any] | None = None,
    *,
    policy: Policy | None = None,
    mode: str | None = None,
) -> ListCheck:
    """Compare ``after`` with ``before`` (the pre-iteration list); ``selected`` is the iteration's story.

    ``trusted_top`` is the non-story part taken when the run started (default: ``before``'s).
    With ``policy`` and ``mode`` the mode's rules apply and the state fields are judged too;
    without them, the selected story may change ``notes`` and be split, and state fields are not looked at.
    """
    result = ListCheck()
    _check_top(result, before, after, trusted_top)
    rules = _rules(policy, mode)
    state = set(policy.state_fields) if policy is not None else set(REVIEW_FIELDS)
    state -= {*model.LOOP_FIELDS, *model.PERSON_FIELDS}  # never a mode's, whatever a table says
    old = {story.id: story for story in before.userStories}
    new: dict[str, Story] = {}
    for story in after.userStories:
        if story.id in new:
            if story.id not in result.copies:
                result.copies.append(story.id)
                result.violations.append(
                    Violation(CHECK, f"Story {shown_name(story.id)} appears more than once; the loop removed the copies.", story.id, undoable=True)
                )
            continue
        new[story.id] = story
    same_ids = len(new) == len(old) and list(new) == list(old)  # the usual case: the same stories in the same order
    for story_id in () if same_ids else old:
        if story_id not in new:
            result.reinsert.append(story_id)
            result.violations.append(
                Violation(
                    CHECK,
                    f"Story {shown_name(story_id)} was removed from the task list; the loop put it back. Stories are never "
                    "deleted by an iteration (split the selected story instead, keeping every criterion).",
                    story_id,
                    undoable=True,
                )
            )
    if not same_ids and [sid for sid in new if sid in old] != [sid for sid in old if sid in new]:
        result.reorder = True
        result.violations.append(
            Violation(
                CHECK,
                "The stories' order changed; the loop restored it (the order breaks priority ties: it is the "
                "person's, like priority).",
                undoable=True,
            )
        )
    changed: list[Story] = []  # the state check needs only these, the added ones and the selected one
    for story_id, was in old.items():
        now = new.get(story_id)
        # the fields' and extra keys' dicts: what pydantic's == compares, without its overhead
        if now is not None and (now.__dict__ != was.__dict__ or now.__pydantic_extra__ != was.__pydantic_extra__):
            changed.append(now)
            _check_existing(result, was, now, story_id == selected, rules, state, mode)
    added = [] if same_ids else [story for story in new.values() if story.id not in old]
    kept = _check_added(result, added, old.get(selected or ""), new.get(selected or ""), new, rules, state, mode)
    _check_scope(result, old.get(selected or ""), new.get(selected or ""), kept, rules, mode)
    if policy is not None and mode is not None:
        if selected in new and new[selected] not in changed:
            changed.append(new[selected])
        gone = set(result.drop)
        judged = [*changed, *(story for story in added if story.id not in gone)]
        result.violations += _state_violations(policy, mode, before, after, old, judged, selected)
    return result


def _rules(policy: Policy | None, mode: str | None) -> ModeRules:
    """The mode's rules; a policy without a table (older plugins): ``notes``, and a split in implement."""
    if policy is None or mode is None:
        return DEFAULT_RULES
    if policy.table is None:
        return ModeRules((), split=mode == "implement")
    return policy.rules(mode) or ModeRules((), frozenset())


def _check_top(result: ListCheck, before: TaskList, after: TaskList, trusted_top: dict[str, Any] | None) -> None:
    trusted = trusted_top if trusted_top is not None else top_level(before)
    current = top_level(after)
    if current == trusted:
        return
    changed = sorted(k for k in set(trusted) | set(current) if trusted.get(k, None) != current.get(k, None))
    for key in changed:
        was = _short(trusted[key]) if key in trusted else "(absent)"
        now = _short(current[key]) if key in current else "(removed)"
        result.violations.append(
            Violation(CHECK, f"The task list's {shown_name(key)} was changed from {was} to {now}; the loop restored it. {PROPOSE}",
                      undoable=True)
        )
    result.top_level = trusted


def _owned_elsewhere(result: ListCheck, story_id: str, changed: list[str]) -> list[str]:
    """Report the loop-only and person-only fields among ``changed``; the rest is returned."""
    loop = [name for name in changed if name in model.LOOP_FIELDS]
    person = [name for name in changed if name in model.PERSON_FIELDS]
    if loop:
        result._revert(story_id, loop)
        result.violations.append(Violation(
            CHECK,
            f"Story {story_id}'s {_names(loop)} changed, but only the loop sets {_them(loop)} (it stops a story "
            f"that keeps failing): the loop restored {_them(loop)}.",
            story_id, undoable=True,
        ))  # fmt: skip
    if person:
        result._revert(story_id, person)
        result.violations.append(Violation(
            CHECK,
            f"Story {story_id}'s {_names(person)} changed, but only a person sets {_them(person)}, between runs: "
            f"the loop restored {_them(person)}. {PROPOSE}",
            story_id, undoable=True,
        ))  # fmt: skip
    return [name for name in changed if name not in model.LOOP_FIELDS and name not in model.PERSON_FIELDS]


def _check_existing(
    result: ListCheck, was: Story, now: Story, is_selected: bool, rules: ModeRules, state: set[str], mode: str | None
) -> None:
    """Fields of an existing story that changed outside the whitelist (text of the selected story: see _check_scope)."""
    before, after = _fields(was), _fields(now)
    changed = [
        name for name in dict.fromkeys([*before, *after])
        if name not in state and before.get(name, _ABSENT) != after.get(name, _ABSENT)
    ]
    changed = _owned_elsewhere(result, now.id, changed)
    if not is_selected:
        if changed:
            result._revert(now.id, changed)
            result.violations.append(Violation(
                CHECK,
                f"Story {now.id}'s {_names(changed)} changed, but it is not this iteration's story: the loop restored "
                f"{_them(changed)} (an iteration changes only its own story; propose other changes in progress.txt).",
                now.id, undoable=True,
            ))  # fmt: skip
        return
    forbidden = [name for name in changed if name not in TEXT_FIELDS and name not in rules.fields]
    if forbidden:
        result._revert(now.id, forbidden)
        allowed = sorted(name for name in {*rules.fields, *state} if name not in model.LOOP_FIELDS and name not in model.PERSON_FIELDS)
        what = f"{'an' if (mode or 'a')[:1] in 'aeiou' else 'a'} {mode} iteration" if mode else "an iteration"
        result.violations.append(Violation(
            CHECK,
            f"Story {now.id}'s {_names(forbidden)} changed, but {what} may change only {_names(allowed)} of its "
            f"story: the loop restored {_them(forbidden)}. {PROPOSE}",
            now.id, undoable=True,
        ))  # fmt: skip


def _check_added(
    result: ListCheck, added: list[Story], was: Story | None, now: Story | None, new: dict[str, Story],
    rules: ModeRules, state: set[str], mode: str | None,
) -> list[Story]:
    """The added stories that are a legal split of the selected story (the others are dropped)."""
    dropped = {_norm(c): c for c in was.acceptanceCriteria} if was is not None else {}
    if now is not None:
        for criterion in now.acceptanceCriteria:
            dropped.pop(_norm(criterion), None)
    kept: list[Story] = []
    for story in added:
        problem = story_id_problem(story.id)
        if problem:
            result.drop.append(story.id)
            result.violations.append(
                Violation(CHECK, f"A story was added with an unsafe id: {problem}. The loop removed it.", story.id, undoable=True)
            )
            continue
        reason = _split_problem(story, was, now, new, dropped, rules, mode)
        if reason is None and len(kept) >= len(dropped):
            reason = f"a split makes at most one new story per criterion it moves ({len(dropped)} moved)."
        if reason:
            result.drop.append(story.id)
            result.violations.append(Violation(CHECK, f"Story {shown_name(story.id)} was added, but {reason} The loop removed it.", story.id, undoable=True))
            continue
        owned = [name for name in (*model.LOOP_FIELDS, *model.PERSON_FIELDS) if _fields(story).get(name, _default(name)) != _default(name)]
        _owned_elsewhere(result, story.id, owned)
        kept.append(story)
    for cycle in _cycles(kept):
        for story_id in cycle:
            result.drop.append(story_id)
            result.violations.append(Violation(
                CHECK,
                f"Story {story_id} was added, but its dependsOn makes a cycle ({' -> '.join([*cycle, cycle[0]])}): "
                "none of them could ever start. The loop removed it.",
                story_id, undoable=True,
            ))  # fmt: skip
    gone = set(result.drop)
    kept = [story for story in kept if story.id not in gone]
    while True:  # a kept story may wait on one just removed
        orphans = [story for story in kept if any(dep in gone for dep in story.dependsOn)]
        if not orphans:
            return kept
        for story in orphans:
            result.drop.append(story.id)
            gone.add(story.id)
            missing = ", ".join(quote(dep, 60) for dep in story.dependsOn if dep in gone)
            result.violations.append(Violation(
                CHECK, f"Story {story.id} was added, but its dependsOn names {missing}, which the loop removed. "
                "The loop removed it too.", story.id, undoable=True,
            ))  # fmt: skip
        kept = [story for story in kept if story.id not in gone]


def _split_problem(
    story: Story, was: Story | None, now: Story | None, new: dict[str, Story], dropped: dict[str, str],
    rules: ModeRules, mode: str | None,
) -> str | None:
    """Why ``story`` (added in this iteration) is not part of a legal split of the selected story."""
    if not rules.split:
        return f"a {mode or 'this'} iteration adds no stories (only a split of the iteration's own story may, where its mode allows it)."
    if was is None or now is None:
        return "new stories come only from splitting the iteration's story."
    foreign = [c for c in story.acceptanceCriteria if _norm(c) not in dropped]
    if foreign:
        shown = "; ".join(quote(c, 200) for c in foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        return (
            f"its acceptance criteria must be ones that {was.id} dropped in this iteration, word for word ({shown} "
            f"{'is' if len(foreign) == 1 else 'are'} not). A split moves criteria; it does not write new ones."
        )
    unknown = [dep for dep in story.dependsOn if dep not in new or dep == story.id]
    if unknown:
        return f"its dependsOn names {', '.join(quote(d, 60) for d in unknown)}, not another story of the task list."
    return None


def _cycles(added: list[Story]) -> list[list[str]]:
    """Dependency cycles among the added stories (the others' dependsOn cannot change)."""
    if not any(story.dependsOn for story in added):
        return []
    from ralph.tasks import find_cycles

    ids = {story.id for story in added}
    return find_cycles({story.id: [d for d in story.dependsOn if d in ids] for story in added})


def _check_scope(result: ListCheck, was: Story | None, now: Story | None, kept: list[Story], rules: ModeRules, mode: str | None) -> None:
    """The selected story's title, description and criteria: changed only as part of a legal split."""
    if was is None or now is None or all(getattr(was, name) == getattr(now, name) for name in TEXT_FIELDS):
        return
    problem = _narrowing_problem(was, now, kept, rules, mode)
    if problem is None:
        return
    result._revert(now.id, [name for name in TEXT_FIELDS if getattr(was, name) != getattr(now, name)])
    undone = [story.id for story in kept]
    if undone:
        result.drop.extend(undone)
        problem += f" The stories split off ({', '.join(undone)}) were removed with it."
    result.violations.append(Violation(CHECK, f"Story {now.id}: {problem} The loop restored it.", now.id, undoable=True))


def _narrowing_problem(was: Story, now: Story, kept: list[Story], rules: ModeRules, mode: str | None) -> str | None:
    """Why this change of the selected story's scope is not a legal split, or None when it is."""
    if not rules.split:
        return (
            f"its title, description or acceptance criteria changed. The story's scope is the person's; "
            f"a {mode or 'this'} iteration does not change it."
        )
    old_criteria = {_norm(c) for c in was.acceptanceCriteria}
    extra = [c for c in now.acceptanceCriteria if _norm(c) not in old_criteria]
    if extra:
        shown = "; ".join(quote(c, 200) for c in extra[:3]) + (" ..." if len(extra) > 3 else "")
        return (
            f"acceptance criteria were added or reworded ({shown}). The story's criteria are the person's: a split "
            "keeps some of them word for word and moves the others."
        )
    kept_criteria = {_norm(c) for c in now.acceptanceCriteria}
    moved = {_norm(c) for story in kept for c in story.acceptanceCriteria}
    missing = [c for c in was.acceptanceCriteria if _norm(c) not in kept_criteria and _norm(c) not in moved]
    if missing:
        shown = "; ".join(quote(c, 200) for c in missing[:3]) + (" ..." if len(missing) > 3 else "")
        return (
            f"acceptance criteria were dropped without moving them to a story added in this iteration ({shown}). "
            "A story may only be narrowed by splitting it: every criterion it loses goes to a new story, word for word."
        )
    if (was.title != now.title or was.description != now.description) and not kept:
        return (
            "its title or description changed although no story was split off. The story's scope is the "
            "person's: change it only as part of a split."
        )
    return None


def _state_violations(
    policy: Policy, mode: str, before: TaskList, after: TaskList, old: dict[str, Story], judged: list[Story],
    selected: str | None,
) -> list[Violation]:
    """The state fields of ``judged`` (the stories that changed, the added ones, the selected one), by the
    policy's table; a policy without one is asked itself."""
    if policy.table is None:
        return policy.transition_violations(mode, policy.snapshot(before), after)  # type: ignore[arg-type]
    from ralph.transitions import state_violations

    return state_violations(policy, mode, old, judged, selected)
