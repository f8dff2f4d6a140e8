"""Parse ``codex exec --json`` output (JSONL, Codex CLI 0.163) into AgentEvents.

The mapping, to the same kinds the claude parser produces:

* ``thread.started`` -> ``system`` (data: ``session_id`` = the thread id).
* ``turn.started`` -> ``system``.
* ``item.started`` of a ``command_execution`` -> ``tool_use`` (name ``Bash``, input
  ``{"command": ...}``, id); of an ``mcp_tool_call`` -> ``tool_use`` named
  ``mcp__<server>__<tool>``; ``web_search`` -> ``tool_use`` ``WebSearch``.
* ``item.completed``: ``agent_message`` -> ``text``; ``command_execution`` /
  ``mcp_tool_call`` -> ``tool_result`` (content trimmed, ``is_error`` from the exit
  code or status); ``file_change`` -> ``tool_use`` ``apply_patch`` (data: changes)
  and its ``tool_result``; ``error`` items are Codex's non-fatal notices ->
  ``system`` with ``warning``; ``reasoning``, ``todo_list`` -> ``system``.
* ``turn.completed`` -> ``result`` (data: usage, ``total_cost_usd`` None: Codex
  reports tokens, not cost).
* ``error``: "Reconnecting... n/m" -> ``error`` with ``retrying: True``; otherwise
  ``error``, preceded by ``usage_limit`` / ``context_overflow`` when the wording
  says so.
* ``turn.failed`` -> ``error`` and a ``result`` with ``is_error`` (same classification).

Lines that are not JSON objects become ``system`` events with ``unparsed``.
The parser never raises.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ralph.api import AgentEvent

from .jsonlines import MAX_CONTENT, parse_object_line, scalars, trim

__all__ = ["MAX_CONTENT", "classify", "parse_line"]

_CONTEXT = re.compile(
    r"ran out of room in the model's context window|context_length_exceeded|exceeds the context window"
    r"|context window|maximum context length",
    re.IGNORECASE,
)
_USAGE = re.compile(
    r"hit your usage limit|usage limit (has been )?reached|usage_limit_reached|rate limit reached"
    r"|try again (in|at|later)",
    re.IGNORECASE,
)
_RETRYING = re.compile(r"^\s*Reconnecting\.\.\.", re.IGNORECASE)


def classify(message: str) -> str | None:
    """``context_overflow``, ``usage_limit`` or None for an error message of Codex."""
    if _CONTEXT.search(message):
        return "context_overflow"
    if _USAGE.search(message):
        return "usage_limit"
    return None


def parse_line(line: str) -> list[AgentEvent]:
    """Events for one stdout line of ``codex exec --json``."""
    return parse_object_line(line, _events_of)


def _events_of(obj: dict[str, Any]) -> list[AgentEvent]:
    kind = obj.get("type")
    if kind == "thread.started":
        return [AgentEvent("system", data={"subtype": "init", "session_id": obj.get("thread_id")})]
    if kind == "turn.started":
        return [AgentEvent("system", data={"subtype": "turn_started"})]
    if kind == "item.started":
        return _item_started(obj.get("item") or {})
    if kind == "item.completed":
        return _item_completed(obj.get("item") or {})
    if kind == "turn.completed":
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        return [AgentEvent("result", data={"is_error": False, "usage": usage, "total_cost_usd": None})]
    if kind == "turn.failed":
        raw_error = obj.get("error")
        error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
        message = str(error.get("message") or "the turn failed")
        return _failure(message, "turn.failed") + [
            AgentEvent("result", text=message, data={"is_error": True, "terminal_reason": "turn_failed"})
        ]
    if kind == "error":
        message = str(obj.get("message") or "")
        if _RETRYING.search(message):
            return [AgentEvent("error", text=message, data={"source": "error", "retrying": True})]
        return _failure(message, "error")
    return [AgentEvent("system", data=scalars(obj))]


def _failure(message: str, source: str) -> list[AgentEvent]:
    events = []
    flag = classify(message)
    if flag:
        events.append(AgentEvent(flag, text=message, data={"source": source}))
    events.append(AgentEvent("error", text=message, data={"source": source}))
    return events


def _item_started(item: dict[str, Any]) -> list[AgentEvent]:
    itype = item.get("type")
    if itype == "command_execution":
        return [AgentEvent("tool_use", data={"name": "Bash", "input": {"command": item.get("command", "")},
                                             "id": item.get("id", "")})]
    if itype == "mcp_tool_call":
        name = f"mcp__{item.get('server', '')}__{item.get('tool', '')}"
        arguments = item.get("arguments")
        return [AgentEvent("tool_use", data={"name": name, "input": arguments if isinstance(arguments, dict) else {},
                                             "id": item.get("id", "")})]
    if itype == "web_search":
        return [AgentEvent("tool_use", data={"name": "WebSearch", "input": {"query": item.get("query", "")},
                                             "id": item.get("id", "")})]
    return []


def _item_completed(item: dict[str, Any]) -> list[AgentEvent]:
    itype = item.get("type")
    item_id = item.get("id", "")
    if itype == "agent_message":
        return [AgentEvent("text", text=str(item.get("text") or ""))]
    if itype == "command_execution":
        content, truncated = trim(str(item.get("aggregated_output") or ""))
        code = item.get("exit_code")
        failed = item.get("status") in ("failed", "declined") or (isinstance(code, int) and code != 0)
        return [AgentEvent("tool_result", data={"tool_use_id": item_id, "is_error": failed, "content": content,
                                                "truncated": truncated, "exit_code": code})]
    if itype == "mcp_tool_call":
        result = item.get("result") if item.get("result") is not None else item.get("error")
        content, truncated = trim(result if isinstance(result, str) else json.dumps(result, default=str))
        return [AgentEvent("tool_result", data={"tool_use_id": item_id, "is_error": item.get("status") == "failed",
                                                "content": content, "truncated": truncated})]
    if itype == "file_change":
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        return [
            AgentEvent("tool_use", data={"name": "apply_patch", "input": {"changes": changes}, "id": item_id}),
            AgentEvent("tool_result", data={"tool_use_id": item_id, "is_error": item.get("status") == "failed",
                                            "content": "", "truncated": False}),
        ]
    if itype == "error":
        return [AgentEvent("system", text=str(item.get("message") or ""), data={"warning": True})]
    return [AgentEvent("system", data={"item_type": itype})]
