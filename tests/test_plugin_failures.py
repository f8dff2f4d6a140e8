"""What happens when a plugin breaks (docs/plugins.md, "When a plugin breaks"), through real `ralph` processes.

Each broken plugin is a real distribution: a ``*.dist-info`` with an entry point and the module,
in a directory put on ``PYTHONPATH`` of the ``ralph`` process.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ralph.testing import RalphProject, ReplayScript, commit, say, set_fields, story
from ralph.testing import run as run_step

DIST = "broken-plugin"


def install(tmp_path: Path, plugin: str, source: str, name: str = "brk") -> dict[str, str]:
    """A distribution ``broken-plugin 1.0`` whose entry point ``name`` is module ``plugin``."""
    site = tmp_path / "site"
    info = site / f"{DIST.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ralph]\n{name} = {plugin}\n")
    (site / f"{plugin}.py").write_text(textwrap.dedent(source))
    return {"PYTHONPATH": str(site)}


MET = say('```json\n{"verdict": "met", "unmet": [], "extra": []}\n```')
"""The spec gate's reviewer (an extra call of the replay agent) finds every criterion met."""


def script(project: RalphProject, tmp_path: Path, *iterations: list[dict[str, Any]]) -> dict[str, str]:
    built = ReplayScript().extra_call("spec", None, MET)
    for number, actions in enumerate(iterations, 1):
        built.iteration(number, *actions)
    return {"RALPH_REPLAY_SCRIPT": str(built.write(tmp_path / "script.json"))}


IMPLEMENT = [set_fields("US-001", passes=True, notes="done"), commit("feat: [US-001] - a"), say("implemented")]


@pytest.fixture
def project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001")])
    return ralph_project


def one_line_error(result: Any) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("ralph: error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return errors[0]


def test_a_plugin_that_fails_to_import_stops_the_run_before_iteration_1(project: RalphProject, tmp_path: Path) -> None:
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_import", "raise ImportError('no module named shellparse')")}
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2
    line = one_line_error(result)
    assert f"plugin 'brk' ({DIST} 1.0) failed to load: ImportError: no module named shellparse" in line
    assert "RALPH_DISABLE_PLUGINS=brk" in line
    assert project.run_dirs() == []  # nothing ran
    assert project.story("US-001")["passes"] is False
    # ralph plugins and --help still work; disabling it explicitly is the way on
    listing = project.run("plugins", env=env)
    assert listing.returncode == 1 and "FAILED: ImportError" in listing.stdout
    assert project.run("--help", env=env).returncode == 0
    going_on = project.run_replay("--skip-review", "-n", "3", env={**env, "RALPH_DISABLE_PLUGINS": "brk"})
    assert going_on.returncode == 0, going_on.stderr


def test_a_plugin_needing_a_newer_api_is_reported_and_not_loaded(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import hookimpl
        RALPH_API = "3"
        LOADED = []

        @hookimpl
        def ralph_validate(context):
            raise AssertionError("an incompatible plugin must never be called")
    """
    env = install(tmp_path, "brk_future", source)
    listing = project.run("plugins", env=env)
    assert listing.returncode == 1
    row = next(line for line in listing.stdout.splitlines() if line.startswith("brk "))
    assert "INCOMPATIBLE: needs ralph plugin API 3, this ralph provides 2.0: upgrade ralph" in row
    result = project.run_replay("--skip-review", "-n", "3", env={**env, **script(project, tmp_path, IMPLEMENT)})
    assert result.returncode == 2 and "is incompatible" in one_line_error(result)


VALIDATOR = """
    from ralph.api import hookimpl

    @hookimpl
    def ralph_validate(context):
        if {when}:
            raise ValueError("validator exploded")
        return []
"""


def test_a_validator_that_raises_before_iteration_1_stops_with_one_line(project: RalphProject, tmp_path: Path) -> None:
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_validator", VALIDATOR.format(when="True"))}
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2
    line = one_line_error(result)
    assert f"validator plugin 'brk' ({DIST} 1.0) raised ValueError: validator exploded" in line
    assert "RALPH_DISABLE_PLUGINS=brk" in line
    assert project.run_dirs() == []


def test_a_validator_that_raises_mid_run_stops_it_and_status_says_why(project: RalphProject, tmp_path: Path) -> None:
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_validator", VALIDATOR.format(when="context.mode is not None"))}
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2
    assert f"validator plugin 'brk' ({DIST} 1.0) raised ValueError" in one_line_error(result)
    summary = project.summary()
    assert summary["exit_code"] == 2 and summary["reason"].startswith("stopped: validator plugin 'brk'")
    assert [e["plugin"] for e in project.events("run_stopped")] == ["brk"]
    status = project.run("status", env=env)
    assert "killed" not in status.stdout
    assert "stopped (exit 2): stopped: validator plugin 'brk'" in status.stdout
    assert not (project.path / ".ralph-active").exists()
    again = project.run_replay("--skip-review", "-n", "3", "--resume", env=script(project, tmp_path, IMPLEMENT))  # the lock is free
    assert again.returncode == 0, again.stderr


def test_a_gate_that_raises_stops_the_run(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import Gate, hookimpl

        class BrokenGate(Gate):
            name = "broken"

            def run(self, context):
                raise RuntimeError("gate exploded")

        @hookimpl
        def ralph_register_gates(register):
            register(BrokenGate)
    """
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_gate", source)}
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2
    assert f"gate plugin 'brk' ({DIST} 1.0) raised RuntimeError: gate exploded" in one_line_error(result)
    assert project.summary()["exit_code"] == 2
    assert project.story("US-001")["passes"] is True  # the agent's work is left as it was


def test_a_gate_that_fails_to_construct_stops_before_iteration_1(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import Gate, hookimpl

        class BrokenGate(Gate):
            name = "broken"

            def enabled(self):
                raise KeyError("no such setting")

            def run(self, context):
                raise AssertionError("never")

        @hookimpl
        def ralph_register_gates(register):
            register(BrokenGate)
    """
    result = project.run_replay("--skip-review", "-n", "3", env={**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_gate2", source)})
    assert result.returncode == 2
    assert f"gate plugin 'brk' ({DIST} 1.0) raised KeyError" in one_line_error(result)
    assert project.run_dirs() == []


def test_a_guard_that_raises_denies_the_call_and_stops_the_run(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import hookimpl

        @hookimpl
        def ralph_pre_tool_use(event):
            raise RuntimeError("guard exploded")
    """
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_guard", source)}
    # the replay agent calls no hooks itself: a step of its script makes a PreToolUse call to the
    # loop's hook server, as the agent-side hook client does
    caller = tmp_path / "call_hook.py"
    caller.write_text(textwrap.dedent(f"""
        import json, os, socket
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.environ["RALPH_HOOK_SOCKET"])
        payload = {{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {{"command": "true"}}, "session_id": "s"}}
        s.sendall(json.dumps({{"payload": payload, "token": os.environ["RALPH_HOOK_TOKEN"]}}).encode() + b"\\n")
        answer = s.makefile().readline()
        with open({str(tmp_path / "hook-answer.json")!r}, "w") as out:
            out.write(answer)
    """))
    built = ReplayScript().extra_call("spec", None, MET).iteration(1, run_step(f"{sys.executable} {caller}"), *IMPLEMENT)
    env["RALPH_REPLAY_SCRIPT"] = str(built.write(tmp_path / "guard-script.json"))
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2
    assert f"guard plugin 'brk' ({DIST} 1.0) raised RuntimeError: guard exploded" in one_line_error(result)
    # the loop records its answer (the agent itself is stopped at once, maybe before it reads it)
    answer = next(e["output"] for e in project.events("hook") if e["event"] == "PreToolUse")
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "guard exploded" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_reporter_that_raises_is_disabled_and_the_run_goes_on(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import hookimpl

        @hookimpl
        def ralph_loop_event(event):
            if event.kind == "iteration_started":
                raise RuntimeError("reporter exploded")
    """
    result = project.run_replay("--skip-review", "-n", "3", env={**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_reporter", source)})
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "reporter exploded" in line]
    assert len(warnings) == 1
    assert f"reporter 'brk' ({DIST} 1.0) raised RuntimeError" in warnings[0] and "disabled" in warnings[0]
    assert project.story("US-001")["passes"] is True
    disabled = project.events("reporter_disabled")
    assert [e["plugin"] for e in disabled] == ["brk"]  # the event log (another reporter) still works


def test_status_follow_warns_once_about_a_reporter_that_did_not_load(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import hookimpl

        raise ImportError("no module named rich_reporter_theme")

        @hookimpl
        def ralph_loop_event(event):
            print("never", event.kind)
    """
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_follow", source)}
    finished = project.run_replay("--skip-review", "-n", "3", env={**env, "RALPH_DISABLE_PLUGINS": "brk"})
    assert finished.returncode == 0, finished.stderr
    followed = project.run("status", "--follow", "--no-live", env=env)
    assert followed.returncode == 0, followed.stderr
    assert "Traceback" not in followed.stderr
    warnings = [line for line in followed.stderr.splitlines() if "'brk'" in line]
    assert warnings == [
        f"ralph: warning: plugin 'brk' ({DIST} 1.0) is not loaded: "
        "FAILED: ImportError: no module named rich_reporter_theme"
    ]
    assert "US-001" in followed.stdout  # the other reporters (the console view) still show the run
    quiet = project.run("status", "--follow", "--no-live", env={**env, "RALPH_DISABLE_PLUGINS": "brk"})
    assert quiet.returncode == 0 and "'brk'" not in quiet.stderr, quiet.stderr


def test_a_disabled_plugin_is_named_as_disabled(project: RalphProject, tmp_path: Path) -> None:
    result = project.run_replay("--skip-review", "-n", "3", env={"RALPH_DISABLE_PLUGINS": "direct"})
    assert result.returncode == 2
    line = one_line_error(result)
    assert "runner 'direct' is not available: plugin 'direct' is disabled (RALPH_DISABLE_PLUGINS)" in line


REGISTRATION_HOOKS = [
    "ralph_register_runners",
    "ralph_register_agents",
    "ralph_register_policies",
    "ralph_register_task_stores",
    "ralph_register_gates",
    "ralph_register_fleet_engines",
    "ralph_config_sections",
]


@pytest.mark.parametrize("hook", REGISTRATION_HOOKS)
def test_a_plugin_whose_registration_raises_is_a_load_failure(project: RalphProject, tmp_path: Path, hook: str) -> None:
    arg = "register" if hook.startswith("ralph_register") else ""
    source = f"""
        from ralph.api import hookimpl

        @hookimpl
        def {hook}({arg}):
            raise RuntimeError("registration exploded")
    """
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_reg", source)}
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2
    line = one_line_error(result)
    assert f"plugin 'brk' ({DIST} 1.0) failed to load: {hook} raised RuntimeError: registration exploded" in line
    assert "RALPH_DISABLE_PLUGINS=brk" in line
    assert project.run_dirs() == []
    assert project.story("US-001")["passes"] is False
    listing = project.run("plugins", env=env)
    assert listing.returncode == 1, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith("brk "))
    assert f"FAILED: {hook} raised RuntimeError: registration exploded" in row
    assert "Traceback" not in listing.stderr
    assert project.run("--help", env=env).returncode == 0
    doctor = project.run("doctor", env=env)  # the checks `ralph run` makes: this one first
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert doctor.stdout.startswith(f"[FAIL] plugin 'brk' ({DIST} 1.0) failed to load: {hook} raised RuntimeError")
    assert "RALPH_DISABLE_PLUGINS=brk" in doctor.stdout
    # named once, by the FAIL check that carries the fix: not again as open_session's warning
    assert (doctor.stdout + doctor.stderr).count(f"plugin 'brk' ({DIST} 1.0)") == 1, doctor.stdout + doctor.stderr
    assert "warning" not in doctor.stderr
    going_on = project.run_replay("--skip-review", "-n", "3", env={**env, "RALPH_DISABLE_PLUGINS": "brk"})
    assert going_on.returncode == 0, going_on.stderr
    # the commands reading that run load the plugins too (--follow's reporters), the broken one included
    for command in (["status"], ["status", "--follow", "--no-live"]):
        shown = project.run(*command, env=env)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (command, shown.stderr)
        assert "US-001" in shown.stdout, command


def test_what_a_plugin_registered_before_its_hook_raised_is_not_kept(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import Runner, hookimpl

        class HalfRunner(Runner):
            name = "half"

            def availability(self):
                raise AssertionError("a runner of a plugin that did not load is never used")

            def run(self, *args, **kwargs):
                raise AssertionError("a runner of a plugin that did not load is never used")

        @hookimpl
        def ralph_register_runners(register):
            register(HalfRunner)

        @hookimpl
        def ralph_register_gates(register):
            raise RuntimeError("second hook exploded")
    """
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_half", source)}
    listing = project.run("plugins", env=env)
    assert listing.returncode == 1
    row = next(line for line in listing.stdout.splitlines() if line.startswith("brk "))
    assert "runner half" not in row and "FAILED: ralph_register_gates raised RuntimeError: second hook exploded" in row
    # the runner of a plugin that did not load is not available, and says why
    result = project.run_replay("--skip-review", "-n", "3", "--runner", "half", env=env)
    assert result.returncode == 2
    assert "second hook exploded" in one_line_error(result)


def test_a_plugin_registering_a_wrong_class_is_a_load_failure(project: RalphProject, tmp_path: Path) -> None:
    source = """
        from ralph.api import hookimpl

        class NotAGate:
            name = "not-a-gate"

        @hookimpl
        def ralph_register_gates(register):
            register(NotAGate)
    """
    env = {**script(project, tmp_path, IMPLEMENT), **install(tmp_path, "brk_wrong", source)}
    listing = project.run("plugins", env=env)
    assert listing.returncode == 1
    row = next(line for line in listing.stdout.splitlines() if line.startswith("brk "))
    assert "FAILED: ralph_register_gates raised PluginError:" in row and "which is not a Gate" in row
    result = project.run_replay("--skip-review", "-n", "3", env=env)
    assert result.returncode == 2 and "which is not a Gate" in one_line_error(result)
