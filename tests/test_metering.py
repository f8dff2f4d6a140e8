"""The loop-owned model endpoint (ralph/metering): it forwards unchanged, and books what the API said.

These talk HTTP to a real meter and a real upstream on 127.0.0.1; the tests through the real CLI
are in tests/test_trust_metering.py.
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import httpx
import pytest

from ralph.loop.records import IterationRecord, add_usage, reported_cost
from ralph.metering import ModelMeter, Price, PriceTable
from ralph.metering.traffic import Exchange, quota_of
from ralph.testing.model_server import (
    ErrorReply, RejectFirst, ScriptedModelServer, SequenceScript, StreamError, Turn, text, tool, unified_headers,
    usage_limit_reply,
)

REQUEST = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 100, "stream": True,
           "messages": [{"role": "user", "content": "hello " * 200}]}
KEY = "sk-ant-api03-secret-never-logged"


@pytest.fixture
def meter() -> Iterator[ModelMeter]:
    exchanges: list[Exchange] = []
    with ModelMeter(on_exchange=exchanges.append) as running:
        running.seen = exchanges  # type: ignore[attr-defined]
        yield running


def post(url: str, body: dict[str, Any] | None = None, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/messages?beta=true", json=body or REQUEST, timeout=30,
                      headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", **headers})


def api_usage(sent: dict[str, int]) -> dict[str, int]:
    """What the scripted server reported, in ralph's token names."""
    return {"input": sent.get("input_tokens", 0), "cache_read": sent.get("cache_read_input_tokens", 0),
            "cache_write": sent.get("cache_creation_input_tokens", 0), "output": sent.get("output_tokens", 0)}


# -- forwarding ---------------------------------------------------------------------------------


class _SlowStream(BaseHTTPRequestHandler):
    """Sends an SSE reply in two pieces and waits between them until the test says it read the first."""

    protocol_version = "HTTP/1.1"
    first = b'event: message_start\ndata: {"type": "message_start", "message": {"model": "claude-haiku-4-5", "usage": {"input_tokens": 1000, "output_tokens": 1}}}\n\n'
    rest = (b'event: message_delta\ndata: {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 500}}\n\n'
            b'event: message_stop\ndata: {"type": "message_stop"}\n\n')
    release = threading.Event()
    seen_headers: dict[str, str] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        type(self).seen_headers = dict(self.headers.items())
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for piece in (self.first, None, self.rest):
            if piece is None:
                self.release.wait(20)  # the client must have had the first piece before the rest exists
                continue
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def test_a_stream_passes_through_unchanged_and_chunk_by_chunk(meter: ModelMeter) -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _SlowStream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    _SlowStream.release.clear()
    try:
        session = meter.open_session("iteration 1", f"http://127.0.0.1:{upstream.server_address[1]}")
        received = b""
        with httpx.stream("POST", f"{session.url}/v1/messages", json=REQUEST, headers={"x-api-key": KEY},
                          timeout=30) as response:
            assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
            for chunk in response.iter_raw():
                received += chunk
                if received == _SlowStream.first:
                    _SlowStream.release.set()  # only now does the upstream send the rest
        assert received == _SlowStream.first + _SlowStream.rest  # byte for byte
        assert _SlowStream.seen_headers["x-api-key"] == KEY  # credentials pass through
        usage = meter.close_session(session)
    finally:
        _SlowStream.release.set()
        upstream.shutdown()
    assert usage.usage == {"input": 1000, "cache_read": 0, "cache_write": 0, "output": 500}  # delta counts are cumulative
    assert usage.cost == pytest.approx((1000 * 1 + 500 * 5) / 1e6)  # Haiku 4.5: $1 in, $5 out
    assert usage.answered == usage.requests == 1 and usage.limit is None


def test_tokens_cost_and_quota_are_what_the_api_sent(meter: ModelMeter) -> None:
    script = SequenceScript([Turn([tool("Bash", {"command": "ls " * 50})]), Turn([text("done " * 40)])])
    with ScriptedModelServer(script, cache=True, headers=unified_headers(0.42, 0.13)) as server:
        session = meter.open_session("iteration 1", server.url)
        first = post(session.url)
        second = post(session.url, {**REQUEST, "messages": REQUEST["messages"] + [
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "go on"}]})
        assert first.status_code == second.status_code == 200
        assert b"message_stop" in first.content and b"done done" in second.content
        usage = meter.close_session(session)
        sent = [api_usage(u) for _, u in server.sent]
    assert len(sent) == 2 and usage.requests == usage.answered == 2
    assert usage.usage == {k: sent[0][k] + sent[1][k] for k in sent[0]}
    assert min(usage.usage.values()) >= 0 and usage.usage["cache_write"] > 0 and usage.usage["cache_read"] > 0
    sonnet = PriceTable().price_for("claude-sonnet-4-5-20250929")
    assert sonnet is not None and usage.cost == pytest.approx(sonnet.of(sent[0]) + sonnet.of(sent[1]))
    assert usage.quota["windows"]["5h"]["utilization"] == 0.42 and usage.quota["windows"]["7d"]["utilization"] == 0.13
    assert usage.quota["status"] == "allowed" and usage.quota["representative_claim"] == "five_hour"
    events = [e.summary() for e in meter.seen]  # type: ignore[attr-defined]
    assert [e["status"] for e in events] == [200, 200] and all(e["quota"] for e in events)
    assert KEY not in json.dumps(events)  # credentials are never recorded


def test_limits_come_from_status_headers_and_body(meter: ModelMeter) -> None:
    resets = int(time.time()) + 7200
    overflow = ErrorReply(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                          "message": "prompt is too long: 250000 tokens > 200000 maximum"}})
    cases: list[tuple[Any, str | None, dict[str, Any]]] = [
        (usage_limit_reply(resets), "usage_limit", {"resets_at": float(resets)}),
        (RejectFirst(9, None, headers={"retry-after": "7"}), "rate_limit", {"retry_after": 7.0}),
        (RejectFirst(9, None, status=529), "rate_limit", {}),
        (overflow, "context_overflow", {}),
        (StreamError(), "rate_limit", {}),  # an overload inside a 200 stream
        (RejectFirst(1, SequenceScript([Turn([text("ok")])])), None, {}),  # a retry that succeeded
    ]
    for reply, kind, details in cases:
        responder = reply if callable(reply) else (lambda request, reply=reply: reply)
        with ScriptedModelServer(responder) as server:
            session = meter.open_session("s", server.url)
            post(session.url)
            if kind is None:
                post(session.url)  # the CLI's retry
            usage = meter.close_session(session)
        assert usage.limit == kind, (reply, usage)
        for key, value in details.items():
            assert getattr(usage, key) == value, (reply, usage)
    from ralph.testing.responses_server import ScriptedResponsesServer
    from ralph.testing.responses_server import usage_limit_reply as codex_usage_limit

    with ScriptedResponsesServer(lambda request: codex_usage_limit(600)) as server:
        session = meter.open_session("codex", server.url)
        before = time.time()
        assert httpx.post(f"{session.url}/responses", json={"model": "gpt-5", "stream": True}).status_code == 429
        codex = meter.close_session(session)
    assert codex.limit == "usage_limit" and codex.resets_at is not None and before + 590 < codex.resets_at < time.time() + 610
    # a usage limit needs no wording in the body: the unified status says it
    assert "usage limit" not in json.dumps(usage_limit_reply(resets).body_json).lower()
    assert usage.seen_limit == "rate_limit" and usage.rejected == 1 and usage.answered == 1


def test_a_closed_or_unknown_session_is_refused_and_not_forwarded(meter: ModelMeter) -> None:
    with ScriptedModelServer(SequenceScript([Turn([text("ok")])])) as server:
        session = meter.open_session("iteration 1", server.url)
        assert post(session.url).status_code == 200
        meter.close_session(session)
        late = post(session.url)  # a process that outlived its iteration
        guessed = post(session.url.rsplit("/", 1)[0] + "/not-a-session")
        bare = post(meter.url)
        assert late.status_code == guessed.status_code == bare.status_code == 403
        assert len(server.requests) == 1  # nothing after the close reached the model API
        assert session.refused == 1 and meter.refused == 3


def test_paths_that_leave_the_upstream_are_refused(meter: ModelMeter) -> None:
    with ScriptedModelServer(SequenceScript([Turn([text("ok")])])) as server:
        session = meter.open_session("s", server.url)
        for path in ("/v1/%2e%2e/x", "/v1/%2E/messages", "/%2e%2e/%2e%2e/etc"):
            response = httpx.post(session.url + path, json=REQUEST, timeout=10)
            assert response.status_code in (400, 404), path
        assert server.requests == []


class _Anything(BaseHTTPRequestHandler):
    """An upstream that answers every request 200 and notes what reached it."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).seen.append(f"{self.command} {self.path}")
        body = b'{"data": [], "input_tokens": 3}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer


@pytest.fixture
def anything() -> Iterator[str]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Anything)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    _Anything.seen = []
    try:
        yield f"http://127.0.0.1:{upstream.server_address[1]}"
    finally:
        upstream.shutdown()


def test_the_meter_forwards_only_what_it_can_book(meter: ModelMeter, anything: str) -> None:
    """Message Batches, Files, a batch's results, other methods: refused with a 403 that names the meter, and
    never sent on; the model calls, counting tokens and the models list go through."""
    session = meter.open_session("s", anything)
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    refused = [
        ("POST", "/v1/messages/batches"), ("GET", "/v1/messages/batches/msgbatch_01/results"),
        ("POST", "/v1/files"), ("GET", "/v1/files/file_01/content"), ("DELETE", "/v1/messages"),
        ("GET", "/v1/messages"), ("POST", "/v1/complete"), ("POST", "/v1/messages/"), ("GET", "/responses/resp_01"),
        ("POST", "/v1/models"), ("POST", "/v1/skills"), ("PUT", "/v1/messages"), ("POST", ""),
    ]
    for method, path in refused:
        response = httpx.request(method, session.url + path, json=REQUEST, headers=headers, timeout=10)
        assert response.status_code == 403, (method, path, response.text)
        error = response.json()["error"]
        assert error["type"] == "permission_error" and "ralph's model meter" in error["message"], (method, path)
    background = httpx.post(session.url + "/responses", json={"model": "gpt-5", "background": True}, timeout=10)
    assert background.status_code == 403 and "background" in background.json()["error"]["message"]
    assert _Anything.seen == []  # nothing of it reached the API
    forwarded = [("POST", "/v1/messages/count_tokens?beta=true"), ("GET", "/v1/models"),
                 ("GET", "/v1/models/claude-sonnet-4-5"), ("POST", "/responses"), ("GET", "/models"),
                 ("POST", "/v1/chat/completions"), ("POST", "/v1/messages?beta=true")]
    for method, path in forwarded:
        response = httpx.request(method, session.url + path, json=REQUEST, headers=headers, timeout=10)
        assert response.status_code == 200, (method, path, response.text)
    usage = meter.close_session(session)
    assert _Anything.seen == [f"{method} {path}" for method, path in forwarded]
    assert usage.requests == 3  # the billed ones: responses, chat completions, messages
    # the bare session URL is no session path at all (refused as unknown); the others, and the background call, blocked
    assert "POST /v1/messages/batches" in usage.blocked and len(usage.blocked) == len(refused) - 1 + 1


def test_routes_are_judged_by_path_and_method() -> None:
    from ralph.metering.routes import billed_path, refusal, route_for

    assert route_for("/v1/messages") is not None and billed_path("/v1/messages?beta=true")
    assert not billed_path("/v1/messages/count_tokens") and not billed_path("/v1/models")
    assert billed_path("/responses") and billed_path("/v1/responses") and billed_path("/chat/completions")
    for path in ("/v1/messages/batches", "/v1/messages/batches/x/results", "/v1/files", "/v1/messages/x",
                 "/v2/messages", "/anthropic/v1/messages", "/responses/resp_1/input_items", "/v1/models/a/b"):
        assert route_for(path) is None and not billed_path(path), path
        assert "ralph's model meter" in (refusal("POST", path) or ""), path
    assert refusal("GET", "/v1/messages") and refusal("POST", "/v1/models") is not None
    assert refusal("POST", "/v1/messages") is None and refusal("GET", "/v1/models") is None
    assert refusal("POST", "/responses", b'{"background": true}') and refusal("POST", "/responses", b"{}") is None


def _classified(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Exchange:
    exchange = Exchange(session="s", path="/v1/messages")
    exchange.begin(status, [("content-type", "application/json"), *(headers or {}).items()])
    exchange.feed(json.dumps(body).encode())
    exchange.finish()
    return exchange


def test_a_usage_limit_comes_from_the_apis_status_headers_and_type_never_its_wording() -> None:
    """A 400 quotes what the request said (an unknown tag), so its text is the agent's: "usage limit reached|<a
    year on>" there is no usage limit and no reset.  A usage limit is the 429 with the unified headers' status
    ``rejected`` (the reset from those headers), or an error type that says it."""
    year = int(time.time()) + 365 * 86400
    quoted = {"type": "error", "error": {"type": "invalid_request_error", "message":
              f"thinking: Input tag 'Claude AI usage limit reached|{year}' found using 'type' does not match any of "
              "the expected tags: 'adaptive', 'disabled', 'enabled'"}}
    assert _classified(400, quoted).limit is None and _classified(400, quoted).resets_at() is None
    worded = {"type": "error", "error": {"type": "invalid_request_error",
                                         "message": "prompt is too long: 5 tokens > 1 maximum? usage limit reached"}}
    assert _classified(403, {"error": {"type": "permission_error", "message": "usage limit reached"}}).limit is None
    wording_429 = {"type": "error", "error": {"type": "rate_limit_error", "message": f"usage limit reached|{year}"}}
    limited = _classified(429, wording_429)
    assert limited.limit == "rate_limit" and limited.resets_at() is None  # the status says a limit; the text no reset
    reply = usage_limit_reply(year)
    usage = _classified(429, reply.body_json, reply.headers)
    assert usage.limit == "usage_limit" and usage.resets_at() == float(year)  # headers: believed here, bounded by the loop
    typed = _classified(429, {"error": {"type": "usage_limit_reached", "message": "x", "resets_in_seconds": 60}})
    assert typed.limit == "usage_limit" and typed.resets_at() is not None
    body_reset = _classified(400, {"error": {"type": "invalid_request_error", "message": "x", "resets_at": year}})
    assert body_reset.limit is None and body_reset.resets_at() is None  # a reset field only counts in a 429
    assert _classified(400, worded).limit == "context_overflow"  # the API's own start of a message


def test_a_context_overflow_is_read_from_the_start_of_the_apis_message() -> None:
    def overflow(message: str, status: int = 400, **extra: Any) -> str | None:
        return _classified(status, {"type": "error", "error": {"type": "invalid_request_error", "message": message,
                                                               **extra}}).limit

    assert overflow("prompt is too long: 250000 tokens > 200000 maximum") == "context_overflow"
    assert overflow("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input "
                    "length or `max_tokens` and try again") == "context_overflow"
    assert overflow("This model's maximum context length is 128000 tokens. However, you requested 130000") == (
        "context_overflow")
    assert overflow("x", code="context_length_exceeded") == "context_overflow"  # OpenAI's code beside its type
    assert overflow("thinking: Input tag 'prompt is too long: 9 tokens > 1 maximum' found using 'type'") is None
    assert overflow("messages.0.content: the maximum context length is exceeded by this prompt") is None


def test_an_unreachable_upstream_is_an_error_the_cli_can_retry(meter: ModelMeter) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    session = meter.open_session("s", f"http://127.0.0.1:{port}")
    response = post(session.url)
    usage = meter.close_session(session)
    assert response.status_code == 502 and response.json()["error"]["type"] == "api_error"
    assert usage.answered == 0 and usage.error and "could not be reached" in usage.error


# -- prices and the agent's own reports -----------------------------------------------------------


def test_price_table_matches_names_and_overrides_come_first() -> None:
    table = PriceTable()
    assert table.price_for("claude-opus-4-20250514").input == 15  # type: ignore[union-attr]
    assert table.price_for("claude-opus-4-5-20251101").input == 5  # type: ignore[union-attr]
    assert table.price_for("us.anthropic.claude-sonnet-4-5-20250929-v1:0").output == 15  # type: ignore[union-attr]
    assert table.price_for("claude-haiku-4-5@20251001").input == 1  # type: ignore[union-attr]
    assert table.price_for("claude-opus-99") is not None  # an unknown version of a family is not free
    assert table.price_for("scripted-model") is None and table.price_for(None) is None
    custom = PriceTable({"scripted-*": Price(1, 2, 0.1, 1.25)})
    assert custom.price_for("scripted-model").of({"input": 1_000_000, "output": 500_000}) == pytest.approx(2.0)  # type: ignore[union-attr]
    hour = Price(3, 15, 0.3, 3.75, 6).of({"cache_write": 1_000_000, "cache_write_1h": 400_000})
    assert hour == pytest.approx(0.6 * 3.75 + 0.4 * 6)


def test_configured_prices_are_validated_and_used(tmp_path) -> None:
    from ralph.config import load_config
    from ralph.errors import ConfigError
    from ralph.loop.metering import price_table

    (tmp_path / "ralph.toml").write_text('[prices."my-model*"]\ninput = 2\noutput = 8\n')
    config, _, _ = load_config(tmp_path, environ={})
    assert price_table(config).price_for("my-model-1").of({"input": 1_000_000, "cache_read": 1_000_000}) == pytest.approx(2.2)
    (tmp_path / "ralph.toml").write_text('[prices."my-model*"]\ninput = 2\noutput = 8\nouput = 1\n')
    with pytest.raises(ConfigError, match="prices.my-model\\*.ouput"):
        load_config(tmp_path, environ={})


@pytest.mark.parametrize("value", [-5, -0.01, math.nan, math.inf, -math.inf, "12", True, None])
def test_a_reported_cost_never_lowers_the_total(value: Any) -> None:
    assert reported_cost(value) == 0.0
    assert reported_cost(1e308) == 1e9 and reported_cost(0.25) == 0.25


def test_reported_tokens_never_lower_the_totals() -> None:
    record = IterationRecord(1, "implement", "US-001")
    add_usage(record.usage, {"input_tokens": 100, "output_tokens": 10})
    add_usage(record.usage, {"input_tokens": -1_000_000, "output_tokens": math.nan, "cache_read_input_tokens": math.inf})
    assert record.usage == {"input": 100, "output": 10}


def test_quota_headers_are_read_per_window() -> None:
    quota = quota_of({"anthropic-ratelimit-unified-status": "allowed_warning",
                      "anthropic-ratelimit-unified-5h-utilization": "0.91",
                      "anthropic-ratelimit-unified-5h-reset": "1750000000",
                      "anthropic-ratelimit-unified-7d_opus-utilization": "0.2",
                      "anthropic-ratelimit-unified-overage-status": "rejected",
                      "anthropic-ratelimit-unified-fallback-percentage": "0.5"})
    assert quota["status"] == "allowed_warning" and quota["fallback_percentage"] == 0.5
    assert quota["windows"] == {"5h": {"utilization": 0.91, "reset": 1750000000}, "7d_opus": {"utilization": 0.2}}
    assert quota["overage_status"] == "rejected"


def test_a_meter_that_cannot_listen_stops_the_run_with_the_fix() -> None:
    from types import SimpleNamespace

    from ralph.config import RalphConfig
    from ralph.errors import UnavailableError
    from ralph.loop.metering import LoopMeter

    runner = SimpleNamespace(name="far", isolates=False, model_endpoint_host=lambda: "192.0.2.1")  # not this machine
    agent = SimpleNamespace(name="claude", model_upstream=lambda: "http://127.0.0.1:9")
    meter = LoopMeter(RalphConfig(), runner, lambda *a, **k: None)  # type: ignore[arg-type]
    with pytest.raises(UnavailableError, match="metering = false"):
        meter.open(agent, "iteration 1", 1)  # type: ignore[arg-type]
    assert LoopMeter(RalphConfig(metering=False), runner, print).enabled_for(agent) == "metering = false in the config"  # type: ignore[arg-type]
    unreachable = SimpleNamespace(name="ray", isolates=False)  # says nothing: its agents may run elsewhere
    assert "cannot reach" in str(LoopMeter(RalphConfig(), unreachable, print).enabled_for(agent))  # type: ignore[arg-type]


def test_tls_to_the_upstream_is_verified(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``https://`` upstream (the real API's case): the certificate is checked against the CAs the
    environment names (``SSL_CERT_FILE``, as for the CLI); an unknown one is refused, never trusted."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the test's certificate)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    with ScriptedModelServer(SequenceScript([Turn([text("over TLS")])] * 3)) as server:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        plain = server._server
        assert plain is not None
        plain.socket = context.wrap_socket(plain.socket, server_side=True)
        upstream = server.url.replace("http://", "https://")
        with ModelMeter() as untrusting:  # the system's CAs: the test's certificate is unknown
            session = untrusting.open_session("s", upstream)
            assert post(session.url).status_code == 502
            assert "could not be reached" in (untrusting.close_session(session).error or "")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with ModelMeter() as trusting:
            session = trusting.open_session("s", upstream)
            response = post(session.url)
            usage = trusting.close_session(session)
    assert response.status_code == 200 and b"over TLS" in response.content
    assert usage.answered == 1 and usage.usage["input"] > 0
