"""Tests of the ralph-nice runner, written the way a plugin author would (fixtures from ralph.testing)."""

from __future__ import annotations

import os
import sys
import threading

from ralph.api import ProcessSpec
from ralph.testing import RalphProject, ReplayScript, commit, say, set_fields, settings_for, story

from ralph_nice.plugin import NiceRunner


def test_the_agent_runs_at_a_lower_priority(ralph_project: RalphProject) -> None:
    ralph_project.path.joinpath("ralph.toml").write_text("[nice]\nniceness = 7\n", encoding="utf-8")
    runner = NiceRunner(settings_for(ralph_project.path))
    assert runner.availability().ok
    lines: list[str] = []
    spec = ProcessSpec(argv=[sys.executable, "-c", "import os; print(os.nice(0))"], env={}, cwd=ralph_project.path)
    outcome = runner.run(spec, lines.append, timeout=30, cancel=threading.Event())
    assert outcome.exit_code == 0
    assert lines == [str(min(19, os.nice(0) + 7))]


def test_an_unknown_key_is_rejected_with_its_toml_path(ralph_project: RalphProject) -> None:
    ralph_project.path.joinpath("pyproject.toml").write_text("[tool.ralph.nice]\nnicenes = 5\n", encoding="utf-8")
    result = ralph_project.run("run", "--runner", "nice", "--dry-run")
    assert result.returncode == 2
    assert "unknown key `tool.ralph.nice.nicenes`" in result.stderr


def test_a_loop_runs_through_the_nice_runner(ralph_project: RalphProject) -> None:
    ralph_project.write_stories([story("US-001", "Greet")])
    script = ReplayScript().iteration(
        1,
        say("implementing US-001"),
        set_fields("US-001", passes=True, notes="greets"),
        commit("feat: [US-001] - Greet"),
    )
    # without a review cycle ralph's spec gate asks a reviewer (here the replay agent again) for a verdict
    script.extra_call("spec", None, say('```json\n{"verdict": "met", "unmet": [], "extra": []}\n```'))
    ralph_project.env["RALPH_REPLAY_SCRIPT"] = str(script.write(ralph_project.state_dir.parent / "script.json"))
    result = ralph_project.run("run", "--runner", "nice", "--agent", "replay", "--skip-review", "-n", "2")
    assert result.returncode == 0, result.stderr
    assert ralph_project.story("US-001")["passes"] is True
    assert ralph_project.events("run_started")[0]["runner"] == "nice"


def test_ralph_plugins_lists_it_with_its_distribution(ralph_project: RalphProject) -> None:
    result = ralph_project.run("plugins")
    line = next(line for line in result.stdout.splitlines() if line.startswith("nice "))
    assert "runner nice" in line and "ralph-nice" in line and "loaded" in line


def test_disabled_it_is_named_as_disabled(ralph_project: RalphProject) -> None:
    env = {"RALPH_DISABLE_PLUGINS": "nice"}
    result = ralph_project.run("run", "--runner", "nice", "--dry-run", env=env)
    assert result.returncode == 2
    assert "runner 'nice' is not available: plugin 'nice' is disabled (RALPH_DISABLE_PLUGINS)" in result.stderr
    listing = ralph_project.run("plugins", env=env)
    row = next(line for line in listing.stdout.splitlines() if line.startswith("nice "))
    assert row.split()[-1] == "disabled" and "ralph-nice" in row


def test_its_command_shows_the_configured_niceness(ralph_project: RalphProject) -> None:
    ralph_project.path.joinpath("ralph.toml").write_text("[nice]\nniceness = 7\n", encoding="utf-8")
    helped = ralph_project.run("--help")
    assert "Show the niceness `ralph run --runner nice` gives the agent" in helped.stdout
    result = ralph_project.run("nice")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("nice -n 7 ")
