"""A scripted, local stand-in for the OpenAI Responses API (what the Codex CLI speaks).

The real ``codex`` binary (0.163) talks to a custom model provider with
``wire_api = "responses"``: ``POST {base_url}/responses`` with ``stream: true``,
answered with server-sent events (``response.created``,
``response.output_item.added`` / ``.done``, ``response.output_text.delta``,
``response.completed`` with usage, or ``response.failed``).  Replies are the
same :class:`~ralph.testing.model_server.Turn` objects the Messages server
uses, so one script can drive Claude Code and Codex; a ``Bash`` tool block is
sent as Codex's ``exec_command`` function call (``{"cmd": ...}``), any other
tool name goes out as a function call of that name with its input as arguments.

Every request body is recorded (:attr:`ScriptedResponsesServer.requests`).
Stdlib only.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Union

from ralph.testing.model_server import EXHAUSTED_TEXT, ErrorReply, TextBlock, ToolBlock, Turn

__all__ = [
    "ResponsesRequest",
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


@dataclass
class ResponsesRequest:
    """One ``/responses`` request the server received (same helpers as ``ModelRequest``)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    text: str
    """The whole request body as received: search it for markers."""

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

    @property
    def model(self) -> str:
        """The model name the client asked for."""
        value = self.body.get("model") if isinstance(self.body, dict) else None
        return value if isinstance(value, str) else "scripted-model"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") in ("input_text", "output_text")
        )
    return ""


Reply = Union[Turn, ErrorReply, StreamFailure]
Responder = Callable[[Any], Any]


def codex_tool(block: ToolBlock) -> tuple[str, dict[str, Any]]:
    """(function name, arguments) Codex receives for a scripted tool block."""
    if block.name == "Bash":
        return "exec_command", {"cmd": str(block.input.get("command", ""))}
    return block.name, dict(block.input)


def _sse(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _tokens(s: str) -> int:
    return max(1, len(s) // 4)


def encode_turn(turn: Turn, input_chars: int) -> bytes:
    """The SSE stream of one model reply."""
    rid = f"resp_scripted_{next(_ids):06d}"
    out = [_sse({"type": "response.created", "response": {"id": rid, "status": "in_progress"}})]
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
            out.append(_sse({"type": "response.output_item.added", "output_index": index, "item": item}))
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
            out.append(_sse({"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}))
            out.append(
                _sse({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                      "content_index": 0, "delta": block.text})
            )
        out.append(_sse({"type": "response.output_item.done", "output_index": index, "item": item}))
    usage: dict[str, Any] = {
        "input_tokens": _tokens(" " * input_chars),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": _tokens(" " * output_chars),
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    out.append(_sse({"type": "response.completed", "response": {"id": rid, "status": "completed", "usage": usage}}))
    return b"".join(out)


def encode_failure(failure: StreamFailure) -> bytes:
    rid = f"resp_scripted_{next(_ids):06d}"
    error = {"code": failure.code, "message": failure.message, **failure.extra}
    return _sse({"type": "response.created", "response": {"id": rid, "status": "in_progress"}}) + _sse(
        {"type": "response.failed", "response": {"id": rid, "status": "failed", "error": error}}
    )


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        # Codex asks for /models on some providers; an empty list means "use what was configured"
        if self.path.split("?", 1)[0].endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [], "models": []}).encode(), "application/json")
            return
        self._send(404, b'{"error": {"message": "not found"}}', "application/json")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length).decode("utf-8", errors="replace") if length else ""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {}
        path = self.path.split("?", 1)[0]
        if not path.endswith("/responses"):
            self._send(404, json.dumps({"error": {"message": path}}).encode(), "application/json")
            return
        request = ResponsesRequest(path=self.path, headers=dict(self.headers.items()), body=body, text=raw)
        owner = self.server.owner
        owner._record(request)
        try:
            reply = owner.responder(request)
        except Exception as exc:  # a broken script must surface, not hang the CLI
            owner._record_error(exc)
            reply = ErrorReply(400, {"error": {"message": f"responder raised: {exc!r}", "type": "invalid_request_error"}})
        if isinstance(reply, ErrorReply):
            body_json = reply.body_json
            if body_json.get("type") == "error" and "error" in body_json:  # a Messages-style body: reshape it
                body_json = {"error": body_json["error"]}
            self._send(reply.status, json.dumps(body_json).encode(), "application/json", reply.headers)
            return
        if isinstance(reply, StreamFailure):
            self._send(200, encode_failure(reply), "text/event-stream")
            return
        if not isinstance(reply, Turn):
            reply = Turn([TextBlock(EXHAUSTED_TEXT)])
        if len(reply.blocks) == 1 and isinstance(reply.blocks[0], TextBlock) and reply.blocks[0].text == EXHAUSTED_TEXT:
            owner._count_unscripted()
        self._send(200, encode_turn(reply, len(raw)), "text/event-stream", {"cache-control": "no-cache"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedResponsesServer


class ScriptedResponsesServer:
    """A local Responses API server on 127.0.0.1 (ephemeral port) in a thread.

    ``responder(request)`` returns a :class:`Turn`, an :class:`ErrorReply` or a
    :class:`StreamFailure`.  The responders of :mod:`ralph.testing.model_server`
    (``SequenceScript``, ``IterationScript``) work unchanged.
    """

    def __init__(self, responder: Responder, host: str = "127.0.0.1") -> None:
        self.responder = responder
        self.host = host
        self._requests: list[ResponsesRequest] = []
        self._errors: list[BaseException] = []
        self._unscripted = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _record(self, request: ResponsesRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self._errors.append(exc)

    def _count_unscripted(self) -> None:
        with self._lock:
            self._unscripted += 1

    @property
    def requests(self) -> list[ResponsesRequest]:
        """The requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def unscripted(self) -> int:
        """How many requests got "(script exhausted)"."""
        with self._lock:
            return self._unscripted

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the responder raised (each was answered with a 400)."""
        with self._lock:
            return list(self._errors)

    @property
    def url(self) -> str:
        """The provider base URL, ``http://127.0.0.1:PORT/v1``; only valid once started."""
        if self._server is None:
            raise RuntimeError("ScriptedResponsesServer is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ScriptedResponsesServer:
        """Bind an ephemeral port and serve in a daemon thread."""
        if self._server is not None:
            return self
        server = _Server((self.host, 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-responses-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> ScriptedResponsesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
