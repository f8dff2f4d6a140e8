"""The loop-owned model endpoint: the agent's CLI talks to the model API through it.

:class:`ModelMeter` is an HTTP server on a loopback address (or an address a sandbox can
reach) that forwards the requests of an open :class:`~ralph.metering.ledger.MeterSession` it
can book (:mod:`ralph.metering.routes`: model calls, counting tokens, the models list; anything
else is refused with a 403) to that session's upstream (the real API over TLS, the person's own
``ANTHROPIC_BASE_URL``, or a scripted model server in tests) and streams the response back
unchanged, chunk by chunk, while :class:`~ralph.metering.traffic.Exchange` reads tokens, limits and errors from
the same bytes.  Credentials (``x-api-key``, ``authorization``) pass through and are never
recorded; only rate-limit and request-id headers are kept.

Why this stack: uvicorn (h11) serves, Starlette streams (it cancels the relay when the CLI
disconnects), httpx is the upstream client (HTTP/1.1 keep-alive pool, TLS with the system's
or ``SSL_CERT_FILE``'s CAs, ``HTTPS_PROXY`` honoured as the CLI would).  All three are imported
only when a run starts the meter (~0.1 s in the loop's process, once per run; the figures are
in benchmarks/README.md); one asyncio thread carries every concurrent stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ralph.metering.ledger import MeterSession, SessionUsage
from ralph.metering.prices import PriceTable
from ralph.metering.routes import billed_path, refusal
from ralph.metering.traffic import Exchange

if TYPE_CHECKING:
    import httpx
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["MAX_REQUEST_BYTES", "MeterError", "ModelMeter"]

MAX_REQUEST_BYTES = 64 * 1024 * 1024
"""A request body larger than this is refused (the Messages API's own limit is 32 MB)."""
_HOP_BY_HOP = {
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer", b"trailers",
    b"transfer-encoding", b"upgrade", b"host", b"content-length", b"accept-encoding",
}
_RESPONSE_DROPPED = {b"connection", b"keep-alive", b"transfer-encoding", b"trailer", b"upgrade", b"proxy-authenticate"}
_SAFE_PATH = re.compile(r"^[A-Za-z0-9._~\-/:@!$&'()*+,;=%]*$")


class MeterError(RuntimeError):
    """The meter could not start (no address to bind, the server thread failed)."""


class ModelMeter:
    """One run's metering endpoint: sessions, forwarding, books.

    ``on_exchange`` is called (from the meter's thread) with every finished exchange, for the
    event log.  Use :meth:`start` / :meth:`stop` or a ``with`` block.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        prices: PriceTable | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        read_timeout: float = 900.0,
    ) -> None:
        self.host = host
        self.prices = prices or PriceTable()
        self.on_exchange = on_exchange
        self.read_timeout = read_timeout
        self._refused_unknown = 0
        self.errors: list[str] = []
        """Failures inside the meter itself (a callback that raised ...), for the event log."""
        self._sessions: dict[str, MeterSession] = {}
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None
        self._url: str | None = None

    @property
    def refused(self) -> int:
        """Requests refused: for an unknown session, or for one already closed."""
        with self._lock:
            return self._refused_unknown + sum(session.refused for session in self._sessions.values())

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running meter."""
        if self._url is None:
            raise MeterError("the model meter is not running")
        return self._url

    def start(self, timeout: float = 15.0) -> ModelMeter:
        """Bind an ephemeral port on :attr:`host` and serve in a daemon thread."""
        if self._server is not None:
            return self
        import uvicorn

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
        # without it every streamed chunk after the headers waits for the CLI's delayed ACK (~40 ms)
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, 0))
        except OSError as exc:
            sock.close()
            raise MeterError(f"the model meter cannot listen on {self.host}: {exc.strerror or exc}") from None
        sock.listen(128)
        config = uvicorn.Config(
            self._app(), lifespan="off", log_config=None, access_log=False, ws="none", loop="asyncio",
            timeout_keep_alive=75, timeout_graceful_shutdown=2, server_header=False, date_header=False,
        )
        server = uvicorn.Server(config)
        failure: list[BaseException] = []

        def serve() -> None:
            try:
                asyncio.run(self._serve(server, sock))
            except BaseException as exc:  # noqa: BLE001 - reported to start() or the event log
                failure.append(exc)
                self.errors.append(f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=serve, name="ralph-model-meter", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if failure or not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                sock.close()
                reason = f"{type(failure[0]).__name__}: {failure[0]}" if failure else "it did not start in time"
                raise MeterError(f"the model meter could not start: {reason}")
            time.sleep(0.002)
        host, port = sock.getsockname()[:2]
        self._server, self._thread = server, thread
        self._url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        return self

    async def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        import httpx

        timeout = httpx.Timeout(connect=30.0, read=self.read_timeout, write=120.0, pool=60.0)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=60.0)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False) as client:
            self._client = client
            await server.serve(sockets=[sock])

    def stop(self) -> None:
        """Stop serving: open sessions are closed, streams in flight are cut after a short grace."""
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()
        if self._server is None:
            return
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None
        self._url = None

    def __enter__(self) -> ModelMeter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sessions --------------------------------------------------------------------------------

    def open_session(self, label: str, upstream: str) -> MeterSession:
        """A new account for one agent process forwarding to ``upstream``; give the CLI ``session.url``."""
        session = MeterSession(label, upstream, self.url, self.prices)
        with self._lock:
            self._sessions[session.key] = session
        return session

    def close_session(self, session: MeterSession) -> SessionUsage:
        """Close ``session`` (its later requests are refused) and return its totals."""
        return session.close()

    # -- the ASGI app --------------------------------------------------------------------------

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        return Starlette(routes=[
            Route("/s/{key}/{rest:path}", self._forward, methods=methods),
            Route("/{rest:path}", self._unknown, methods=methods),
        ])

    async def _unknown(self, request: Request) -> Response:
        with self._lock:
            self._refused_unknown += 1
        return _error(403, "permission_error", "ralph's model meter: no open session at this address")

    async def _forward(self, request: Request) -> Response:
        key, rest = request.path_params["key"], request.path_params["rest"]
        with self._lock:
            session = self._sessions.get(key)
        if session is None:
            return await self._unknown(request)
        if not _SAFE_PATH.match(rest) or any(part in ("..", ".") for part in rest.split("/")):
            return _error(400, "invalid_request_error", "ralph's model meter: unusable path")
        refused = refusal(request.method, rest)
        if refused is not None:
            return self._blocked(session, request.method, rest, refused)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
            return _error(413, "request_too_large", "ralph's model meter: request body too large")
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > MAX_REQUEST_BYTES:
                return _error(413, "request_too_large", "ralph's model meter: request body too large")
        refused = refusal(request.method, rest, bytes(body))
        if refused is not None:
            return self._blocked(session, request.method, rest, refused)
        exchange = Exchange(session=session.label, path="/" + rest)
        if not session.add(exchange):
            return _error(403, "permission_error", "ralph's model meter: this agent session is over")
        url = f"{session.upstream}/{rest}"
        if request.url.query:
            url += "?" + request.url.query
        headers = [(k, v) for k, v in request.headers.raw if k.lower() not in _HOP_BY_HOP]
        headers.append((b"accept-encoding", b"identity"))  # the meter reads the bytes it passes on
        client = self._client
        assert client is not None
        import httpx

        try:
            upstream = await client.send(
                client.build_request(request.method, url, headers=headers, content=bytes(body)), stream=True
            )
        except httpx.HTTPError as exc:
            exchange.finish(error=f"the model API could not be reached: {type(exc).__name__}: {exc}")
            self._done(exchange, bytes(body))
            return _error(502, "api_error", f"ralph's model meter: the model API could not be reached ({type(exc).__name__})")
        raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.headers.raw]
        exchange.begin(upstream.status_code, raw)
        from starlette.background import BackgroundTask

        cleanup = BackgroundTask(self._cleanup, upstream, exchange, bytes(body))
        return _Relay(self._relay(upstream, exchange, bytes(body)), upstream, cleanup)

    def _blocked(self, session: MeterSession, method: str, rest: str, reason: str) -> Response:
        """Refuse a request the meter cannot book (a path or method it does not forward): 403, never sent on."""
        session.block(f"{method.upper()} /{rest}"[:200])
        return _error(403, "permission_error", reason)

    async def _relay(self, upstream: httpx.Response, exchange: Exchange, body: bytes) -> AsyncIterator[bytes]:
        import httpx

        error = None
        try:
            async for chunk in upstream.aiter_raw():
                exchange.feed(chunk)
                yield chunk
        except httpx.HTTPError as exc:
            error = f"the model API broke off: {type(exc).__name__}: {exc}"
            raise
        except BaseException:
            error = "the agent's CLI went away mid-response"
            raise
        finally:
            await self._cleanup(upstream, exchange, body, error)

    async def _cleanup(self, upstream: httpx.Response, exchange: Exchange, body: bytes, error: str | None = None) -> None:
        """Close the upstream response and book the exchange (once, however the relay ended)."""
        await upstream.aclose()
        if not exchange.finished:
            exchange.finish(error=error)
            self._done(exchange, body)

    def _done(self, exchange: Exchange, body: bytes) -> None:
        """Price a finished exchange and hand it to ``on_exchange``."""
        if exchange.model is None and billed_path(exchange.path):
            exchange.model = _request_model(body)
        if billed_path(exchange.path) and exchange.usage:
            price = self.prices.price_for(exchange.model)
            exchange.cost = price.of(exchange.usage) if price is not None else None
        if self.on_exchange is not None:
            try:
                self.on_exchange(exchange)
            except Exception as exc:  # noqa: BLE001 - a listener never breaks the agent's traffic
                self.errors.append(f"on_exchange raised {type(exc).__name__}: {exc}")


def _request_model(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


def _error(status: int, kind: str, message: str) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


def _relay_class() -> type:
    from starlette.responses import StreamingResponse

    class Relay(StreamingResponse):
        """The upstream's status and headers, and its body as it arrives."""

        def __init__(self, content: AsyncIterator[bytes], upstream: httpx.Response, background: Any) -> None:
            super().__init__(content, status_code=upstream.status_code, background=background)
            self.raw_headers = [(k, v) for k, v in upstream.headers.raw if k.lower() not in _RESPONSE_DROPPED]

    return Relay


def _Relay(content: AsyncIterator[bytes], upstream: httpx.Response, background: Any) -> Response:  # noqa: N802
    global _RELAY
    if _RELAY is None:
        _RELAY = _relay_class()
    response: Response = _RELAY(content, upstream, background)
    return response


_RELAY: type | None = None
