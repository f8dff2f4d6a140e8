"""The claude agent: its stream-json parser and command line, and the real CLI end to end.

Tests marked ``real_claude`` run the real Claude Code binary (claude on PATH or
the one bundled in claude-agent-sdk) offline against the scripted model server.
They skip when no binary is found, and fail instead under CI=true or
RALPH_REQUIRE_REAL=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.contracts import AgentChannel, AgentEvent, AgentInvocation
from ralph.settings import Settings
from ralph.testing.model_server import ScriptedModelServer, SequenceScript, Turn, claude_env, text, tool
from ralph.testing.requirements import require
from ralph_plugins.agents import claude as claude_plugin
from ralph import claude_cli
from ralph.claude_cli import resolve_binary
from ralph_plugins.agents.claude import ClaudeAgent
from ralph_plugins.agents.claude_config import ClaudeConfig
from ralph_plugins.agents.streamjson import MAX_CONTENT, parse_line

# -- the stream-json parser ------------------------------------------------------


def _kinds(events: list[AgentEvent]) -> list[str]:
    return [e.kind for e in events]


def test_assistant_blocks_become_text_and_tool_use() -> None:
    text_line = {"type": "assistant", "message": {"model": "m", "content": [{"type": "text", "text": "Hello"}]}}
    tool_line = {
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": "x"}}]},
    }
    (event,) = parse_line(json.dumps(text_line))
    assert event.kind == "text" and event.text == "Hello"
    (event,) = parse_line(json.dumps(tool_line) + "\n")
    assert event.kind == "tool_use"
    assert event.data == {"name": "Write", "input": {"file_path": "x"}, "id": "t1"}


def test_tool_results_are_trimmed() -> None:
    long = "x" * (MAX_CONTENT * 3)
    line = {
        "type": "user",
        "message": {
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": long, "is_error": True},
                {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "ok"}]},
            ]
        },
    }
    first, second = parse_line(json.dumps(line))
    assert first.kind == "tool_result" and first.data["is_error"] is True and first.data["truncated"]
    assert MAX_CONTENT <= len(first.data["content"]) < MAX_CONTENT + 100
    assert second.data == {"tool_use_id": "t2", "is_error": False, "content": "ok", "truncated": False}


def test_result_event_carries_cost_and_usage() -> None:
    line = {
        "type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "result": "Done.",
        "total_cost_usd": 0.25, "usage": {"input_tokens": 10}, "duration_ms": 161,
        "terminal_reason": "completed", "stop_reason": "end_turn", "modelUsage": {"big": "ignored"},
    }  # fmt: skip
    (event,) = parse_line(json.dumps(line))
    assert event.kind == "result" and event.text == "Done."
    assert event.data["total_cost_usd"] == 0.25 and event.data["num_turns"] == 2
    assert event.data["usage"] == {"input_tokens": 10} and event.data["terminal_reason"] == "completed"
    assert "modelUsage" not in event.data


def test_api_errors_and_retries_are_errors() -> None:
    api_error = {
        "type": "assistant", "is_api_error_message": True, "error": "server_error", "api_error_status": 529,
        "message": {"model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529 Overloaded."}]},
    }  # fmt: skip
    # 529 (overloaded) is also a rate-limit rejection, waited out like a usage limit (issue 12)
    rate_limit, event = parse_line(json.dumps(api_error))
    assert rate_limit.kind == "rate_limit" and rate_limit.data["status"] == 529
    assert event.kind == "error" and event.data["status"] == 529
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 1, "error_status": 500}
    (event,) = parse_line(json.dumps(retry))
    assert event.kind == "error" and event.data["retrying"] is True and event.data["error_status"] == 500
    failed = {"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "api_error",
              "result": "API Error: 500 boom."}  # fmt: skip
    assert _kinds(parse_line(json.dumps(failed))) == ["error", "result"]


@pytest.mark.parametrize(
    "message",
    ["Claude AI usage limit reached|1760000000", "You've hit your limit · resets 3pm (Europe/Berlin)",
     "5-hour limit reached ∙ resets 2am"],
)  # fmt: skip
def test_usage_limit_wording(message: str) -> None:
    assistant = {"type": "assistant", "message": {"content": [{"type": "text", "text": message}]}}
    assert _kinds(parse_line(json.dumps(assistant))) == ["usage_limit", "text"]
    result = {"type": "result", "is_error": True, "result": message}
    assert _kinds(parse_line(json.dumps(result))) == ["usage_limit", "error", "result"]


def test_rate_limit_event_rejected_is_usage_limit() -> None:
    rejected = {"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": 1760000000}}
    (event,) = parse_line(json.dumps(rejected))
    assert event.kind == "usage_limit" and event.data["resets_at"] == 1760000000
    allowed = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}
    assert _kinds(parse_line(json.dumps(allowed))) == ["system"]


def test_context_overflow() -> None:
    result = {"type": "result", "is_error": True, "terminal_reason": "prompt_too_long", "result": "Prompt is too long"}
    assert _kinds(parse_line(json.dumps(result))) == ["context_overflow", "error", "result"]
    api_error = {
        "type": "assistant", "is_api_error_message": True, "error": "invalid_request",
        "message": {"content": [{"type": "text", "text": "input exceeds the context window of this model"}]},
    }  # fmt: skip
    assert _kinds(parse_line(json.dumps(api_error))) == ["context_overflow", "error"]


def test_model_talking_about_limits_is_just_text() -> None:
    chatty = "I added a check so the usage limit reached message resets at midnight; prompt is too long is handled."
    line = {"type": "assistant", "message": {"content": [{"type": "text", "text": chatty}]}}
    assert _kinds(parse_line(json.dumps(line))) == ["text"]
    ok = {"type": "result", "is_error": False, "result": chatty}
    assert _kinds(parse_line(json.dumps(ok))) == ["result"]


def test_user_text_is_system_feedback() -> None:
    line = {"type": "user", "isSynthetic": True,
            "message": {"content": [{"type": "text", "text": "Stop hook feedback:\nfix it"}]}}  # fmt: skip
    (event,) = parse_line(json.dumps(line))
    assert event.kind == "system" and event.text == "Stop hook feedback:\nfix it"
    assert event.data == {"source": "user", "synthetic": True}


def test_init_is_system() -> None:
    init = {"type": "system", "subtype": "init", "session_id": "s", "model": "m", "tools": ["Bash"], "huge": [1] * 50}
    (event,) = parse_line(json.dumps(init))
    assert event.kind == "system"
    assert event.data == {"subtype": "init", "session_id": "s", "model": "m", "tools": ["Bash"]}


@pytest.mark.parametrize(
    "line",
    ["not json at all", "[1, 2]", "42", "null", '{"type": "assistant", "message": {"content": "plain"}}',
     '{"type": "assistant", "message": {"content": [null, 3, {"type": "tool_use", "input": "x"}]}}',
     '{"type": "user", "message": {"content": [{"type": "tool_result", "content": {"a": 1}}]}}',
     '{"type": "result", "result": null, "is_error": "yes"}', '{"type": "system"}',
     '{"type": "rate_limit_event", "rate_limit_info": 5}', '{"type": 7}', "\x00\xff{"],
)  # fmt: skip
def test_bad_input_never_raises(line: str) -> None:
    events = parse_line(line)
    assert all(isinstance(e, AgentEvent) for e in events)


def test_non_json_lines_and_blank_lines() -> None:
    (event,) = parse_line("Warning: something odd")
    assert event.kind == "system" and event.data == {"raw": "Warning: something odd", "unparsed": True}
    assert parse_line("   \n") == []


# -- the agent plugin --------------------------------------------------------------


def _settings(tmp_path: Path, **claude: Any) -> Settings:
    # the fake binaries live in tmp_path, outside the project: ralph never runs a program from the project tree
    return Settings(project_dir=tmp_path / "project", config=RalphConfig(), plugin_config={"claude": ClaudeConfig(**claude)})


def _fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_process_builds_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = _fake_binary(tmp_path / "bin" / "my-claude")
    monkeypatch.setenv("SOME_TOKEN", "secret")
    monkeypatch.delenv("UNSET_VAR", raising=False)
    settings = _settings(
        tmp_path, binary=str(binary), extra_args=["--max-turns", "7"], env_passthrough=["SOME_TOKEN", "UNSET_VAR"]
    )
    agent = ClaudeAgent(settings)
    hooks = tmp_path / "run" / "claude-settings.json"
    invocation = AgentInvocation(
        prompt="do it", project_dir=tmp_path, run_dir=tmp_path / "run", iteration=3,
        model="opus", channel=_channel(tmp_path / "run"), env={"RALPH_ITERATION": "3"},
    )  # fmt: skip
    spec = agent.process(invocation)
    assert list(spec.files) == [hooks]  # rendered from the channel; the runner writes it where the agent runs
    assert spec.argv == [
        str(binary), "-p", "do it", "--output-format", "stream-json", "--verbose",
        "--dangerously-skip-permissions", "--model", "opus", "--settings", str(hooks),
        "--setting-sources", "project,local", "--strict-mcp-config", "--mcp-config", '{"mcpServers":{}}',
        "--max-turns", "7",
    ]  # fmt: skip
    assert spec.env == {"IS_SANDBOX": "1", "SOME_TOKEN": "secret", "RALPH_ITERATION": "3"}
    assert spec.cwd == tmp_path
    assert agent.resolve_binary() == (binary, "config")
    assert agent.availability().ok


def _channel(run_dir: Path, hook_command: tuple[str, ...] = ("/usr/bin/python3", "-I", "-S", "client.py")) -> AgentChannel:
    """A loop's channel with its run directory at ``run_dir`` (the hook client ``hook_command``)."""
    return AgentChannel(hook_socket=run_dir / "hook.sock", token="t", run_dir=run_dir, state_file=run_dir / "state.json",
                        tasks_file=run_dir / "tasks.json", hook_command=hook_command)


def test_minimal_command_line(tmp_path: Path) -> None:
    binary = _fake_binary(tmp_path / "claude")
    spec = ClaudeAgent(_settings(tmp_path, binary=str(binary))).process(
        AgentInvocation(prompt="p", project_dir=tmp_path, run_dir=tmp_path, iteration=1)
    )
    assert "--model" not in spec.argv and "--settings" not in spec.argv
    assert spec.argv[-1] == "--dangerously-skip-permissions"


def test_a_loop_session_reads_only_the_configuration_the_loop_gives(tmp_path: Path) -> None:
    """--setting-sources never names the person's user settings; only the configured MCP servers start."""
    import json

    binary = _fake_binary(tmp_path / "claude")
    servers = {"docs": {"command": "/usr/bin/docs-server", "args": ["--stdio"]}}
    agent = ClaudeAgent(_settings(tmp_path, binary=str(binary), setting_sources=["local"], mcp_servers=servers))
    invocation = AgentInvocation(prompt="p", project_dir=tmp_path, run_dir=tmp_path, iteration=1,
                                 channel=_channel(tmp_path))
    argv = agent.process(invocation).argv
    assert argv[argv.index("--setting-sources") + 1] == "local"
    assert "--strict-mcp-config" in argv
    assert json.loads(argv[argv.index("--mcp-config") + 1]) == {"mcpServers": servers}
    none = ClaudeAgent(_settings(tmp_path, binary=str(binary), setting_sources=[])).process(invocation).argv
    assert none[none.index("--setting-sources") + 1] == ""


def test_user_settings_cannot_be_configured_back(tmp_path: Path) -> None:
    from ralph.config import load_config
    from ralph.errors import ConfigError
    from ralph.plugin.manager import PluginHost

    (tmp_path / "pyproject.toml").write_text('[tool.ralph.claude]\nsetting_sources = ["project", "user"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, sections=PluginHost(environ={}).config_sections(), environ={})
    assert "tool.ralph.claude.setting_sources" in str(info.value) and '"user" is not allowed' in str(info.value)


def test_binary_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from_config = _fake_binary(tmp_path / "a" / "claude")
    from_env = _fake_binary(tmp_path / "b" / "claude")
    on_path = _fake_binary(tmp_path / "c" / "claude")
    environ = {"RALPH_CLAUDE_BINARY": str(from_env), "PATH": str(on_path.parent)}
    assert resolve_binary(str(from_config), environ) == (from_config, "config")
    assert resolve_binary(None, environ) == (from_env, "env")
    assert resolve_binary(None, {"PATH": str(on_path.parent)}) == (on_path, "path")
    # explicit choices that do not exist are reported, not silently replaced
    assert resolve_binary(str(tmp_path / "missing"), environ) == (None, "config")
    assert resolve_binary(None, {**environ, "RALPH_CLAUDE_BINARY": str(tmp_path / "nope")}) == (None, "env")
    # relative config paths are relative to the project
    assert resolve_binary("a/claude", {}, base_dir=tmp_path) == (from_config, "config")

    monkeypatch.setattr(claude_cli, "bundled_binary", lambda: on_path)
    assert resolve_binary(None, {"PATH": str(tmp_path / "empty")}) == (on_path, "claude-agent-sdk")
    monkeypatch.setattr(claude_cli, "bundled_binary", lambda: None)
    assert resolve_binary(None, {"PATH": str(tmp_path / "empty")}) == (None, "none")


def test_unavailable_says_what_was_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claude_cli, "bundled_binary", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("RALPH_CLAUDE_BINARY", raising=False)
    availability = ClaudeAgent(_settings(tmp_path)).availability()
    assert not availability.ok
    for source in ("binary", "RALPH_CLAUDE_BINARY", "PATH", "claude-agent-sdk"):
        assert source in availability.reason
    bad = ClaudeAgent(_settings(tmp_path, binary="/no/such/claude")).availability()
    assert not bad.ok and "/no/such/claude" in bad.reason


def test_hookimpls_and_import_cost() -> None:
    registered: list[type] = []
    claude_plugin.ralph_register_agents(registered.append)
    assert registered == [ClaudeAgent]
    assert claude_plugin.ralph_config_sections() == {"claude": ClaudeConfig}
    with pytest.raises(ValueError):
        ClaudeConfig(unknown_key=1)
    # importing the plugin must not pull in pydantic or the SDK (ralph --help speed)
    code = (
        "import sys, ralph_plugins.agents.claude, ralph.claude_cli as c; c.bundled_binary(); "
        "bad = [m for m in ('pydantic', 'claude_agent_sdk') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stdout + done.stderr


# -- the real CLI ------------------------------------------------------------------


def _real_binary(tmp_path: Path) -> Path:
    """The real CLI as the plugin resolves it (env, PATH, claude-agent-sdk), or skip/fail."""
    agent = ClaudeAgent(_settings(tmp_path))
    availability = agent.availability()
    require(availability.ok, availability.reason)
    path, _ = agent.resolve_binary()
    assert path is not None
    return path


def _git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    return path


def _run_agent(
    agent: ClaudeAgent, invocation: AgentInvocation, server: ScriptedModelServer, home: Path
) -> tuple[subprocess.CompletedProcess[str], list[AgentEvent]]:
    """Run the real CLI as the agent builds it, against ``server``, with a fresh ``home``."""
    home.mkdir()
    spec = agent.process(invocation)
    spec.write_files()  # what a runner does before it starts the process
    env = {**os.environ, **claude_env(server.url, home), **spec.env}
    done = subprocess.run(spec.argv, cwd=spec.cwd, env=env, capture_output=True, text=True, timeout=120)
    events = [event for line in done.stdout.splitlines() for event in agent.parse_line(line)]
    return done, events


@pytest.mark.real_claude
def test_real_cli_writes_a_file_and_reports_cost(tmp_path: Path) -> None:
    binary = _real_binary(tmp_path)
    project = _git_repo(tmp_path / "project")
    content = "written by the scripted model\nline 2\n"
    write = tool("Write", {"file_path": str(project / "notes.txt"), "content": content})
    script = SequenceScript([Turn([text("Creating the file."), write]), Turn([text("All done: notes.txt written.")])])
    agent = ClaudeAgent(_settings(project, binary=str(binary)))
    invocation = AgentInvocation(
        prompt="Ralph Loop iteration 1 of 1", project_dir=project, run_dir=tmp_path, iteration=1
    )
    with ScriptedModelServer(script) as server:
        done, events = _run_agent(agent, invocation, server, tmp_path / "home")
        requests = server.requests
    assert done.returncode == 0, done.stderr[-2000:]
    assert (project / "notes.txt").read_text() == content
    assert len(requests) == 2 and server.unscripted == 0
    tool_uses = [e for e in events if e.kind == "tool_use"]
    assert [e.data["name"] for e in tool_uses] == ["Write"]
    assert tool_uses[0].data["input"]["content"] == content
    results = [e for e in events if e.kind == "tool_result"]
    assert len(results) == 1 and not results[0].data["is_error"]
    assert "All done: notes.txt written." in [e.text for e in events if e.kind == "text"]
    final = events[-1]
    assert final.kind == "result" and final.data["is_error"] is False
    assert isinstance(final.data.get("total_cost_usd"), (int, float))
    assert final.data["num_turns"] == 2 and final.text == "All done: notes.txt written."
    assert not [e for e in events if e.kind in ("error", "usage_limit", "context_overflow")]


_STOP_HOOK = """\
import json, pathlib, sys
state = pathlib.Path(sys.argv[1])
payload = json.load(sys.stdin)
if payload["hook_event_name"] != "Stop":
    print("{}")
    sys.exit(0)
calls = json.loads(state.read_text()) if state.exists() else []
calls.append(payload)
state.write_text(json.dumps(calls))
if len(calls) == 1:
    print(json.dumps({"decision": "block", "reason": "MARKER-123 fix things"}))
else:
    print("{}")
"""


@pytest.mark.real_claude
def test_real_cli_stop_hook_reason_reaches_the_model(tmp_path: Path) -> None:
    binary = _real_binary(tmp_path)
    project = _git_repo(tmp_path / "project")
    hooks_dir = tmp_path / "hooks"  # outside the project, as ralph keeps it
    hooks_dir.mkdir()
    hook_script = hooks_dir / "stop.py"
    hook_script.write_text(_STOP_HOOK)
    state = hooks_dir / "calls.json"
    # the channel's hook client is this script: the agent wires it on every event, fail-closed
    channel = _channel(hooks_dir, (sys.executable, str(hook_script), str(state)))

    script = SequenceScript([Turn([text("I think I am done.")]), Turn([text("Fixed things.")])])
    agent = ClaudeAgent(_settings(project, binary=str(binary)))
    invocation = AgentInvocation(
        prompt="Ralph Loop iteration 1 of 1", project_dir=project, run_dir=tmp_path, iteration=1, channel=channel,
    )  # fmt: skip
    with ScriptedModelServer(script) as server:
        done, events = _run_agent(agent, invocation, server, tmp_path / "home")
        requests = server.requests
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(requests) == 2, [r.text[-500:] for r in requests]
    assert "MARKER-123" not in requests[0].text
    assert "MARKER-123" in requests[1].text
    calls = json.loads(state.read_text())
    assert [c["hook_event_name"] for c in calls] == ["Stop", "Stop"]
    assert [c["stop_hook_active"] for c in calls] == [False, True]
    assert events[-1].kind == "result" and events[-1].text == "Fixed things."
    feedback = [e for e in events if e.kind == "system" and "MARKER-123" in e.text]
    assert feedback and feedback[0].data["source"] == "user"
    assert not (project / ".claude").exists()


def test_doctor_says_what_claude_reads_in_a_loop(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ralph.contracts import AgentView

    binary = _fake_binary(tmp_path / "bin" / "claude")
    agent = ClaudeAgent(_settings(tmp_path / "p", binary=str(binary), setting_sources=["local"],
                                  mcp_servers={"docs": {"command": "d"}}))
    here = SimpleNamespace(runner=SimpleNamespace(isolates=False), view=AgentView(env={}, home=tmp_path))
    check = agent.scope_check(here)  # type: ignore[arg-type]
    assert check.ok is True and "run-owned config dir per session" in check.what
    assert "ralph's + local" in check.what and "MCP servers: docs" in check.what
