"""The codex agent plugin: binary resolution, command line, event parsing, and the
Responses server's failures as the real Codex CLI reports them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ralph.contracts import AgentChannel, AgentInvocation
from ralph.testing.model_server import ErrorReply, SequenceScript, Turn, text, tool
from ralph.testing.responses_server import ScriptedResponsesServer, StreamFailure, codex_env
from ralph_plugins.agents import codex_events
from ralph_plugins.agents.codex import CodexAgent, channel_hooks, resolve_binary, toml_value


class _Settings:
    project_dir = None

    def section(self, name: str):  # noqa: D401 - test double
        return None


def _kinds(line: dict) -> list[str]:
    return [e.kind for e in codex_events.parse_line(json.dumps(line))]


def test_resolution_order_config_env_path(tmp_path: Path) -> None:
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert resolve_binary(str(fake), {}) == (fake, "config")
    assert resolve_binary(None, {"RALPH_CODEX_BINARY": str(fake), "PATH": ""})[1] == "env"
    assert resolve_binary(None, {"PATH": str(tmp_path)}) == (fake, "path")
    missing, source = resolve_binary(str(tmp_path / "nope"), {})
    assert (missing, source) == (None, "config")


def test_parser_maps_codex_events_to_agent_events() -> None:
    assert _kinds({"type": "thread.started", "thread_id": "t1"}) == ["system"]
    started = codex_events.parse_line(json.dumps(
        {"type": "item.started", "item": {"id": "i1", "type": "command_execution", "command": "ls", "status": "in_progress"}}
    ))
    assert [(e.kind, e.data["name"], e.data["input"]) for e in started] == [("tool_use", "Bash", {"command": "ls"})]
    done = codex_events.parse_line(json.dumps(
        {"type": "item.completed", "item": {"id": "i1", "type": "command_execution", "command": "ls",
                                            "aggregated_output": "boom", "exit_code": 2, "status": "failed"}}
    ))
    assert (done[0].kind, done[0].data["is_error"], done[0].data["content"]) == ("tool_result", True, "boom")
    message = codex_events.parse_line(json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "hi"}}))
    assert [(e.kind, e.text) for e in message] == [("text", "hi")]
    result = codex_events.parse_line(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}}))
    assert result[0].kind == "result" and result[0].data["usage"]["input_tokens"] == 5
    # Codex's notices ("model metadata not found") are not errors
    assert _kinds({"type": "item.completed", "item": {"type": "error", "message": "Model metadata for x not found"}}) == ["system"]
    assert _kinds({"type": "error", "message": "Reconnecting... 1/5 (boom)"}) == ["error"]
    assert codex_events.parse_line("not json")[0].data["unparsed"] is True
    assert codex_events.parse_line("") == []


def test_command_line_wires_hooks_sandbox_and_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("RALPH_CODEX_BINARY", str(fake))
    monkeypatch.setenv("RALPH_CODEX_BASE_URL", "http://127.0.0.1:9/v1")
    project = tmp_path / "p"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    channel = AgentChannel(hook_socket=run_dir / "hook.sock", token="t", run_dir=run_dir, state_file=run_dir / "state.json",
                           tasks_file=project / "ralph" / "tasks.json", hook_command=("hookcmd",))
    invocation = AgentInvocation("do it", project, run_dir, 1, model="m1", channel=channel)
    spec = CodexAgent(_Settings()).process(invocation)  # type: ignore[arg-type]

    assert spec.argv[:3] == [str(fake), "exec", "--json"] and spec.argv[-1] == "-"
    assert spec.stdin == "do it"
    assert ["-s", "workspace-write"] == spec.argv[spec.argv.index("-s"): spec.argv.index("-s") + 2]
    assert "--dangerously-bypass-hook-trust" in spec.argv and "-m" in spec.argv
    overrides = [spec.argv[i + 1] for i, a in enumerate(spec.argv) if a == "-c"]
    stop = next(o for o in overrides if o.startswith("hooks.Stop="))
    assert 'type = "command"' in stop and "exec hookcmd" in stop and "timeout = 60" in stop  # the fail-closed wrapper
    assert any(o.startswith("sandbox_workspace_write.writable_roots=") and str(project / ".git") in o for o in overrides)
    assert any('base_url = "http://127.0.0.1:9/v1"' in o and 'wire_api = "responses"' in o for o in overrides)
    assert spec.env["CODEX_HOME"] == str(run_dir / "codex-home") and oct(os.stat(run_dir / "codex-home").st_mode)[-3:] == "700"

    boxed = CodexAgent(_Settings()).process(  # type: ignore[arg-type]
        AgentInvocation("x", project, run_dir, 1, sandboxed=True)
    )
    assert "--dangerously-bypass-approvals-and-sandbox" in boxed.argv and "-s" not in boxed.argv
    assert "--dangerously-bypass-hook-trust" not in boxed.argv  # no hook wiring given
    assert "CODEX_HOME" not in boxed.env  # ~/.codex on the container's tmpfs home


def test_toml_values_and_hook_file() -> None:
    assert toml_value({"a": [1, "x"], "b": True}) == '{a = [1, "x"], b = true}'
    assert channel_hooks(AgentInvocation("p", Path("."), Path("."), 1)) == {}  # no channel: no hooks (never parsed from a file)


def _run_codex(binary: Path, server: ScriptedResponsesServer, tmp_path: Path, prompt: str = "hi") -> list:
    project = tmp_path / "proj"
    project.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, **codex_env(server.url, home)}
    old = {k: os.environ.get(k) for k in ("RALPH_CODEX_BASE_URL", "RALPH_CODEX_BINARY")}
    os.environ["RALPH_CODEX_BASE_URL"] = server.url
    os.environ["RALPH_CODEX_BINARY"] = str(binary)
    try:
        spec = CodexAgent(_Settings()).process(AgentInvocation(prompt, project, run_dir, 1))  # type: ignore[arg-type]
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    completed = subprocess.run(spec.argv, input=spec.stdin, cwd=spec.cwd, env={**env, **spec.env},
                               capture_output=True, text=True, timeout=60)
    return [e for line in completed.stdout.splitlines() for e in codex_events.parse_line(line)]


@pytest.mark.real_codex
@pytest.mark.parametrize(
    ("reply", "flag"),
    [
        (StreamFailure("context_length_exceeded", "Your input exceeds the context window of this model."), "context_overflow"),
        (ErrorReply(429, {"error": {"type": "usage_limit_reached", "message": "usage limit reached"}}), "usage_limit"),
        (ErrorReply(400, {"error": {"type": "invalid_request_error", "message": "bad request"}}), None),
    ],
)
def test_real_codex_failures_become_flags(reply, flag, codex_binary: Path, tmp_path: Path) -> None:
    with ScriptedResponsesServer(lambda request: reply) as server:
        events = _run_codex(codex_binary, server, tmp_path)
    kinds = [e.kind for e in events]
    assert "error" in kinds and any(e.kind == "result" and e.data["is_error"] for e in events)
    if flag:
        assert flag in kinds
    else:
        assert "usage_limit" not in kinds and "context_overflow" not in kinds


@pytest.mark.real_codex
def test_real_codex_tool_call_usage_and_recorded_requests(codex_binary: Path, tmp_path: Path) -> None:
    script = SequenceScript([Turn([tool("Bash", {"command": "printf made > made.txt"})]), Turn([text("finished")])])
    with ScriptedResponsesServer(script) as server:
        events = _run_codex(codex_binary, server, tmp_path, prompt="MARKER-PROMPT")
        requests = server.requests
    assert (tmp_path / "proj" / "made.txt").read_text() == "made"
    assert [e.data["name"] for e in events if e.kind == "tool_use"] == ["Bash"]
    assert [e.text for e in events if e.kind == "text"] == ["finished"]
    usage = [e.data["usage"] for e in events if e.kind == "result"][0]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert requests[0].path.endswith("/responses") and requests[0].body["stream"] is True
    assert "MARKER-PROMPT" in requests[0].first_user_text and requests[1].assistant_turns == 1


def test_codex_apply_patch_is_judged_as_its_shell_equivalent(tmp_path: Path) -> None:
    from ralph.contracts import LoopView
    from ralph.hooks.answers import HookContext, answer
    from ralph.hooks.dialects import patch_as_shell
    from ralph.hooks.sessionstore import MemorySession
    from ralph.plugin.manager import PluginHost

    patch = "*** Begin Patch\n*** Update File: ralph/prd.md\n@@\n-a\n+b\n*** Add File: new.txt\n+x\n*** End Patch\n"
    assert patch_as_shell(patch) == ": > ralph/prd.md ; : > new.txt"
    assert patch_as_shell("*** Update File: a b\n*** Move to: c\n") == ": > 'a b' ; mv -- 'a b' c"
    project, run_dir = tmp_path / "p", tmp_path / "run"
    view = LoopView(runner="direct", mode="implement", story_id="US-001", ralph_dir=project / "ralph",
                    run_dir=run_dir, protected_paths=[project / "ralph" / "prd.md"])
    ctx = HookContext(PluginHost(environ={}), project, MemorySession(), run_dir, view, None)
    payload = {"hook_event_name": "PreToolUse", "tool_name": "apply_patch", "tool_input": {"command": patch},
               "session_id": "s", "cwd": str(project), "turn_id": "t", "model": "m"}
    denied = answer(payload, ctx, {"RALPH_HOOK_DIALECT": "codex"})
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "prd.md" in denied["hookSpecificOutput"]["permissionDecisionReason"]
    harmless = {**payload, "tool_input": {"command": "*** Begin Patch\n*** Add File: new.txt\n+x\n*** End Patch\n"}}
    assert answer(harmless, ctx, {"RALPH_HOOK_DIALECT": "codex"}) == {}


def test_context_monitor_reads_codex_rollout_token_counts(tmp_path: Path) -> None:
    from ralph_plugins.monitors.context_monitor import estimate_tokens

    rollout = tmp_path / "rollout.jsonl"
    lines = [
        {"type": "session_meta", "payload": {"id": "x", "instructions": "y" * 4000}},
        {"type": "event_msg", "payload": {"type": "token_count", "info": {
            "last_token_usage": {"input_tokens": 150_000, "output_tokens": 20}, "model_context_window": 258400}}},
    ]
    rollout.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert estimate_tokens(rollout) == 150_020
