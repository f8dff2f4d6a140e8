"""Reading one model exchange (a request and its response) as it streams through the meter.

Everything here is the loop's own view of the traffic: the status line, the headers and the
body the model API sent.  :class:`Exchange` is fed the response bytes chunk by chunk (the
same bytes the agent's CLI receives) and keeps what the loop decides on: tokens, whether
the model answered, and a rate limit, a usage limit or a context overflow with the API's
reset time, ``retry-after`` and the ``anthropic-ratelimit-*`` / ``x-ratelimit-*`` headers
(Claude subscriptions: the unified 5-hour and 7-day windows).

Wire formats: Anthropic Messages (``/v1/messages``: ``message_start`` usage, cumulative
``message_delta`` usage, ``error`` events) and OpenAI Responses (``/responses``:
``response.completed`` usage, ``response.failed``); a JSON body for a non-streaming reply
or an error.  Nothing here trusts the agent: the request body is read only for the model
name and whether the request is billed.
"""

from __future__ import annotations

import json
import math
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from ralph.metering.routes import billed_path

__all__ = ["Exchange", "LimitKind", "billed_path", "quota_of", "ratelimit_headers"]

LimitKind = str
"""``usage_limit``, ``rate_limit`` (429 / 529 overloaded) or ``context_overflow``."""

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""One server-sent event larger than this is passed through but not parsed (memory stays bounded)."""
MAX_ERROR_BODY = 256 * 1024
"""How much of a non-streamed body (an error, a JSON reply) is kept for reading."""

_CONTEXT_MESSAGE = re.compile(
    r"(prompt is too long: \d+ tokens? > \d+|input length and `?max_tokens`? exceed context limit: \d+"
    r"|this model's maximum context length is \d+ tokens)",
    re.IGNORECASE,
)
"""How the APIs word a context overflow, matched at the start of the message: the API writes that start
itself, while a message that quotes the request (an unknown tag, a bad value) starts with the field's
name, so text the agent put in its request cannot be taken for an overflow."""
_USAGE_LIMIT_TYPES = {"usage_limit_reached", "insufficient_quota", "billing_error"}
"""Error types (or codes) that mean the account's usage is used up: structured fields the API sets."""
_RATE_LIMIT_TYPES = {"rate_limit_error", "rate_limit_exceeded", "overloaded_error", "rate_limit", "overloaded"}
_CONTEXT_TYPES = {"context_length_exceeded"}
_KEPT_HEADERS = re.compile(r"^(anthropic-ratelimit-|x-ratelimit-|x-codex-|retry-after|request-id$|x-request-id$)")
_UNIFIED = "anthropic-ratelimit-unified-"
_WINDOW_FIELD = re.compile(r"^(?P<window>[0-9a-z_]+)-(?P<field>utilization|reset|status|used-percent|surpassed-threshold)$")


def ratelimit_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The rate-limit, retry and request-id headers of a response (never credentials), lower-cased."""
    return {name.lower(): value for name, value in headers if _KEPT_HEADERS.match(name.lower())}


def quota_of(kept: dict[str, str]) -> dict[str, Any]:
    """The subscription windows of ``anthropic-ratelimit-unified-*`` headers, parsed.

    ``{"status": "allowed", "reset": 1750000000, "representative_claim": "five_hour",
    "windows": {"5h": {"utilization": 0.42, "reset": 1750000000, "status": "allowed"}, "7d": {...}}}``;
    ``{}`` when the response had none (API-key traffic).  Utilization is a fraction (1.0 = the window's limit).
    """
    quota: dict[str, Any] = {}
    windows: dict[str, dict[str, Any]] = {}
    for name, value in kept.items():
        if not name.startswith(_UNIFIED):
            continue
        rest = name[len(_UNIFIED):]
        match = _WINDOW_FIELD.match(rest)
        if match and match.group("window") not in ("overage", "fallback"):
            windows.setdefault(match.group("window"), {})[match.group("field").replace("-", "_")] = _number(value)
        else:
            quota[rest.replace("-", "_")] = _number(value)
    if windows:
        quota["windows"] = windows
    return quota


def _number(value: str) -> Any:
    """A header value as int or float when it is one (finite), else the text."""
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number):
        return text
    return int(number) if number.is_integer() and "." not in text else number


def _dict(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int | None:
    """A token count: a non-negative finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(value)


@dataclass
class Exchange:
    """One request through the meter and what its response said, filled in as the bytes pass."""

    session: str
    path: str
    model: str | None = None
    """The model the request named; replaced by the one the response names."""
    started: float = field(default_factory=time.time)
    status: int | None = None
    """The upstream's HTTP status; None while waiting, or when the upstream could not be reached."""
    headers: dict[str, str] = field(default_factory=dict)
    """The response's rate-limit, retry and request-id headers (no credentials)."""
    usage: dict[str, int] = field(default_factory=dict)
    """Tokens the response reports: input, cache_read, cache_write (cache_write_1h of it), output."""
    cost: float | None = None
    """USD at the price table's rate; None: the model has no price (or the call is not billed)."""
    answered: bool = False
    """A 2xx reply to a billed call: the model produced output the agent could act on."""
    complete: bool = False
    """The stream (or body) ended as the API ends a finished reply."""
    limit: LimitKind | None = None
    error_type: str | None = None
    error_code: str | None = None
    """The API error's other classifying field (OpenAI's ``code`` beside its ``type``), when it had one."""
    error: str | None = None
    """The API's error message (a body's, or a stream's error event), or why the upstream failed."""
    seconds: float = 0.0
    first_byte: float | None = None
    """Seconds from the request to the upstream's first response byte."""
    bytes_out: int = 0
    """Response bytes passed to the agent."""
    unparsed: bool = False
    """Part of the response could not be read (compressed in an unknown way, or an oversized event)."""
    _buffer: bytearray = field(default_factory=bytearray, repr=False)
    _body: bytearray = field(default_factory=bytearray, repr=False)
    _event: str = field(default="", repr=False)
    _data: list[bytes] = field(default_factory=list, repr=False)
    _sse: bool = field(default=False, repr=False)
    _decoder: Any = field(default=None, repr=False)
    _finished: bool = field(default=False, repr=False)

    # -- the response head -----------------------------------------------------------------

    def begin(self, status: int, headers: list[tuple[str, str]]) -> None:
        """The upstream's status line and headers arrived."""
        self.status = status
        self.first_byte = round(time.time() - self.started, 6)
        self.headers = ratelimit_headers(headers)
        lowered = {name.lower(): value for name, value in headers}
        self._sse = "text/event-stream" in lowered.get("content-type", "")
        encoding = lowered.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            self.unparsed = True  # passed through unchanged; the meter cannot read it
        self.answered = 200 <= status < 300 and billed_path(self.path)

    # -- the body, chunk by chunk ----------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        """Read one chunk of the response body (the bytes the agent receives, unchanged)."""
        self.bytes_out += len(chunk)
        if self.unparsed and self._decoder is None and not self._sse:
            return
        if self._decoder is not None:
            try:
                chunk = self._decoder.decompress(chunk)
            except zlib.error:
                self._decoder, self.unparsed = None, True
                return
        if self._sse and self.status is not None and self.status < 300:
            self._feed_sse(chunk)
        elif len(self._body) < MAX_ERROR_BODY:
            self._body += chunk[: MAX_ERROR_BODY - len(self._body)]

    def _feed_sse(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:
                    self._buffer.clear()
                    self._data.clear()
                    self.unparsed = True
                return
            line = bytes(self._buffer[:end]).rstrip(b"\r")
            del self._buffer[: end + 1]
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
        elif line.startswith(b"event:"):
            self._event = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            if sum(len(d) for d in self._data) < MAX_EVENT_BYTES:
                self._data.append(line[5:].lstrip(b" "))
            else:
                self.unparsed = True

    def _dispatch(self) -> None:
        event, data = self._event, b"\n".join(self._data)
        self._event, self._data = "", []
        if not data:
            return
        interesting = event in _EVENTS or (not event and any(marker in data for marker in _MARKERS))
        if not interesting:
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self.unparsed = True
            return
        if isinstance(obj, dict):
            self._on_event(str(obj.get("type") or event), obj)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "message_start":
            message = _dict(obj, "message")
            if isinstance(message.get("model"), str):
                self.model = message["model"]
            self._anthropic_usage(message.get("usage"))
        elif kind == "message_delta":
            self._anthropic_usage(obj.get("usage"))
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error":
            error = _dict(obj, "error")
            self._error(str(error.get("type") or "error"), str(error.get("message") or ""), error.get("code"))
        elif kind in ("response.completed", "response.incomplete", "response.created", "response.failed"):
            response = _dict(obj, "response")
            if isinstance(response.get("model"), str):
                self.model = response["model"]
            self._openai_usage(response.get("usage"))
            if kind == "response.completed" or kind == "response.incomplete":
                self.complete = True
            elif kind == "response.failed":
                error = _dict(response, "error")
                self._error(str(error.get("code") or error.get("type") or "error"), str(error.get("message") or ""),
                            error.get("type"))
                self.answered = False

    def _anthropic_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for key, name in (("input_tokens", "input"), ("cache_read_input_tokens", "cache_read"),
                          ("cache_creation_input_tokens", "cache_write"), ("output_tokens", "output")):
            value = _count(usage.get(key))
            if value is not None:
                self.usage[name] = value  # message_delta's counts are cumulative: the latest wins
        creation = usage.get("cache_creation")
        if isinstance(creation, dict):
            value = _count(creation.get("ephemeral_1h_input_tokens"))
            if value is not None:
                self.usage["cache_write_1h"] = value

    def _openai_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        total_in = _count(usage.get("input_tokens", usage.get("prompt_tokens")))
        details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
        output = _count(usage.get("output_tokens", usage.get("completion_tokens")))
        if total_in is not None:
            self.usage["cache_read"] = min(cached or 0, total_in)
            self.usage["input"] = total_in - self.usage["cache_read"]
        if output is not None:
            self.usage["output"] = output

    # -- the end -------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """:meth:`finish` was called."""
        return self._finished

    def finish(self, error: str | None = None) -> None:
        """The response ended (or broke off with ``error``): read a kept body, classify a failure (once)."""
        if self._finished:
            return
        self._finished = True
        self.seconds = round(time.time() - self.started, 6)
        if self._sse and self._buffer:
            self._line(bytes(self._buffer).rstrip(b"\r"))
            self._buffer.clear()
        if self._sse and self._data:
            self._dispatch()
        if error is not None and self.error is None:
            self.error = error
        if self._body:
            self._read_body()
        if self.status is not None and self.status >= 400 and self.limit is None:
            self.limit = _classify(self.status, self.headers, (self.error_type, self.error_code), self.error or "")
        if self.status is not None and self.status < 300 and not self._sse and self._body and not self.unparsed:
            self.complete = True
        self._body = bytearray()

    def _read_body(self) -> None:
        try:
            obj = json.loads(bytes(self._body))
        except ValueError:
            if self.status is not None and self.status >= 400 and self.error is None:
                self.error = bytes(self._body[:2000]).decode("utf-8", "replace").strip()
            return
        if not isinstance(obj, dict):
            return
        error = obj.get("error")
        if isinstance(error, dict):
            self._error(str(error.get("type") or error.get("code") or "error"), str(error.get("message") or ""),
                        error.get("code"))
            if self.status == 429:  # a limit's reset as a number field of the API's 429 (Codex), never from a text
                if isinstance(error.get("resets_in_seconds"), (int, float)):
                    self.headers.setdefault("x-ralph-resets-in", str(error["resets_in_seconds"]))
                if isinstance(error.get("resets_at"), (int, float)):
                    self.headers.setdefault("x-ralph-resets-at", str(error["resets_at"]))
        elif isinstance(error, str) and self.status is not None and self.status >= 400:
            self._error("error", error)
        if self.status is not None and self.status < 300:
            if isinstance(obj.get("model"), str):
                self.model = obj["model"]
            if obj.get("type") == "message":
                self._anthropic_usage(obj.get("usage"))
            else:
                self._openai_usage(obj.get("usage"))

    def _error(self, kind: str, message: str, other: Any = None) -> None:
        """An error the API sent: its type (or code), message and the other of type and code, when it had both."""
        self.error_type, self.error = kind, message[:2000]
        self.error_code = other if isinstance(other, str) and other else None
        if self.status is not None and self.status < 300:  # an error event inside a 2xx stream: no usable answer
            self.limit = self.limit or _classify(None, self.headers, (kind, self.error_code), message)
            self.answered = False

    # -- what the loop reads ------------------------------------------------------------------

    def resets_at(self) -> float | None:
        """Epoch seconds when the limit this response reports resets, when it says."""
        for name in (f"{_UNIFIED}reset", "x-ralph-resets-at"):
            value = _number(self.headers.get(name, ""))
            if isinstance(value, (int, float)) and value > 0:
                return float(value)
        claim = self.headers.get(f"{_UNIFIED}representative-claim", "")
        window = {"five_hour": "5h", "seven_day": "7d"}.get(claim, claim)
        value = _number(self.headers.get(f"{_UNIFIED}{window}-reset", "")) if window else None
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
        value = _number(self.headers.get("x-ralph-resets-in", ""))
        if isinstance(value, (int, float)) and value >= 0:
            return self.started + float(value)
        return None

    def retry_after(self) -> float | None:
        """Seconds the API asked to wait (``retry-after-ms`` or ``retry-after``, seconds or an HTTP date)."""
        millis = _number(self.headers.get("retry-after-ms", ""))
        if isinstance(millis, (int, float)) and millis >= 0:
            return float(millis) / 1000
        value = self.headers.get("retry-after", "").strip()
        if not value:
            return None
        seconds = _number(value)
        if isinstance(seconds, (int, float)):
            return float(seconds) if seconds >= 0 else None
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None

    def quota(self) -> dict[str, Any]:
        """The subscription windows this response reported (see :func:`quota_of`)."""
        return quota_of(self.headers)

    def summary(self) -> dict[str, Any]:
        """A JSON-able line for the event log (no headers with credentials: none are kept)."""
        data: dict[str, Any] = {
            "session": self.session, "path": self.path.split("?", 1)[0], "model": self.model, "status": self.status,
            "usage": dict(self.usage), "cost": None if self.cost is None else round(self.cost, 8),
            "answered": self.answered, "complete": self.complete, "seconds": self.seconds,
            "first_byte": self.first_byte, "bytes": self.bytes_out,
        }
        if self.limit:
            data["limit"] = self.limit
            data["retry_after"] = self.retry_after()
            data["resets_at"] = self.resets_at()
        if self.error:
            data["error"] = self.error[:500]
            data["error_type"] = self.error_type
        quota = self.quota()
        if quota:
            data["quota"] = quota
        if self.unparsed:
            data["unparsed"] = True
        return data


_EVENTS = {
    "message_start", "message_delta", "message_stop", "error",
    "response.completed", "response.incomplete", "response.created", "response.failed",
}
_MARKERS = (b'"message_start"', b'"message_delta"', b'"message_stop"', b'"error"', b'"response.')


def _classify(
    status: int | None, headers: dict[str, str], kinds: tuple[str | None, ...], message: str
) -> LimitKind | None:
    """What a failed exchange means for the loop: a usage limit, a rate limit, a context overflow, or None.

    Only what the API itself decides counts: the status, the headers, the error's type or code.  The
    message is read for one thing, a context overflow, and only at its start (:data:`_CONTEXT_MESSAGE`):
    a 400 quotes what the request said, and the request may be the agent's own.  A usage limit is never
    read from wording ("usage limit reached" in a 400 is the agent's text the API quoted).
    ``status`` None: an error event inside a 2xx stream.
    """
    types = {kind.lower() for kind in kinds if kind}
    if headers.get(f"{_UNIFIED}status", "").lower() == "rejected" and status in (429, None):
        return "usage_limit"
    if types & _USAGE_LIMIT_TYPES:
        return "usage_limit"
    if types & _CONTEXT_TYPES or (status in (400, 413, None) and _CONTEXT_MESSAGE.match(message.strip())):
        return "context_overflow"
    if status in (429, 529) or types & _RATE_LIMIT_TYPES:
        return "rate_limit"
    return None
