"""Budgets, usage limits and context exhaustion (issue: the rest of the lifecycle)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import RalphProject, story
from ralph.loop.usagelimit import reset_time


def replay(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]]) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {str(k): v for k, v in iterations.items()}}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


def costly(story_id: str, cost: float) -> list[dict[str, Any]]:
    return [{"write": {"path": f"{story_id}.txt", "content": str(time.time())}}, {"commit": f"wip {story_id}"},
            {"cost": cost}, {"say": "working on it"}]


def test_reset_time_shapes() -> None:
    now = dt.datetime(2026, 11, 25, 14, 0, tzinfo=dt.timezone.utc)
    assert reset_time("Claude AI usage limit reached|1764082800", now) == dt.datetime.fromtimestamp(1764082800, dt.timezone.utc)
    assert reset_time("5-hour limit reached ∙ resets 3pm", now) == now.replace(hour=15)
    assert reset_time("limit reached, resets at 10:30", now) == (now + dt.timedelta(days=1)).replace(hour=10, minute=30)
    assert reset_time("limit will reset at 2026-11-25T16:00:00Z", now) == now.replace(hour=16)
    assert reset_time("usage limit reached", now) is None


def test_run_budget_stops_cleanly(ralph_project: RalphProject, tmp_path) -> None:
    ralph_project.write_stories([story("US-001")])
    env = replay(tmp_path, {n: costly("US-001", 0.6) for n in range(1, 6)})
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--max-cost", "1.0", env=env)
    assert result.returncode == 5, result.stderr
    assert len(ralph_project.events("iteration_started")) == 2
    assert ralph_project.summary()["reason"] == "budget reached: $1.2000 of $1.0000 spent"
    assert not (ralph_project.path / ".ralph-active").exists()


def test_story_cost_cap_flags_the_story_and_moves_on(ralph_project: RalphProject, tmp_path) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
    approve2 = [{"set": {"story": "US-002", "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1,
                                                        "notes": "ok"}}}, {"commit": "approve"}, {"say": "ok"}]
    submit2 = [{"set": {"story": "US-002", "fields": {"reviewStatus": "needs_review"}}}, {"commit": "submit"}, {"say": "ok"}]
    env = {**replay(tmp_path, {1: costly("US-001", 0.3), 2: costly("US-001", 0.3), 3: submit2, 4: approve2}),
           "RALPH_STORY_MAX_COST": "0.5"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", env=env)
    assert result.returncode == 3, result.stderr
    flagged = ralph_project.story("US-001")
    assert flagged["failed"] is True and "per-story cost cap reached ($0.6000 of $0.5000)" in flagged["failureReason"]
    assert ralph_project.story("US-002")["passes"] is True


@pytest.mark.real_claude
def test_usage_limit_from_the_model_server_pauses_cleanly(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import ErrorReply

    ralph_project.write_stories([story("US-001")])
    resets = int(time.time()) + 3600
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": f"Claude AI usage limit reached|{resets}"}}
    server = scripted_model(lambda request: ErrorReply(429, body, {"x-should-retry": "false"}))
    result = ralph_project.run(
        "run", "--runner", "direct", "--agent", "claude", env={**claude_agent_env(server.url), "RALPH_ON_USAGE_LIMIT": "exit"}
    )
    assert result.returncode == 6, result.stdout + result.stderr
    summary = ralph_project.summary()
    assert "ralph run --resume" in summary["reason"]
    expected = dt.datetime.fromtimestamp(resets).astimezone().strftime("%Y-%m-%d %H:%M")
    assert expected in summary["reason"]
    assert summary["iterations"] == 1 and ralph_project.events("usage_limit")
    assert ralph_project.events("attempt_failed") == []  # not counted as a failed attempt
    assert not (ralph_project.path / ".ralph-active").exists()


@pytest.mark.real_claude
def test_usage_limit_wait_then_continue(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import ErrorReply, IterationScript
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    ralph_project.write_stories([story("US-001")], verifyCommands=[])
    resets = int(time.time()) + 2
    calls = {"n": 0}
    script = IterationScript(
        {
            1: bash_turns([set_fields_command("US-001", reviewStatus="needs_review"), commit_command("feat")], "done"),
            2: bash_turns([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
                           commit_command("review")], "approved"),
        }
    )

    def responder(request):
        calls["n"] += 1
        if calls["n"] == 1:
            return ErrorReply(429, {"type": "error", "error": {"type": "rate_limit_error",
                                                                "message": f"Claude AI usage limit reached|{resets}"}},
                              {"x-should-retry": "false"})
        return script(request)

    server = scripted_model(responder)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=claude_agent_env(server.url))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [e["kind"] for e in ralph_project.events() if e["kind"].startswith("usage_limit")] == ["usage_limit", "usage_limit_wait"]
    assert [e["iteration"] for e in ralph_project.events("iteration_started")] == [1, 1, 2]


@pytest.mark.real_claude
def test_context_exhaustion_asks_for_a_split_then_flags(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import ErrorReply

    ralph_project.write_stories([story("US-001")])
    body = {"type": "error", "error": {"type": "invalid_request_error",
                                       "message": "prompt is too long: 250000 tokens > 200000 maximum"}}
    server = scripted_model(lambda request: ErrorReply(400, body, {"x-should-retry": "false"}))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=claude_agent_env(server.url))
    assert result.returncode == 3, result.stdout + result.stderr
    assert [e["times"] for e in ralph_project.events("context_exhausted")] == [1, 2]
    second_prompt = (ralph_project.run_dirs()[-1] / "iteration-002.prompt.md").read_text()
    assert "exhausted the agent's context" in second_prompt and "split US-001" in second_prompt
    flagged = ralph_project.story("US-001")
    assert flagged["failed"] is True and "split this story" in flagged["failureReason"]
