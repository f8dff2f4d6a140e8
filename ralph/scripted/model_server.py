"""A scripted, local stand-in for the Anthropic Messages API.

The real Claude Code CLI talks to it (``ANTHROPIC_BASE_URL``) exactly as it
talks to the real API: ``POST /v1/messages?beta=true`` with ``stream: true``,
answered with server-sent events.  A *responder* chooses each reply; the
scripted responders here key on the number of assistant messages already in
the request, which stays deterministic across retries and Stop-hook
continuations.

Stdlib only, so tests and downstream projects can use it without extras.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from ralph.scripted.scripted_server import ScriptedRequest, ScriptedServer, ScriptHandler, estimate_tokens, sse

__all__ = [
    "ErrorReply",
    "StreamError",
    "IterationScript",
    "ModelRequest",
    "RATE_LIMIT_MESSAGE",
    "RejectFirst",
    "Responder",
    "ScriptedModelServer",
    "SequenceScript",
    "TextBlock",
    "ToolBlock",
    "Turn",
    "claude_env",
    "text",
    "tool",
    "unified_headers",
    "usage_limit_reply",
]

EXHAUSTED_TEXT = "(script exhausted)"
# Tool input JSON is streamed in this many input_json_delta pieces (at most),
# as the real API does, so the client's incremental JSON assembly is exercised.
_JSON_PIECES = 3
_tool_ids = itertools.count(1)


# -- replies --------------------------------------------------------------------


@dataclass(frozen=True)
class TextBlock:
    """An assistant ``text`` content block."""

    text: str


@dataclass(frozen=True)
class ToolBlock:
    """An assistant ``tool_use`` content block; ``id`` is generated when empty."""

    name: str
    input: dict[str, Any]
    id: str = ""


Block = Union[TextBlock, ToolBlock]


def text(s: str) -> TextBlock:
    """A text block saying ``s``."""
    return TextBlock(s)


def tool(name: str, input_dict: dict[str, Any], id: str = "") -> ToolBlock:  # noqa: A002
    """A tool call block: the CLI really executes it (Write, Edit, Read, Bash ...)."""
    return ToolBlock(name, dict(input_dict), id)


@dataclass
class Turn:
    """One assistant message: its blocks, and a stop reason derived from them."""

    blocks: list[Block]
    stop_reason: str | None = None
    """``tool_use`` when any block is a tool call, else ``end_turn`` (unless set)."""

    def __post_init__(self) -> None:
        if self.stop_reason is None:
            has_tool = any(isinstance(block, ToolBlock) for block in self.blocks)
            self.stop_reason = "tool_use" if has_tool else "end_turn"


@dataclass
class ErrorReply:
    """An HTTP error instead of a message, e.g. ``ErrorReply(529, ..., {"x-should-retry": "false"})``."""

    status: int
    body_json: dict[str, Any] = field(
        default_factory=lambda: {"type": "error", "error": {"type": "api_error", "message": "scripted error"}}
    )
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamError:
    """A reply that starts streaming (HTTP 200, ``message_start``) and then fails with an SSE ``error``
    event, as the API reports an overload mid-response (``overloaded_error``)."""

    type: str = "overloaded_error"
    message: str = "Overloaded"


def unified_headers(
    five_hour: float = 0.0, seven_day: float = 0.0, *, status: str = "allowed", resets_5h: int | None = None,
    resets_7d: int | None = None, claim: str = "five_hour",
) -> dict[str, str]:
    """The ``anthropic-ratelimit-unified-*`` headers the API sends a subscription (OAuth) client:
    utilization of the 5-hour and 7-day windows (fractions), their resets (epoch seconds), the status."""
    import time as _time

    now = int(_time.time())
    r5, r7 = resets_5h or now + 3600, resets_7d or now + 5 * 86400
    window_status = lambda used: "rejected" if used >= 1 else ("allowed_warning" if used >= 0.8 else "allowed")  # noqa: E731
    return {
        "anthropic-ratelimit-unified-status": status,
        "anthropic-ratelimit-unified-reset": str(r5 if claim == "five_hour" else r7),
        "anthropic-ratelimit-unified-representative-claim": claim,
        "anthropic-ratelimit-unified-5h-status": window_status(five_hour),
        "anthropic-ratelimit-unified-5h-utilization": str(five_hour),
        "anthropic-ratelimit-unified-5h-reset": str(r5),
        "anthropic-ratelimit-unified-7d-status": window_status(seven_day),
        "anthropic-ratelimit-unified-7d-utilization": str(seven_day),
        "anthropic-ratelimit-unified-7d-reset": str(r7),
    }


def usage_limit_reply(resets_at: int, claim: str = "five_hour", message: str | None = None) -> ErrorReply:
    """A subscription's usage limit as the API sends it: HTTP 429, ``rate_limit_error``, the unified
    headers with status ``rejected`` and the reset time (no usage wording needed in the body)."""
    headers = unified_headers(1.0 if claim == "five_hour" else 0.5, 1.0 if claim == "seven_day" else 0.5,
                              status="rejected", claim=claim,
                              resets_5h=resets_at if claim == "five_hour" else None,
                              resets_7d=resets_at if claim == "seven_day" else None)
    headers["x-should-retry"] = "false"
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": message or RATE_LIMIT_MESSAGE}}
    return ErrorReply(429, body, headers)


# -- requests -------------------------------------------------------------------


class ModelRequest(ScriptedRequest):
    """One Messages request the server received (``path``, ``headers``, ``body``, ``text``)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (``body["messages"]``), or ``[]``."""
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return messages if isinstance(messages, list) else []

    @property
    def assistant_turns(self) -> int:
        """How many assistant messages the conversation already holds."""
        return sum(1 for m in self.messages if isinstance(m, dict) and m.get("role") == "assistant")

    @property
    def first_user_text(self) -> str:
        """All text of the first user message (string content or text blocks), joined."""
        for message in self.messages:
            if isinstance(message, dict) and message.get("role") == "user":
                return _content_text(message.get("content"))
        return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


Reply = Union[Turn, ErrorReply, StreamError]
Responder = Callable[[ModelRequest], Reply]
"""What chooses each reply: called with the request, returns a :class:`Turn` or an :class:`ErrorReply`
(:class:`IterationScript`, :class:`SequenceScript` and :class:`RejectFirst` are responders)."""


# -- scripted responders ----------------------------------------------------------


def _exhausted() -> Turn:
    return Turn([TextBlock(EXHAUSTED_TEXT)])


def settle_turn(reply: object, server: ScriptedServer[Any]) -> Turn:
    """``reply`` as the turn to stream: "(script exhausted)" when it is no :class:`Turn`;
    either way an exhausted turn counts in ``server.unscripted``."""
    turn = reply if isinstance(reply, Turn) else _exhausted()
    blocks = turn.blocks
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock) and blocks[0].text == EXHAUSTED_TEXT:
        server.count_unscripted()
    return turn


class SequenceScript:
    """Answer turn ``request.assistant_turns`` of ``turns``; beyond it, "(script exhausted)"."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = list(turns)
        self.unscripted = 0
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Reply:
        index = request.assistant_turns
        if index < len(self.turns):
            return self.turns[index]
        with self._lock:
            self.unscripted += 1
        return _exhausted()


class IterationScript:
    """Per-iteration scripts keyed by the iteration number found in the prompt.

    The key is the first integer group ``pattern`` captures in the request's
    first user message (ralph prompts start with "Ralph Loop iteration N of M");
    prompts without a match, or with an unscripted key, use ``default``.
    """

    def __init__(
        self,
        turns_by_key: dict[int, list[Turn]],
        default: list[Turn] | None = None,
        pattern: str = r"iteration (\d+) of (\d+)",
    ) -> None:
        self.turns_by_key = {int(k): list(v) for k, v in turns_by_key.items()}
        self.default = list(default) if default is not None else None
        self.pattern = re.compile(pattern, re.IGNORECASE)
        self.unscripted = 0
        self._lock = threading.Lock()

    def key_of(self, request: ModelRequest) -> int | None:
        """The iteration number of ``request``, or None when the prompt has none."""
        match = self.pattern.search(request.first_user_text)
        if match is None or not match.groups():
            return None
        try:
            return int(match.group(1))
        except (TypeError, ValueError):
            return None

    def __call__(self, request: ModelRequest) -> Reply:
        key = self.key_of(request)
        turns = self.turns_by_key.get(key) if key is not None else None
        if turns is None:
            turns = self.default
        index = request.assistant_turns
        if turns is not None and index < len(turns):
            return turns[index]
        with self._lock:
            self.unscripted += 1
        return _exhausted()


RATE_LIMIT_MESSAGE = "This request would exceed your account's rate limit. Please try again later."
"""The error message :class:`RejectFirst` sends by default, worded as the real API's rate-limit error."""


class RejectFirst:
    """Reject the first ``count`` requests with an HTTP error (429, a rate limit, by default), then
    answer with ``then`` (a responder; None keeps rejecting).

    ``headers`` are sent with each rejection (e.g. ``{"retry-after": "2"}``, which the real CLI
    honours and reports as ``retry_delay_ms``).  ``rejected`` counts the rejections sent.
    """

    def __init__(
        self,
        count: int,
        then: Responder | None,
        status: int = 429,
        message: str = RATE_LIMIT_MESSAGE,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.count = count
        self.then = then
        error_type = "overloaded_error" if status == 529 else "rate_limit_error"
        self.reply = ErrorReply(status, {"type": "error", "error": {"type": error_type, "message": message}},
                                dict(headers or {}))
        self.rejected = 0
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Reply:
        with self._lock:
            reject = self.then is None or self.rejected < self.count
            if reject:
                self.rejected += 1
        return self.reply if reject else self.then(request)  # type: ignore[misc]


# -- SSE encoding -----------------------------------------------------------------


def _split(s: str, pieces: int) -> list[str]:
    if not s:
        return [""]
    size = max(1, -(-len(s) // pieces))
    return [s[i : i + size] for i in range(0, len(s), size)]


def encode_turn(turn: Turn, model: str, input_tokens: int, usage: dict[str, int] | None = None) -> bytes:
    """The full SSE stream for ``turn``, as the Messages API streams a reply.

    ``usage`` overrides the token counts of ``message_start`` (e.g. a simulated cache split).
    """
    message_id = f"msg_scripted_{next(_tool_ids):06d}"
    out = [
        sse({
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    **(usage or {}),
                },
            },
        }),
        sse({"type": "ping"}),
    ]
    output_chars = 0
    for index, block in enumerate(turn.blocks):
        if isinstance(block, ToolBlock):
            tool_id = block.id or f"toolu_scripted_{next(_tool_ids):06d}"
            start = {"type": "tool_use", "id": tool_id, "name": block.name, "input": {}}
            payload = json.dumps(block.input)
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _split(payload, _JSON_PIECES)]
            output_chars += len(payload)
        else:
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block.text}]
            output_chars += len(block.text)
        out.append(sse({"type": "content_block_start", "index": index, "content_block": start}))
        for delta in deltas:
            out.append(sse({"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(sse({"type": "content_block_stop", "index": index}))
    out.append(sse({
        "type": "message_delta",
        "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": _output_tokens(turn)},
    }))
    out.append(sse({"type": "message_stop"}))
    return b"".join(out)


def _output_tokens(turn: Turn) -> int:
    """The output tokens a turn is reported to cost: ~4 characters of text or tool input JSON per token."""
    chars = sum(len(json.dumps(b.input)) if isinstance(b, ToolBlock) else len(b.text) for b in turn.blocks)
    return estimate_tokens(" " * chars)


# -- the server -------------------------------------------------------------------


class _Handler(ScriptHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        raw, body = self.read_json()
        path = self.path.split("?", 1)[0]
        if path == "/v1/messages/count_tokens":
            self.send_json(200, {"input_tokens": estimate_tokens(raw)})
            return
        if path != "/v1/messages":
            self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
            return
        request = ModelRequest(path=self.path, headers=dict(self.headers.items()), body=body, text=raw)
        reply = self.ask(request, lambda exc: ErrorReply(
            500,
            {"type": "error", "error": {"type": "api_error", "message": f"responder raised: {exc!r}"}},
            {"x-should-retry": "false"},
        ))
        owner = self.server.owner
        assert isinstance(owner, ScriptedModelServer)
        if isinstance(reply, ErrorReply):
            owner._sent_reply(reply.status, {})
            self.send_json(reply.status, reply.body_json, reply.headers)
            return
        usage = owner._usage(body, raw)
        headers = {"cache-control": "no-cache", "request-id": "req_scripted", **owner.headers_for(request)}
        if isinstance(reply, StreamError):
            owner._sent_reply(200, {**usage, "output_tokens": 1})
            stream = encode_turn(Turn([]), request.model, usage["input_tokens"], usage).split(b"event: message_delta")[0]
            error = sse({"type": "error", "error": {"type": reply.type, "message": reply.message}})
            self.send_body(200, stream + error, "text/event-stream", headers)
            return
        turn = settle_turn(reply, owner)
        encoded = encode_turn(turn, request.model, usage["input_tokens"], usage)
        owner._sent_reply(200, {**usage, "output_tokens": _output_tokens(turn)})
        self.send_body(200, encoded, "text/event-stream", headers)


class ScriptedModelServer(ScriptedServer[ModelRequest]):
    """A local Messages API server on 127.0.0.1 (ephemeral port) in a thread.

    ``responder(request)`` returns a :class:`Turn` or an :class:`ErrorReply` (a responder
    that raises is answered with a 500).  Use as a context manager, or call :meth:`start`
    and :meth:`stop`; ``url`` is ``http://127.0.0.1:PORT``.
    """

    handler = _Handler
    thread_name = "scripted-model-server"

    def __init__(
        self,
        responder: Responder,
        host: str = "127.0.0.1",
        cache: bool = False,
        headers: dict[str, str] | Callable[[ModelRequest], dict[str, str]] | None = None,
    ) -> None:
        super().__init__(responder, host)
        self.cache = cache
        """Simulate prompt caching in the reported usage: the request's tools + system prefix is
        a cache write the first time the server sees it and a cache read afterwards."""
        self.headers = headers
        """Extra response headers of every streamed reply (e.g. :func:`unified_headers`), or a function
        of the request that returns them."""
        self._prefixes: set[str] = set()
        self._sent: list[tuple[int, dict[str, int]]] = []

    def headers_for(self, request: ModelRequest) -> dict[str, str]:
        """The extra headers of the reply to ``request``."""
        if callable(self.headers):
            return dict(self.headers(request))
        return dict(self.headers or {})

    def _sent_reply(self, status: int, usage: dict[str, int]) -> None:
        with self._lock:
            self._sent.append((status, dict(usage)))

    @property
    def sent(self) -> list[tuple[int, dict[str, int]]]:
        """Every reply sent so far: (HTTP status, the usage it reported, in the API's names:
        ``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``, ``output_tokens``)."""
        with self._lock:
            return list(self._sent)

    def _usage(self, body: Any, raw: str) -> dict[str, int]:
        """Token counts for a request: ~4 bytes per token, split by the cache simulation."""
        total = estimate_tokens(raw)
        if not self.cache or not isinstance(body, dict):
            return {"input_tokens": total}
        prefix = json.dumps([body.get("tools"), body.get("system")], sort_keys=True)
        cached = min(total - 1, estimate_tokens(prefix))
        with self._lock:
            seen = prefix in self._prefixes
            self._prefixes.add(prefix)
        key = "cache_read_input_tokens" if seen else "cache_creation_input_tokens"
        return {"input_tokens": total - cached, key: cached}


def claude_env(server_url: str, home: Path) -> dict[str, str]:
    """Environment additions that run the real Claude Code CLI offline against ``server_url``.

    ``home`` should be a fresh directory per test so no user settings, hooks or
    credentials leak in.  Retries are capped so an error reply fails fast.
    """
    return {
        "ANTHROPIC_BASE_URL": server_url,
        "ANTHROPIC_API_KEY": "dummy-offline-key",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(Path(home) / ".config"),
        # --dangerously-skip-permissions refuses to run as root without it.
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
        "API_TIMEOUT_MS": "30000",
    }
