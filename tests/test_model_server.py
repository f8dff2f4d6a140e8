"""The scripted model server: SSE framing as the Messages API streams it, and script selection."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import (
    ErrorReply,
    IterationScript,
    ModelRequest,
    ScriptedModelServer,
    SequenceScript,
    Turn,
    claude_env,
    text,
    tool,
)


def _post(url: str, body: dict[str, Any], path: str = "/v1/messages?beta=true") -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers.items()), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read().decode()


def _sse_events(stream: str) -> list[tuple[str, dict[str, Any]]]:
    """Parse an SSE body into (event, data) pairs, checking each frame's shape."""
    events = []
    for frame in stream.split("\n\n"):
        if not frame.strip():
            continue
        lines = frame.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        name, data = lines[0][len("event: ") :], json.loads(lines[1][len("data: ") :])
        assert data["type"] == name
        events.append((name, data))
    return events


def _assemble(events: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """Rebuild the content blocks as a client would; return blocks, stop_reason, start usage."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    stop_reason = ""
    usage: dict[str, Any] = {}
    open_blocks: set[int] = set()
    for name, data in events:
        if name == "message_start":
            usage = data["message"]["usage"]
        elif name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
            open_blocks.add(data["index"])
        elif name == "content_block_delta":
            assert data["index"] in open_blocks
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            open_blocks.remove(data["index"])
            if data["index"] in partial:
                blocks[data["index"]]["input"] = json.loads(partial[data["index"]])
        elif name == "message_delta":
            stop_reason = data["delta"]["stop_reason"]
            assert data["usage"]["output_tokens"] >= 1
    assert not open_blocks
    return [blocks[i] for i in sorted(blocks)], stop_reason, usage


def _body(*messages: tuple[str, Any], model: str = "test-model") -> dict[str, Any]:
    return {"model": model, "stream": True, "messages": [{"role": r, "content": c} for r, c in messages]}


def test_tool_turn_streams_as_messages_api_sse() -> None:
    tool_input = {"file_path": "a/b.txt", "content": "hello \"world\"\n" * 5}
    turns = [Turn([text("Writing now."), tool("Write", tool_input)])]
    with ScriptedModelServer(SequenceScript(turns)) as server:
        status, headers, stream = _post(server.url, _body(("user", "go")))
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = _sse_events(stream)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    # the tool input arrives in several input_json_delta pieces
    assert sum(1 for n, d in events if n == "content_block_delta" and d["index"] == 1) > 1
    blocks, stop_reason, usage = _assemble(events)
    assert blocks[0] == {"type": "text", "text": "Writing now."}
    assert blocks[1]["type"] == "tool_use" and blocks[1]["name"] == "Write"
    assert blocks[1]["input"] == tool_input
    assert blocks[1]["id"].startswith("toolu_")
    assert stop_reason == "tool_use"
    assert usage["input_tokens"] >= 1
    assert events[0][1]["message"]["model"] == "test-model"


def test_text_turn_ends_turn_and_requests_are_recorded() -> None:
    script = SequenceScript([Turn([text("one")]), Turn([text("two")])])
    with ScriptedModelServer(script) as server:
        _post(server.url, _body(("user", "hi")))
        _, _, stream = _post(server.url, _body(("user", "hi"), ("assistant", "one"), ("user", "MARK-9 more")))
        _, _, beyond = _post(
            server.url, _body(("user", "hi"), ("assistant", "a"), ("user", "b"), ("assistant", "c"), ("user", "d"))
        )
        requests = server.requests
        unscripted = server.unscripted
    blocks, stop_reason, _ = _assemble(_sse_events(stream))
    assert blocks == [{"type": "text", "text": "two"}] and stop_reason == "end_turn"
    assert [r.assistant_turns for r in requests] == [0, 1, 2]
    assert "MARK-9" in requests[1].text and "MARK-9" not in requests[0].text
    assert requests[0].path == "/v1/messages?beta=true"
    assert _assemble(_sse_events(beyond))[0] == [{"type": "text", "text": "(script exhausted)"}]
    assert unscripted == 1


def test_error_reply_status_headers_and_body() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with ScriptedModelServer(lambda request: ErrorReply(529, error, {"x-should-retry": "false"})) as server:
        status, headers, body = _post(server.url, _body(("user", "hi")))
    assert status == 529
    assert headers["x-should-retry"] == "false"
    assert json.loads(body) == error


def test_other_paths_are_404_and_not_recorded() -> None:
    with ScriptedModelServer(SequenceScript([])) as server:
        status, _, _ = _post(server.url, _body(("user", "hi")), path="/v1/complete")
        assert status == 404
        assert server.requests == []


def test_broken_responder_answers_500_and_is_recorded() -> None:
    def responder(request: ModelRequest) -> Turn:
        raise ValueError("bad script")

    with ScriptedModelServer(responder) as server:
        status, headers, body = _post(server.url, _body(("user", "hi")))
        errors = server.errors
    assert status == 500 and headers["x-should-retry"] == "false"
    assert "bad script" in body and isinstance(errors[0], ValueError)


def _request(*messages: tuple[str, Any]) -> ModelRequest:
    body = _body(*messages)
    return ModelRequest(path="/v1/messages", headers={}, body=body, text=json.dumps(body))


def _reply_text(reply: object) -> str:
    assert isinstance(reply, Turn)
    return reply.blocks[0].text  # type: ignore[union-attr]


def test_iteration_script_keys_on_prompt_and_assistant_turns() -> None:
    script = IterationScript(
        {1: [Turn([text("it1-a")]), Turn([text("it1-b")])], 2: [Turn([text("it2-a")])]},
        default=[Turn([text("default")])],
    )
    # the CLI puts system reminders before the prompt, as text blocks of the first user message
    first = [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
             {"type": "text", "text": "Ralph Loop iteration 2 of 5\nDo the work."}]
    assert _reply_text(script(_request(("user", first)))) == "it2-a"
    assert _reply_text(script(_request(("user", "Ralph Loop iteration 1 of 5")))) == "it1-a"
    second = _request(("user", "Ralph Loop iteration 1 of 5"), ("assistant", "x"), ("user", "y"))
    assert _reply_text(script(second)) == "it1-b"
    assert _reply_text(script(_request(("user", "Ralph Loop iteration 9 of 9")))) == "default"
    assert _reply_text(script(_request(("user", "no number here")))) == "default"
    assert script.unscripted == 0
    # iteration 2 has one turn: its second request is beyond the script
    beyond = _request(("user", "Ralph Loop iteration 2 of 5"), ("assistant", "x"), ("user", "y"))
    assert _reply_text(script(beyond)) == "(script exhausted)"
    assert script.unscripted == 1


def test_iteration_script_without_default_and_custom_pattern() -> None:
    script = IterationScript({3: [Turn([text("three")])]}, pattern=r"step #(\d+)")
    assert _reply_text(script(_request(("user", "step #3 please")))) == "three"
    assert _reply_text(script(_request(("user", "iteration 3 of 3")))) == "(script exhausted)"
    assert script.unscripted == 1


def test_model_request_helpers_tolerate_odd_bodies() -> None:
    odd = ModelRequest(path="/v1/messages", headers={}, body={"messages": "nope"}, text="")
    assert odd.assistant_turns == 0 and odd.first_user_text == "" and odd.model == "scripted-model"


def test_turn_stop_reason_is_derived() -> None:
    assert Turn([text("a")]).stop_reason == "end_turn"
    assert Turn([text("a"), tool("Bash", {"command": "true"})]).stop_reason == "tool_use"
    assert Turn([text("a")], stop_reason="max_tokens").stop_reason == "max_tokens"


def test_claude_env_points_the_cli_at_the_server(tmp_path: Path) -> None:
    env = claude_env("http://127.0.0.1:1234", tmp_path)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:1234"
    assert env["HOME"] == str(tmp_path)
    assert env["ANTHROPIC_API_KEY"] and env["IS_SANDBOX"] == "1"
    for key in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY"):
        assert env[key] == "1"
    assert int(env["CLAUDE_CODE_MAX_RETRIES"]) <= 2


def test_server_url_requires_start() -> None:
    server = ScriptedModelServer(SequenceScript([]))
    with pytest.raises(RuntimeError):
        _ = server.url
    server.start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.stop()
