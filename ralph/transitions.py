"""A policy's transition table as checks: which state changes an iteration may make (Trust boundary rule 4).

The policy declares, per mode, the legal transitions of the selected story's state fields
(:class:`ralph.contracts.ModeRules`); this module is the only place that turns the declaration
into decisions, so the loop's whitelist (``ralph/loop/listcheck.py``), the Stop hook's answers
and the ``transitions`` validator (outside a loop) agree by construction, for any policy.

:func:`state_changes` judges every story; the policy words the illegal ones
(:meth:`Policy.describe_changes`, default :func:`describe`).  Duck-typed on stories: no pydantic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ralph.contracts import StateChange, StoryState, Transition, Violation

if TYPE_CHECKING:
    from ralph.contracts import Policy

CHECK = "transitions"
"""The ``Violation.check`` of every state-field finding (Check 2.5 of the seeds)."""

_MISSING = object()


def fmt(value: object) -> str:
    """A field value as the messages show it: ``null``, ``true``, ``'text'``, ``3``."""
    if value is None or value is _MISSING:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def allowed_by(transitions: Iterable[Transition], old: Any, new: Any) -> str | None:
    """The name of the first transition that allows ``old`` -> ``new``, or None."""
    for transition in transitions:
        if transition.allows(old, new):
            return transition.name
    return None


def _reader(names: tuple[str, ...]) -> Any:
    """A getter of ``names`` from a story (a tuple of values; ``AttributeError`` when one is missing)."""
    if not names:
        return lambda story: ()
    getter = attrgetter(*names)
    return getter if len(names) > 1 else lambda story: (getter(story),)


def _values(getter: Any, names: tuple[str, ...], story: Any) -> tuple[Any, ...]:
    try:
        return tuple(getter(story))
    except AttributeError:  # a policy's own field, absent from this story
        return tuple(getattr(story, name, _MISSING) for name in names)


def _old_values(getter: Any, names: tuple[str, ...], old: Any, story: Any) -> tuple[Any, ...]:
    """``old``'s values of ``names``; a field a :class:`StoryState` was not taken with counts as unchanged
    (a state made by hand with the seeds' three fields, say)."""
    if isinstance(old, StoryState) and any(not old.carries(name) for name in names):
        return tuple(getattr(old, name, _MISSING) if old.carries(name) else getattr(story, name, _MISSING)
                     for name in names)
    return _values(getter, names, old)


def state_changes(
    policy: Policy, mode: str, before: Mapping[str, Any], stories: Iterable[Any], selected: str | None
) -> list[StateChange]:
    """Every story whose state an iteration in ``mode`` changed (or had to change), judged by the table.

    ``before`` maps ids to the stories before the iteration (or their :class:`StoryState` snapshots);
    ``selected`` is the iteration's story.  When it is None (the Stop hook outside a loop) the
    first story whose change a transition allows counts as the selected one, and in a mode that
    must decide, more than one changed story cannot be told apart: each counts as another story.
    """
    rules = policy.rules(mode)
    transitions = rules.transitions if rules is not None else ()
    initial = policy.initial_state
    fields = policy.state_fields
    names = tuple(fields)
    old_of = new_of = _reader(names)
    changes: list[StateChange] = []
    changed: list[tuple[Any, Any, tuple[tuple[str, Any, Any], ...]]] = []
    unchanged_selected: tuple[Any, Any] | None = None
    first_unchanged: tuple[Any, Any] | None = None
    for story in stories:
        old = before.get(story.id)
        if old is None:
            diffs = tuple(
                (name, value, now) for name, value in initial.items()
                if name in fields and (now := getattr(story, name, value)) != value
            )
            if diffs:
                changes.append(StateChange(story.id, "new", diffs, selected=selected, new=story))
            continue
        if not names:
            continue
        was, now = _old_values(old_of, names, old, story), _values(new_of, names, story)
        if was != now:
            diffs = tuple((name, a, b) for name, a, b in zip(names, was, now) if a != b)
            changed.append((story, old, diffs))
        elif story.id == selected:
            unchanged_selected = (story, old)
        elif first_unchanged is None:
            first_unchanged = (story, old)
    if selected is not None:
        for story, old, diffs in changed:
            name = allowed_by(transitions, old, story)
            if story.id == selected:
                changes.append(StateChange(story.id, "selected", diffs, name is not None, name, selected, old, story))
            else:
                changes.append(StateChange(story.id, "other", diffs, False, name, selected, old, story))
        if unchanged_selected is not None and allowed_by(transitions, unchanged_selected[1], unchanged_selected[0]) is None:
            story, old = unchanged_selected
            changes.append(StateChange(story.id, "undecided", (), selected=selected, old=old, new=story))
        return changes
    if not changed:
        if first_unchanged is not None and allowed_by(transitions, first_unchanged[1], first_unchanged[0]) is None:
            changes.append(StateChange(None, "undecided", ()))
        return changes
    must_decide = _must_decide(transitions, names, changed[0][1], changed[0][0])
    if must_decide and len(changed) > 1:
        return changes + [StateChange(s.id, "other", d, False, allowed_by(transitions, o, s), None, o, s) for s, o, d in changed]
    claimed = False
    for story, old, diffs in changed:
        name = allowed_by(transitions, old, story)
        if name is not None and not claimed:
            claimed = True
            changes.append(StateChange(story.id, "selected", diffs, True, name, None, old, story))
        elif name is not None:
            changes.append(StateChange(story.id, "other", diffs, False, name, None, old, story))
        else:
            changes.append(StateChange(story.id, "selected", diffs, False, None, None, old, story))
    return changes


def _must_decide(transitions: tuple[Transition, ...], names: tuple[str, ...], old: Any, story: Any) -> bool:
    """True when no transition allows ``story`` to keep ``old``'s state (the mode must change it)."""
    copy = getattr(story, "model_copy", None)
    if copy is None:
        return False
    unchanged = copy(update={name: getattr(old, name) for name in names if hasattr(old, name)})
    return allowed_by(transitions, old, unchanged) is None


def state_violations(
    policy: Policy, mode: str, before: Mapping[str, Any], stories: Iterable[Any], selected: str | None
) -> list[Violation]:
    """The illegal state changes of :func:`state_changes`, worded by the policy."""
    changes = state_changes(policy, mode, before, stories, selected)
    if all(change.legal for change in changes):
        return []
    return policy.describe_changes(mode, changes)


def diff_text(diffs: Iterable[tuple[str, Any, Any]]) -> str:
    """``passes false → true; reviewCount 0 → 1``."""
    return "; ".join(f"{name} {fmt(a)} → {fmt(b)}" for name, a, b in diffs)


def describe(policy: Policy, mode: str, changes: list[StateChange]) -> list[Violation]:
    """The default wording of :meth:`Policy.describe_changes`: fields, values and the legal transitions."""
    rules = policy.rules(mode)
    legal = ", ".join(t.name for t in rules.transitions) if rules is not None and rules.transitions else "none"
    article = "an" if mode[:1] in "aeiou" else "a"
    out: list[Violation] = []
    for change in changes:
        if change.legal:
            continue
        sid = change.story_id
        if change.kind == "new":
            start = ", ".join(f"{name}={fmt(value)}" for name, value in policy.initial_state.items())
            found = ", ".join(f"{name}={fmt(b)}" for name, _, b in change.diffs)
            text = f"New story {sid} added in {article} {mode} iteration must start at {start} (found {found})."
        elif change.kind == "undecided":
            text = f"{article.capitalize()} {mode} iteration must change the state of its story {sid or ''}".rstrip()
            text += f" as one of its transitions says ({legal}); it left it unchanged."
            out.append(Violation(CHECK, text, sid))
            continue
        elif change.kind == "other":
            text = (
                f"Story {sid} is not this iteration's story ({change.selected or 'another one'}): its "
                f"{diff_text(change.diffs)} was undone. Only the selected story changes in {article} {mode} iteration."
            )
        else:
            text = (
                f"Story {sid}: {diff_text(change.diffs)} is not a legal change in {article} {mode} iteration "
                f"(legal: {legal}); the loop restored it."
            )
        out.append(Violation(CHECK, text, sid, undoable=True))
    return out
