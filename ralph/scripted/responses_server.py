"""A scripted, local stand-in for the OpenAI Responses API (what the Codex CLI speaks).

The real ``codex`` binary (0.163) talks to a custom model provider with
``wire_api = "responses"``: ``POST {base_url}/responses`` with ``stream: true``,
answered with server-sent events (``response.created``,
``response.output_item.added`` / ``.done``, ``response.output_text.delta``,
``response.completed`` with usage, or ``response.failed``).  Replies are the
same :class:`~ralph.scripted.model_server.Turn` objects the Messages server
uses, so one script can drive Claude Code and Codex; a ``Bash`` tool block is
sent as Codex's ``exec_command`` function call (``{"cmd": ...}``), any other
tool name goes out as a function call of that name with its input as arguments.

Every request body is recorded (:attr:`ScriptedResponsesServer.requests`).
Stdlib only.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ralph.scripted.model_server import ErrorReply, TextBlock, ToolBlock, Turn, settle_turn
from ralph.scripted.scripted_server import ScriptedRequest, ScriptedServer, ScriptHandler, estimate_tokens, sse

__all__ = [
    "ResponsesRequest",
    "usage_limit_reply",
    "ScriptedResponsesServer",
    "StreamFailure",
    "codex_env",
    "codex_tool",
]

_ids = itertools.count(1)
_ASSISTANT_ITEMS = ("function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call")


@dataclass
class StreamFailure:
    """A stream that starts and then fails (``response.failed``), as the API reports
    context overflow (``context_length_exceeded``), quota (``insufficient_quota``) or
    a usage limit (``usage_limit_reached``)."""

    code: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)


class ResponsesRequest(ScriptedRequest):
    """One ``/responses`` request the server received (same helpers as ``ModelRequest``)."""

    @property
    def input(self) -> list[dict[str, Any]]:
        """The conversation items (``body["input"]``), or ``[]``."""
        items = self.body.get("input") if isinstance(self.body, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    messages = input

    @property
    def assistant_turns(self) -> int:
        """How many model replies the conversation already holds (runs of assistant items)."""
        count, inside = 0, False
        for item in self.input:
            assistant = item.get("type") in _ASSISTANT_ITEMS or (
                item.get("type") == "message" and item.get("role") == "assistant"
            )
            if assistant and not inside:
                count += 1
            inside = assistant
        return count

    @property
    def first_user_text(self) -> str:
        """The user text before the first model reply (Codex's environment context and the prompt)."""
        parts: list[str] = []
        for item in self.input:
            if item.get("type") != "message":
                if item.get("type") in _ASSISTANT_ITEMS:
                    break
                continue
            if item.get("role") == "assistant":
                break
            if item.get("role") == "user":
                parts.append(_content_text(item.get("content")))
        return "\n".join(parts)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") in ("input_text", "output_text")
        )
    return ""


Reply = Union[Turn, ErrorReply, StreamFailure]


def codex_tool(block: ToolBlock) -> tuple[str, dict[str, Any]]:
    """(function name, arguments) Codex receives for a scripted tool block."""
    if block.name == "Bash":
        return "exec_command", {"cmd": str(block.input.get("command", ""))}
    return block.name, dict(block.input)


def encode_turn(turn: Turn, input_chars: int) -> bytes:
    """The SSE stream of one model reply."""
    rid = f"resp_scripted_{next(_ids):06d}"
    out = [sse({"type": "response.created", "response": {"id": rid, "status": "in_progress"}})]
    output_chars = 0
    for index, block in enumerate(turn.blocks):
        if isinstance(block, ToolBlock):
            name, arguments = codex_tool(block)
            payload = json.dumps(arguments)
            output_chars += len(payload)
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_scripted_{next(_ids):06d}",
                "call_id": block.id or f"call_scripted_{next(_ids):06d}",
                "name": name,
                "arguments": payload,
                "status": "completed",
            }
            out.append(sse({"type": "response.output_item.added", "output_index": index, "item": item}))
        else:
            assert isinstance(block, TextBlock)
            output_chars += len(block.text)
            item = {
                "type": "message",
                "role": "assistant",
                "id": f"msg_scripted_{next(_ids):06d}",
                "status": "completed",
                "content": [{"type": "output_text", "text": block.text, "annotations": []}],
            }
            out.append(sse({"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}))
            out.append(
                sse({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                      "content_index": 0, "delta": block.text})
            )
        out.append(sse({"type": "response.output_item.done", "output_index": index, "item": item}))
    usage: dict[str, Any] = {
        "input_tokens": estimate_tokens(" " * input_chars),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": estimate_tokens(" " * output_chars),
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    out.append(sse({"type": "response.completed", "response": {"id": rid, "status": "completed", "usage": usage}}))
    return b"".join(out)


def encode_failure(failure: StreamFailure) -> bytes:
    rid = f"resp_scripted_{next(_ids):06d}"
    error = {"code": failure.code, "message": failure.message, **failure.extra}
    return sse({"type": "response.created", "response": {"id": rid, "status": "in_progress"}}) + sse(
        {"type": "response.failed", "response": {"id": rid, "status": "failed", "error": error}}
    )


class _Handler(ScriptHandler):
    def do_GET(self) -> None:  # noqa: N802
        # Codex asks for /models on some providers; an empty list means "use what was configured"
        if self.path.split("?", 1)[0].endswith("/models"):
            self.send_json(200, {"object": "list", "data": [], "models": []})
            return
        self.send_body(404, b'{"error": {"message": "not found"}}', "application/json")

    def do_POST(self) -> None:  # noqa: N802
        raw, body = self.read_json()
        path = self.path.split("?", 1)[0]
        if not path.endswith("/responses"):
            self.send_json(404, {"error": {"message": path}})
            return
        request = ResponsesRequest(path=self.path, headers=dict(self.headers.items()), body=body, text=raw)
        reply = self.ask(request, lambda exc: ErrorReply(
            400, {"error": {"message": f"responder raised: {exc!r}", "type": "invalid_request_error"}}
        ))
        if isinstance(reply, ErrorReply):
            body_json = reply.body_json
            if body_json.get("type") == "error" and "error" in body_json:  # a Messages-style body: reshape it
                body_json = {"error": body_json["error"]}
            self.send_json(reply.status, body_json, reply.headers)
            return
        if isinstance(reply, StreamFailure):
            self.send_body(200, encode_failure(reply), "text/event-stream")
            return
        turn = settle_turn(reply, self.server.owner)
        self.send_body(200, encode_turn(turn, len(raw)), "text/event-stream", {"cache-control": "no-cache"})


class ScriptedResponsesServer(ScriptedServer[ResponsesRequest]):
    """A local Responses API server on 127.0.0.1 (ephemeral port) in a thread.

    ``responder(request)`` returns a :class:`Turn`, an :class:`ErrorReply` or a
    :class:`StreamFailure` (a responder that raises is answered with a 400).  The responders
    of :mod:`ralph.scripted.model_server` (``SequenceScript``, ``IterationScript``) work
    unchanged.  ``url`` is the provider base URL, ``http://127.0.0.1:PORT/v1``.
    """

    handler = _Handler
    url_path = "/v1"
    thread_name = "scripted-responses-server"


def usage_limit_reply(resets_in_seconds: int, plan: str = "plus") -> ErrorReply:
    """A usage limit as the Codex backend sends it: HTTP 429, ``usage_limit_reached`` with the plan and
    the seconds until the limit resets (the loop's meter reads the reset from the body)."""
    return ErrorReply(429, {"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                                      "plan_type": plan, "resets_in_seconds": resets_in_seconds}})


def codex_env(server_url: str, home: Path) -> dict[str, str]:
    """Environment additions that run the real Codex CLI offline against ``server_url``.

    ``RALPH_CODEX_BASE_URL`` makes ralph's codex agent define a Responses provider
    for that URL in its private ``CODEX_HOME``; ``home`` is a fresh ``HOME`` so no
    user config leaks in.
    """
    return {
        "RALPH_CODEX_BASE_URL": server_url,
        "OPENAI_API_KEY": "dummy-offline-key",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(Path(home) / ".config"),
        "CODEX_HOME": str(Path(home) / ".codex"),
    }
