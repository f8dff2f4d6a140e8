"""A new user's first day, when things go wrong (issue 22 items 1, 3, 4, 5, 6, 9, 13, 14): one test or
more per item, each through the CLI as a person types it (a real ``ralph`` process in a real git
repository; the replay agent, or the real Claude Code CLI against the scripted model server, where
that is what the person would run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ralph.testing import replay
from ralph.testing.project import GIT_IDENTITY, RalphProject, ralph_command, story


def person_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a person with a fresh home and no ralph variables set (state in ~/.local/state)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RALPH_", "XDG_"))}
    return {**env, **GIT_IDENTITY, "HOME": str(home), **extra}


def ralph_at(cwd: Path, env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``ralph ARGS`` as a process in ``cwd``."""
    return subprocess.run([*ralph_command(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# -- item 3: the demo's "look around" commands find the run ------------------------------------------


@pytest.mark.parametrize("agent", ["replay", pytest.param("claude", marks=pytest.mark.real_claude)])
def test_item3_the_demos_look_around_commands_find_the_run(tmp_path: Path, agent: str, request: Any) -> None:
    """The demo drives the real CLI with a HOME of its own; its run still goes where `ralph status`
    looks (the person's state directory), so the commands it prints find it."""
    if agent == "claude":
        request.getfixturevalue("claude_binary")
    home = tmp_path / "home"
    home.mkdir()
    env = person_env(home, TMPDIR=str(tmp_path))
    demo = ralph_at(tmp_path, env, "demo", "--agent", agent, "--dir", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert f"status -d {tmp_path / 'demo'}" in demo.stdout
    for command in ("status", "report"):
        looked = ralph_at(tmp_path, env, command, "-d", str(tmp_path / "demo"))
        assert looked.returncode == 0, looked.stderr
        assert "no ralph run recorded" not in looked.stdout + looked.stderr
        assert "greet() says hello" in looked.stdout and "approved" in looked.stdout
    assert str(home / ".local" / "state" / "ralph") in ralph_at(tmp_path, env, "status", "-d", str(tmp_path / "demo")).stdout


def test_item14_demo_with_the_replay_agent_does_not_look_for_the_claude_cli(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    demo = ralph_at(tmp_path, person_env(home), "demo", "--agent", "replay", "--dir", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stderr
    assert "replay agent acts out" in demo.stdout
    assert "no Claude Code CLI found" not in demo.stdout


# -- item 1: why a gate failed is shown where people look ------------------------------------------


def gated_project(ralph_project: RalphProject, verify: list[str], **top: Any) -> RalphProject:
    ralph_project.write_stories([story("US-001")], verifyCommands=verify, **top)
    return ralph_project


def implement_once(tmp_path: Path, *extra: tuple[str, list[dict[str, Any]]], sleep_first: float = 0) -> dict[str, str]:
    """The replay agent implements US-001 every iteration (after sleeping ``sleep_first`` seconds)."""
    steps = ([replay.sleep(sleep_first)] if sleep_first else []) + [
        replay.write_file("a.txt", "a"), replay.set_fields("US-001", reviewStatus="needs_review"),
        replay.commit("feat: [US-001] - a"), replay.say("implemented")]
    script = replay.ReplayScript().default(*steps)
    for purpose, actions in extra:
        script.extra_call(purpose, None, *actions)
    return script.env(tmp_path / "script.json")


def looked_at(project: RalphProject, html: Path) -> dict[str, str]:
    """What a person reads after the run: ``ralph status``, ``ralph report``, ``ralph report --html FILE``."""
    seen = {}
    for name, args in (("status", ("status",)), ("report", ("report",)), ("html", ("report", "--html", str(html)))):
        result = project.run(*args)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        seen[name] = result.stdout
    seen["html"] = html.read_text(encoding="utf-8")
    return seen


@pytest.mark.parametrize("output", [[], ["-v"], ["-q"]], ids=["normal", "verbose", "quiet"])
def test_item1_a_command_not_found_is_shown_verbatim_with_where_the_rest_is(ralph_project, tmp_path, output) -> None:
    project = gated_project(ralph_project, ["no-such-tool-xyz --check"])
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", *output,
                         env=implement_once(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "tests gate failed for US-001 (exit 127: command not found)" in result.stderr
    assert "no-such-tool-xyz: not found" in result.stderr
    [kept] = [line.split("full output: ", 1)[1] for line in result.stderr.splitlines() if "full output: " in line]
    kept_file = Path(kept)
    assert kept_file.is_file() and not kept_file.is_relative_to(project.path)
    assert "no-such-tool-xyz: not found" in kept_file.read_text()
    seen = looked_at(project, tmp_path / "report.html")
    for where in ("status", "report"):
        assert "tests gate failed (exit 127: command not found)" in seen[where], where
        assert "no-such-tool-xyz: not found" in seen[where] and f"full output: {kept}" in seen[where], where
    assert "no-such-tool-xyz: not found" in seen["html"] and kept in seen["html"]


def test_item1_a_long_failure_shows_its_first_and_last_lines_and_keeps_all(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, ["seq 1 200 | sed 's/^/line /'; echo 'FAILED test_x.py::test_y'; exit 3"])
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=implement_once(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "tests gate failed for US-001 (exit 3)" in result.stderr
    assert "line 1\n" in result.stderr and "FAILED test_x.py::test_y" in result.stderr
    assert "line 100\n" not in result.stderr and "more lines ...]" in result.stderr
    [event] = project.events("gate_failed")
    assert event["left_out"] > 150
    kept = Path(event["log"]).read_text()
    assert all(f"line {n}\n" in kept for n in range(1, 201)) and "[exit 3]" in kept


def test_item1_the_spec_gates_reason_is_shown(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, [])
    not_met = replay.say('```json\n{"verdict": "not_met", "unmet": [{"criterion": "US-001 works", "where": "a.txt", '
                         '"why": "a.txt says a, not hello"}], "extra": []}\n```')
    steps = [replay.write_file("a.txt", "a"), replay.set_fields("US-001", passes=True, notes="done"),
             replay.commit("feat: [US-001] - a"), replay.say("implemented")]
    env = replay.ReplayScript().default(*steps).extra_call("spec", None, not_met).env(tmp_path / "script.json")
    result = project.run("run", "--runner", "direct", "--agent", "replay", "--skip-review", "-n", "1", env=env)
    assert result.returncode == 1, result.stderr
    assert "spec gate failed for US-001 (exit 1)" in result.stderr
    assert "NOT MET" in result.stderr and "a.txt says a, not hello" in result.stderr
    seen = looked_at(project, tmp_path / "report.html")
    assert all("a.txt says a, not hello" in seen[where] for where in ("status", "report", "html"))


def test_item1_a_quality_warning_is_shown(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, ["true"])
    (project.path / "ralph.toml").write_text("[quality]\nenabled = true\n")
    project.commit_all("quality review on")
    warn = [replay.say("WARNING: a.txt has no trailing newline")]
    env = implement_once(tmp_path, ("quality", warn))
    first = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=env)
    assert "quality warning (US-001): a.txt has no trailing newline (full output: " in first.stderr
    seen = looked_at(project, tmp_path / "quality.html")
    assert all("a.txt has no trailing newline" in seen[where] for where in ("status", "report", "html"))


def test_item1_an_iteration_timeout_is_shown(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, ["true"])
    slow = implement_once(tmp_path, sleep_first=30)
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", "--timeout", "1", env=slow)
    assert "iteration gate failed for US-001 (timed out)" in result.stderr, result.stderr
    assert "TIMEOUT: the implement iteration was stopped after 1s" in result.stderr
    seen = looked_at(project, tmp_path / "timeout.html")
    assert all("TIMEOUT: the implement iteration was stopped after 1s" in seen[where] for where in ("status", "report", "html"))


# -- item 4: run from anywhere in the project ---------------------------------------------------------


def test_item4_every_command_finds_the_project_from_a_subdirectory(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, [])
    deep = project.path / "src" / "pkg"
    deep.mkdir(parents=True)
    (deep / "mod.py").write_text("x = 1\n")
    project.commit_all("code")
    env = project.process_env(implement_once(tmp_path))
    dry = ralph_at(deep, env, "run", "--dry-run", "--agent", "replay")
    assert dry.returncode == 0, dry.stderr
    assert "story:   US-001" in dry.stdout
    run = ralph_at(deep, env, "run", "--runner", "direct", "--agent", "replay", "-n", "1")
    assert run.returncode == 1, run.stderr  # one iteration: implemented, not yet reviewed
    assert project.story("US-001")["reviewStatus"] == "needs_review"
    assert (project.path / "a.txt").is_file() and not (deep / "a.txt").exists()
    assert not (deep / "ralph").exists()
    for cwd in (deep, project.ralph_dir):
        for args in (("status",), ("report",), ("plan", "--check"), ("doctor", "--agent", "replay")):
            result = ralph_at(cwd, env, *args)
            assert "no ralph run recorded" not in result.stdout, (cwd, args)
            assert "Traceback" not in result.stderr and "does not exist" not in result.stderr, (cwd, args, result.stderr)
        assert "implement US-001" in ralph_at(cwd, env, "status").stdout
        assert "checked " + str(project.tasks_path) in ralph_at(cwd, env, "plan", "--check").stdout
    # -d still wins: the subdirectory as the project has no loop and no run
    pinned = ralph_at(project.path, env, "status", "-d", str(deep))
    assert "no ralph run recorded" in pinned.stdout


def test_item4_init_refuses_a_second_loop_inside_a_project_and_finds_the_top_level(tmp_path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    env = person_env(tmp_path)
    first = ralph_at(repo / "src", env, "init", "--name", "x")  # from a subdirectory: at the top level
    assert first.returncode == 0, first.stderr
    assert f"project: {repo}" in first.stdout
    assert (repo / "ralph" / "tasks.json").is_file() and not (repo / "src" / "ralph").exists()
    again = ralph_at(repo / "src", env, "init")
    assert again.returncode == 0 and "nothing to add" in again.stdout, again.stdout + again.stderr
    for where in (repo / "src", repo / "ralph"):
        nested = ralph_at(repo, env, "init", "-d", str(where))
        assert nested.returncode == 2, nested.stdout
        assert f"{repo} already has a Ralph loop ({repo / 'ralph'})" in nested.stderr
        assert nested.stderr.count("\n") == 1 and "nothing was written" in nested.stderr
        assert not (where / "ralph").exists()


def test_item4_init_refuses_a_second_loop_folder_beside_the_one_there(tmp_path) -> None:
    """`--ralph-dir` does not get around it: one loop per project, except `.ralph/PRD-N/` folders side by side."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    env = person_env(tmp_path)
    assert ralph_at(repo, env, "init", "--name", "x").returncode == 0
    for second in ("loop2", "ralph/inner", ".ralph/PRD-1"):
        refused = ralph_at(repo, env, "init", "--ralph-dir", second)
        assert refused.returncode == 2, (second, refused.stdout)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert f"{repo} already has a Ralph loop ({repo / 'ralph'})" in refused.stderr
        assert "`ralph init --ralph-dir ralph`" in refused.stderr and "nothing was written" in refused.stderr
        assert not (repo / second).exists()
    assert "kept ralph/tasks.json" in ralph_at(repo, env, "init", "--ralph-dir", "ralph").stdout  # the same loop: fine
    # a loop in the folder the config names counts too
    (repo / "loops").mkdir()
    shutil.move(repo / "ralph", repo / "loops" / "main")
    (repo / "ralph.toml").write_text('ralph_dir = "loops/main"\n')
    refused = ralph_at(repo, env, "init")
    assert refused.returncode == 2 and f"({repo / 'loops' / 'main'})" in refused.stderr, refused.stderr
    assert not (repo / "ralph").exists()
    # PRD folders for `ralph run --parallel` are the way to have several
    (repo / "ralph.toml").unlink()
    (repo / ".ralph").mkdir()
    shutil.move(repo / "loops" / "main", repo / ".ralph" / "PRD-1")
    added = ralph_at(repo, env, "init", "--ralph-dir", ".ralph/PRD-2")
    assert added.returncode == 0, added.stderr
    assert (repo / ".ralph" / "PRD-2" / "tasks.json").is_file()


# -- item 9: a person's change is never the agent's ---------------------------------------------------


def test_item9_init_force_waits_for_no_run_it_refuses_while_one_is_active(ralph_project, tmp_path) -> None:
    """`ralph init --force` during a run: refused (the run's files untouched); the run is not disturbed."""
    from ralph.testing.project import wait_for

    project = gated_project(ralph_project, [])
    started = tmp_path / "started"
    steps = [replay.run(f"touch {started} && sleep 4"), replay.write_file("a.txt", "a"),
             replay.set_fields("US-001", reviewStatus="needs_review"), replay.commit("feat: [US-001] - a"),
             replay.say("implemented")]
    env = replay.ReplayScript().default(*steps).env(tmp_path / "script.json")
    before = {name: (project.ralph_dir / name).read_bytes() for name in ("prd.md", "prompt.md", "progress.txt")}
    proc = project.start("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=env)
    try:
        wait_for(started.exists, timeout=60)
        during = project.run("init", "--force", "--name", "other")
    finally:
        out, err = proc.communicate(timeout=120)
    assert during.returncode == 2, during.stdout
    assert during.stderr.count("\n") == 1 and "Traceback" not in during.stderr
    assert during.stderr.startswith(f"ralph: error: a `ralph run` is active in {project.path} (pid {proc.pid}, started ")
    assert "then run `ralph init` again; nothing was written" in during.stderr
    assert not list(project.ralph_dir.glob("init-backup-*"))
    assert proc.returncode == 1, err  # one iteration: implemented, waiting for its review
    assert project.story("US-001")["reviewStatus"] == "needs_review"
    assert project.events("violation") == [] and "failed" not in err
    assert (project.ralph_dir / "prd.md").read_bytes() == before["prd.md"]
    assert (project.ralph_dir / "prompt.md").read_bytes() == before["prompt.md"]
    after = project.run("init", "--force", "--name", "other")  # the run is over: now it may
    assert after.returncode == 0, after.stderr
    assert "backed up ralph/prd.md" in after.stdout


@pytest.mark.real_claude
def test_item9_a_change_between_iterations_is_the_persons_never_the_agents(ralph_project, scripted_model, claude_binary,
                                                                           claude_agent_env) -> None:
    """While the loop waits out a usage limit after iteration 1, the person edits the task list and prd.md: the
    loop stops before the agent starts again, names the files, and leaves the edits as they are (before, the
    next iteration undid them and blamed the agent)."""
    import json
    import time

    from ralph.testing.model_server import IterationScript, usage_limit_reply
    from ralph.testing.project import wait_for
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    project = gated_project(ralph_project, [])
    script = IterationScript({
        1: bash_turns(["printf hi > hi.txt", set_fields_command("US-001", reviewStatus="needs_review"),
                       commit_command("feat: [US-001] - hi")], "implemented"),
        2: bash_turns([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
                       commit_command("review: [US-001] - approved")], "approved"),
    })
    limited = {"done": False}

    def responder(request: Any) -> Any:
        if script.key_of(request) == 2 and not limited["done"]:
            limited["done"] = True
            return usage_limit_reply(int(time.time()) + 8)
        return script(request)

    server = scripted_model(responder)
    proc = project.start("run", "--runner", "direct", "--agent", "claude", "-n", "3", env=claude_agent_env(server.url))
    try:
        wait_for(lambda: project.run_dirs() and project.events("usage_limit_wait"), timeout=120)
        tasks = json.loads(project.tasks_path.read_text())
        tasks["userStories"][0]["acceptanceCriteria"].append("hi.txt ends with a newline")
        edited = json.dumps(tasks, indent=2) + "\n"
        project.tasks_path.write_text(edited)  # what the person's editor saves
        (project.ralph_dir / "prd.md").write_text("# The plan, rewritten by its person\n")
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert "ralph/prd.md, ralph/tasks.json changed between iterations 1 and 2, while no agent ran: your change" in err
    assert "commit it (or undo it) and `ralph run` again" in out + err
    assert project.tasks_path.read_text() == edited  # kept as the person saved it
    assert (project.ralph_dir / "prd.md").read_text() == "# The plan, rewritten by its person\n"
    kinds = [e["kind"] for e in project.events()]
    after_wait = kinds[kinds.index("usage_limit_wait"):]
    assert after_wait == ["usage_limit_wait", "person_changed", "run_finished"], after_wait  # nothing undone, no blame
    assert [e["paths"] for e in project.events("person_changed")] == [["ralph/prd.md", "ralph/tasks.json"]]
    assert [e["iteration"] for e in project.events("iteration_started")] == [1, 2]  # the one limited call, no more
    assert project.summary()["exit_code"] == 2
    assert project.git("log", "-1", "--format=%s").strip() == "feat: [US-001] - hi"  # nothing committed after it


# -- item 13: regressions against the original specification -------------------------------------------


def exported_bundle(tmp_path: Path, where: str = "bundle") -> tuple[Path, str]:
    """``ralph plugin export DIR`` as a person runs it; (the plugin's root, its hook command)."""
    import json

    result = ralph_at(tmp_path, person_env(tmp_path), "plugin", "export", str(tmp_path / where))
    assert result.returncode == 0, result.stderr
    root = tmp_path / where / "ralph"
    hooks = json.loads((root / "hooks" / "hooks.json").read_text())
    commands = {h["command"] for entries in hooks["hooks"].values() for entry in entries for h in entry["hooks"]}
    [command] = commands
    return root, command


def run_hook_command(command: str, root: Path, payload: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The hook command through ``/bin/sh -c``, as Claude Code runs it (``CLAUDE_PLUGIN_ROOT`` set)."""
    return subprocess.run(["/bin/sh", "-c", command], input=payload, capture_output=True, text=True, timeout=60,
                          env={**env, "CLAUDE_PLUGIN_ROOT": str(root), "RALPH_HOOK_DAEMON": "0"}, cwd=root)


@pytest.mark.parametrize("payload", ["{bad", '{"hook_event_name": "PreToolUse", "tool_name": ', "[1, 2]", "\xff garbage"])
def test_item13_malformed_hook_input_in_a_loop_blocks_with_a_message(tmp_path: Path, payload: str) -> None:
    """The hook client as the exported bundle and a loop's settings run it, fed input that is not a JSON
    object: in a loop it blocks (exit 2, the status Claude Code blocks every event on) saying why, never
    a traceback; outside a loop it allows (fail-open), saying why."""
    import json
    import sys

    from ralph.hooks.wiring import claude_settings, compiled_hook_argv, loader_env
    from ralph.contracts import AgentChannel

    root, bundle_command = exported_bundle(tmp_path)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    channel = AgentChannel(hook_socket=tmp_path / "gone.sock", token="t", run_dir=tmp_path,
                           state_file=tmp_path / "state.json", tasks_file=tmp_path / "tasks.json",
                           hook_command=compiled_hook_argv(tmp_path), loader_env=loader_env(inherit=True))
    loop_command = json.loads(claude_settings(channel))["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    in_loop = {**env, "RALPH_HOOK_SOCKET": str(tmp_path / "gone.sock"), "RALPH_HOOK_TOKEN": "t"}
    for command in (bundle_command, loop_command):
        blocked = run_hook_command(command, root, payload, in_loop)
        assert blocked.returncode == 2, (command, blocked.stdout, blocked.stderr)
        assert "Traceback" not in blocked.stderr
        assert "ralph hook: the hook input is not a JSON object" in blocked.stderr
    allowed = run_hook_command(bundle_command, root, payload, env)
    assert allowed.returncode == 0 and json.loads(allowed.stdout) == {}, allowed.stderr
    assert "Traceback" not in allowed.stderr and "(action allowed)" in allowed.stderr


def test_item13_the_exported_plugin_finds_ralph_where_it_runs(tmp_path: Path) -> None:
    """No path of the exporting machine in the bundle; moved elsewhere, its hooks run with the Python
    of the `ralph` found on PATH when they run; with no ralph they allow the action, saying why."""
    import json
    import shutil
    import sys

    root, command = exported_bundle(tmp_path)
    bundle_text = "\n".join(p.read_text() for p in root.rglob("*") if p.is_file())
    assert sys.executable not in bundle_text and str(Path(sys.executable).parent) not in bundle_text
    assert str(tmp_path) not in bundle_text
    moved = tmp_path / "elsewhere" / "ralph"
    shutil.copytree(root, moved)
    shutil.rmtree(tmp_path / "bundle")
    # another machine: ralph installed in some venv, its console script on PATH (pip's shebang form)
    other_bin = tmp_path / "other-machine" / "bin"
    other_bin.mkdir(parents=True)
    (other_bin / "ralph").write_text(f"#!{sys.executable}\nimport sys\nfrom ralph.cli.main import main\nsys.exit(main())\n")
    (other_bin / "ralph").chmod(0o755)
    push = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git push"},
                       "session_id": "s", "cwd": str(tmp_path)})
    env = {"PATH": f"{other_bin}:/usr/bin:/bin", "HOME": str(tmp_path), "RALPH_STATE_DIR": str(tmp_path / "state"),
           "CLAUDE_PROJECT_DIR": str(tmp_path)}
    answer = run_hook_command(command, moved, push, env)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    # pip's long-path form of a console script: #!/bin/sh, then '''exec' "PYTHON" "$0" "$@"
    (other_bin / "ralph").write_text(f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    answer = run_hook_command(command, moved, push, env)
    assert json.loads(answer.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny", answer.stderr
    # no ralph anywhere: allowed, with the reason
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    for path in (f"{empty}:/usr/bin:/bin", str(empty)):
        bare = run_hook_command(command, moved, push, {**env, "PATH": path})
        assert bare.returncode == 0 and json.loads(bare.stdout) == {}, bare.stderr
        assert "Traceback" not in bare.stderr and "action allowed" in bare.stderr


@pytest.mark.parametrize("args", [("run", "--dry-run"), ("run", "--runner", "direct")], ids=["dry-run", "run"])
def test_item13_a_missing_prd_is_refused_before_iteration_1(ralph_project, tmp_path, args) -> None:
    project = gated_project(ralph_project, [])
    project.git("rm", "-q", "ralph/prd.md")
    project.commit_all("no prd")
    result = project.run(*args, "--agent", "replay", env=implement_once(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("ralph: error: ralph/prd.md is missing, and the prompt tells the agent to read it")
    assert "git checkout HEAD -- ralph/prd.md" in result.stderr and "`ralph init`" in result.stderr
    assert "Traceback" not in result.stderr and not project.run_dirs()
    assert project.story("US-001")["reviewStatus"] is None


def test_item13_the_cap_of_5_attempts_is_a_cap(ralph_project, tmp_path) -> None:
    """An error that points at missing information (a module not found) used to get a 6th attempt
    ("Attempts: 6/5"): its context expansion now comes within the cap."""
    project = gated_project(ralph_project, ["python3 -c 'import no_such_module_for_ralph'"])
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "12", env=implement_once(tmp_path),
                         timeout=300)
    assert result.returncode == 3, result.stdout + result.stderr
    implement = [e for e in project.events("iteration_started") if e["story"] == "US-001"]
    assert len(implement) == 5
    assert [e["decision"] for e in project.events("escalation")] == ["strategy-shift", "context-expansion", "stop"]
    assert "Attempts: 5/5" in result.stdout and "6/5" not in result.stdout
    assert project.story("US-001")["failed"] is True


JEST_SUITE_FAILED = "FAIL src/a.test.ts\n  Test suite failed to run\n\nTest Suites: 1 failed, 1 total\nTests:       0 total\n"
PYTEST_Q_NO_DURATION = "..F.FF.....\n3 failed, 10 passed\n"


@pytest.mark.real_claude
def test_item13_jest_suites_and_pytest_q_failures_are_detected(ralph_project, scripted_model, claude_binary,
                                                                 claude_agent_env) -> None:
    """Through the real CLI: the agent runs a Jest suite that does not compile and `pytest -q` without a
    duration line; the PostToolUse hook tells it the tests failed, and the next prompt carries the failure."""
    import shlex

    from ralph.testing.model_server import IterationScript, Turn, text, tool
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    project = gated_project(ralph_project, [])

    def bash(command: str) -> Turn:
        return Turn([tool("Bash", {"command": command, "description": "run the tests"})])

    jest = f"printf %s {shlex.quote(JEST_SUITE_FAILED)}; echo npx jest >/dev/null"
    pytest_q = f"printf %s {shlex.quote(PYTEST_Q_NO_DURATION)} # python -m pytest -q"
    implement = bash_turns(["printf hi > hi.txt", set_fields_command("US-001", reviewStatus="needs_review"),
                            commit_command("feat: [US-001] - hi")], "implemented")
    script = IterationScript({1: [bash(jest), bash(pytest_q), Turn([text("ok")])], 2: implement})
    server = scripted_model(script)
    result = project.run("run", "--runner", "direct", "--agent", "claude", "-n", "2", env=claude_agent_env(server.url))
    assert result.returncode == 1, result.stderr
    first = [r.text for r in server.requests if script.key_of(r) == 1]
    assert "Tests failed (jest): 1 test suite failed" in first[1]
    assert "Tests failed (pytest): 3 failed" in first[2]
    second = [r.text for r in server.requests if script.key_of(r) == 2]
    assert "Tests failed during the previous iteration" in second[0] and "3 failed, 10 passed" in second[0]


@pytest.mark.real_claude
def test_item13_check_2_5_skipped_is_shown_to_the_person_and_the_agent(ralph_project, scripted_model, claude_binary,
                                                                      claude_agent_env, tmp_path) -> None:
    """The exported plugin in an interactive session whose `.ralph-active` marker has no snapshot: Stop
    says Check 2.5 was skipped (to the person; and to the agent when other checks block)."""
    import json
    import sys

    from ralph.testing.model_server import SequenceScript, Turn, text

    project = gated_project(ralph_project, [])
    (project.path / ".ralph-active").write_text(json.dumps({"iterationMode": "implement", "ralphDir": str(project.ralph_dir)}))
    root, _ = exported_bundle(tmp_path)
    skipped = "transition check (2.5) skipped"

    def session(server_url: str) -> subprocess.CompletedProcess[str]:
        env = {**project.process_env(claude_agent_env(server_url)),
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        env.pop("RALPH_HOOK_SOCKET", None)
        return subprocess.run([str(claude_binary), "-p", "go", "--output-format", "stream-json", "--verbose",
                               "--dangerously-skip-permissions", "--plugin-dir", str(root)],
                              cwd=project.path, env=env, capture_output=True, text=True, timeout=120)

    clean = scripted_model(SequenceScript([Turn([text("done")])]))
    result = session(clean.url)  # the marker is the tree's only change: .gitignore'd by ralph init
    assert result.returncode == 0, result.stderr
    assert skipped in result.stdout and len(clean.requests) == 1
    (project.path / "stray.txt").write_text("uncommitted\n")  # Check 3 blocks the stop
    blocked = scripted_model(SequenceScript([Turn([text("done")]), Turn([text("still done")])]))
    session(blocked.url)
    assert len(blocked.requests) >= 2 and skipped in blocked.requests[1].text


def test_item13_incomplete_sessions_are_logged(ralph_project, tmp_path) -> None:
    """Seed 001's sessions.log: `incomplete:US-XXX:timestamp:reason` for each iteration that ended with its
    story where it was, written by the loop outside the project; an iteration that moved it on adds nothing."""
    import re
    import time

    project = gated_project(ralph_project, ["test ! -f a.txt || test -f b.txt"])
    implement = [replay.write_file("a.txt", "a"), replay.set_fields("US-001", reviewStatus="needs_review"),
                 replay.commit("feat: [US-001] - a"), replay.say("implemented")]
    fixed = [replay.write_file("b.txt", "b"), *implement]
    script = replay.ReplayScript().iteration(1, replay.say("I looked around")).iteration(2, *implement)
    script.iteration(3, replay.sleep(30)).iteration(4, *fixed)
    started = int(time.time())
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "4", "--timeout", "3",
                         env=script.env(tmp_path / "script.json"))
    assert result.returncode == 1, result.stderr
    log = project.run_dirs()[-1].parent.parent / "sessions.log"
    lines = log.read_text().splitlines()
    assert [line.split(":")[3] for line in lines] == ["end_turn", "gate_failed_tests", "timeout"]
    for line in lines:
        assert re.fullmatch(r"incomplete:US-001:\d+:[a-z_]+", line), line
        assert started <= int(line.split(":")[2]) <= time.time()
    assert not (project.path / "sessions.log").exists() and not (project.ralph_dir / "sessions.log").exists()


# -- item 5: failed agent iterations do not commit; no path of this machine in a committed file ----------


def test_item5_failed_iterations_do_not_commit_and_no_absolute_path_is_committed(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, ["test ! -f a.txt || test -f b.txt"])
    head = project.git("rev-parse", "HEAD").strip()
    failed = replay.ReplayScript().default(replay.say("Not logged in"), replay.exit_with(1))
    first = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "2", env=failed.env(tmp_path / "f.json"))
    assert first.returncode in (1, 7), first.stderr
    progress = (project.ralph_dir / "progress.txt").read_text()
    assert "the agent failed" not in progress and "exit code 1" not in progress
    ahead = project.git("log", "--format=%s", f"{head}..HEAD").split("\n")
    assert not [subject for subject in ahead if subject.startswith("ralph: iteration")], ahead
    assert project.git("status", "--porcelain").strip() == ""

    implement = [replay.write_file("a.txt", "a"), replay.set_fields("US-001", reviewStatus="needs_review"),
                 replay.commit("feat: [US-001] - a"), replay.say("implemented")]
    overwrite_prd = [replay.write_file("ralph/prd.md", "# mine now\n"), *implement]
    fixed = [replay.write_file("b.txt", "b"), *implement]
    approve = [replay.set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
               replay.commit("review: [US-001] - approved"), replay.say("approved <promise>COMPLETE</promise>")]
    script = (replay.ReplayScript().iteration(1, replay.sleep(30)).iteration(2, *overwrite_prd)
              .iteration(3, *fixed).iteration(4, *approve))
    second = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "4", "--timeout", "3",
                         env=script.env(tmp_path / "s.json"))
    assert second.returncode == 0, second.stdout + second.stderr
    progress = (project.ralph_dir / "progress.txt").read_text()
    assert "timed out after 3s" in progress and "the agent's output: <run dir " in progress
    assert "restored protected files" in progress
    # an older ralph wrote absolute run-directory paths into its notes: archive makes them symbolic
    run_dir = project.run_dirs()[-1]
    legacy = f"\n[ralph loop 2026-01-01 10:00] iteration 9: the agent's output: {run_dir}/iteration-009.agent.jsonl\n"
    with (project.ralph_dir / "progress.txt").open("a") as log:
        log.write(legacy)
    history = project.git("log", "-p", "--all", "--format=%B")  # everything the loop committed in both runs
    project.commit_all("an old note")
    archived = project.run("archive")
    assert archived.returncode == 0, archived.stderr
    [folder] = (project.path / "ralph-archive").iterdir()
    assert f"<run dir {run_dir.name}>/iteration-009.agent.jsonl" in (folder / "progress.txt").read_text()
    assert f"run {run_dir.name}" in (folder / "summary.md").read_text()

    committed = project.git("ls-files")
    contents = "\n".join((project.path / name).read_text(errors="replace") for name in committed.splitlines())
    for where, text in (("the files committed after the archive", contents), ("the runs' commits", history)):
        for path in (str(project.state_dir), str(project.path), str(tmp_path)):
            assert path not in text, (where, path)


# -- item 6: no tracebacks, anywhere ------------------------------------------------------------------


def test_item6_report_html_into_a_folder_and_a_missing_parent(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, [])
    folder = tmp_path / "reports"
    folder.mkdir()
    into = project.run("report", "--html", str(folder))
    assert into.returncode == 0, into.stderr
    assert (folder / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert f"wrote {folder / 'report.html'}" in into.stdout
    missing = project.run("report", "--html", str(tmp_path / "no" / "such" / "report.html"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stdout == ""  # one line, and no report printed before it
    assert missing.stderr.startswith(f"ralph: error: --html {tmp_path / 'no' / 'such' / 'report.html'}: ")
    assert "does not exist" in missing.stderr


def hostile_paths(base: Path) -> dict[str, Path]:
    """Paths a person (or a typo) gives where ralph expects something else, made fresh under ``base``:
    a directory where a file is expected, a missing parent, a file as a parent (what root cannot write
    through either), a place nobody may create files in (``/sys``), a dangling symlink, a symlink to a file."""
    base.mkdir(parents=True)
    (base / "a-dir").mkdir()
    (base / "a-file").write_text("not a folder\n")
    (base / "dangling").symlink_to(base / "nowhere")
    (base / "link-to-file").symlink_to(base / "a-file")
    return {
        "a-dir": base / "a-dir",
        "missing-parent": base / "no" / "such" / "x",
        "file-as-parent": base / "a-file" / "x",
        "unwritable": Path("/sys/ralph-first-day-test"),
        "dangling-symlink": base / "dangling",
        "symlink-to-a-file": base / "link-to-file",
    }


def leaf_commands() -> list[tuple[list[str], Any]]:
    """(command words, the click command) for every command of the command line, plugins' included."""
    import click

    from ralph.cli.main import cli

    found = []
    ctx = click.Context(cli)

    def walk(command: click.Command, words: list[str]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*words, name])
            return
        found.append((words, command))

    walk(cli, [])
    return found


PATH_NAMES = {"project_dir", "ralph_dir", "file", "directory", "html_path", "run", "label", "state_dir"}

PATH_FROM_ENVIRONMENT = {("ask",): "RALPH_HOOK_SOCKET"}
"""Commands whose path comes from the environment: the agent's ``ralph ask`` reaches the loop at the socket
the loop names there."""

NO_PATH = {("plugins",): "lists what is loaded", ("sandbox", "build"): "builds an image from the shipped recipe"}
"""Commands that take no path at all, and why."""


def every_path_parameter() -> list[tuple[list[str], str, str]]:
    """(command words, how the path is given: an option, ``ARG`` or ``ENV:NAME``, its name) for every command of
    the command line, plugins' included, and each parameter (or environment variable) that names a path."""
    import click

    found = []
    for words, command in leaf_commands():
        for param in command.params:
            if param.name in PATH_NAMES or isinstance(param.type, click.Path):
                option = param.opts[0] if isinstance(param, click.Option) else "ARG"
                found.append((words, option, str(param.name)))
        if tuple(words) in PATH_FROM_ENVIRONMENT:
            found.append((words, f"ENV:{PATH_FROM_ENVIRONMENT[tuple(words)]}", "environment"))
    return found


def test_item6_the_hostile_paths_walk_covers_every_command() -> None:
    """A new command (or a plugin's) is either walked with hostile paths below or said to take none."""
    walked = {tuple(words) for words, _, _ in every_path_parameter()}
    for words, _ in leaf_commands():
        assert tuple(words) in walked or tuple(words) in NO_PATH, f"a new command takes no path the walk knows: {words}"
    assert {("serve",), ("ask",), ("answer",)} <= walked


SAFE_ARGS = {"plan": ["--check"], "demo": ["--agent", "replay"], "run": ["--agent", "replay", "--runner", "direct"],
             "doctor": ["--agent", "replay", "--runner", "direct"], "serve": ["--check", "--port", "0"],
             "ask": ["is", "this", "a", "question?"], "answer": ["US-001", "an answer"]}
"""What keeps a command from starting an agent (or a server) of its own when the hostile path happens to be
accepted: ``serve --check`` checks everything and exits without serving."""


@pytest.mark.parametrize("words, option, name", every_path_parameter(),
                         ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_item6_every_command_with_hostile_paths_ends_in_one_line(ralph_project, tmp_path, words, option, name) -> None:
    project = gated_project(ralph_project, [])
    assert words[0] in {"answer", "archive", "ask", "demo", "doctor", "init", "nice", "plan", "plugin", "report", "restore",
                        "run", "sandbox", "serve", "status", "worktrees"}, f"a new command: check what SAFE_ARGS it needs: {words}"
    [command] = [c for w, c in leaf_commands() if w == words]
    takes_project = any(param.name == "project_dir" for param in command.params)
    for label, path in hostile_paths(tmp_path / "hostile").items():
        env = project.process_env(replay.ReplayScript().env(tmp_path / "script.json"))
        given: list[str] = []
        if option.startswith("ENV:"):
            env[option[4:]] = str(path)
        else:
            given = [str(path)] if option == "ARG" else [option, str(path)]
        pinned = ["-d", str(project.path)] if takes_project and name != "project_dir" else []
        args = [*words, *pinned, *given, *SAFE_ARGS.get(words[0], [])]
        result = ralph_at(project.path, env, *args, timeout=120)
        seen = f"ralph {' '.join(args)} ({label}): exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stdout + result.stderr, seen
        if words == ["doctor"] and result.returncode == 1:  # its answer is the list of checks, a failed one among them
            assert "[FAIL] " in result.stdout, seen
        elif result.returncode != 0:
            lines = result.stderr.strip().splitlines()
            # the agent's `ralph ask` answers in its own words (the agent reads them), one line too
            prefix = "ralph ask: " if words == ["ask"] else "ralph: error: "
            assert lines and lines[-1].startswith(prefix), seen
            assert len(lines) == 1 or all(line.startswith("ralph: warning: ") for line in lines[:-1]), seen
        shutil.rmtree(tmp_path / "hostile")
        hostile_paths(tmp_path / "hostile")


def test_item6_an_error_nobody_expected_is_one_line_naming_its_traceback(tmp_path, fake_dists) -> None:
    """A bug (here a plugin command's) still ends in one line, exit 2; the traceback is kept in a file."""
    fake_dists.add(
        {"boomer": "ralph_fake_boomer"},
        {"ralph_fake_boomer": "", "ralph_fake_boomer_cli": """
            import click

            @click.command()
            def boom():
                '''Divide by zero.'''
                return 1 / 0
        """},
        name="fake_boomer", commands={"boomer.boom": "ralph_fake_boomer_cli:boom"},
    )
    env = {**person_env(tmp_path), "PYTHONPATH": str(fake_dists.root), "RALPH_STATE_DIR": str(tmp_path / "state")}
    result = ralph_at(tmp_path, env, "boom")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("ralph: error: ZeroDivisionError: division by zero (")
    kept = Path(result.stderr.split("the traceback is in ", 1)[1].split(";", 1)[0])
    assert kept.parent == tmp_path / "state" and "Traceback" in kept.read_text() and "1 / 0" in kept.read_text()


# -- item 14: small things a person notices -------------------------------------------------------------


def test_item14_init_commit_does_not_ask_to_commit_what_it_committed(tmp_path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    done = ralph_at(repo, person_env(tmp_path), "init", "--name", "x", "--commit")
    assert done.returncode == 0, done.stderr
    steps = done.stdout.split("Next steps:", 1)[1]
    assert "committed what init wrote: " in done.stdout
    assert "`ralph init --commit` commits what init wrote" not in steps and ".gitignore" not in steps
    assert "Commit your edits: `git add ralph && git commit" in steps and "what init wrote is committed already" in steps
    plain = ralph_at(tmp_path / "repo", person_env(tmp_path), "init", "--force")
    assert "`ralph init --commit` commits what init wrote" in plain.stdout  # without --commit: the hint stays


LONG_TITLE = "Add a command line flag that prints the version number"


def test_item14_titles_use_the_room_there_is_and_counts_say_1_story(ralph_project, tmp_path) -> None:
    """On a wide terminal a 54-character title is shown whole (summary, status, report); on a narrow one it is
    cut with an ellipsis, never below 24 characters. One story, one iteration: "1 story", "1 iteration"."""
    ralph_project.write_stories([story("US-001", LONG_TITLE)], verifyCommands=[])
    project = ralph_project
    wide = {**implement_once(tmp_path), "COLUMNS": "200"}
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=wide)
    assert result.returncode == 1, result.stderr
    assert LONG_TITLE in result.stdout
    assert "run started: 1 story, " in result.stderr and "up to 1 iteration\n" in result.stderr
    assert "0/1 story done | 1 iteration | " in result.stdout
    for command in ("status", "report"):
        shown = project.run(command, env={"COLUMNS": "200"}).stdout
        assert LONG_TITLE in shown, shown
        assert " 1 stories" not in shown and " 1 iterations" not in shown, shown
        assert LONG_TITLE in project.run(command, env={"COLUMNS": ""}).stdout  # into a pipe: nothing to fit
        narrow = project.run(command, env={"COLUMNS": "60"}).stdout
        [row] = [line for line in narrow.splitlines() if line.startswith("US-001")]
        cut = row.split("  ")[1].strip() if command == "status" else row[8:].split("…")[0] + "…"
        assert cut.endswith("…") and LONG_TITLE.startswith(cut[:-1]) and len(cut) >= 24, (command, narrow)
    assert "(tasks-json): 1 story\n" in project.run("plan", "--check").stdout


def test_item14_how_a_process_stopped_is_said_in_words(ralph_project, tmp_path) -> None:
    """A timeout, Ctrl-C (the loop stops the agent with SIGTERM) and an agent killed by SIGKILL: words on every
    line, never -15, 143, -9 or 137."""
    import re
    import signal

    from ralph.testing.project import wait_for

    project = gated_project(ralph_project, [])
    timed = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", "--timeout", "1",
                        env=implement_once(tmp_path, sleep_first=30))
    assert re.search(r"iteration 1 finished in [0-9.]+s \(timed out, ", timed.stderr), timed.stderr
    started = tmp_path / "started"
    held = replay.ReplayScript().default(replay.write_file("half.txt", "half\n"), replay.run(f"touch {started}"),
                                         replay.sleep(60)).env(tmp_path / "held.json")
    proc = project.start("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=held)
    wait_for(started.exists, timeout=60)
    proc.send_signal(signal.SIGINT)
    out, interrupted = proc.communicate(timeout=120)
    assert proc.returncode == 130, interrupted
    assert re.search(r"iteration 1 finished in [0-9.]+s \(stopped by SIGTERM, ", interrupted), interrupted
    # the person stopped it: not blamed for what it could not commit, and the files are named with the next step
    assert "check git-clean failed" not in interrupted and "Left uncommitted: half.txt" in out, out + interrupted
    assert "state: finished: interrupted" in project.run("status").stdout
    (project.path / "half.txt").unlink()
    killed = replay.ReplayScript().default(replay.run("kill -KILL $PPID")).env(tmp_path / "killed.json")
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=killed)
    assert "agent was stopped by SIGKILL" in result.stderr, result.stderr
    assert re.search(r"\(stopped by SIGKILL, ", result.stderr), result.stderr
    for seen in (timed.stderr, interrupted, result.stderr):
        assert not re.search(r"exit (-15|143|-9|137|-2|130)\b|code (-15|143|-9|137)\b", seen), seen


def test_item14_a_trailing_comma_is_named_where_it_is(ralph_project) -> None:
    project = gated_project(ralph_project, [])
    text = project.tasks_path.read_text()
    lines = text.splitlines()
    last_criterion = max(i for i, line in enumerate(lines) if line.strip().startswith('"') and "acceptanceCriteria" not in line
                         and lines[i + 1].strip().startswith("]"))
    lines[last_criterion] += ","
    project.tasks_path.write_text("\n".join(lines) + "\n")
    column = len(lines[last_criterion])
    for args in (("plan", "--check"), ("run", "--dry-run", "--agent", "replay")):
        result = project.run(*args)
        assert result.returncode in (1, 2), result.stdout
        said = result.stdout + result.stderr
        assert f"not valid JSON at line {last_criterion + 1} column {column}: a comma before the closing `]`" in said, said
        assert "remove it" in said and "Traceback" not in said


def test_item14_a_stuck_story_is_said_in_plain_words(ralph_project, tmp_path) -> None:
    project = gated_project(ralph_project, ["echo 'AssertionError: greet() returned None'; exit 1"])
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "4", env=implement_once(tmp_path))
    assert "failed 3 times in a row the same way: the next attempt is told to drop its approach" in result.stderr, result.stderr
    assert "tier " not in result.stderr and "strategy-shift" not in result.stderr and "stuck (" not in result.stderr


# -- the dead ends of a first day -------------------------------------------------------------------------


def test_what_a_failed_run_left_uncommitted_is_named_with_the_safe_next_step(ralph_project, tmp_path) -> None:
    """A failed iteration commits nothing, so its files stay in the tree: the run's end names them and what to do,
    the next run's refusal says they are the last run's, and `git stash -u` (as it says) lets the next run start."""
    project = gated_project(ralph_project, [])
    failing = replay.ReplayScript().default(replay.write_file("junk.txt", "half done\n"),
                                            replay.say("Not logged in · Please run /login"), replay.exit_with(1))
    first = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "2", env=failing.env(tmp_path / "f.json"))
    assert first.returncode in (1, 7), first.stderr
    assert "Left uncommitted: junk.txt (the agent's: an iteration that failed or was stopped commits nothing)" in first.stdout
    assert "set them aside (`git stash -u`; `git stash pop` brings them back)" in first.stdout
    assert "check git-clean failed: There are uncommitted changes: ?? junk.txt\n" in first.stderr
    refused = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=implement_once(tmp_path))
    assert refused.returncode == 2, refused.stdout
    assert refused.stderr.startswith("ralph: error: the last `ralph run` here ended with changes its agent left uncommitted")
    assert "?? junk.txt" in refused.stderr and "`git stash -u`" in refused.stderr and "Traceback" not in refused.stderr
    (project.path / "mine.txt").write_text("the person's own\n")  # not the run's: the usual refusal
    theirs = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=implement_once(tmp_path))
    assert theirs.returncode == 2 and "the project has uncommitted changes" in theirs.stderr, theirs.stderr
    (project.path / "mine.txt").unlink()
    project.git("stash", "-u")
    went_on = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=implement_once(tmp_path))
    assert went_on.returncode == 1, went_on.stderr  # implemented, waiting for its review
    assert project.story("US-001")["reviewStatus"] == "needs_review"
    assert "junk.txt" in project.git("stash", "show", "--include-untracked", "--name-only")


def test_item6_output_into_a_pipe_that_closes_ends_quietly(tmp_path) -> None:
    """`ralph init | head -1`: the reader goes away; ralph ends without an error line (as click does)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    proc = subprocess.Popen([*ralph_command(), "init"], cwd=repo, env=person_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before ralph writes its first line
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert "ralph: error" not in err and "Traceback" not in err, err
    assert (repo / "ralph" / "tasks.json").is_file()
