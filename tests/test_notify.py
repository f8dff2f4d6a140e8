"""Notifications through Apprise, received by a real HTTP endpoint on this machine (``json://127.0.0.1``).

Every case runs the real ``ralph`` CLI; the agent is the replay agent where what it does does not matter
(budgets, a story's cost cap, failing and slow endpoints), and the real Claude Code CLI against the
scripted model server where it asks a person (``ralph ask``) or hits the usage limit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from ralph.testing.project import RalphProject, story, wait_for
from tests.notify_endpoint import NotifyEndpoint


@pytest.fixture
def endpoint() -> Iterator[NotifyEndpoint]:
    served = NotifyEndpoint()
    yield served
    served.close()


def notify_config(project: RalphProject, *urls: str, **extra: Any) -> None:
    lines = ["[notify]", f"urls = {json.dumps(list(urls))}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
    (project.path / "ralph.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    project.commit_all("notify config")


def replay(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]]) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {str(k): v for k, v in iterations.items()}}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


def costly(story_id: str, cost: float) -> list[dict[str, Any]]:
    return [{"write": {"path": f"{story_id}.txt", "content": str(time.time())}}, {"commit": f"wip {story_id}"},
            {"cost": cost}, {"say": "working on it"}]


def run_replay(project: RalphProject, env: dict[str, str], *args: str) -> Any:
    return project.run("run", "--runner", "direct", "--agent", "replay", *args, env=env, timeout=300)


# -- what a person is told ------------------------------------------------------------------------


def test_a_budget_stop_is_notified_with_the_reason_and_the_run_directory(
        ralph_project: RalphProject, endpoint: NotifyEndpoint, tmp_path) -> None:
    notify_config(ralph_project, endpoint.url)
    ralph_project.write_stories([story("US-001")])
    env = replay(tmp_path, {n: costly("US-001", 0.6) for n in range(1, 6)})
    result = run_replay(ralph_project, env, "--max-cost", "1.0")
    assert result.returncode == 5, result.stderr
    assert len(endpoint.received) == 1, endpoint.received
    sent = endpoint.received[0]
    assert sent["path"] == "/notify" and sent["type"] == "warning"
    assert sent["title"] == f"ralph: run stopped: budget reached ({ralph_project.path.name})"
    assert "budget reached: $1.2000 of $1.0000 spent" in sent["message"]
    assert f"run: {ralph_project.run_dirs()[-1]}" in sent["message"]
    assert "0/1 story done | 2 iterations" in sent["message"]
    assert "warning" not in result.stderr.lower().replace("warning: pre-flight", "")  # delivered: nothing to warn


def test_a_stopped_story_and_the_end_are_notified_in_order(
        ralph_project: RalphProject, endpoint: NotifyEndpoint, tmp_path) -> None:
    notify_config(ralph_project, endpoint.url)
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
    approve2 = [{"set": {"story": "US-002", "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1,
                                                        "notes": "ok"}}}, {"commit": "approve"}, {"say": "ok"}]
    submit2 = [{"set": {"story": "US-002", "fields": {"reviewStatus": "needs_review"}}}, {"commit": "submit"},
               {"say": "ok"}]
    env = {**replay(tmp_path, {1: costly("US-001", 0.3), 2: costly("US-001", 0.3), 3: submit2, 4: approve2}),
           "RALPH_STORY_MAX_COST": "0.5"}
    result = run_replay(ralph_project, env)
    assert result.returncode == 3, result.stderr
    name = ralph_project.path.name
    assert endpoint.titles() == [f"ralph: US-001 stopped ({name})", f"ralph: run finished with failed stories ({name})"]
    stopped, ended = endpoint.received
    assert "per-story cost cap reached ($0.6000 of $0.5000)" in stopped["message"] and stopped["type"] == "failure"
    assert "1/2 stories done" in ended["message"]


def test_only_the_configured_events_are_sent(ralph_project: RalphProject, endpoint: NotifyEndpoint, tmp_path) -> None:
    notify_config(ralph_project, endpoint.url, events=["question"])
    ralph_project.write_stories([story("US-001")])
    result = run_replay(ralph_project, replay(tmp_path, {n: costly("US-001", 0.6) for n in range(1, 6)}),
                        "--max-cost", "1.0")
    assert result.returncode == 5, result.stderr
    assert endpoint.requests == 0


def test_urls_from_the_environment_are_added(ralph_project: RalphProject, endpoint: NotifyEndpoint, tmp_path) -> None:
    other = NotifyEndpoint()
    try:
        notify_config(ralph_project, endpoint.url)
        ralph_project.write_stories([story("US-001")])
        env = {**replay(tmp_path, {n: costly("US-001", 0.6) for n in range(1, 6)}), "RALPH_NOTIFY_URLS": other.url}
        result = run_replay(ralph_project, env, "--max-cost", "1.0")
        assert result.returncode == 5, result.stderr
        assert len(endpoint.received) == len(other.received) == 1
        assert endpoint.received[0]["message"] == other.received[0]["message"]
    finally:
        other.close()


def test_an_interrupted_run_is_notified(ralph_project: RalphProject, endpoint: NotifyEndpoint, tmp_path) -> None:
    notify_config(ralph_project, endpoint.url)
    ralph_project.write_stories([story("US-001")])
    marker = tmp_path / "started"
    script = replay(tmp_path, {1: [{"run": f"touch {marker}"}, {"sleep": 120}, {"say": "late"}]})
    process = ralph_project.start("run", "--runner", "direct", "--agent", "replay", env=script)
    try:
        wait_for(marker.exists, timeout=60)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert endpoint.titles() == [f"ralph: run interrupted ({ralph_project.path.name})"]
    assert endpoint.received[0]["type"] == "info"


# -- a failing or slow endpoint is a warning, never a stop ----------------------------------------


def test_a_failing_and_a_refused_endpoint_are_warnings_and_the_run_ends_as_it_would(
        ralph_project: RalphProject, endpoint: NotifyEndpoint, tmp_path) -> None:
    broken = NotifyEndpoint("fail")
    closed = NotifyEndpoint()
    closed.close()  # nothing listens on its port any more
    try:
        notify_config(ralph_project, broken.url, closed.url + "?token=SECRET-TOKEN", endpoint.url)
        ralph_project.write_stories([story("US-001")])
        result = run_replay(ralph_project, replay(tmp_path, {n: costly("US-001", 0.6) for n in range(1, 6)}),
                            "--max-cost", "1.0")
    finally:
        broken.close()
    assert result.returncode == 5, result.stderr  # the budget stop, as without notifications
    assert ralph_project.summary()["reason"].startswith("budget reached")
    assert broken.requests == 1
    assert f"ralph | warning: notification to json://127.0.0.1:{broken.port}/... failed" in result.stderr
    assert f"ralph | warning: notification to json://127.0.0.1:{closed.port}/... failed" in result.stderr
    assert "SECRET-TOKEN" not in result.stderr and "/notify" not in result.stderr
    assert len(endpoint.received) == 1  # the working one still got it


def test_a_slow_endpoint_never_holds_up_the_run(ralph_project: RalphProject, tmp_path) -> None:
    """The endpoint reads the request and never answers (Apprise would wait 10 minutes for it: ``rto``):
    the run goes on and ends with its own exit code, warning that the notification was not delivered."""
    slow = NotifyEndpoint("hang")
    try:
        notify_config(ralph_project, slow.url + "?rto=600&cto=600", timeout=1)
        ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
        env = {**replay(tmp_path, {1: costly("US-001", 0.3), 2: costly("US-001", 0.3), 3: costly("US-002", 0.1)}),
               "RALPH_STORY_MAX_COST": "0.5"}
        result = run_replay(ralph_project, env, "-n", "3")
    finally:
        slow.close()
    assert result.returncode == 1, result.stderr  # max iterations: every iteration ran while a send hung
    assert [e["iteration"] for e in ralph_project.events("iteration_started")] == [1, 2, 3]
    assert slow.requests == 1  # the first (US-001 stopped) never finished; the rest waited behind it
    assert "notification(s) not delivered within 1s (notify timeout)" in result.stderr


# -- configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize("table, expected", [
    ('urls = ["bogus://x"]', "`notify.urls.0` is not a URL Apprise can send to (service bogus://"),
    ('urls = ["just-text"]', "`notify.urls.0` is not an Apprise URL (SERVICE://..."),
    ('url = ["json://127.0.0.1/x"]', "unknown key `notify.url`; did you mean `urls`?"),
    ('events = ["questions"]', "`notify.events.0` must be one of"),
    ("timeout = 0", "`notify.timeout` must be a number > 0"),
])
def test_a_bad_notify_section_stops_the_run_before_it_starts(ralph_project: RalphProject, tmp_path, table,
                                                             expected) -> None:
    (ralph_project.path / "ralph.toml").write_text(f"[notify]\n{table}\n", encoding="utf-8")
    ralph_project.commit_all("bad notify config")
    ralph_project.write_stories([story("US-001")])
    result = run_replay(ralph_project, replay(tmp_path, {1: costly("US-001", 0.1)}))
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr, result.stderr
    assert ralph_project.run_dirs() == []


def test_a_bad_url_in_the_environment_is_named_without_its_secret(ralph_project: RalphProject, tmp_path) -> None:
    ralph_project.write_stories([story("US-001")])
    env = {**replay(tmp_path, {1: costly("US-001", 0.1)}), "RALPH_NOTIFY_URLS": "json://ok.example/x bogus://TOKEN123"}
    result = run_replay(ralph_project, env)
    assert result.returncode == 2, result.stderr
    assert "environment variable RALPH_NOTIFY_URLS: URL 2 (bogus://...) is not a URL Apprise can send to" in result.stderr
    assert "TOKEN123" not in result.stderr


def test_doctor_says_where_notifications_go(ralph_project: RalphProject, endpoint: NotifyEndpoint) -> None:
    notify_config(ralph_project, endpoint.url + "?token=abc")
    result = ralph_project.run("doctor", "--runner", "direct", "--agent", "replay")
    assert (f"notifications (question, story_stopped, waiting, run_ended) go to json://127.0.0.1:{endpoint.port}/..."
            in result.stdout), result.stdout
    assert "token=abc" not in result.stdout


# -- the real Claude Code CLI: a question, and the usage limit --------------------------------------


QUESTION = "Should the export use ';' or ',' as the delimiter? The PRD says both. \\033[31mRED\\033[0m"
"""The agent's question; ``printf %b`` turns its ``\\033`` into escape characters (Claude Code refuses a command
that holds control characters itself)."""


def bin_path() -> str:
    """PATH with this interpreter's scripts first, so the agent's ``ralph`` is this ralph."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@pytest.mark.real_claude
def test_a_question_and_the_waiting_end_reach_the_endpoint(ralph_project: RalphProject, endpoint: NotifyEndpoint,
                                                           scripted_model, claude_binary, claude_agent_env) -> None:
    import shlex

    from ralph.testing.model_server import IterationScript
    from ralph.testing.scripting import approve_turns, bash_turns, implement_turns

    notify_config(ralph_project, endpoint.url)
    ralph_project.write_stories([story("US-001", title="CSV export"), story("US-002", priority=2)])
    asking = f"ralph ask \"$(printf %b {shlex.quote(QUESTION)})\""
    asks = bash_turns(["printf wip > notes-wip.txt", asking], "I asked and stop here.")
    server = scripted_model(IterationScript({1: asks, 2: implement_turns("US-002", "b.txt", "b"),
                                             3: approve_turns("US-002", 1)}))
    env = {**claude_agent_env(server.url), "PATH": bin_path()}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--timeout", "180", "-n", "6",
                               env=env, timeout=600)
    assert result.returncode == 8, result.stderr
    name = ralph_project.path.name
    assert endpoint.titles() == [f"ralph: US-001 asks a person ({name})", f"ralph: run waiting for a person ({name})"]
    question, ended = endpoint.received
    body = question["message"]
    assert 'US-001 "CSV export" asked a person in iteration 1 (implement)' in body, body
    # agent text is data: the escape sequences the agent put into its question are gone
    assert "Should the export use ';' or ',' as the delimiter? The PRD says both. RED\n" in body and "\x1b" not in body
    assert f"Answer: ralph answer -d {shlex.quote(str(ralph_project.path))} US-001 \"ANSWER\"" in body
    assert "What the agent was doing:" in body and "notes-wip.txt" in body
    assert ended["message"].startswith("waiting for a person: US-001 asked")
    assert "1/2 stories done" in ended["message"] and "waiting for your answer: US-001" in ended["message"]


@pytest.mark.real_claude
def test_the_usage_limit_wait_and_then_the_end_are_notified(ralph_project: RalphProject, endpoint: NotifyEndpoint,
                                                            scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import IterationScript, usage_limit_reply
    from ralph.testing.scripting import approve_turns, implement_turns

    notify_config(ralph_project, endpoint.url)
    ralph_project.write_stories([story("US-001")])
    script = IterationScript({1: implement_turns("US-001", "a.txt", "a"), 2: approve_turns("US-001", 1)})
    state = {"rejected": 0}

    def responder(request: Any) -> Any:
        if state["rejected"] == 0:
            state["rejected"] += 1
            return usage_limit_reply(int(time.time()) + 2)
        return script(request)

    server = scripted_model(responder)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "4",
                               env=claude_agent_env(server.url), timeout=600)
    assert result.returncode == 0, result.stderr
    name = ralph_project.path.name
    assert endpoint.titles() == [f"ralph: waiting for the usage limit ({name})", f"ralph: run complete ({name})"]
    assert "goes on by itself" in endpoint.received[0]["message"]
    assert endpoint.received[1]["type"] == "success" and "1/1 story done" in endpoint.received[1]["message"]


def test_a_run_stopped_by_a_broken_plugin_is_notified_as_an_error(ralph_project: RalphProject,
                                                                  endpoint: NotifyEndpoint, tmp_path) -> None:
    """A project-local validator that raises stops the run (exit 2, fail-closed): the person is told."""
    (ralph_project.path / "ralph_local.py").write_text(
        "from ralph.api import hookimpl\n\n\n@hookimpl\ndef ralph_validate(context):\n"
        "    if context.mode is not None:\n        raise RuntimeError('the check cannot run')\n    return []\n")
    (ralph_project.path / "ralph.toml").write_text(
        f'plugins = ["ralph_local.py"]\n\n[notify]\nurls = ["{endpoint.url}"]\n', encoding="utf-8")
    ralph_project.commit_all("a local validator, notifications")
    ralph_project.write_stories([story("US-001")])
    result = run_replay(ralph_project, replay(tmp_path, {1: costly("US-001", 0.1)}))
    assert result.returncode == 2, result.stderr
    assert endpoint.titles() == [f"ralph: run stopped on an error ({ralph_project.path.name})"]
    assert endpoint.received[0]["type"] == "failure"
    assert "RuntimeError: the check cannot run" in endpoint.received[0]["message"]


@pytest.mark.real_claude
def test_a_usage_limit_stop_is_notified(ralph_project: RalphProject, endpoint: NotifyEndpoint, scripted_model,
                                        claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import usage_limit_reply

    notify_config(ralph_project, endpoint.url)
    ralph_project.write_stories([story("US-001")])
    server = scripted_model(lambda request: usage_limit_reply(int(time.time()) + 7200))
    env = {**claude_agent_env(server.url), "RALPH_ON_USAGE_LIMIT": "exit"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=env, timeout=300)
    assert result.returncode == 6, result.stderr
    assert endpoint.titles() == [f"ralph: run paused: usage limit ({ralph_project.path.name})"]
    assert "ralph run --resume" in endpoint.received[0]["message"]
