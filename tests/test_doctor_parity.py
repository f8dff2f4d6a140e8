"""Issue 22 item 8: ``ralph doctor`` makes exactly the checks ``ralph run`` makes before iteration 1.

Every broken project below is given to both commands as a person types them (real ``ralph``
processes, the replay agent): whenever ``ralph run`` refuses to start (exit 2), ``ralph doctor``
fails (exit 1) with the same message; where ``ralph run`` would start, ``ralph doctor`` passes.
Before this, ``ralph doctor`` passed an unknown policy name and an invalid task list.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ralph.testing.project import RalphProject, story
from ralph.testing.replay import replay_env


def _unknown_policy(project: RalphProject) -> None:
    (project.path / "ralph.toml").write_text('policy = "reveiw"\n')


def _template_task_list(project: RalphProject) -> None:
    """What `ralph init` wrote: a story without acceptance criteria."""
    from ralph.templates import template_text

    project.tasks_path.write_text(template_text("tasks.json"))


def _cycle(project: RalphProject) -> None:
    project.write_stories([story("US-001", dependsOn=["US-002"]), story("US-002", dependsOn=["US-001"])], commit=False)


def _bad_marker(project: RalphProject) -> None:
    (project.ralph_dir / "prompt.md").write_text("<!-- ralph:if implment -->\nx\n<!-- ralph:end -->\n")


def _no_ralph_dir(project: RalphProject) -> None:
    (project.path / "ralph.toml").write_text('ralph_dir = "loop"\n')


def _unsafe_id(project: RalphProject) -> None:
    project.write_stories([story("US 1; rm")], commit=False)


def _too_many_iterations(project: RalphProject) -> None:
    (project.path / "ralph.toml").write_text("max_iterations = 500\n")


def _unknown_config_key(project: RalphProject) -> None:
    (project.path / "ralph.toml").write_text("max_iteration = 5\n")


BROKEN: dict[str, tuple[Callable[[RalphProject], None], str]] = {
    "unknown policy": (_unknown_policy, "unknown policy 'reveiw'"),
    "template task list": (_template_task_list, "acceptanceCriteria: must not be empty"),
    "dependency cycle": (_cycle, "dependency cycle: US-001 -> US-002 -> US-001"),
    "bad prompt marker": (_bad_marker, "unknown section name implment"),
    "no ralph directory": (_no_ralph_dir, "loop does not exist"),
    "unsafe story id": (_unsafe_id, "is not a valid story id"),
    "too many iterations": (_too_many_iterations, "--max-iterations 500 is above the limit"),
    "unknown config key": (_unknown_config_key, "did you mean `max_iterations`?"),
}


@pytest.fixture
def replay(tmp_path: Path) -> dict[str, str]:
    return replay_env(tmp_path / "script.json", {})


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_doctor_fails_exactly_where_run_refuses(ralph_project: RalphProject, replay: dict[str, str], case: str) -> None:
    ralph_project.write_stories([story("US-001")])
    breaks, message = BROKEN[case]
    breaks(ralph_project)
    ralph_project.commit_all(f"broken: {case}")
    run = ralph_project.run("run", "--runner", "direct", "--agent", "replay", env=replay)
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stderr
    assert ralph_project.run_dirs() == []  # refused before iteration 1
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "replay", env=replay)
    assert doctor.returncode == 1, doctor.stdout
    failed = [line for line in doctor.stdout.splitlines() if line.startswith("[FAIL]")]
    assert failed and message in doctor.stdout, doctor.stdout
    assert "Traceback" not in doctor.stdout + doctor.stderr


def test_doctor_passes_where_run_starts(ralph_project: RalphProject, replay: dict[str, str], tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001")])
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "replay", env=replay)
    assert doctor.returncode == 0, doctor.stdout
    assert "[ok  ] runner direct can be used" in doctor.stdout
    script = replay_env(tmp_path / "done.json", {1: [{"say": "nothing to do"}]})
    run = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=script)
    assert run.returncode == 1, run.stderr  # it started: one iteration ran, the story stays open
    assert len(ralph_project.run_dirs()) == 1


def test_doctor_names_where_an_unknown_name_was_set(ralph_project: RalphProject, replay: dict[str, str]) -> None:
    ralph_project.write_stories([story("US-001")])
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "replay", env={**replay, "RALPH_POLICY": "nope"})
    assert doctor.returncode == 1
    assert "unknown policy 'nope'; available: review, skip-review (set by the environment variable RALPH_POLICY)" in doctor.stdout


def test_doctor_and_dry_run_warn_about_what_run_warns_about(ralph_project: RalphProject, replay: dict[str, str]) -> None:
    """Warnings (a misspelt task-list key, uncommitted changes) do not fail doctor, and are shown."""
    ralph_project.write_stories([story("US-001", depends_on=["US-002"]), story("US-002")])
    (ralph_project.path / "notes.txt").write_text("not committed\n")
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "replay", env=replay)
    assert doctor.returncode == 0, doctor.stdout
    assert "[warn] ralph/tasks.json: userStories[0] (US-001).depends_on: not a key ralph reads" in doctor.stdout
    assert "did you mean `dependsOn`?" in doctor.stdout
    assert "[warn] uncommitted changes (notes.txt): `ralph run` will refuse to start" in doctor.stdout
    data = json.loads(ralph_project.tasks_path.read_text())
    assert data["userStories"][0]["depends_on"] == ["US-002"]  # nothing the person wrote is changed
