"""A story's state in words for people (``ralph status``, ``ralph report``, the archive summary, the dashboard).

The words are the policy's (:meth:`ralph.contracts.Policy.story_state`): the loop writes them into each
story it reports (``summary.json``, ``story_states`` and ``run_finished`` events) as ``state``, so every
display reads the same word.  A record written before the loop wrote one gets the review policy's words
for its fields.  Standard library only: the dashboard folds logs with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["shown_state"]


def shown_state(story: Mapping[str, Any]) -> str:
    """The ``state`` the loop wrote for ``story``; for an older record, the review policy's words."""
    state = story.get("state")
    if isinstance(state, str) and state:
        return state
    if story.get("passes") and story.get("reviewStatus") == "approved":
        return "approved (at cap)" if story.get("autoApproved") else "approved"
    if story.get("passes"):
        return "done"
    if story.get("failed"):
        return "failed"
    if story.get("waiting"):
        return "waiting for a person"
    return str(story.get("reviewStatus") or "open")
