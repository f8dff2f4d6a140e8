"""What a policy plugin needs beyond ``ralph.api.Policy``: its transition table and the loop's view of it.

A policy declares its workflow as data (docs/plugins.md, "Policies"): ``state_fields``,
``initial_state`` and ``table``, a :class:`ModeRules` per mode made of :class:`Transition`
entries.  The loop derives every check of the task list from it; :class:`StateChange` is what
:meth:`Policy.describe_changes` words, :class:`StoryHistory` (with its :class:`GateAttempt` entries)
what :meth:`Policy.select_next` sees, ``diff_text`` and ``fmt`` word values as the loop does.
``LOOP_FIELDS`` and ``PERSON_FIELDS`` are the story fields no mode may change.
:class:`Selection` is what :meth:`Policy.select_next` returns, ``ready_stories`` the stories whose
dependencies have passed (``first_ready`` the first of them), ``AUTO_APPROVED_PREFIX`` the note of a story approved at the review cap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ralph.contracts import AUTO_APPROVED_PREFIX, GateAttempt, ModeRules, Selection, StateChange, StoryHistory, Transition
from ralph.transitions import diff_text, fmt

if TYPE_CHECKING:
    from ralph.tasks import LOOP_FIELDS, PERSON_FIELDS, blocked_reason, first_ready, ready_stories

__all__ = [
    "AUTO_APPROVED_PREFIX",
    "GateAttempt",
    "LOOP_FIELDS",
    "ModeRules",
    "PERSON_FIELDS",
    "Selection",
    "StateChange",
    "StoryHistory",
    "Transition",
    "blocked_reason",
    "diff_text",
    "first_ready",
    "fmt",
    "ready_stories",
    "story_line",
]

_LAZY = {"LOOP_FIELDS": "ralph.tasks", "PERSON_FIELDS": "ralph.tasks", "blocked_reason": "ralph.tasks",
         "first_ready": "ralph.tasks", "ready_stories": "ralph.tasks"}
"""Names backed by the pydantic task model, imported on first use (loading a policy stays cheap)."""


def story_line(story_id: str | None, story: Any) -> str:
    """The prompt line naming the iteration's story: ``- Story: **US-001**, titled "Add login"``.

    The title is the task list's (an agent may have written it in a split), so it is quoted
    (:func:`ralph.agenttext.quote`): inside the loop's authoritative section it can neither start a
    line nor end the value early.  ``story`` None: the id alone.
    """
    from ralph.agenttext import name, quote

    if story is None:
        return f"- Story: **{name(story_id or '')}**"
    return f"- Story: **{name(story.id)}**, titled {quote(story.title, 300)}"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ralph.api.policies' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
