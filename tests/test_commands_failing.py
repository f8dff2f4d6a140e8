"""An agent whose commands all fail is reported as failing, with the first error (issue 24 item 4).

Before, such iterations "finished" with exit 0 one after another until ``-n`` ran out, without a
word of why (Codex's sandbox could not start a command: ``bwrap: execvp codex-linux-sandbox``).
Now an iteration whose tool calls all failed and that changed nothing says so with the first error,
and ``max_agent_failures`` of them in a row stop the run (exit 7).  Scripted models drive the real
Claude Code and Codex CLIs; the commands really run and really fail.
"""

from __future__ import annotations

from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.loop.limits import RunLimits
from ralph.loop.records import IterationRecord
from ralph.testing.model_server import IterationScript
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import bash_turns

MISSING = "cat notes-that-do-not-exist.txt"
MISSING_ERROR = "notes-that-do-not-exist.txt: No such file or directory"


def failing_script(iterations: int, commands: list[str] | None = None) -> IterationScript:
    """Every iteration runs ``commands`` (default: two that fail) and gives up."""
    steps = commands or [MISSING, "ls a-directory-that-does-not-exist"]
    return IterationScript({n: bash_turns(steps, say="I could not read the notes.") for n in range(1, iterations + 1)})


def assert_reported_failing(project: RalphProject, result: Any) -> None:
    assert result.returncode == 7, result.stderr + result.stdout
    assert len(project.events("iteration_started")) == 3  # not all eight
    failed = project.events("commands_failed")
    assert [e["iteration"] for e in failed] == [1, 2, 3]
    assert all(e["calls"] == e["errors"] == 2 for e in failed), failed
    assert MISSING_ERROR in failed[0]["first_error"]
    # the first error on the console, every iteration and when the run stops
    lines = result.stderr.splitlines()
    assert len([line for line in lines if "failed and nothing changed: " in line and MISSING_ERROR in line]) == 3
    stop_line = lines[-1]
    assert "changing nothing, in 3 iterations in a row; the first error: " in stop_line and MISSING_ERROR in stop_line
    (stop,) = project.events("agent_failing")
    assert stop["cause"] == "commands" and MISSING_ERROR in stop["reason"]
    reason = project.summary()["reason"]
    assert reason.startswith("every command the agent ran failed, and nothing changed, in 3 iterations in a row")
    assert MISSING_ERROR in reason
    assert project.story("US-001")["passes"] is False


@pytest.mark.real_claude
def test_claude_agent_whose_commands_all_fail_stops_with_the_first_error(
    ralph_project, scripted_model, claude_binary, claude_agent_env
) -> None:
    ralph_project.write_stories([story("US-001")])
    server = scripted_model(failing_script(8))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "8",
                               env=claude_agent_env(server.url))
    assert_reported_failing(ralph_project, result)


@pytest.mark.real_codex
def test_codex_agent_whose_commands_all_fail_stops_with_the_first_error(
    ralph_project, scripted_responses, codex_binary, codex_agent_env
) -> None:
    ralph_project.write_stories([story("US-001")])
    server = scripted_responses(failing_script(8))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "codex", "-n", "8", "--timeout", "120",
                               env=codex_agent_env(server.url))
    assert_reported_failing(ralph_project, result)


@pytest.mark.real_claude
def test_a_working_command_or_a_change_ends_the_streak(
    ralph_project, scripted_model, claude_binary, claude_agent_env
) -> None:
    """Iterations 1, 2, 4 and 6 fail every command; 3 runs one that works, 5 changes a file before
    its command fails: never three in a row, so the run goes on to -n."""
    ralph_project.write_stories([story("US-001")])
    fail = bash_turns([MISSING], say="No notes.")
    script = IterationScript({
        1: fail, 2: fail,
        3: bash_turns([MISSING, "git status --short"], say="Looked around."),
        4: fail,
        5: bash_turns(["printf draft > draft.txt", MISSING], say="Started a draft."),
        6: fail,
    })
    server = scripted_model(script)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "6",
                               env=claude_agent_env(server.url))
    assert result.returncode == 1, result.stderr + result.stdout  # max iterations
    assert [e["iteration"] for e in ralph_project.events("commands_failed")] == [1, 2, 4, 6]
    assert ralph_project.events("agent_failing") == []


@pytest.mark.real_claude
def test_calls_the_guards_deny_are_not_failing_commands(
    ralph_project, scripted_model, claude_binary, claude_agent_env
) -> None:
    """A denial is the loop's answer, not a broken environment: an agent whose every call is denied
    (a push, in direct mode) goes on to -n, each denied call counted apart."""
    ralph_project.write_stories([story("US-001")])
    push = "git push origin main"  # data for the scripted model: never run by this test
    server = scripted_model(IterationScript({n: bash_turns([push, push], say="Pushed?") for n in range(1, 5)}))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "4",
                               env=claude_agent_env(server.url))
    assert result.returncode == 1, result.stderr + result.stdout
    assert ralph_project.events("commands_failed") == [] and ralph_project.events("agent_failing") == []
    denials = [e for e in ralph_project.events("hook") if e.get("event") == "PreToolUse"]
    assert len(denials) == 8
    records = ralph_project.summary()["records"]
    assert [(r["tool_calls"], r["tool_denials"]) for r in records] == [(0, 2)] * 4


# -- the streak, unit level ---------------------------------------------------------------------------


def limits(max_failures: int = 3) -> tuple[RunLimits, list[tuple[str, dict[str, Any]]]]:
    import threading
    from types import SimpleNamespace

    from ralph.loop.limits import RunClock

    events: list[tuple[str, dict[str, Any]]] = []
    config = RalphConfig(max_agent_failures=max_failures)
    context = SimpleNamespace(config=config, clock=RunClock(config), emit=lambda kind, **data: events.append((kind, data)),
                              cancel=threading.Event(), persist_tasks=lambda *a: None)
    return RunLimits(context), events  # type: ignore[arg-type]


def record(number: int, *, calls: int = 0, errors: int = 0, failed: bool = False, error: str | None = None) -> IterationRecord:
    item = IterationRecord(number, "implement", "US-001", exit_code=0)
    item.tool_calls, item.tool_errors, item.commands_failed, item.tool_error = calls, errors, failed, error
    return item


def test_iterations_without_tool_calls_leave_the_streak_as_it_is() -> None:
    """Codex does not report a command its sandbox could not start: an iteration with no call in the
    stream neither counts nor ends the streak."""
    run, events = limits()
    assert run.agent_failing(record(1, calls=2, errors=2, failed=True, error="bwrap: execvp x")) is None
    assert run.agent_failing(record(2)) is None
    assert run.agent_failing(record(3, calls=1, errors=1, failed=True, error="later")) is None
    reason = run.agent_failing(record(4, calls=1, errors=1, failed=True, error="last"))
    assert reason is not None and "3 iterations in a row" in reason and "bwrap: execvp x" in reason
    assert events[-1][0] == "agent_failing" and events[-1][1]["cause"] == "commands"


def test_a_call_that_worked_ends_the_streak() -> None:
    run, _ = limits(2)
    assert run.agent_failing(record(1, calls=1, errors=1, failed=True, error="e")) is None
    assert run.agent_failing(record(2, calls=2, errors=1)) is None
    assert run.agent_failing(record(3, calls=1, errors=1, failed=True, error="e")) is None
    assert run.agent_failing(record(4, calls=1, errors=1, failed=True, error="e")) is not None


def test_the_console_line_carries_no_terminal_escapes() -> None:
    import io

    from ralph.api import LoopEvent
    from ralph_plugins.reporters.console import ConsoleView

    err = io.StringIO()
    view = ConsoleView(out=io.StringIO(), err=err, live=False)
    view.handle(LoopEvent("commands_failed", {"iteration": 2, "calls": 1, "errors": 1, "denied": 0,
                                              "first_error": "boom\x1b[2J\x07 gone\nnext"}))
    line = err.getvalue()
    assert "\x1b" not in line and "\x07" not in line
    assert line == "ralph | iteration 2: the agent's only command failed and nothing changed: boom gone \u23ce next\n"
