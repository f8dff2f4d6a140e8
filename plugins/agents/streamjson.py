"""Parse Claude Code's ``--output-format stream-json --verbose`` output into AgentEvents.

One stdout line is one JSON object.  The mapping:

* ``system/init`` -> ``system`` (data: subtype, session_id, model, cwd, version ...).
* ``system/api_retry`` -> ``error`` (data: subtype, attempt, max_retries, error_status ...,
  ``retrying: True``): the CLI will try again, so it is not final.
* other ``system`` subtypes -> ``system`` with their scalar fields.
* ``assistant``: one event per content block: ``text`` (``.text``) and ``tool_use``
  (data: name, input, id).  A synthetic API-error message (``is_api_error_message``)
  becomes ``error`` instead of ``text``.
* ``user``: one ``tool_result`` per tool result block (data: tool_use_id, is_error,
  content trimmed to :data:`MAX_CONTENT` characters, truncated); text blocks (the CLI's
  own additions, such as "Stop hook feedback:" after a blocking Stop hook) become
  ``system`` events with ``.text`` and data ``{"source": "user", "synthetic": ...}``.
* ``result`` -> ``result`` (data: is_error, num_turns, total_cost_usd, usage,
  duration_ms, terminal_reason, stop_reason, result, ...; ``.text`` is the result
  text), preceded by an ``error`` event when ``is_error`` is true.
* ``rate_limit_event`` with status ``rejected`` -> ``usage_limit``; other statuses ->
  ``system``.
* An API error that is a rate-limit or overload rejection (HTTP 429 or 529, error
  types ``rate_limit_error`` / ``overloaded_error``) and not a usage limit ->
  ``rate_limit`` (data: status, source), before the ``error`` event.

``usage_limit``, ``rate_limit`` and ``context_overflow`` are emitted *in addition*
to the event they were detected in (just before it).  Error wording is matched loosely only
in error contexts (API-error messages, ``is_error`` results); ordinary model text
must *start* with the CLI's own wording to count, so an agent merely talking
about limits does not stop a loop.  One failure therefore usually yields events
from both the API-error message and the final result: consumers should treat
these kinds as flags, not counters.

Lines that are not JSON objects (CLI warnings, a stray print) become ``system``
events with ``data={"raw": line, "unparsed": True}``; blank lines yield nothing.
The parser never raises.

The agent can write to this stream (its shell can print to its CLI's stdout), so for a metered
agent (docs/metering.md) the loop decides nothing from the ``usage_limit``, ``rate_limit``,
``context_overflow`` and ``result`` cost/usage events: they are shown and recorded as the agent's
claims, and the loop's meter of the model traffic decides.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ralph.api import AgentEvent

from .jsonlines import MAX_CONTENT, parse_object_line, scalars, trim

__all__ = ["MAX_CONTENT", "classify_failure", "parse_line"]

_RESULT_KEYS = (
    "subtype",
    "is_error",
    "num_turns",
    "total_cost_usd",
    "usage",
    "duration_ms",
    "duration_api_ms",
    "terminal_reason",
    "stop_reason",
    "result",
    "session_id",
    "api_error_status",
    "api_error_type",
    "permission_denials",
)
_INIT_KEYS = ("subtype", "session_id", "model", "cwd", "claude_code_version", "permissionMode", "apiKeySource")

# Loose wording, trusted only where we already know something failed.
_USAGE_LIMIT_LOOSE = re.compile(
    r"usage limit|limit reached|hit your (usage )?limit|limit will reset|resets at|resets \d"
    r"|out of (extra )?usage|credit balance is too low",
    re.IGNORECASE,
)
# Wording the CLI itself prints at the start of its own message.
_USAGE_LIMIT_STRICT = re.compile(
    r"^\s*(claude ai usage limit reached|you've hit your (usage )?limit"
    r"|(5-hour|weekly|session|daily|opus|sonnet)( usage)? limit reached)",
    re.IGNORECASE,
)
_CONTEXT_LOOSE = re.compile(
    r"prompt is too long|context (length|window)|maximum context|too many tokens|exceeds? the context",
    re.IGNORECASE,
)
_CONTEXT_STRICT = re.compile(r"^\s*prompt is too long", re.IGNORECASE)
# A rejection to wait out (not a usage limit): the CLI words it "API Error: Request rejected (429) ..."
_RATE_LIMIT_STATUSES = {429, 529}
_RATE_LIMIT_TYPES = {"rate_limit", "rate_limit_error", "overloaded", "overloaded_error"}
_RATE_LIMIT_TEXT = re.compile(r"\((429|529)\)|\brate limit\b|\boverloaded\b", re.IGNORECASE)


def _flags(
    body: str, source: str, obj: dict[str, Any], *, failed: bool, error: Any = None, terminal_reason: str | None = None
) -> list[AgentEvent]:
    """The ``usage_limit`` / ``context_overflow`` or ``rate_limit`` flag that goes before the
    event of ``body`` when it says so; ``failed``: the line is known to report an API error."""
    failure = classify_failure(body, error_context=failed, terminal_reason=terminal_reason)
    if failure:
        return [AgentEvent(failure, text=body, data={"source": source})]
    status = obj.get("api_error_status")
    if failed and _is_rate_limit(body, status, obj.get("api_error_type"), error):
        return [AgentEvent("rate_limit", text=body, data={"source": source, "status": status})]
    return []


def _is_rate_limit(text: str, status: Any, error_type: Any, error: Any) -> bool:
    """An API error (already known to be one) that says: too many requests, or overloaded."""
    return (
        status in _RATE_LIMIT_STATUSES
        or error_type in _RATE_LIMIT_TYPES
        or error in _RATE_LIMIT_TYPES
        or bool(_RATE_LIMIT_TEXT.search(text))
    )


def classify_failure(text: str, *, error_context: bool, terminal_reason: str | None = None) -> str | None:
    """``usage_limit``, ``context_overflow`` or None for a message's text.

    ``error_context`` says the text is already known to describe a failure, which
    allows the looser wording to match.
    """
    if terminal_reason == "prompt_too_long":
        return "context_overflow"
    usage, context = (_USAGE_LIMIT_LOOSE, _CONTEXT_LOOSE) if error_context else (_USAGE_LIMIT_STRICT, _CONTEXT_STRICT)
    if context.search(text):
        return "context_overflow"
    if usage.search(text):
        return "usage_limit"
    return None


def parse_line(line: str) -> list[AgentEvent]:
    """Events for one stdout line of ``claude -p --output-format stream-json --verbose``."""
    return parse_object_line(line, _events_of)


def _events_of(obj: dict[str, Any]) -> list[AgentEvent]:
    kind = obj.get("type")
    if kind == "assistant":
        return _assistant(obj)
    if kind == "user":
        return _user(obj)
    if kind == "result":
        return _result(obj)
    if kind == "system":
        return _system(obj)
    if kind == "rate_limit_event":
        return _rate_limit(obj)
    data = scalars(obj)
    data.setdefault("type", kind)
    return [AgentEvent("system", data=data)]


def _message_content(obj: dict[str, Any]) -> list[Any]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _dict(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _assistant(obj: dict[str, Any]) -> list[AgentEvent]:
    message = _dict(obj, "message")
    api_error = bool(obj.get("is_api_error_message")) or (
        message.get("model") == "<synthetic>" and bool(obj.get("error"))
    )
    events: list[AgentEvent] = []
    for block in _message_content(obj):
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text":
            body = _str(block, "text")
            events += _flags(body, "assistant", obj, failed=api_error, error=obj.get("error"))
            if api_error:
                events.append(
                    AgentEvent(
                        "error",
                        text=body,
                        data={
                            "source": "assistant",
                            "error": obj.get("error"),
                            "status": obj.get("api_error_status"),
                            "type": obj.get("api_error_type"),
                        },
                    )
                )
            else:
                events.append(AgentEvent("text", text=body))
        elif btype in ("tool_use", "server_tool_use"):
            tool_input = block.get("input")
            events.append(
                AgentEvent(
                    "tool_use",
                    data={
                        "name": block.get("name", ""),
                        "input": tool_input if isinstance(tool_input, dict) else {},
                        "id": block.get("id", ""),
                    },
                )
            )
        # thinking and other blocks carry nothing the loop acts on
    return events


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, dict):
                if item.get("type") == "text" and isinstance(item.get("text"), str):
                    parts.append(item["text"])
                else:
                    parts.append(f"[{item.get('type', 'block')}]")
            elif isinstance(item, str):
                parts.append(item)
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, default=str)


def _user(obj: dict[str, Any]) -> list[AgentEvent]:
    events = []
    for block in _message_content(obj):
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            # Text the CLI itself adds to the conversation, e.g. "Stop hook feedback:\n<reason>".
            body, _ = trim(block["text"])
            data = {"source": "user", "synthetic": bool(obj.get("isSynthetic"))}
            events.append(AgentEvent("system", text=body, data=data))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            content, truncated = trim(_tool_result_text(block.get("content")))
            events.append(
                AgentEvent(
                    "tool_result",
                    data={
                        "tool_use_id": block.get("tool_use_id", ""),
                        "is_error": bool(block.get("is_error")),
                        "content": content,
                        "truncated": truncated,
                    },
                )
            )
    return events


def _result(obj: dict[str, Any]) -> list[AgentEvent]:
    data = {key: obj.get(key) for key in _RESULT_KEYS if key in obj}
    is_error = data["is_error"] = bool(obj.get("is_error"))
    body = _str(obj, "result")
    if not body and isinstance(obj.get("errors"), list):
        body = "\n".join(str(e) for e in obj["errors"])
    terminal = _str(obj, "terminal_reason") or None
    events = _flags(body, "result", obj, failed=is_error, terminal_reason=terminal)
    if is_error:
        events.append(
            AgentEvent(
                "error",
                text=body,
                data={
                    "source": "result",
                    "terminal_reason": terminal,
                    "status": obj.get("api_error_status"),
                    "subtype": obj.get("subtype"),
                },
            )
        )
    events.append(AgentEvent("result", text=body, data=data))
    return events


def _system(obj: dict[str, Any]) -> list[AgentEvent]:
    subtype = obj.get("subtype")
    if subtype == "init":
        data = {key: obj.get(key) for key in _INIT_KEYS if key in obj}
        tools = obj.get("tools")
        if isinstance(tools, list):
            data["tools"] = [t for t in tools if isinstance(t, str)]
        return [AgentEvent("system", data=data)]
    if subtype == "api_retry":
        data = scalars(obj)
        data["retrying"] = True
        return [AgentEvent("error", text=f"API error {obj.get('error_status')}, retrying", data=data)]
    return [AgentEvent("system", data=scalars(obj))]


def _rate_limit(obj: dict[str, Any]) -> list[AgentEvent]:
    info = _dict(obj, "rate_limit_info")
    data = {
        "status": info.get("status"),
        "resets_at": info.get("resetsAt"),
        "rate_limit_type": info.get("rateLimitType"),
        "utilization": info.get("utilization"),
    }
    if info.get("status") == "rejected":
        return [AgentEvent("usage_limit", text=f"rate limit rejected ({data['rate_limit_type']})", data=data)]
    data["type"] = "rate_limit_event"
    return [AgentEvent("system", data=data)]
