"""What the agents' output parsers share: one JSON object per stdout line, parsed without ever raising.

:func:`parse_object_line` turns blank lines into nothing and lines that are not JSON objects
(CLI warnings, a stray print) into ``system`` events with ``data={"raw": line, "unparsed": True}``;
it hands each JSON object to the parser's own mapping, and an exception there becomes such an
event too (with ``parse_error``).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ralph.api import AgentEvent

__all__ = ["MAX_CONTENT", "parse_object_line", "scalars", "trim"]

MAX_CONTENT = 4000
"""Longest tool-result content (and raw line) kept in an event, in characters."""


def trim(value: str, limit: int = MAX_CONTENT) -> tuple[str, bool]:
    """``value`` cut to ``limit`` characters (saying how many more there were), and whether it was cut."""
    if len(value) <= limit:
        return value, False
    return value[:limit] + f"\n... [{len(value) - limit} more characters]", True


def scalars(obj: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``obj`` whose values are strings, numbers, booleans or None."""
    return {k: v for k, v in obj.items() if isinstance(v, (str, int, float, bool)) or v is None}


def parse_object_line(line: str, events_of: Callable[[dict[str, Any]], list[AgentEvent]]) -> list[AgentEvent]:
    """Events for one stdout line: ``events_of(obj)`` for a JSON object; never raises."""
    try:
        stripped = line.strip()
        if not stripped:
            return []
        try:
            obj = json.loads(stripped)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raw, _ = trim(stripped)
            return [AgentEvent("system", data={"raw": raw, "unparsed": True})]
        return events_of(obj)
    except Exception as exc:  # the contract: never raise on agent output
        raw, _ = trim(line if isinstance(line, str) else repr(line))
        return [AgentEvent("system", data={"raw": raw, "unparsed": True, "parse_error": repr(exc)})]
