"""The ``prd.json`` task store: the format of seed 003 and of other Ralph tools.

A ``prd.json`` story has no review fields (``reviewStatus``, ``reviewCount``,
``reviewFeedback``).  Parsing fills them with their defaults (null, 0, ""), so the
loop sees the common model.  Writing patches the file's text: only the values that
changed are replaced, in place, keeping the file's key order, indentation, line
ends and every other byte.  A review field the file did not have is added only when
its value differs from the default (after the first review, say).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.api import TaskListError, TaskStore, hookimpl
from ralph.api.stores import JsonScanError, indent_unit, json_line_of, patch_json_text, same_json

if TYPE_CHECKING:
    from ralph.api import TaskList

REVIEW_DEFAULTS: dict[str, Any] = {"reviewStatus": None, "reviewCount": 0, "reviewFeedback": ""}
"""The review fields prd.json stories lack, and the values a missing one means."""


def _model_defaults(model: Any) -> dict[str, Any]:
    return {
        name: info.get_default(call_default_factory=True)
        for name, info in model.model_fields.items()
        if not info.is_required()
    }


class PrdJsonStore(TaskStore):
    """Reads and writes ``<ralph dir>/prd.json``."""

    name = "prd-json"
    parse_reads_only_its_text = True
    filename = "prd.json"

    def parse(self, raw: str, source: Path) -> TaskList:
        from ralph.api.stores import decode_json, parse_tasks, story_id_problem

        data = decode_json(raw, source)
        if not isinstance(data, dict):
            raise TaskListError(f"{source}: (top level): must be a JSON object with `userStories`")
        stories = data.get("userStories")
        if isinstance(stories, list):
            for index, story in enumerate(stories):
                if not isinstance(story, dict):
                    continue
                for key, default in REVIEW_DEFAULTS.items():
                    story.setdefault(key, default)
                story_id = story.get("id")
                problem = story_id_problem(story_id) if isinstance(story_id, str) else None
                if problem:
                    line = json_line_of(raw, ["userStories", index, "id"])
                    where = f"{source}:{line}" if line else str(source)
                    raise TaskListError(f"{where}: userStories[{index}] ({story_id}).id: {problem}")
        return parse_tasks(data, str(source))

    def render(self, tasks: TaskList, previous_raw: str | None) -> str:
        """The model as prd.json: a text patch of ``previous_raw`` changing only what changed."""
        new = tasks.model_dump(mode="json", exclude_unset=True)
        old: Any = None
        if previous_raw is not None:
            try:
                old = json.loads(previous_raw)
            except json.JSONDecodeError:
                old = None
        if not isinstance(old, dict) or previous_raw is None:
            return json.dumps(_without_defaults(new), indent=2, ensure_ascii=False) + "\n"
        wanted = _merge_top(old, new)
        try:
            return patch_json_text(previous_raw, wanted)
        except JsonScanError:  # pragma: no cover - json.loads accepted it, the scanner should too
            return json.dumps(wanted, indent=indent_unit(previous_raw), ensure_ascii=False) + "\n"


# -- what the file should hold ---------------------------------------------------------


def _without_defaults(doc: dict[str, Any]) -> dict[str, Any]:
    """A new prd.json: review fields only where they are not at their defaults."""
    out = dict(doc)
    out["userStories"] = [
        {k: v for k, v in story.items() if not (k in REVIEW_DEFAULTS and same_json(v, REVIEW_DEFAULTS[k]))}
        for story in doc.get("userStories", [])
    ]
    return out


def _merge_keys(old: dict[str, Any], new: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``old``'s keys (kept even when ``new`` lacks them), ``new``'s values; new keys only when not default."""
    merged = {key: new.get(key, value) for key, value in old.items()}
    for key, value in new.items():
        if key not in old and not (key in defaults and same_json(value, defaults[key])):
            merged[key] = value
    return merged


def _merge_top(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    from ralph.api import Story, TaskList

    story_defaults = {**_model_defaults(Story), **REVIEW_DEFAULTS}
    merged = _merge_keys(old, {k: v for k, v in new.items() if k != "userStories"}, _model_defaults(TaskList))
    old_stories = old.get("userStories")
    new_stories = new.get("userStories", [])
    by_id: dict[str, dict[str, Any]] = {}
    if isinstance(old_stories, list):
        ids = [s.get("id") for s in old_stories if isinstance(s, dict)]
        if len(ids) == len(old_stories) and len(set(ids)) == len(ids):
            by_id = {s["id"]: s for s in old_stories}
        elif len(old_stories) == len(new_stories):  # duplicate ids: match by position
            by_id = {}
            merged["userStories"] = [
                _merge_keys(o, n, story_defaults) if isinstance(o, dict) else n
                for o, n in zip(old_stories, new_stories)
            ]
            return merged
    merged["userStories"] = [
        _merge_keys(by_id[s["id"]], s, story_defaults) if s.get("id") in by_id else _without_defaults({"userStories": [s]})["userStories"][0]
        for s in new_stories
    ]
    return merged


@hookimpl(trylast=True)
def ralph_register_task_stores(register):  # type: ignore[no-untyped-def]
    """Register the prd.json store."""
    register(PrdJsonStore)
