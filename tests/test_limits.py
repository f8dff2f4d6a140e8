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
    from ralph.testing.model_server import usage_limit_reply

    ralph_project.write_stories([story("US-001")])
    resets = int(time.time()) + 3600
    # the API's own form: 429 with the unified headers (status rejected, the reset); no wording needed
    server = scripted_model(lambda request: usage_limit_reply(resets))
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
    from ralph.testing.model_server import IterationScript, usage_limit_reply
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
            return usage_limit_reply(resets)
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


def _limits(**config: Any) -> tuple[Any, list[tuple[str, dict[str, Any]]]]:
    import threading
    from types import SimpleNamespace

    from ralph.loop.limits import RunLimits

    events: list[tuple[str, dict[str, Any]]] = []
    settings = {"on_usage_limit": "exit", "usage_limit_wait": 900.0, "usage_limit_max_wait": 6 * 3600.0,
                "max_agent_failures": 3, **config}
    context = SimpleNamespace(config=SimpleNamespace(**settings), clock=None, cancel=threading.Event(),
                              emit=lambda kind, **data: events.append((kind, data)), persist_tasks=None)
    return RunLimits(context), events  # type: ignore[arg-type]


def test_a_usage_limits_reset_is_the_apis_and_never_more_than_a_week_away() -> None:
    """Metered: the reset comes from the API's headers (the meter's ``limit_resets_at``), never from a time in
    the message, which can quote the agent's request; a reset more than a week away is not believed."""
    from ralph.loop.records import IterationRecord

    year = time.time() + 365 * 86400
    limits, events = _limits()
    record = IterationRecord(1, "implement", "US-001", metered=True, limit_resets_at=year,
                             usage_limit="Request rejected (429): limited")
    reason = limits.wait_out(record)
    assert reason is not None and "more than a week away" in reason and "not believed" in reason
    [(kind, data)] = events
    assert kind == "usage_limit" and data["wait"] == 900.0 and data["reset_not_believed"]
    limits, events = _limits()
    quoted = IterationRecord(1, "implement", "US-001", metered=True,
                             usage_limit=f"Request rejected (400): usage limit reached|{int(time.time()) + 3 * 3600}")
    limits.wait_out(quoted)
    assert events[0][1]["wait"] == 900.0 and "reset_not_believed" not in events[0][1]  # no time read from the text
    limits, events = _limits()
    soon = IterationRecord(1, "implement", "US-001", metered=True, limit_resets_at=time.time() + 3600,
                           usage_limit="Request rejected (429): limited")
    limits.wait_out(soon)
    assert 3500 < events[0][1]["wait"] <= 3600


def test_an_iteration_that_changed_the_project_never_counts_toward_a_failure_stop() -> None:
    """The agent can write its CLI's output and kill it: a metered iteration that changed the project ends the
    streak, and one that got a model answer is quoted from the meter (the API's answer), never its output."""
    from ralph.loop.records import IterationRecord

    limits, _ = _limits()
    forged = "Invalid API key · Please run /login (forged)"
    for number in range(1, 6):
        record = IterationRecord(number, "implement", "US-001", metered=True, exit_code=-9, answered=3,
                                 agent_error=forged, changed=True)
        assert limits.agent_failing(record) is None
    reasons = []
    for number in range(1, 4):
        record = IterationRecord(number, "implement", "US-001", metered=True, exit_code=-9, answered=3,
                                 agent_error=forged, changed=False)
        reasons.append(limits.agent_failing(record))
    assert reasons[:2] == [None, None] and reasons[2] is not None
    assert "forged" not in reasons[2] and "SIGKILL" in reasons[2]
    limits, _ = _limits()
    for number in range(1, 4):  # no model answer reached the CLI: its own line is shown
        record = IterationRecord(number, "implement", "US-001", metered=True, exit_code=1, answered=0,
                                 agent_error="Not logged in · Please run /login", changed=False,
                                 api_error="the model API answered HTTP 401 (authentication_error): invalid x-api-key")
        stop = limits.agent_failing(record)
    assert stop is not None and "Not logged in" in stop
