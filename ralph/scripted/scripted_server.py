"""What the scripted model servers share: the HTTP plumbing, the request record, the bookkeeping.

:class:`ScriptedServer` serves on an ephemeral port in a daemon thread, hands each
request to a *responder* and records requests, responder exceptions and unscripted
replies; :class:`ScriptHandler` reads a JSON body and writes a reply.  The wire
formats live in the servers built on them: :mod:`ralph.scripted.model_server`
(Anthropic Messages, for Claude Code) and :mod:`ralph.scripted.responses_server`
(OpenAI Responses, for Codex).

Stdlib only.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, ClassVar, Generic, TypeVar

__all__ = ["ScriptHandler", "ScriptedRequest", "ScriptedServer", "estimate_tokens", "sse"]


def estimate_tokens(s: str) -> int:
    """A token count for ``s``: ~4 characters per token, at least 1."""
    return max(1, len(s) // 4)


def sse(data: dict[str, Any]) -> bytes:
    """One server-sent event named after ``data["type"]``, as both APIs frame them."""
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


@dataclass
class ScriptedRequest:
    """One request a scripted server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    text: str
    """The whole request body as received: search it for markers."""

    @property
    def model(self) -> str:
        """The model name the client asked for."""
        value = self.body.get("model") if isinstance(self.body, dict) else None
        return value if isinstance(value, str) else "scripted-model"


R = TypeVar("R", bound=ScriptedRequest)
S = TypeVar("S", bound="ScriptedServer[Any]")


class ScriptHandler(BaseHTTPRequestHandler):
    """The request handler base: quiet, HTTP/1.1, with helpers to read a JSON body and reply."""

    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """Headers and body go out as separate writes: without TCP_NODELAY the body would wait for the
    client's delayed ACK (~40 ms per reply on Linux)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Log nothing: ``BaseHTTPRequestHandler`` would write a line per request to stderr."""

    def send_body(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` and any extra ``headers``."""
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``data`` as JSON."""
        self.send_body(status, json.dumps(data).encode(), "application/json", headers)

    def read_json(self) -> tuple[str, dict[str, Any]]:
        """The request body as text and as JSON (``{}`` when empty or not JSON)."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length).decode("utf-8", errors="replace") if length else ""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {}
        return raw, body

    def ask(self, request: ScriptedRequest, on_error: Callable[[Exception], Any]) -> Any:
        """Record ``request`` and return the responder's reply, or ``on_error(exc)`` when it raised."""
        owner = self.server.owner
        owner._record(request)
        try:
            return owner.responder(request)
        except Exception as exc:  # a broken script must surface, not hang the CLI
            owner._record_error(exc)
            return on_error(exc)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer[Any]


class ScriptedServer(Generic[R]):
    """A local scripted API server on ``host`` (127.0.0.1 by default, an ephemeral port) in a thread.

    A subclass names its :attr:`handler` and, optionally, :attr:`url_path`.  Use as a context
    manager, or call :meth:`start` and :meth:`stop`.
    """

    handler: ClassVar[type[ScriptHandler]]
    """The request handler class serving the API."""
    url_path: ClassVar[str] = ""
    """What :attr:`url` adds after ``http://host:port`` (the base URL a client is given)."""
    thread_name: ClassVar[str] = "scripted-server"
    """The name of the serving thread."""

    def __init__(self, responder: Callable[[Any], Any], host: str = "127.0.0.1") -> None:
        self.responder = responder
        self.host = host
        """The address to bind: e.g. the docker bridge gateway, so a sandboxed agent reaches it."""
        self._requests: list[R] = []
        self._errors: list[BaseException] = []
        self._unscripted = 0
        self._lock = threading.Lock()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # bookkeeping, called from handler threads
    def _record(self, request: R) -> None:
        with self._lock:
            self._requests.append(request)

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self._errors.append(exc)

    def count_unscripted(self) -> None:
        """Count one reply of "(script exhausted)" (the handler calls it)."""
        with self._lock:
            self._unscripted += 1

    @property
    def requests(self) -> list[R]:
        """A snapshot of the API requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def unscripted(self) -> int:
        """How many requests got "(script exhausted)" because the script had no answer."""
        with self._lock:
            return self._unscripted

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the responder raised (each was answered with an HTTP error)."""
        with self._lock:
            return list(self._errors)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` and :attr:`url_path`; only valid once started."""
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.url_path}"

    def start(self: S) -> S:
        """Bind an ephemeral port and serve in a daemon thread."""
        if self._server is not None:
            return self
        server = _HTTPServer((self.host, 0), self.handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
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

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
