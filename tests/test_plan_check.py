"""``ralph plan --check`` on broken task lists, ``--prd N``, and the ``ralph plan`` launcher.

The CLI runs as a real process in a real git project (the lifecycle commands are
added to the main group the way ralph/cli/main.py registers them).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.errors import UsageError
from ralph.lifecycle.plan import check_task_list, plan_command, plan_mode, prd_dir, prd_is_template, story_id_problem
from ralph.tasks import find_cycles
from ralph.testing.project import RalphProject, story

def good(story_id: str, **fields: Any) -> dict[str, Any]:
    return story(story_id, acceptanceCriteria=[f"GET /{story_id.lower()} returns 200 with a JSON list"], **fields)


@pytest.fixture
def project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([good("US-001"), good("US-002", priority=2, dependsOn=["US-001"])],
                                verifyCommands=["pytest -q"])
    return ralph_project


def test_a_sound_task_list_passes(project: RalphProject) -> None:
    result = project.run("plan", "--check")
    assert result.returncode == 0, result.stderr
    assert "ralph/tasks.json (tasks-json): 2 stories" in result.stdout
    assert result.stdout.rstrip().endswith("0 errors, 0 warnings")


def test_dependency_cycle_is_an_error(project: RalphProject) -> None:
    project.write_stories([
        good("US-001", dependsOn=["US-003"]),
        good("US-002", priority=2, dependsOn=["US-001"]),
        good("US-003", priority=3, dependsOn=["US-002"]),
        good("US-004", priority=4),
    ], verifyCommands=["pytest -q"])
    result = project.run("plan", "--check")
    assert result.returncode == 1
    assert "error: US-001: dependency cycle: US-001 -> US-003 -> US-002 -> US-001" in result.stdout
    assert result.stdout.count("dependency cycle") == 1
    assert "US-004" not in result.stdout


def test_unknown_and_self_dependencies(project: RalphProject) -> None:
    project.write_stories([good("US-001", dependsOn=["US-009"]), good("US-002", priority=2, dependsOn=["US-002"])],
                          verifyCommands=[])
    result = project.run("plan", "--check")
    assert result.returncode == 1
    assert "error: US-001: dependsOn names 'US-009', which is not a story in this task list" in result.stdout
    assert "error: US-002: dependsOn lists the story itself" in result.stdout
    assert "warning: verifyCommands is empty" in result.stdout
    assert "2 errors, 1 warning" in result.stdout


def test_criteria_that_cannot_be_verified(project: RalphProject) -> None:
    project.write_stories([
        story("US-001", "Export CSV", acceptanceCriteria=["Works correctly"]),
        story("US-002", "Import CSV", priority=2, acceptanceCriteria=["import csv", "  "]),
        good("US-003", priority=3),
    ], verifyCommands=["pytest"])
    result = project.run("plan", "--check")
    assert result.returncode == 1
    assert "error: US-001: acceptance criterion 1 is not verifiable: 'Works correctly'" in result.stdout
    assert "error: US-002: acceptance criterion 1 only repeats the title" in result.stdout
    assert "error: US-002: acceptance criterion 2 is empty" in result.stdout
    assert "US-003" not in result.stdout


def test_sizing_and_order_are_warnings_only(project: RalphProject) -> None:
    long = " ".join(f"Sentence {n} changes part {n}." for n in range(7))
    project.write_stories([
        good("US-001", description=long, dependsOn=["US-002"]),
        story("US-002", priority=2, acceptanceCriteria=[f"Field {n} is validated" for n in range(10)]),
    ], verifyCommands=["pytest"])
    result = project.run("plan", "--check")
    assert result.returncode == 0, result.stdout
    assert "warning: US-001: description has 7 sentences" in result.stdout
    assert "warning: US-002: 10 acceptance criteria (more than 8)" in result.stdout
    assert "warning: US-001: priority 1 comes before its dependency US-002 (priority 2)" in result.stdout


def test_duplicate_ids_and_bad_ids(project: RalphProject) -> None:
    project.write_stories([good("US-001"), good("US-001", priority=2), good("story one", priority=3)], verifyCommands=["x"])
    result = project.run("plan", "--check")
    assert result.returncode == 1
    assert "Duplicate story id 'US-001'" in result.stdout
    assert "error: story one: 'story one' is not a valid story id" in result.stdout


def test_a_file_that_does_not_parse_exits_2_and_names_it(project: RalphProject) -> None:
    broken = '{"project": "x", "userStories": [ {"id": "US-001",, } ]\n'
    project.tasks_path.write_text(broken)
    result = project.run("plan", "--check")
    assert result.returncode == 2
    assert "ralph: error:" in result.stderr and "tasks.json: not valid JSON at line 1" in result.stderr
    assert project.tasks_path.read_text() == broken


def test_check_a_prd_json_file_by_path(project: RalphProject, tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text(json.dumps({"project": "p", "branchName": "b", "description": "", "userStories": [
        {"id": "US-001", "title": "A", "acceptanceCriteria": ["TBD"], "priority": 1, "passes": False, "dependsOn": ["US-7"]},
    ]}, indent=2))
    result = project.run("plan", "--check", "--file", str(path))
    assert result.returncode == 1
    assert f"checked {path} (prd-json): 1 story" in result.stdout
    assert "not verifiable: 'TBD'" in result.stdout and "dependsOn names 'US-7'" in result.stdout


def test_prd_n_folder_with_plan_md(project: RalphProject) -> None:
    folder = project.path / ".ralph" / "PRD-2"
    folder.mkdir(parents=True)
    (folder / "plan.md").write_text(
        "# Plan: two\n\n- [ ] US-001: First\n- [ ] US-002: Second\n\n"
        "### US-002: Second\n**Acceptance criteria:**\n- Page /two shows a table\n\n**Depends on:** US-003\n"
    )
    result = project.run("plan", "--check", "--prd", "2")
    assert result.returncode == 1, result.stderr
    assert ".ralph/PRD-2/plan.md (plan-md): 2 stories" in result.stdout
    assert "error: US-001: acceptance criterion 1 only repeats the title" in result.stdout
    assert "error: US-002: dependsOn names 'US-003'" in result.stdout
    missing = project.run("plan", "--check", "--prd", "3")
    assert missing.returncode == 2 and "PRD-3 does not exist (existing: PRD-2)" in missing.stderr
    bad = project.run("plan", "--check", "--prd", "../x")
    assert bad.returncode == 2 and "--prd must be a positive integer" in bad.stderr


# -- units ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, "0", "01", "../1", "1/2", "x", True, 1.5, "1234567"])
def test_prd_dir_rejects_anything_but_a_positive_integer(tmp_path: Path, value: Any) -> None:
    with pytest.raises(UsageError, match="--prd must be a positive integer"):
        prd_dir(tmp_path, value)


def test_prd_dir_path(tmp_path: Path) -> None:
    assert prd_dir(tmp_path, 7) == tmp_path / ".ralph" / "PRD-7"
    assert prd_dir(tmp_path, "12") == tmp_path / ".ralph" / "PRD-12"
    with pytest.raises(UsageError, match="there is no PRD folder"):
        prd_dir(tmp_path, 1, must_exist=True)


@pytest.mark.parametrize("story_id", ["US-001", "BUG-12", "api_v2-3", "US-003-2", "a-1"])
def test_valid_story_ids(story_id: str) -> None:
    assert story_id_problem(story_id) is None


@pytest.mark.parametrize("story_id", ["US001", "US-", "1-US", "US-001;rm", "US-001.*", "US 1", "-1", "US-001a", "", "X" * 60 + "-1"])
def test_invalid_story_ids(story_id: str) -> None:
    assert story_id_problem(story_id)


def test_find_cycles_reports_each_cycle_once() -> None:
    graph = {"A-1": ["A-2"], "A-2": ["A-1", "A-3"], "A-3": ["A-3x"], "A-3x": ["A-3"], "A-4": []}
    assert find_cycles(graph) == [["A-1", "A-2"], ["A-3", "A-3x"]]


def test_check_budget_warning() -> None:
    from ralph.tasks import TaskList

    tasks = TaskList.model_validate({"project": "p", "branchName": "b", "description": "", "verifyCommands": ["t"],
                                     "userStories": [good(f"US-{n}", priority=n) for n in range(1, 10)]})
    messages = [str(p) for p in check_task_list(tasks, max_iterations=15)]
    assert messages == ["warning: 9 open stories need at least 18 iterations (implement + review each), more than "
                        "max_iterations=15: raise --max-iterations"]
    assert check_task_list(tasks, max_iterations=15, uses_review=False) == []


# -- ralph plan: the interactive launcher ----------------------------------------------------------


def test_prd_template_detection(ralph_project: RalphProject) -> None:
    prd = ralph_project.ralph_dir / "prd.md"
    assert prd_is_template(prd.read_text())  # as ralph init wrote it (name and date filled in)
    assert plan_mode(ralph_project.ralph_dir) == 1
    trimmed = "\n".join(line for line in prd.read_text().splitlines() if "Goal" not in line)
    assert prd_is_template(trimmed)  # deleting sections is not writing a PRD
    prd.write_text(prd.read_text().replace("_Current state:_", "_Current state:_ search has no filters at all."))
    assert not prd_is_template(prd.read_text())
    assert plan_mode(ralph_project.ralph_dir) == 2


def test_plan_command_line(ralph_project: RalphProject, tmp_path: Path) -> None:
    argv = plan_command("/opt/claude", tmp_path / "bundle" / "ralph", ralph_project.path, ralph_project.ralph_dir, model="opus")
    assert argv[:5] == ["/opt/claude", "--plugin-dir", str(tmp_path / "bundle" / "ralph"), "--model", "opus"]
    assert len(argv) == 6 and "-p" not in argv
    assert argv[5].startswith("/ralph:ralph-plan Mode 1 (full planning): ralph/prd.md is still the template.")
    (ralph_project.ralph_dir / "prd.md").write_text("# PRD\n\nSearch gets status filters for support staff.\n")
    argv = plan_command("/opt/claude", tmp_path, ralph_project.path, ralph_project.ralph_dir)
    assert argv[3].startswith("/ralph:ralph-plan Mode 2 (task derivation): ralph/prd.md already describes")


def test_ralph_plan_starts_claude_with_the_exported_bundle(ralph_project: RalphProject, tmp_path: Path) -> None:
    """A stand-in `claude` records its argv and what the plugin dir holds while it runs."""
    record = tmp_path / "record.json"
    fake = tmp_path / "claude"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "d = sys.argv[sys.argv.index('--plugin-dir') + 1]\n"
        "files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)\n"
        f"json.dump({{'argv': sys.argv[1:], 'files': files, 'cwd': os.getcwd()}}, open({str(record)!r}, 'w'))\n"
        "sys.exit(7)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    result = ralph_project.run("plan", env={"RALPH_CLAUDE_BINARY": str(fake)})
    assert result.returncode == 7, result.stderr  # claude's exit code passes through
    data = json.loads(record.read_text())
    assert data["cwd"] == str(ralph_project.path)
    assert data["argv"][0] == "--plugin-dir" and data["argv"][2].startswith("/ralph:ralph-plan Mode 1")
    assert "skills/ralph-plan/SKILL.md" in data["files"] and ".claude-plugin/plugin.json" in data["files"]
    assert not Path(data["argv"][1]).exists()  # the temporary bundle is removed afterwards
    assert "Mode 1 (full planning)" in result.stdout


def test_ralph_plan_without_claude_is_a_clear_error(ralph_project: RalphProject, tmp_path: Path) -> None:
    env = {"RALPH_CLAUDE_BINARY": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    result = ralph_project.run("plan", env=env)
    assert result.returncode != 0
    assert "ralph: error:" in result.stderr
