"""Format-preserving JSON edits for task stores: change values, keep every other byte.

:func:`patch_json_text` edits a JSON document's text so it decodes to a wanted
value while unchanged members keep their exact bytes (key order, indentation,
line endings, spacing).  Stores use it so a loop's write of one field shows up
in ``git diff`` as that one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

__all__ = ["JsonScanError", "decode_json", "indent_unit", "json_line_of", "patch_json_text", "same_json"]


def decode_json(raw: str, source: Path) -> Any:
    """``json.loads`` with a ``TaskListError`` naming the file, line and column."""
    from ralph.errors import TaskListError

    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        comma = _trailing_comma(raw, exc.pos)
        if comma is not None:
            line, column, closer = comma
            raise TaskListError(
                f"{source}: not valid JSON at line {line} column {column}: a comma before the closing `{closer}` "
                "(JSON allows none after the last item): remove it"
            ) from None
        raise TaskListError(f"{source}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise TaskListError(
            f"{source}: nested too deeply to be a task list (arrays/objects inside each other thousands of "
            "levels deep): fix the file"
        ) from None


def _trailing_comma(raw: str, pos: int) -> tuple[int, int, str] | None:
    """(line, column, the closing bracket) of the comma before ``pos`` when the error at ``pos`` is a closing
    ``]`` or ``}`` right after a comma (json reports the position of the bracket, often on the next line)."""
    closing = raw[pos:pos + 1]
    if closing not in ("]", "}"):
        return None
    before = len(raw[:pos].rstrip())
    if before == 0 or raw[before - 1] != ",":
        return None
    comma = before - 1
    line = raw.count("\n", 0, comma) + 1
    return line, comma - (raw.rfind("\n", 0, comma) + 1) + 1, closing


def same_json(a: Any, b: Any) -> bool:
    """JSON equality that tells ``true`` from ``1`` and ``1`` from ``1.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return bool(a == b)


# -- a JSON scanner that keeps positions -------------------------------------------------


class JsonScanError(ValueError):
    """The text is not JSON the scanner can follow (the caller re-serialises instead)."""


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


def json_line_of(raw: str, path: list[str | int]) -> int | None:
    """The line number (1-based) where the value at ``path`` (keys and indexes) starts in
    ``raw``; for an object member, the line of its key.  None when it cannot be told."""
    try:
        node = _scan(raw, 0)
        offset = node.start
        for step in path:
            if isinstance(step, int):
                node = node.items[step]
                offset = node.start
            else:
                _, offset, node = next(member for member in reversed(node.members) if member[0] == step)
    except (StopIteration, IndexError, JsonScanError):
        return None
    return raw.count("\n", 0, offset) + 1


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
    if same_json(old, new):
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
    elif len(new) > len(old) and all(same_json(o, n) for o, n in zip(old, new)):
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
