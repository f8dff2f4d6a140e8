"""Agent failures say why and stop when they repeat; API rate limits are waited out, not burnt (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import RalphProject, story

CREDENTIALS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")
REJECTED = "This request would exceed your account's rate limit. Please try again later."


def replay(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]]) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {str(k): v for k, v in iterations.items()}}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


# -- agent failures -----------------------------------------------------------------------------


@pytest.mark.real_claude
def test_not_logged_in_is_shown_and_stops_the_run(ralph_project: RalphProject, claude_binary: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    ralph_project.write_stories([story("US-001")])
    env = {"HOME": str(home), "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "RALPH_PREFLIGHT": "0",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "10", env=env)
    print(result.stderr)
    assert result.returncode == 7, result.stderr
    # every failed iteration's console line carries the agent's own reason
    assert result.stderr.count("agent exited with code 1: Not logged in · Please run /login") == 3
    assert "the agent failed 3 times in a row with the same error: Not logged in · Please run /login" in result.stderr
    assert len(ralph_project.events("iteration_started")) == 3  # not all ten
    summary = ralph_project.summary()
    assert summary["exit_code"] == 7 and "Not logged in" in summary["reason"]
    assert [r["agent_error"] for r in summary["records"]] == ["Not logged in · Please run /login"] * 3


def test_a_changing_error_does_not_stop_the_run(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001")])
    fail = lambda why: [{"say": why}, {"exit": 1}]  # noqa: E731
    env = {**replay(tmp_path, {1: fail("disk full"), 2: fail("network down"), 3: fail("disk full"),
                               4: fail("disk full")}), "RALPH_MAX_AGENT_FAILURES": "2"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "8", env=env)
    assert result.returncode == 7, result.stderr
    assert [e["reason"] for e in ralph_project.events("agent_failed")] == ["disk full", "network down", "disk full",
                                                                          "disk full"]
    assert "failed 2 times in a row with the same error: disk full" in ralph_project.summary()["reason"]


def test_exit_code_seven_is_documented() -> None:
    from click.testing import CliRunner

    from ralph.cli.main import cli

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "7 the agent failed repeatedly with the same error" in " ".join(readme.split())
    help_text = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "7 the agent failed" in " ".join(help_text.split())
    assert "--max-wait" in help_text and "--no-live" in help_text


# -- rate limits ---------------------------------------------------------------------------------


def rejecting(first: int, then: Any, headers: dict[str, str] | None = None) -> Any:
    """A responder: HTTP 429 for the first ``first`` requests, then ``then``."""
    from ralph.testing.model_server import RejectFirst

    return RejectFirst(first, then, headers=headers)


@pytest.mark.real_claude
def test_rate_limit_rejections_are_waited_out(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import IterationScript
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    ralph_project.write_stories([story("US-001")], verifyCommands=[])
    script = IterationScript({
        1: bash_turns([set_fields_command("US-001", reviewStatus="needs_review"), commit_command("feat")], "done"),
        2: bash_turns([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
                       commit_command("review")], "approved"),
    })
    responder = rejecting(2, script)
    server = scripted_model(responder)
    env = {**claude_agent_env(server.url), "CLAUDE_CODE_MAX_RETRIES": "0", "RALPH_RATE_LIMIT_WAIT": "1"}
    # two iterations is exactly what the story needs: none may be spent on the rejections
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "2", env=env)
    print(result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert responder.rejected == 2
    waits = ralph_project.events("rate_limit")
    assert [(e["wait"], e["basis"]) for e in waits] == [(1.0, "backoff"), (2.0, "backoff")]  # doubling
    assert "Request rejected (429)" in waits[0]["message"]
    assert [e["iteration"] for e in ralph_project.events("iteration_started")] == [1, 1, 1, 2]
    assert "iteration 1 does not count; retrying at" in result.stderr
    assert ralph_project.events("agent_failing") == [] and ralph_project.story("US-001")["passes"] is True


@pytest.mark.real_claude
def test_retry_after_passed_on_by_the_cli(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import IterationScript
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    ralph_project.write_stories([story("US-001")], verifyCommands=[])
    script = IterationScript({
        1: bash_turns([set_fields_command("US-001", reviewStatus="needs_review"), commit_command("feat")], "done"),
        2: bash_turns([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
                       commit_command("review")], "approved"),
    })
    # the CLI retries once after the server's retry-after, is rejected again, and reports the delay
    server = scripted_model(rejecting(2, script, headers={"retry-after": "2"}))
    env = {**claude_agent_env(server.url), "CLAUDE_CODE_MAX_RETRIES": "1", "RALPH_RATE_LIMIT_WAIT": "60"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "2", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (event,) = ralph_project.events("rate_limit")
    assert event["basis"] == "the API's retry-after" and 2.0 <= event["wait"] < 5, event


@pytest.mark.real_claude
@pytest.mark.parametrize("setting, expected", [
    ({"RALPH_ON_USAGE_LIMIT": "exit"}, "on_usage_limit = exit"),
    ({"RALPH_RATE_LIMIT_WAIT": "120"}, "waiting would pass --max-wait (60s)"),
])
def test_rate_limit_wait_is_bounded(ralph_project, scripted_model, claude_binary, claude_agent_env, setting,
                                    expected) -> None:
    ralph_project.write_stories([story("US-001")])
    server = scripted_model(rejecting(100, None))
    env = {**claude_agent_env(server.url), "CLAUDE_CODE_MAX_RETRIES": "0", **setting}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--max-wait", "60", env=env)
    assert result.returncode == 6, result.stdout + result.stderr
    reason = ralph_project.summary()["reason"]
    assert reason.startswith("paused on the API's rate limit") and expected in reason
    assert "ralph run --resume" in reason


def test_stream_json_tells_rate_limits_from_usage_limits() -> None:
    from ralph_plugins.agents.streamjson import parse_line

    # what the real CLI printed for a 429 (captured from claude 2.1.332)
    message = f"API Error: Request rejected (429) · {REJECTED}"
    assistant = {"type": "assistant", "message": {"model": "<synthetic>", "content": [{"type": "text", "text": message}]},
                 "error": "rate_limit", "is_api_error_message": True, "api_error_status": 429}
    result = {"type": "result", "subtype": "success", "is_error": True, "result": message, "api_error_status": 429,
              "terminal_reason": "api_error"}
    assert [e.kind for e in parse_line(json.dumps(assistant))] == ["rate_limit", "error"]
    assert [e.kind for e in parse_line(json.dumps(result))] == ["rate_limit", "error", "result"]
    overloaded = {**result, "api_error_status": 529, "result": "API Error: Repeated 529 Overloaded errors"}
    assert parse_line(json.dumps(overloaded))[0].kind == "rate_limit"
    usage = {**result, "result": "Claude AI usage limit reached|1764082800"}
    assert [e.kind for e in parse_line(json.dumps(usage))] == ["usage_limit", "error", "result"]
    # a model merely talking about rate limits is no rejection
    text = {"type": "assistant", "message": {"content": [{"type": "text", "text": "Add a rate limit (429) handler"}]}}
    assert [e.kind for e in parse_line(json.dumps(text))] == ["text"]
