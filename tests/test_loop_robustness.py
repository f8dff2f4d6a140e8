"""`ralph run` as a user meets it when things go wrong: bad input, a second run,
Ctrl-C, a hanging agent, an agent that says nothing, a broken task list.

These run the real CLI as a process, the replay agent as a real subprocess,
in real git repositories.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import RalphProject, process_alive, story, wait_for
from ralph.testing.replay import commit, replay_env, say, set_fields, write_file


def replay(project: RalphProject, iterations: dict[int, list[dict[str, Any]]], tmp_path: Path) -> dict[str, str]:
    return replay_env(tmp_path / "script.json", iterations)


# one story through implement and review, as the replay agent acts it out (test_first_hour uses them too)
IMPLEMENT = [write_file("a.txt", "a"), set_fields("US-001", reviewStatus="needs_review"), commit("feat: [US-001] - a"),
             say("implemented")]
APPROVE = [set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
           commit("review: [US-001] - approved"), say("approved <promise>COMPLETE</promise>")]


@pytest.fixture
def project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001")])
    return ralph_project


def test_malformed_tasks_json_exits_2_and_leaves_file_untouched(project, tmp_path) -> None:
    broken = b'{"project": "x", "userStories": [ {"id": "US-001",, } ]\n'
    project.tasks_path.write_bytes(broken)
    result = project.run_replay(env=replay(project, {}, tmp_path))
    assert result.returncode == 2
    assert "tasks.json: not valid JSON at line 1" in result.stderr
    assert project.tasks_path.read_bytes() == broken


def test_schema_error_names_story_and_field(project, tmp_path) -> None:
    data = project.tasks()
    data["userStories"][0]["acceptanceCriteria"] = []
    raw = json.dumps(data, indent=2).encode()
    project.tasks_path.write_bytes(raw)
    result = project.run_replay(env=replay(project, {}, tmp_path))
    assert result.returncode == 2
    assert "userStories[0] (US-001).acceptanceCriteria: must not be empty" in result.stderr
    assert project.tasks_path.read_bytes() == raw


def test_not_a_git_repository(tmp_path) -> None:
    from ralph.testing.project import RalphProject as P

    plain = tmp_path / "plain"
    plain.mkdir()
    result = P(plain, tmp_path / "state").run("run", "--agent", "replay")
    assert result.returncode == 2
    assert "is not a git repository" in result.stderr


def test_missing_ralph_dir_points_at_init(tmp_path, project) -> None:
    result = project.run("run", "--ralph-dir", "nowhere")
    assert result.returncode == 2
    assert "run `ralph init` first" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runner", "warp-drive"], "unknown runner 'warp-drive'; available: auto, bwrap, direct"),
        (["--agent", "hal"], "unknown agent 'hal'; available: claude, codex, replay"),
        (["--policy", "yolo"], "unknown policy 'yolo'"),
        (["-n", "101"], "is above the limit of 100 iterations"),
    ],
)
def test_unknown_plugins_and_runaway_iterations_are_refused(project, args, message) -> None:
    result = project.run("run", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_iteration_limit_can_be_raised_explicitly(project, tmp_path) -> None:
    env = replay(project, {1: IMPLEMENT, 2: APPROVE}, tmp_path)
    result = project.run_replay("-n", "150", "--iteration-limit", "150", env=env)
    assert result.returncode == 0, result.stderr


def test_missing_agent_binary_is_a_clear_error(project) -> None:
    result = project.run("run", "--agent", "claude", "--runner", "direct", env={"RALPH_CLAUDE_BINARY": "/nonexistent/claude"})
    assert result.returncode == 2
    assert "agent 'claude' cannot run" in result.stderr and "/nonexistent/claude" in result.stderr


def test_bad_config_names_toml_path(project) -> None:
    (project.path / "pyproject.toml").write_text("[tool.ralph]\nreview_cap = 0\n")
    result = project.run("run", "--dry-run")
    assert result.returncode == 2
    assert "`tool.ralph.review_cap` must be an integer >= 1" in result.stderr


def test_dry_run_shows_mode_story_and_prompt_and_runs_nothing(project, tmp_path) -> None:
    env = replay(project, {1: IMPLEMENT}, tmp_path)
    result = project.run_replay("--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    assert "mode:    implement" in result.stdout
    assert "story:   US-001" in result.stdout
    assert "# Ralph Loop iteration 1 of 15" in result.stdout
    assert not (project.path / "a.txt").exists()
    assert project.run_dirs() == []


def test_second_run_is_refused_by_the_lock(project, tmp_path) -> None:
    env = replay(project, {1: [{"sleep": 30}]}, tmp_path)
    first = project.start("run", "--runner", "direct", "--agent", "replay", env=env)
    try:
        wait_for(lambda: (project.path / ".ralph-active").exists())
        second = project.run_replay(env=env)
        assert second.returncode == 2
        assert f"another `ralph run` is active in this project (pid {first.pid}" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=30)


def test_sigint_stops_agent_releases_lock_removes_marker(project, tmp_path) -> None:
    pid_file = tmp_path / "agent.pid"
    env = replay(project, {1: [{"run": f"echo $PPID > {pid_file}; sleep 60"}]}, tmp_path)
    proc = project.start("run", "--runner", "direct", "--agent", "replay", env=env)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
    agent_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "SIGINT received" in stderr
    assert not (project.path / ".ralph-active").exists()
    assert not process_alive(agent_pid)
    # the lock is free again: a new run starts (and completes), resuming the interrupted run's state
    result = project.run_replay("--resume", env=replay(project, {1: IMPLEMENT, 2: APPROVE}, tmp_path))
    assert result.returncode == 0, result.stderr


def test_sigterm_also_cleans_up(project, tmp_path) -> None:
    env = replay(project, {1: [{"sleep": 60}]}, tmp_path)
    proc = project.start("run", "--runner", "direct", "--agent", "replay", env=env)
    wait_for(lambda: (project.path / ".ralph-active").exists())
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143  # 128 + SIGTERM; 130 is for SIGINT
    assert not (project.path / ".ralph-active").exists()
    assert project.summary()["reason"] == "interrupted (SIGTERM)"


def test_timeout_stops_a_hanging_agent_and_the_loop_goes_on(project, tmp_path) -> None:
    env = replay(project, {1: [{"sleep": 60}], 2: IMPLEMENT, 3: APPROVE}, tmp_path)
    started = time.monotonic()
    result = project.run_replay("--timeout", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 50
    assert [e["iteration"] for e in project.events("iteration_timeout")] == [1]
    assert "timed out after 2s" in result.stderr


def test_empty_responses_are_retried_with_a_cap(project, tmp_path) -> None:
    env = replay(project, {1: []}, tmp_path)
    result = project.run_replay("-n", "1", env=env)
    assert result.returncode == 1
    retries = [e["retry"] for e in project.events("empty_response")]
    assert retries == [1, 2, None]


def test_unparseable_task_list_after_iteration_is_restored(project, tmp_path) -> None:
    before = project.tasks_path.read_text()
    breaking = [{"write": {"path": "ralph/tasks.json", "content": "{ oops"}}, {"say": "oops"}]
    env = replay(project, {1: breaking, 2: IMPLEMENT, 3: APPROVE}, tmp_path)
    result = project.run_replay(env=env)
    assert result.returncode == 0, result.stderr
    restored = project.events("tasks_restored")
    assert [e["iteration"] for e in restored] == [1]
    kept = project.run_dirs()[-1] / "iteration-001.tasks-invalid.json"
    assert kept.read_text() == "{ oops"
    assert json.loads(before)["userStories"][0]["id"] == "US-001"


def test_dirty_tree_after_iteration_is_reported_to_the_next(project, tmp_path) -> None:
    sloppy = [{"write": {"path": "loose.txt", "content": "x"}}, {"say": "forgot to commit"}]
    env = replay(project, {1: sloppy, 2: IMPLEMENT, 3: APPROVE}, tmp_path)
    result = project.run_replay(env=env)
    assert result.returncode == 0, result.stderr
    checks = [e["check"] for e in project.events("violation") if e["iteration"] == 1]
    assert checks == ["git-clean"]
    prompt2 = (project.run_dirs()[-1] / "iteration-002.prompt.md").read_text()
    assert "loose.txt" in prompt2 and "commit ALL changes" in prompt2


def test_unknown_dependency_is_a_task_list_error_before_any_agent(ralph_project, tmp_path) -> None:
    ralph_project.write_stories([story("US-001", dependsOn=["US-404"])])
    result = ralph_project.run_replay(env=replay(ralph_project, {}, tmp_path))
    assert result.returncode == 2  # issue 12 item 5: was "no story can be selected", exit 1
    assert "US-001 depends on 'US-404', which is not a story in this task list" in result.stderr
    assert ralph_project.run_dirs() == []


def test_status_reads_the_last_run(project, tmp_path) -> None:
    env = replay(project, {1: IMPLEMENT, 2: APPROVE}, tmp_path)
    assert project.run_replay(env=env).returncode == 0
    status = project.run("status")
    assert status.returncode == 0
    assert "state: finished" in status.stdout
    assert "US-001" in status.stdout and "approved" in status.stdout
    assert (project.run_dirs()[-1] / "iteration-001.agent.jsonl").read_text().count('"type": "result"') == 1



def test_a_prd_folder_with_progress_md_gets_the_loop_notes_there(ralph_project, tmp_path) -> None:
    prd = ralph_project.path / ".ralph" / "PRD-1"
    prd.mkdir(parents=True)
    for name in ("prompt.md", "prd.md"):
        (prd / name).write_text((ralph_project.ralph_dir / name).read_text())
    (prd / "progress.md").write_text("# Progress\n")
    data = ralph_project.tasks()
    data["userStories"] = [story("US-001")]
    (prd / "tasks.json").write_text(json.dumps(data, indent=2) + "\n")
    ralph_project.commit_all("prd 1")
    cheat = [{"set": {"story": "US-001", "fields": {"reviewStatus": "approved", "passes": True, "notes": "x"}}},
             {"commit": "cheat"}, {"say": "done"}]
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--prd", "1", "-n", "1",
                               env=replay(ralph_project, {1: cheat}, tmp_path))
    assert result.returncode == 1, result.stderr
    assert "undid illegal review-field changes" in (prd / "progress.md").read_text()
    assert not (prd / "progress.txt").exists()


def test_a_failure_while_the_run_sets_up_gives_back_the_lock_and_signal_handlers(project, tmp_path, monkeypatch) -> None:
    """A failure between the lock and iteration 1 (run directory, trusted copy, hook server), say a full
    disk, leaves nothing held: a loop run inside a long-lived process (a fleet actor) can be run again."""
    from ralph.session import open_session
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    monkeypatch.setenv("RALPH_STATE_DIR", str(project.state_dir))
    monkeypatch.setenv("RALPH_REPLAY_SCRIPT", replay(project, {1: IMPLEMENT}, tmp_path)["RALPH_REPLAY_SCRIPT"])
    loop = open_session(project.path, {"runner": "direct", "agent": "replay"}).build_loop()
    handler = signal.getsignal(signal.SIGINT)
    lock = ProjectLock(git_dir(project.path))

    def disk_full(run_dir: Path, tasks: Any) -> None:
        assert lock.is_held() and signal.getsignal(signal.SIGINT) is not handler
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loop.trusted, "take", disk_full)
    with pytest.raises(OSError, match="No space left"):
        loop.run()
    assert not lock.is_held()
    assert signal.getsignal(signal.SIGINT) is handler


def test_stop_checks_build_the_snapshot_once_and_hand_each_check_its_own_copy(project, tmp_path, monkeypatch) -> None:
    """The pre-iteration snapshot is built once per iteration, not per Stop; a validator that changes the
    snapshot it was handed changes no later Stop's (each gets a copy), so every Stop answers the same."""
    from ralph.session import open_session

    monkeypatch.setenv("RALPH_STATE_DIR", str(project.state_dir))
    monkeypatch.setenv("RALPH_REPLAY_SCRIPT", replay(project, {1: IMPLEMENT}, tmp_path)["RALPH_REPLAY_SCRIPT"])
    loop = open_session(project.path, {"runner": "direct", "agent": "replay"}).build_loop()
    before = loop.preflight()
    selection = loop.policy.select(before)
    assert selection is not None and selection.mode == "implement"
    project.write_stories([story("US-001", passes=True)], commit=False)  # illegal in an implement iteration
    seen: list[dict[str, Any]] = []
    validate = loop.host.validate

    def validate_then_spoil(context: Any) -> Any:
        seen.append(dict(context.snapshot))
        found = validate(context)
        context.snapshot.clear()
        return found

    monkeypatch.setattr(loop.host, "validate", validate_then_spoil)
    answers = [[(v.check, v.message) for v in loop.context.checks.stop_checks(selection, before)] for _ in range(2)]
    assert seen == [before.snapshot()] * 2 and seen[0]
    assert answers[0] == answers[1] and any(check == "transitions" for check, _ in answers[0])
    cached = loop.context.checks.snapshot_of
    assert cached is not None and cached[1] == before.snapshot()


def test_a_file_name_that_is_not_utf8_does_not_stop_the_loop(project, tmp_path) -> None:
    # the agent's work includes a file whose name is not UTF-8: git lists it as raw bytes
    make_it = "python3 -c " + json.dumps("open(b'odd-\\xff-name.txt', 'w').write('x')")
    iterations = {1: [*IMPLEMENT, {"run": make_it}], 2: APPROVE}  # made after the commit: left untracked
    result = project.run_replay(env=replay(project, iterations, tmp_path))

    assert not project.events("loop_crashed"), result.stdout + result.stderr
    assert result.returncode == 0, result.stderr + result.stdout
    assert project.story("US-001")["passes"] is True
