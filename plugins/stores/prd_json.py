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
import re
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph import hookimpl
from ralph.contracts import TaskStore
from ralph.errors import TaskListError

if TYPE_CHECKING:
    from ralph.tasks import TaskList

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
    filename = "prd.json"

    def path(self, ralph_dir: Path) -> Path:
        return ralph_dir / self.filename

    def parse(self, raw: str, source: Path) -> TaskList:
        from ralph.lifecycle.plan import story_id_problem
        from ralph.tasks import parse_tasks

        from ralph_plugins.stores.tasks_json import decode_json

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
                    line = _line_of_story_field(raw, index, "id")
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
        {k: v for k, v in story.items() if not (k in REVIEW_DEFAULTS and _same(v, REVIEW_DEFAULTS[k]))}
        for story in doc.get("userStories", [])
    ]
    return out


def _merge_keys(old: dict[str, Any], new: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``old``'s keys (kept even when ``new`` lacks them), ``new``'s values; new keys only when not default."""
    merged = {key: new.get(key, value) for key, value in old.items()}
    for key, value in new.items():
        if key not in old and not (key in defaults and _same(value, defaults[key])):
            merged[key] = value
    return merged


def _merge_top(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    from ralph.tasks import Story, TaskList

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


def _same(a: Any, b: Any) -> bool:
    """JSON equality that tells ``true`` from ``1`` and ``1`` from ``1.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


# -- a JSON scanner that keeps positions -------------------------------------------------


class JsonScanError(ValueError):
    pass


@dataclass
class _Node:
    kind: str  # "object", "array" or "scalar"
    start: int
    end: int
    members: list[tuple[str, int, _Node]] = field(default_factory=list)
    """(key, offset of the key's opening quote, value) for objects."""
    items: list[_Node] = field(default_factory=list)


_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _scan(text: str, i: int) -> _Node:
    i = _skip(text, i)
    if i >= len(text):
        raise JsonScanError("unexpected end")
    char = text[i]
    if char in "{[":
        closing = "}" if char == "{" else "]"
        node = _Node("object" if char == "{" else "array", i, i)
        j = _skip(text, i + 1)
        if text[j] == closing:
            node.end = j + 1
            return node
        while True:
            j = _skip(text, j)
            if node.kind == "object":
                if text[j] != '"':
                    raise JsonScanError(f"expected a key at {j}")
                key, after = scanstring(text, j + 1)
                colon = _skip(text, after)
                if text[colon] != ":":
                    raise JsonScanError(f"expected ':' at {colon}")
                value = _scan(text, colon + 1)
                node.members.append((key, j, value))
            else:
                value = _scan(text, j)
                node.items.append(value)
            j = _skip(text, value.end)
            if text[j] == ",":
                j += 1
                continue
            if text[j] == closing:
                node.end = j + 1
                return node
            raise JsonScanError(f"expected ',' or {closing!r} at {j}")
    if char == '"':
        _, end = scanstring(text, i + 1)
        return _Node("scalar", i, end)
    match = _SCALAR.match(text, i)
    if not match:
        raise JsonScanError(f"unexpected {char!r} at {i}")
    return _Node("scalar", i, match.end())


def _line_of_story_field(raw: str, index: int, key: str) -> str:
    """The line number of ``userStories[index].key`` in ``raw`` (empty when it cannot be told)."""
    try:
        root = _scan(raw, 0)
        stories = next(v for k, _, v in reversed(root.members) if k == "userStories")
        story = stories.items[index]
        offset = next(start for k, start, _ in reversed(story.members) if k == key)
    except (StopIteration, IndexError, JsonScanError):
        return ""
    return str(raw.count("\n", 0, offset) + 1)


# -- patching -----------------------------------------------------------------------------


@dataclass
class _Style:
    unit: int | None  # None: the file is on one line
    newline: str


def indent_unit(raw: str) -> int:
    """The indentation the file already uses (2 when it cannot be told)."""
    for line in raw.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) != len(line):
            return len(line) - len(stripped)
    return 2


def _line_indent(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    prefix = text[start:offset]
    return prefix[: len(prefix) - len(prefix.lstrip(" \t"))]


def _dump(value: Any, style: _Style, base: str) -> str:
    if style.unit is None:
        return json.dumps(value, ensure_ascii=False)
    text = json.dumps(value, indent=style.unit, ensure_ascii=False)
    return text.replace("\n", style.newline + base)


def patch_json_text(raw: str, wanted: Any) -> str:
    """``raw`` edited so it decodes to ``wanted``, touching only the values that differ.

    Object members and array elements that are unchanged keep their exact bytes;
    changed scalars are replaced in place; added members go after the last one with
    the same indentation; removed ones take their separator with them.  Arrays of
    objects with unique ``id``s are matched by id (a reorder rewrites the array).
    """
    root = _scan(raw, 0)
    if _skip(raw, root.end) != len(raw):
        raise JsonScanError("trailing data")
    style = _Style(indent_unit(raw) if "\n" in raw.strip() else None, "\r\n" if "\r\n" in raw else "\n")
    edits: list[tuple[int, int, str]] = []
    _patch(raw, root, json.loads(raw), wanted, style, edits)
    # Apply from the end.  At one offset a replacement is applied before the insertions
    # there, and insertions in reverse order, so they end up in the order they were listed.
    order = sorted(range(len(edits)), key=lambda n: (edits[n][0], edits[n][1] > edits[n][0], n), reverse=True)
    text = raw
    for start, end, replacement in (edits[n] for n in order):
        text = text[:start] + replacement + text[end:]
    return text


def _patch(raw: str, node: _Node, old: Any, new: Any, style: _Style, edits: list[tuple[int, int, str]]) -> None:
    if _same(old, new):
        return
    if node.kind == "object" and isinstance(old, dict) and isinstance(new, dict) and node.members:
        _patch_object(raw, node, old, new, style, edits)
    elif node.kind == "array" and isinstance(old, list) and isinstance(new, list) and node.items:
        _patch_array(raw, node, old, new, style, edits)
    else:
        edits.append((node.start, node.end, _dump(new, style, _line_indent(raw, node.start))))


def _member_text(key: str, value: Any, style: _Style, indent: str) -> str:
    return json.dumps(key, ensure_ascii=False) + ": " + _dump(value, style, indent)


def _separator(raw: str, style: _Style, at: int, indent: str) -> str:
    return "," + (style.newline + indent if style.unit is not None else " ")


def _deletions(spans: list[tuple[int, int]], keep: list[bool]) -> list[tuple[int, int]]:
    """Text ranges removing the elements not kept (with their separators); some are kept."""
    first_kept = keep.index(True)
    out = []
    if first_kept > 0:
        out.append((spans[0][0], spans[first_kept][0]))
    for k in range(first_kept + 1, len(spans)):
        if not keep[k]:
            out.append((spans[k - 1][1], spans[k][1]))
    return out


def _patch_object(raw: str, node: _Node, old: dict[str, Any], new: dict[str, Any], style: _Style, edits: list) -> None:  # type: ignore[type-arg]
    last: dict[str, int] = {key: index for index, (key, _, _) in enumerate(node.members)}
    keep = [key in new and last[key] == index for index, (key, _, _) in enumerate(node.members)]
    if not any(keep):
        edits.append((node.start, node.end, _dump(new, style, _line_indent(raw, node.start))))
        return
    spans = [(start, value.end) for _, start, value in node.members]
    for start, end in _deletions(spans, keep):
        edits.append((start, end, ""))
    for index, (key, _, value) in enumerate(node.members):
        if keep[index]:
            _patch(raw, value, old[key], new[key], style, edits)
    kept = [m for m, k in zip(node.members, keep) if k]
    indent = _line_indent(raw, kept[-1][1])
    end = kept[-1][2].end
    for key, value in new.items():
        if key not in old:
            edits.append((end, end, _separator(raw, style, end, indent) + _member_text(key, value, style, indent)))


def _ids(values: list[Any]) -> list[str] | None:
    if not all(isinstance(v, dict) and isinstance(v.get("id"), str) for v in values):
        return None
    ids = [v["id"] for v in values]
    return ids if len(set(ids)) == len(ids) else None


def _patch_array(raw: str, node: _Node, old: list[Any], new: list[Any], style: _Style, edits: list) -> None:  # type: ignore[type-arg]
    old_ids, new_ids = _ids(old), _ids(new)
    if old_ids is not None and new_ids is not None and old_ids and new_ids:
        kept_ids = [i for i in new_ids if i in old_ids]
        if kept_ids == [i for i in old_ids if i in kept_ids] and kept_ids:
            _patch_array_by_id(raw, node, old, new, old_ids, new_ids, style, edits)
            return
    elif len(old) == len(new):
        for item, o, n in zip(node.items, old, new):
            _patch(raw, item, o, n, style, edits)
        return
    elif len(new) > len(old) and all(_same(o, n) for o, n in zip(old, new)):
        indent = _line_indent(raw, node.items[-1].start)
        end = node.items[-1].end
        for value in new[len(old):]:
            edits.append((end, end, _separator(raw, style, end, indent) + _dump(value, style, indent)))
        return
    edits.append((node.start, node.end, _dump(new, style, _line_indent(raw, node.start))))


def _patch_array_by_id(
    raw: str, node: _Node, old: list[Any], new: list[Any], old_ids: list[str], new_ids: list[str], style: _Style, edits: list  # type: ignore[type-arg]
) -> None:
    keep = [i in new_ids for i in old_ids]
    spans = [(item.start, item.end) for item in node.items]
    for start, end in _deletions(spans, keep):
        edits.append((start, end, ""))
    position = {story_id: index for index, story_id in enumerate(old_ids)}
    for story_id, value in zip(new_ids, new):
        if story_id in position:
            index = position[story_id]
            _patch(raw, node.items[index], old[index], value, style, edits)
    kept_nodes = [node.items[position[i]] for i in new_ids if i in position]
    indent = _line_indent(raw, kept_nodes[0].start)
    upcoming = iter(enumerate(new_ids))
    for index, story_id in upcoming:
        if story_id in position:
            continue
        following = next((position[i] for i in new_ids[index + 1:] if i in position), None)
        text = _dump(new[index], style, indent)
        if following is not None:  # before the next kept element
            at = node.items[following].start
            edits.append((at, at, text + _separator(raw, style, at, indent)))
        else:
            at = kept_nodes[-1].end
            edits.append((at, at, _separator(raw, style, at, indent) + text))


@hookimpl(trylast=True)
def ralph_register_task_stores(register):  # type: ignore[no-untyped-def]
    """Register the prd.json store."""
    register(PrdJsonStore)
