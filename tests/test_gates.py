"""Gates, stuck detection, escalation, failure branches, checkpoints, timeouts, rerun.

Through real git repositories, the real CLI process and the replay agent
(and one through the real Claude Code CLI).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ralph.loop.storystate import StoryAttempts, error_hash, normalize, truncate
from ralph.testing.project import RalphProject, story

# -- unit: the state file and escalation ----------------------------------------------------------


def test_noise_does_not_change_the_error_hash() -> None:
    a = "2026-11-25T10:00:01Z run 0.52s at 0x7f3a9c in /tmp/pytest-1/x\nAssertionError: greeting is wrong"
    b = "2026-11-26 11:22:33 run 12.9 seconds at 0xdeadbeef in /tmp/other-dir/y\nAssertionError: greeting is wrong"
    assert error_hash(a) == error_hash(b)
    assert error_hash(a) != error_hash("AssertionError: greeting is right")
    assert "<time>" in normalize(a) and "<tmp>" in normalize(a)


def test_truncate_keeps_head_and_tail_with_marker() -> None:
    text = "\n".join(f"line {i}" for i in range(250))
    cut = truncate(text)
    lines = cut.splitlines()
    assert len(lines) == 101
    assert lines[0] == "line 0" and lines[-1] == "line 249"
    assert "[... 150 lines truncated ...]" in lines


def test_escalation_sequence_for_the_same_error() -> None:
    state = StoryAttempts("US-001", max_iterations=5)
    decisions = []
    for _ in range(5):
        state.record_failure("tests", "AssertionError: nope", 1, False, ["a.py"])
        decision = state.escalation()
        if decision == "strategy-shift":
            state.strategy_shifts += 1
        decisions.append(decision)
    assert decisions == [None, None, "strategy-shift", "strategy-shift", "stop"]
    assert len(state.attempts) == 3  # rolling window


def test_missing_information_gets_context_expansion_before_the_stop() -> None:
    state = StoryAttempts("US-001", max_iterations=5)
    decisions = []
    for _ in range(6):
        state.record_failure("tests", "ModuleNotFoundError: No module named 'greetlib'", 1, False, [])
        decision = state.escalation()
        if decision == "strategy-shift":
            state.strategy_shifts += 1
        if decision == "context-expansion":
            state.context_expanded = True
        decisions.append(decision)
        if decision == "stop":
            break
    # the cap of 5 attempts is a cap (issue 22): the expansion comes after the first shift, not as a 6th attempt
    assert decisions == [None, None, "strategy-shift", "context-expansion", "stop"]


def test_a_changing_error_is_never_stuck() -> None:
    state = StoryAttempts("US-001", max_iterations=5)
    decisions = []
    for left in (4, 3, 2, 1):
        state.record_failure("tests", f"AssertionError: {left} cases left", 1, False, [])
        decisions.append(state.escalation())
    assert decisions == [None, None, None, None]
    assert state.stuck_count == 1


def test_state_file_format(tmp_path: Path) -> None:
    state = StoryAttempts("US-001")
    state.record_failure("tests", "FAIL src/auth.test.ts\n  expected 401", 1, False, ["src/auth.ts"])
    path = state.save(tmp_path)
    text = path.read_text()
    front, body = text.split("---\n", 2)[1:]
    assert "task_id: US-001" in front and "last_gate: tests" in front and "stuck_count: 1" in front
    assert '  - "src/auth.ts"' in front
    assert "## Attempt 1: tests gate output (verbatim)" in body and "expected 401" in body
    assert StoryAttempts.load(tmp_path, "US-001", 5).attempts[0].output == state.attempts[0].output


# -- through the CLI ------------------------------------------------------------------------------

VERIFY = textwrap.dedent(
    """
    import datetime, os, sys, tempfile, time
    # noise that differs from run to run
    print(f"{datetime.datetime.now().isoformat()} checked in {time.perf_counter() % 7:.3f}s at {hex(id(object()))}")
    print("scratch dir", tempfile.mkdtemp())
    if os.path.exists("greet.txt") and open("greet.txt").read() != "hello":
        print("AssertionError: greeting is wrong: " + open("greet.txt").read())
        sys.exit(1)
    print("all good")
    """
)


def replay_env(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]], **extra: Any) -> dict[str, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {str(k): v for k, v in iterations.items()}, **extra}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


def implement(story_id: str, path: str, content: str) -> list[dict[str, Any]]:
    return [
        {"write": {"path": path, "content": content}},
        {"set": {"story": story_id, "fields": {"reviewStatus": "needs_review"}}},
        {"commit": f"feat: [{story_id}] - attempt"},
        {"say": f"implemented {story_id}; tests pass (the agent says)"},
    ]


def approve(story_id: str, count: int = 1) -> list[dict[str, Any]]:
    return [
        {"set": {"story": story_id, "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": count, "notes": "ok"}}},
        {"commit": f"review: [{story_id}] - approved"},
        {"say": "approved"},
    ]


@pytest.fixture
def gated(ralph_project: RalphProject) -> RalphProject:
    (ralph_project.path / "verify.py").write_text(VERIFY)
    ralph_project.write_stories(
        [story("US-001", "Greeting"), story("US-002", "Second", priority=2)],
        verifyCommands=["python3 verify.py"],
    )
    return ralph_project


def test_same_error_three_times_escalates_then_stops_branches_resets_and_moves_on(gated, tmp_path) -> None:
    start = gated.git("rev-parse", "HEAD").strip()
    iterations = {n: implement("US-001", "greet.txt", "helo") for n in range(1, 6)}
    iterations[6] = implement("US-002", "second.txt", "2")
    iterations[7] = approve("US-002")
    result = gated.run_replay(env=replay_env(tmp_path, iterations))

    assert result.returncode == 3, result.stderr
    escalations = [(e["attempts"], e["tier"]) for e in gated.events("escalation")]
    assert escalations == [(3, 1), (4, 1), (5, 3)]
    prompt4 = (gated.run_dirs()[-1] / "iteration-004.prompt.md").read_text()
    assert "Strategy Shift Required" in prompt4 and "AssertionError: greeting is wrong: helo" in prompt4
    prompt2 = (gated.run_dirs()[-1] / "iteration-002.prompt.md").read_text()
    assert "tests gate output (verbatim)" in prompt2

    branches = gated.git("branch", "--list", "wip/ralph-fail-US-001-*").split()
    assert len(branches) == 1
    message = gated.git("log", "-1", "--format=%B", branches[0])
    assert "Ralph Loop failed: US-001" in message and "Last gate: tests" in message and "Stuck: yes" in message
    assert gated.git("show", f"{branches[0]}:greet.txt") == "helo"
    # the working branch went back to before the story's work, then moved on to US-002
    assert not (gated.path / "greet.txt").exists()
    assert start in gated.git("rev-list", "HEAD").split()
    assert "feat: [US-001]" not in gated.git("log", "--format=%s", "HEAD")
    failed = gated.story("US-001")
    assert failed["failed"] is True and "wip/ralph-fail-US-001" in failed["failureReason"]
    assert gated.story("US-002")["passes"] is True
    report = (gated.run_dirs()[-1] / "report.md").read_text()
    assert "## Completed: 1/2 stories" in report and "### US-001: Greeting" in report
    assert "- Stuck: Yes" in report and f"- Branch: {branches[0]}" in report
    assert "Failed Stories" in result.stdout
    assert gated.git("remote").strip() == ""  # nothing pushed anywhere


def test_an_error_that_changes_each_time_is_not_stuck(ralph_project, tmp_path) -> None:
    counter = tmp_path / "left.txt"
    counter.write_text("3")
    check = textwrap.dedent(
        f"""
        import sys
        left = int(open({str(counter)!r}).read())
        if left:
            open({str(counter)!r}, "w").write(str(left - 1))
            print(f"AssertionError: {{left}} cases left")
            sys.exit(1)
        """
    )
    (ralph_project.path / "check.py").write_text(check)
    ralph_project.write_stories([story("US-001")], verifyCommands=["python3 check.py"])
    iterations = {n: implement("US-001", "work.txt", str(n)) for n in range(1, 5)}
    iterations[5] = approve("US-001")
    result = ralph_project.run_replay(env=replay_env(tmp_path, iterations))
    assert result.returncode == 0, result.stderr
    assert ralph_project.events("escalation") == []
    assert [e["attempts"] for e in ralph_project.events("attempt_failed")] == [1, 2, 3]
    assert [e["mode"] for e in ralph_project.events("iteration_started")] == ["implement"] * 4 + ["review"]


def test_quality_warning_is_logged_but_does_not_block(gated, tmp_path) -> None:
    (gated.path / "pyproject.toml").write_text("[tool.ralph.quality]\nenabled = true\n")
    gated.commit_all("enable quality review")
    iterations = {1: implement("US-001", "greet.txt", "hello"), 2: approve("US-001"),
                  3: implement("US-002", "second.txt", "2"), 4: approve("US-002")}
    env = replay_env(tmp_path, iterations, quality={"default": [{"say": "WARNING: greet.txt lacks a trailing newline"}]})
    result = gated.run_replay(env=env)
    assert result.returncode == 0, result.stderr
    warnings = gated.events("quality_warning")
    assert [w["story"] for w in warnings] == ["US-001", "US-002"]
    assert warnings[0]["warning"] == "greet.txt lacks a trailing newline"
    assert "Quality warnings (logged, not blocking)" in (gated.run_dirs()[-1] / "report.md").read_text()
    assert gated.story("US-001")["passes"] is True


def test_rollback_removes_created_files_and_keeps_stashed_user_work(gated, tmp_path) -> None:
    (gated.path / "notes.md").write_text("my notes\n")
    gated.commit_all("notes")
    (gated.path / "notes.md").write_text("my notes\nuncommitted edit\n")
    (gated.path / "mine.txt").write_text("my untracked file\n")
    env = {**replay_env(tmp_path, {1: [{"write": {"path": "created/new.txt", "content": "x"}}, *implement("US-001", "greet.txt", "helo")][:1]
                                   + [{"write": {"path": "stray.txt", "content": "y"}}] + implement("US-001", "greet.txt", "helo")}),
           "RALPH_DIRTY_START": "stash", "RALPH_ON_GATE_FAILURE": "rollback"}
    checkpoint = gated.git("rev-parse", "HEAD").strip()
    result = gated.run_replay("-n", "1", env=env)
    assert result.returncode == 1, result.stderr
    assert [e["to"] for e in gated.events("rollback")] == [checkpoint]
    assert gated.git("rev-parse", "HEAD").strip() == checkpoint
    for created in ("greet.txt", "stray.txt", "created/new.txt"):
        assert not (gated.path / created).exists(), created
    stashes = gated.git("stash", "list")
    assert "ralph: your uncommitted work" in stashes
    assert "stashed as stash@{0}" in result.stdout + result.stderr
    gated.git("stash", "pop")
    assert (gated.path / "notes.md").read_text() == "my notes\nuncommitted edit\n"
    assert (gated.path / "mine.txt").read_text() == "my untracked file\n"


def test_uncommitted_work_is_refused_by_default(gated, tmp_path) -> None:
    (gated.path / "mine.txt").write_text("precious")
    result = gated.run_replay(env=replay_env(tmp_path, {1: implement("US-001", "greet.txt", "hello")}))
    assert result.returncode == 2
    assert "uncommitted changes" in result.stderr and "mine.txt" in result.stderr
    assert (gated.path / "mine.txt").read_text() == "precious"
    assert gated.git("stash", "list") == ""


def test_global_hard_timeout_stops_cleanly_with_the_report(gated, tmp_path) -> None:
    env = {**replay_env(tmp_path, {1: [{"sleep": 30}]}), "RALPH_GLOBAL_HARD_TIMEOUT": "2"}
    result = gated.run_replay(env=env)
    assert result.returncode == 4, result.stderr
    summary = gated.summary()
    assert summary["reason"].startswith("global hard timeout")
    assert (gated.run_dirs()[-1] / "report.md").exists()
    attempts = [e for e in gated.events("attempt_failed")]
    assert attempts and attempts[0]["attempts"] == 1
    state = json.loads(next((gated.state_dir / "projects").glob("*/stories/US-001.json")).read_text())
    assert state["attempts"][0]["timed_out"] is True and "TIMEOUT" in state["attempts"][0]["output"]
    assert not (gated.path / ".ralph-active").exists()


def test_rerun_asks_and_fresh_archives_the_old_state(gated, tmp_path) -> None:
    env = replay_env(tmp_path, {1: implement("US-001", "greet.txt", "helo")})
    assert gated.run_replay("-n", "1", env=env).returncode == 1
    # a run that ended normally is simply continued (issue 12 item 12); a changed task list asks
    data = gated.tasks()
    data["description"] = "changed by hand after the run"
    gated.tasks_path.write_text(json.dumps(data, indent=2) + "\n")
    gated.commit_all("edit the task list")
    refused = gated.run_replay("-n", "1", env=env)
    assert refused.returncode == 2 and "--resume" in refused.stderr and "--fresh" in refused.stderr
    assert "the task list changed since that run ended" in refused.stderr
    fresh = gated.run_replay("-n", "1", "--fresh", env=env)
    assert fresh.returncode == 1, fresh.stderr
    archived = list((gated.state_dir / "projects").glob("*/stories-archive/*/US-001.json"))
    assert len(archived) == 1
    assert json.loads(archived[0].read_text())["iteration"] == 1


@pytest.mark.real_claude
def test_failing_gate_output_reaches_the_real_agent(gated, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import IterationScript
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    def attempt(content: str) -> list:
        return bash_turns(
            [f"printf {content} > greet.txt", set_fields_command("US-001", reviewStatus="needs_review"),
             commit_command("feat: [US-001] - greet")],
            "Done, tests pass.",
        )

    approve_turns = bash_turns(
        [set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
         commit_command("review: [US-001] - approved")],
        "approved",
    )
    gated.write_stories([story("US-001", "Greeting")], verifyCommands=["python3 verify.py"])
    script = IterationScript({1: attempt("helo"), 2: attempt("hello"), 3: approve_turns})
    server = scripted_model(script)
    result = gated.run("run", "--runner", "direct", "--agent", "claude", env=claude_agent_env(server.url))
    assert result.returncode == 0, result.stderr
    second = [r.text for r in server.requests if script.key_of(r) == 2][0]
    assert "AssertionError: greeting is wrong: helo" in second
    assert [e["gate"] for e in gated.events("gate_failed")] == ["tests"]
    assert gated.story("US-001")["passes"] is True


# -- the gate keeper's interface to the loop --------------------------------------------------------


GATE_MODULES = ("gates", "gaterunner", "sendback", "escalation", "hardstop", "storyledger", "lastrun")
"""The gate keeper and the modules it is made of: none may reach past :class:`GateLoop` into the engine."""


def test_gate_modules_do_not_import_the_engine() -> None:
    import ast
    import importlib

    for name in GATE_MODULES:
        module = importlib.import_module(f"ralph.loop.{name}")
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert len(imported) > 2, f"ralph.loop.{name}: no imports found (is the parser broken?)"
        assert not any(item.startswith("ralph.loop.engine") for item in imported), name
        assert not any(alias.name == "engine" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                       and node.module == "ralph.loop" for alias in node.names), name
    import ralph.loop.gates as gates

    assert "GateLoop" in vars(gates)


class NoSessions:
    """A gate of this project asks no agent."""

    def ask(self, request: Any, prompt: str) -> tuple[str, str]:
        raise AssertionError(f"no gate of this project asks an agent ({request})")


class ProtocolOnlyLoop:
    """Exactly the members :class:`ralph.loop.gates.GateLoop` names; the keeper may set nothing on it."""

    run_dir: Path
    taskfile: Any
    runner: Any
    policy: Any
    clock: Any
    sessions: NoSessions
    events: list[tuple[str, dict[str, Any]]]
    persisted: list[str]

    def __init__(self, run_dir: Path, taskfile: Any, runner: Any, policy: Any, clock: Any) -> None:
        fields = {"run_dir": run_dir, "taskfile": taskfile, "runner": runner, "policy": policy, "clock": clock,
                  "sessions": NoSessions(), "events": [], "persisted": []}
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AssertionError(f"the gate keeper set {name!r} on the loop")

    def emit(self, kind: str, **data: Any) -> None:
        self.events.append((kind, data))

    def persist_tasks(self, tasks: Any, record: Any, message: str) -> None:
        self.taskfile.persist(tasks)
        self.persisted.append(message)


def test_gate_keeper_runs_the_real_tests_gate_through_the_protocol_alone(gated: RalphProject, tmp_path: Path) -> None:
    from ralph.session import open_session
    from ralph.contracts import Selection
    from ralph.loop.gates import GateKeeper, GateLoop
    from ralph.loop.records import IterationRecord
    from ralph.loop.taskfile import TaskFile

    session = open_session(gated.path, {"runner": "direct"}, environ={**gated.process_env()})
    settings, host = session.settings, session.host
    store = host.stores.get("tasks-json")()
    taskfile = TaskFile(store, store.path(settings.ralph_dir))
    runner = host.runners.get("direct")(settings).resolve(host.runners)
    policy = host.policies.get("review")(settings)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    from ralph.loop.limits import RunClock

    loop = ProtocolOnlyLoop(run_dir, taskfile, runner, policy, RunClock(settings.config))
    typed: GateLoop = loop  # `mypy tests/test_gates.py` checks the fake against the protocol
    keeper = GateKeeper(typed, host, settings)
    checkpoint = gated.git("rev-parse", "HEAD").strip()
    selection = Selection("implement", "US-001", "test")

    def iteration(number: int, greeting: str) -> Any:
        (gated.path / "greet.txt").write_text(greeting)
        data = gated.tasks()
        data["userStories"][0]["reviewStatus"] = "needs_review"
        gated.write_stories(data["userStories"])
        raw, tasks, _ = taskfile.read()
        assert tasks is not None
        taskfile.accept(raw)
        taskfile.trust(tasks)
        keeper.before_iteration(selection, checkpoint)
        return keeper.after_iteration(IterationRecord(number, "implement", "US-001"), selection, tasks, checkpoint, set())

    tasks = iteration(1, "helo")
    gate = next(data for kind, data in loop.events if kind == "gate")
    assert gate["gate"] == "tests" and gate["passed"] is False and gate["where"] == "host"
    assert "AssertionError: greeting is wrong: helo" in gate["output"]
    failed = next(data for kind, data in loop.events if kind == "gate_failed")
    assert failed["sent_back"] == ["reviewStatus needs_review → null"]
    assert loop.persisted == ["the tests gate failed for US-001; the loop set it back (reviewStatus needs_review → null)"]
    assert tasks.story("US-001").reviewStatus is None
    assert gated.story("US-001")["reviewStatus"] is None  # written through the task file
    assert keeper.state("US-001").attempts[-1].gate == "tests"
    assert keeper.states_dir.is_relative_to(gated.state_dir)

    loop.events.clear()
    tasks = iteration(2, "hello")
    assert [data["passed"] for kind, data in loop.events if kind == "gate"] == [True]
    assert len(loop.persisted) == 1  # nothing sent back
    assert tasks.story("US-001").reviewStatus == "needs_review"


VANDAL_VERIFY = textwrap.dedent(
    """
    import pathlib, subprocess
    # the agent's test code: passes, and writes into the project while the gate runs it
    pathlib.Path("gate-note.txt").write_text("left by a test")
    pathlib.Path("greet.txt").write_text("rewritten by a test")
    print("all good")
    """
)


def test_what_a_gate_command_changes_in_the_project_is_undone(ralph_project: RalphProject, tmp_path: Path) -> None:
    # the tree guard's snapshot is taken only when a gate first starts something of the agent's: the
    # test-integrity gate before it starts nothing here, the tests gate runs the agent's verify.py
    (ralph_project.path / "verify.py").write_text(VANDAL_VERIFY)
    ralph_project.write_stories([story("US-001", "Greeting")], verifyCommands=["python3 verify.py"])
    iterations = {1: implement("US-001", "greet.txt", "hello"), 2: approve("US-001")}
    result = ralph_project.run_replay(env=replay_env(tmp_path, iterations))

    assert result.returncode == 0, result.stderr + result.stdout
    assert (ralph_project.path / "greet.txt").read_text() == "hello"
    assert not (ralph_project.path / "gate-note.txt").exists()
    undone = ralph_project.events("gate_changes_undone")
    assert undone and undone[0]["gate"] == "tests"
    assert any("gate-note.txt" in change for change in undone[0]["changes"])
    assert any("greet.txt" in change for change in undone[0]["changes"])
