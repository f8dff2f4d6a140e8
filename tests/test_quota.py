"""Money a person can plan: a budget in percent of a subscription's usage windows (``--max-quota``), and a
warning (or a refusal) when an API key would bill the API although the person is logged in with a
subscription.  Through the real CLI: the real Claude Code CLI against the scripted model server, which
sends the API's ``anthropic-ratelimit-unified-*`` headers as a subscription's responses carry them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ralph.loop.quota import ALL_WINDOWS, QuotaUse, parse_max_quota
from ralph.testing.model_server import IterationScript, unified_headers
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import approve_turns, implement_turns

# -- the budget's forms and its arithmetic ------------------------------------------------------------


def test_max_quota_forms() -> None:
    assert parse_max_quota(20) == {ALL_WINDOWS: 20.0}
    assert parse_max_quota("12.5%") == {ALL_WINDOWS: 12.5}
    assert parse_max_quota("5h=50, 7d=10") == {"5h": 50.0, "7d": 10.0}
    assert parse_max_quota({"7D": 5}) == {"7d": 5.0}
    assert parse_max_quota(None) is None and parse_max_quota("") is None
    for bad, words in [("abc", "must be a percentage"), ("0", "above 0 and at most 100"), ("101", "at most 100"),
                       ("5h=x", "'x' is not a percentage"), ("5h", "must be a percentage"), ({"5 h": 3}, "not a window"),
                       (True, "must be a percentage")]:
        with pytest.raises(ValueError, match=words):
            parse_max_quota(bad)


def window(utilization: float, reset: float) -> dict[str, Any]:
    return {"windows": {"5h": {"utilization": utilization, "reset": reset, "status": "allowed"}}}


def test_the_runs_use_counts_rises_from_the_first_reading_and_all_of_a_new_window() -> None:
    use = QuotaUse()
    use.add(window(0.40, 1000), now=100)  # the baseline: what was used before the run does not count
    use.add(window(0.45, 1000), now=200)
    use.add(window(0.44, 1001), now=300)  # a small fall (or the reset figure moving) takes nothing back
    assert use.windows["5h"].used == pytest.approx(0.05)
    use.add(window(0.10, 19000), now=1200)  # the window reset: all of the new one counts
    assert use.windows["5h"].used == pytest.approx(0.15)
    assert use.over({"5h": 20}) is None and use.over({ALL_WINDOWS: 15}) is not None
    assert "used 15.0% of the 5-hour window (--max-quota 15%; the window is at 10% now)" in use.over({"5h": 15})
    assert use.summary() == {"5h": {"used_by_run": 15.0, "now": 10.0, "reset": 19000.0}}


# -- --max-quota through the real CLI ----------------------------------------------------------------


def two_stories(project: RalphProject) -> IterationScript:
    project.write_stories([story("US-001"), story("US-002", priority=2)])
    return IterationScript({1: implement_turns("US-001", "a.txt", "a"), 2: approve_turns("US-001", 1),
                            3: implement_turns("US-002", "b.txt", "b"), 4: approve_turns("US-002", 1)})


@pytest.mark.real_claude
def test_the_run_stops_when_it_has_used_its_share_of_the_5_hour_window(
        ralph_project: RalphProject, scripted_model, claude_binary, claude_agent_env) -> None:
    script = two_stories(ralph_project)

    def headers(request: Any) -> dict[str, str]:  # each iteration uses 8 points of the 5-hour window
        number = script.key_of(request) or 1
        return unified_headers(0.30 + 0.08 * (number - 1), 0.20)

    server = scripted_model(script, headers=headers)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "6",
                               "--max-quota", "5h=15,7d=50", env=claude_agent_env(server.url), timeout=600)
    assert result.returncode == 5, result.stdout + result.stderr
    summary = ralph_project.summary()
    assert summary["iterations"] == 3  # 0 after the first (the baseline), 8 after the second, 16 after the third
    assert summary["reason"] == ("quota budget reached: this run used 16.0% of the 5-hour window (--max-quota 15%; "
                                 "the window is at 46% now)")
    used = summary["metering"]["quota_used"]
    assert used["5h"]["used_by_run"] == 16.0 and used["7d"]["used_by_run"] == 0.0
    assert ralph_project.story("US-002")["passes"] is False


@pytest.mark.real_claude
def test_a_quota_budget_for_traffic_billed_per_token_stops_after_the_first_iteration(
        ralph_project: RalphProject, scripted_model, claude_binary, claude_agent_env) -> None:
    server = scripted_model(two_stories(ralph_project))  # no quota headers: what an API key's traffic gets
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "6", "--max-quota", "20",
                               env=claude_agent_env(server.url), timeout=600)
    assert result.returncode == 5, result.stdout + result.stderr
    summary = ralph_project.summary()
    assert summary["iterations"] == 1
    assert summary["reason"].startswith("quota budget cannot be kept: the API reported no subscription quota")
    assert "--max-cost limits a run billed in USD" in summary["reason"]


def replay_env(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": [{"say": "nothing to do"}]}}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


def test_a_quota_budget_needs_a_metered_agent(ralph_project: RalphProject, tmp_path) -> None:
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--max-quota", "20",
                               env=replay_env(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "--max-quota needs the loop's meter of the model traffic, and agent 'replay' is not metered" in result.stderr
    assert ralph_project.run_dirs() == []


@pytest.mark.parametrize("where, value, expected", [
    ("flag", "abc", "command line option for max-quota: `max_quota` must be a percentage (20), or windows"),
    ("flag", "5h=0", "`max_quota` must be above 0 and at most 100 percent for window 5h (got 0)"),
    ("env", "200", "environment variable RALPH_MAX_QUOTA: `max_quota` must be above 0 and at most 100 percent (got 200)"),
    ("file", "{ 5h = \"x\" }", "pyproject.toml: `tool.ralph.max_quota` must give window 5h a number of percent (got 'x')"),
])
def test_a_bad_quota_budget_is_one_line_naming_where_it_was_set(ralph_project: RalphProject, tmp_path, where, value,
                                                                expected) -> None:
    ralph_project.write_stories([story("US-001")])
    args, env = ["run", "--runner", "direct", "--agent", "replay", "--dry-run"], replay_env(tmp_path)
    if where == "flag":
        args += ["--max-quota", value]
    elif where == "env":
        env["RALPH_MAX_QUOTA"] = value
    else:
        (ralph_project.path / "pyproject.toml").write_text(f"[tool.ralph]\nmax_quota = {value}\n", encoding="utf-8")
    result = ralph_project.run(*args, env=env)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr, result.stderr


# -- an API key beside a subscription login ---------------------------------------------------------


def subscription_home(env: dict[str, str]) -> Path:
    """Log the agent's (fresh) home in with a Claude subscription, as `claude /login` leaves it."""
    directory = Path(env["HOME"]) / ".claude"
    directory.mkdir(parents=True, exist_ok=True)
    login = {"claudeAiOauth": {"accessToken": "sk-ant-oat01-test", "refreshToken": "r", "expiresAt": 4102444800000,
                               "scopes": ["user:inference"], "subscriptionType": "max"}}
    (directory / ".credentials.json").write_text(json.dumps(login), encoding="utf-8")
    return directory / ".credentials.json"


@pytest.mark.real_claude
def test_an_api_key_beside_a_subscription_login_warns_at_start_and_can_be_refused(
        ralph_project: RalphProject, scripted_model, claude_binary, claude_agent_env) -> None:
    script = two_stories(ralph_project)
    server = scripted_model(script)
    env = claude_agent_env(server.url)  # ANTHROPIC_API_KEY is set, as in every offline test
    credentials = subscription_home(env)
    warning = (f"ANTHROPIC_API_KEY is set where the agent runs (this machine): Claude Code bills the API per token for "
               f"this run, although you are logged in with a Claude max subscription login in {credentials}")

    dry = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert warning in dry.stderr and "unset ANTHROPIC_API_KEY" in dry.stderr

    refused = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--refuse-api-billing", env=env)
    assert refused.returncode == 2, refused.stderr
    assert warning in refused.stderr and 'api_billing = "refuse"' in refused.stderr
    assert ralph_project.run_dirs() == [] and server.requests == []  # no agent started

    ran = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "1", env=env, timeout=600)
    assert ran.returncode == 1, ran.stderr  # the warning does not stop a run
    assert warning in ran.stderr
    warned = ralph_project.events("preflight_warnings")
    assert warned and any(warning in w["what"] for w in warned[0]["warnings"])

    (ralph_project.path / "pyproject.toml").write_text('[tool.ralph]\napi_billing = "allow"\n', encoding="utf-8")
    allowed = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--dry-run", env=env)
    assert allowed.returncode == 0 and "bills the API" not in allowed.stderr

    (ralph_project.path / "pyproject.toml").write_text('[tool.ralph]\npreflight = false\n', encoding="utf-8")
    unchecked = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--refuse-api-billing", env=env)
    assert unchecked.returncode == 2 and 'api_billing = "refuse" needs the pre-flight checks' in unchecked.stderr
