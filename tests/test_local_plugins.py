"""Project-local plugins (``[tool.ralph] plugins = ["ralph_local.py"]``, ralph/plugin/local.py),
through the real ``ralph`` command.

The local plugin of these tests records what runs in a canary file outside the project: which
version of it ran (``v1`` is the person's; anything the agent wrote says ``EVIL``).  What the
agent writes is plain data here (a replay action, or a patch file the scripted model's Bash call
applies); nothing of it runs in the test's own shell.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ralph.testing import RalphProject, ReplayScript, commit, say, set_fields, story, write_file
from ralph.testing.model_server import IterationScript, Turn, text, tool

LOCAL = """
    import os
    from ralph.api import Violation, hookimpl

    VERSION = {version!r}


    def _note(line):
        with open(os.environ["LOCAL_CANARY"], "a") as out:
            out.write(f"{{VERSION}} {{line}}\\n")


    _note("imported")


    @hookimpl
    def ralph_loop_event(event):
        if event.kind in ("run_started", "iteration_started", "run_finished"):
            _note(event.kind)


    @hookimpl
    def ralph_validate(context):
        if context.mode is None:
            return []
        return [Violation("local-check", f"the local plugin {{VERSION}} ran", severity="warning")]
"""


def local_source(version: str) -> str:
    return textwrap.dedent(LOCAL.format(version=version))


def configure(project: RalphProject, *names: str, source: str | None = None) -> None:
    """``[tool.ralph] plugins = [names]`` in pyproject.toml and ralph_local.py (``v1``), committed."""
    listed = ", ".join(f'"{name}"' for name in names)
    (project.path / "pyproject.toml").write_text(f'[project]\nname = "demo"\n\n[tool.ralph]\nplugins = [{listed}]\n')
    (project.path / "ralph_local.py").write_text(local_source("v1") if source is None else source)
    project.commit_all("the person's local plugin")


def replay(tmp_path: Path, *iterations: list[Any], name: str = "script.json") -> dict[str, str]:
    built = ReplayScript().extra_call("spec", None, say('```json\n{"verdict": "met", "unmet": [], "extra": []}\n```'))
    for number, actions in enumerate(iterations, 1):
        built.iteration(number, *actions)
    return {"RALPH_REPLAY_SCRIPT": str(built.write(tmp_path / name))}


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("ralph: error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return errors[0]


@pytest.fixture
def project(ralph_project: RalphProject, tmp_path: Path) -> RalphProject:
    ralph_project.write_stories([story("US-001"), story("US-002")])
    ralph_project.env["LOCAL_CANARY"] = str(tmp_path / "canary.txt")
    return ralph_project


def canary(tmp_path: Path) -> list[str]:
    path = tmp_path / "canary.txt"
    return path.read_text().splitlines() if path.exists() else []


DONE_1 = [set_fields("US-001", passes=True, notes="done"), commit("feat: [US-001] - a"), say("implemented")]
DONE_2 = [set_fields("US-002", passes=True, notes="done"), commit("feat: [US-002] - b"), say("implemented")]


def test_a_local_plugin_runs_in_the_loop(project: RalphProject, tmp_path: Path) -> None:
    configure(project, "ralph_local.py")
    result = project.run_replay("--skip-review", "-n", "2", env=replay(tmp_path, DONE_1, DONE_2))
    assert result.returncode == 0, result.stderr
    assert canary(tmp_path) == ["v1 imported", "v1 run_started", "v1 iteration_started", "v1 iteration_started",
                                "v1 run_finished"]
    assert {e["message"] for e in project.events("violation") if e["check"] == "local-check"} == {"the local plugin v1 ran"}
    assert project.events("protected_file_restored") == []


def test_what_the_agent_writes_mid_run_is_not_loaded_and_is_undone(project: RalphProject, tmp_path: Path) -> None:
    configure(project, "ralph_local.py")
    trusted = (project.path / "ralph_local.py").read_bytes()
    pyproject = (project.path / "pyproject.toml").read_text()
    evil = local_source("EVIL")
    attack = [
        write_file("ralph_local.py", evil),  # the plugin rewritten
        write_file("evil.py", evil.replace("EVIL", "EVIL2")),  # and another one named in the config
        write_file("pyproject.toml", pyproject.replace('plugins = ["ralph_local.py"]', 'plugins = ["ralph_local.py", "evil.py"]')),
        *DONE_1,
    ]
    result = project.run_replay("--skip-review", "-n", "2", env=replay(tmp_path, attack, DONE_2))
    assert result.returncode == 0, result.stderr
    # the run executed what it read at its start, in both iterations; nothing of the agent's
    assert not [line for line in canary(tmp_path) if "EVIL" in line], canary(tmp_path)
    assert canary(tmp_path).count("v1 iteration_started") == 2
    # and put the person's versions back after iteration 1, saying so
    assert (project.path / "ralph_local.py").read_bytes() == trusted
    assert 'plugins = ["ralph_local.py"]\n' in (project.path / "pyproject.toml").read_text()
    restored = {(e["iteration"], e["path"], e.get("part", "")) for e in project.events("protected_file_restored")}
    assert {(1, "ralph_local.py", ""), (1, "pyproject.toml", "[tool.ralph]")} <= restored, restored
    # the next run loads the person's version again
    again = project.run_replay("--skip-review", "-n", "1", "--fresh", env=replay(tmp_path, DONE_1, name="again.json"))
    assert again.returncode in (0, 1), again.stderr
    assert not [line for line in canary(tmp_path) if "EVIL" in line], canary(tmp_path)
    assert canary(tmp_path).count("v1 run_started") == 2


def test_a_plugin_file_that_fails_stops_the_run_with_one_line(project: RalphProject, tmp_path: Path) -> None:
    configure(project, "ralph_local.py", source="def broken(:\n")
    result = project.run_replay("--skip-review", "-n", "2", env=replay(tmp_path, DONE_1))
    assert result.returncode == 2
    line = one_line_error(result)
    assert "plugin 'ralph_local.py' (local, pyproject.toml) failed to load: SyntaxError" in line
    assert "RALPH_DISABLE_PLUGINS=ralph_local.py" in line
    assert project.run_dirs() == []
    doctor = project.run("doctor")
    assert "[FAIL] local plugin ralph_local.py: SyntaxError" in doctor.stdout, doctor.stdout
    going_on = project.run_replay("--skip-review", "-n", "2", env={**replay(tmp_path, DONE_1, DONE_2), "RALPH_DISABLE_PLUGINS": "ralph_local.py"})
    assert going_on.returncode == 0, going_on.stderr


@pytest.mark.parametrize(
    ("hook", "what"),
    [("ralph_register_runners", "a runner"), ("ralph_config_sections", "a config section")],
)
def test_a_local_plugin_cannot_add_what_other_commands_need(project: RalphProject, tmp_path: Path, hook: str, what: str) -> None:
    argument = "register" if hook.startswith("ralph_register") else ""
    configure(project, "ralph_local.py", source=f"from ralph.api import hookimpl\n\n@hookimpl\ndef {hook}({argument}):\n    pass\n")
    result = project.run_replay("--skip-review", "-n", "2", env=replay(tmp_path, DONE_1))
    assert result.returncode == 2
    assert f"adds {what}, which only an installed plugin may" in one_line_error(result)


@pytest.mark.parametrize("entry", ["../outside.py", "/etc/outside.py", "notes.txt", "~/x.py"])
def test_a_plugin_path_outside_the_project_is_refused(project: RalphProject, tmp_path: Path, entry: str) -> None:
    configure(project, entry)
    result = project.run_replay("--skip-review", "-n", "2", env=replay(tmp_path, DONE_1))
    assert result.returncode == 2
    line = one_line_error(result)
    assert "tool.ralph.plugins" in line and "must be a .py file inside the project" in line
    assert canary(tmp_path) == []


def test_a_symlinked_plugin_file_is_refused_not_followed(project: RalphProject, tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(local_source("OUTSIDE"))
    configure(project, "linked.py")
    (project.path / "linked.py").symlink_to(outside)
    project.commit_all("a link")
    result = project.run_replay("--skip-review", "-n", "2", env=replay(tmp_path, DONE_1))
    assert result.returncode == 2
    assert "local plugin 'linked.py' cannot be read safely" in one_line_error(result)
    assert canary(tmp_path) == []


def test_doctor_never_executes_a_local_plugin(project: RalphProject, tmp_path: Path) -> None:
    configure(project, "ralph_local.py")
    doctor = project.run("doctor")
    assert "local plugin ralph_local.py (sha256 " in doctor.stdout and "compiles" in doctor.stdout, doctor.stdout
    assert canary(tmp_path) == []  # not imported: nothing of it ran


def test_dry_run_while_a_run_is_active_does_not_load_local_plugins(project: RalphProject, tmp_path: Path) -> None:
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    configure(project, "ralph_local.py")
    lock = ProjectLock(git_dir(project.path))
    lock.acquire()  # as a run in another terminal holds it (its agent may be writing the file)
    try:
        result = project.run_replay("--skip-review", "-n", "2", "--dry-run", env=replay(tmp_path, DONE_1))
    finally:
        lock.release()
    assert result.returncode == 2
    assert "another `ralph run` is active in this project" in one_line_error(result)
    assert canary(tmp_path) == []
    dry = project.run_replay("--skip-review", "-n", "2", "--dry-run", env=replay(tmp_path, DONE_1))
    assert dry.returncode == 0, dry.stderr
    assert canary(tmp_path) == ["v1 imported"]


# -- through the real Claude Code CLI: the agent patches the plugin and the config with git apply ----


@pytest.mark.real_claude
def test_real_cli_agent_patching_the_local_plugin_never_runs_its_code(
    project: RalphProject, tmp_path: Path, scripted_model: Any, claude_binary: Any, claude_agent_env: Any
) -> None:
    configure(project, "ralph_local.py")
    trusted = (project.path / "ralph_local.py").read_bytes()
    pyproject = (project.path / "pyproject.toml").read_text()
    # the attack material, as a patch the agent applies: built by git here, applied by the agent's Bash call
    (project.path / "ralph_local.py").write_text(local_source("EVIL"))
    (project.path / "evil.py").write_text(local_source("EVIL2"))
    (project.path / "pyproject.toml").write_text(pyproject.replace('["ralph_local.py"]', '["ralph_local.py", "evil.py"]'))
    project.git("add", "-N", "evil.py")
    patch = project.git("diff")
    project.git("reset", "-q")
    project.git("checkout", "--", "ralph_local.py", "pyproject.toml")
    (project.path / "evil.py").unlink()
    (project.path / "attack.diff").write_text(patch)
    project.commit_all("attack material")

    def bash(command: str) -> Turn:
        return Turn([tool("Bash", {"command": command, "description": "step"})])

    passes = ("python3 -c \"import json;p='ralph/tasks.json';d=json.load(open(p));"
              "[s.update(passes=True) for s in d['userStories'] if s['id']=='{0}'];open(p,'w').write(json.dumps(d,indent=2))\"")
    script = IterationScript({
        # through python: the guards deny a plain `git apply` of a diff naming protected files; this checks the
        # loop's own restore after the iteration, behind them
        1: [bash("python3 -c \"import subprocess;subprocess.run(['git','apply','attack.diff'],check=True)\""),
            bash(passes.format("US-001")), bash("git add -A && git commit -qm 'feat: [US-001] - a'"),
            Turn([text("Done.")])],
        2: [bash(passes.format("US-002")), bash("git add -A && git commit -qm 'feat: [US-002] - b'"), Turn([text("Done.")])],
    })
    server = scripted_model(script)
    env = {**claude_agent_env(server.url), "LOCAL_CANARY": str(tmp_path / "canary.txt")}
    result = project.run("run", "--runner", "direct", "--agent", "claude", "--skip-review", "--timeout", "120", "-n", "2",
                         env=env, timeout=600)
    assert "EVIL" not in "\n".join(canary(tmp_path)), canary(tmp_path)
    assert canary(tmp_path).count("v1 iteration_started") == 2, (canary(tmp_path), result.stderr[-3000:])
    applied = [e for e in project.events("protected_file_restored") if e["iteration"] == 1]
    assert {(e["path"], e.get("part", "")) for e in applied} >= {("ralph_local.py", ""), ("pyproject.toml", "[tool.ralph]")}, applied
    assert (project.path / "ralph_local.py").read_bytes() == trusted
    assert '["ralph_local.py"]' in (project.path / "pyproject.toml").read_text()
    # the next run executes the person's version again, not the agent's evil.py
    server2 = scripted_model(IterationScript({1: [Turn([text("Nothing left.")])]}))
    again = project.run("run", "--runner", "direct", "--agent", "claude", "--skip-review", "--timeout", "120", "-n", "1",
                        env={**env, **claude_agent_env(server2.url)}, timeout=600)
    assert "EVIL" not in "\n".join(canary(tmp_path)), (canary(tmp_path), again.stderr[-2000:])
    assert canary(tmp_path).count("v1 run_started") == 2
