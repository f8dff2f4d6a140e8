"""A story of the task list as plain data, with valid defaults."""

from __future__ import annotations

from typing import Any

__all__ = ["story"]


def story(story_id: str, title: str | None = None, **fields: Any) -> dict[str, Any]:
    """A seed §8 story dict with valid defaults; override any field."""
    base: dict[str, Any] = {
        "id": story_id,
        "title": title or f"Story {story_id}",
        "description": "",
        "acceptanceCriteria": [f"{story_id} works"],
        "priority": 1,
        "passes": False,
        "reviewStatus": None,
        "reviewCount": 0,
        "reviewFeedback": "",
        "notes": "",
        "dependsOn": [],
    }
    base.update(fields)
    return base
