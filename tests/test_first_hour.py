"""Issue 12, "the first hour of a new user": one test (or more) per numbered item, each through
the CLI as a user types it (a real ``ralph`` process in a real git repository, the replay agent
as a real subprocess).  The README's quick start itself is run by tests/test_quickstart.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import GIT_IDENTITY, RalphProject, ralph_command, story

IMPLEMENT = [
    {"write": {"path": "a.txt", "content": "a"}},
    {"set": {"story": "US-001", "fields": {"reviewStatus": "needs_review"}}},
    {"commit": "feat: [US-001] - a"},
    {"say": "implemented"},
]
APPROVE = [
    {"set": {"story": "US-001", "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1, "notes": "ok"}}},
    {"commit": "review: [US-001] - approved"},
    {"say": "approved <promise>COMPLETE</promise>"},
]


def replay(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]]) -> dict[str, str]:
    """The environment that makes ``--agent replay`` act out ``iterations``."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {str(k): v for k, v in iterations.items()}}))
    return {"RALPH_REPLAY_SCRIPT": str(script)}


def run(project: RalphProject, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return project.run("run", "--runner", "direct", "--agent", "replay", *args, env=env)


def ralph_in(cwd: Path, state: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ralph ARGS`` as a process in ``cwd`` (any directory, not only a RalphProject)."""
    return subprocess.run(
        [*ralph_command(), *args],
        cwd=cwd,
        env={**os.environ, **GIT_IDENTITY, "RALPH_STATE_DIR": str(state), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001")])
    return ralph_project


# -- item 9: python -m ralph, docker a regular dependency ------------------------------------


def test_item9_python_dash_m_ralph_works(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-P", "-m", "ralph", "--version"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ralph, version")


def test_item9_docker_sdk_is_a_regular_dependency_imported_lazily() -> None:
    from importlib.metadata import requires

    required = [r for r in requires("ralph-trustloop") or [] if "extra ==" not in r]
    assert any(r.replace(" ", "").startswith("docker>=") for r in required), required
    code = "import sys; from ralph.cli.main import cli; import ralph_plugins.runners.docker_sandbox; print('docker' in sys.modules)"
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# -- item 12: running again after a normal end, state keyed by repository ----------------------


def test_item12_run_after_iterations_ran_out_just_continues(project: RalphProject, tmp_path: Path) -> None:
    first = run(project, replay(tmp_path, {1: IMPLEMENT}), "-n", "1")
    assert first.returncode == 1, first.stderr
    assert "max iterations (1) reached" in first.stdout
    # the next run continues (no --resume/--fresh question) and completes the story
    second = run(project, replay(tmp_path, {1: APPROVE}))
    assert second.returncode == 0, second.stderr
    assert "continuing with the story state the previous run left for 1 story" in second.stderr


def test_item12_changed_task_list_after_a_run_still_asks(project: RalphProject, tmp_path: Path) -> None:
    assert run(project, replay(tmp_path, {1: IMPLEMENT}), "-n", "1").returncode == 1
    project.write_stories([story("US-001"), story("US-002")])
    again = run(project, replay(tmp_path, {1: APPROVE}))
    assert again.returncode == 2
    assert "the task list changed since that run ended" in again.stderr
    assert "--resume" in again.stderr and "--fresh" in again.stderr


def test_item12_new_repository_at_the_same_path_starts_clean(project: RalphProject, tmp_path: Path) -> None:
    import shutil

    assert run(project, replay(tmp_path, {1: IMPLEMENT}), "-n", "1").returncode == 1
    # a crash leaves state without an end marker: make it look like one, then replace the repository
    shutil.rmtree(project.path / ".git")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project.path, check=True)
    project.write_stories([story("US-001")])  # commits: a new root commit
    result = run(project, replay(tmp_path, {1: IMPLEMENT, 2: APPROVE}))
    assert result.returncode == 0, result.stderr
    assert "continuing" not in result.stderr
    assert len(project.run_dirs()) == 1  # the old project's runs are not this repository's


# -- item 13: clear errors instead of tracebacks ----------------------------------------------------


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p.write_bytes(b'\xff\xfe{"project": 1}'), "is not UTF-8 text"),
        (lambda p: (p.unlink(), p.mkdir()), "is a directory, not a task-list file"),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    ],
    ids=["not-utf8", "directory", "deeply-nested"],
)
@pytest.mark.parametrize("command", [("run", "--dry-run"), ("run",), ("plan", "--check")], ids=" ".join)
def test_item13_unreadable_task_list_is_a_one_line_error(project, tmp_path, make, expected, command) -> None:
    make(project.tasks_path)
    before = project.tasks_path.read_bytes() if project.tasks_path.is_file() else None
    result = project.run(*command, "--agent", "replay", env=replay(tmp_path, {})) if command[0] == "run" else project.run(*command)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr
    assert str(project.tasks_path) in result.stderr
    if before is not None:
        assert project.tasks_path.read_bytes() == before


@pytest.mark.parametrize("where", ["file", "unwritable", "impossible"])
def test_item13_bad_state_dir_is_a_clear_error(project, tmp_path, where) -> None:
    if where == "file":
        state = tmp_path / "a-file"
        state.write_text("")
    elif where == "unwritable":
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere: an unwritable directory cannot be made")
        state = tmp_path / "ro"
        state.mkdir()
        state.chmod(0o500)
    else:
        state = Path("/proc/self/no-such-state-dir")
    result = run(project, {**replay(tmp_path, {1: IMPLEMENT}), "RALPH_STATE_DIR": str(state)})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"cannot use {state} as ralph's state directory ($RALPH_STATE_DIR)" in result.stderr


# -- item 3: init says to commit, --commit, outside git, dry-run warning, branchName ------------------


def test_item3_init_outside_a_git_repository_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    result = ralph_in(folder, tmp_path / "state", "init", "--name", "x")
    assert result.returncode == 2
    assert "is not inside a git repository" in result.stderr and "git init" in result.stderr
    assert list(folder.iterdir()) == []


def test_item3_init_says_to_commit_and_init_commit_commits_what_it_wrote(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "mine.txt").write_text("untracked and not ralph's\n")
    plain = ralph_in(repo, tmp_path / "state", "init", "--name", "demo")
    assert plain.returncode == 0, plain.stderr
    assert "git add ralph .gitignore && git commit" in plain.stdout
    subprocess.run(["rm", "-rf", str(repo / "ralph"), str(repo / ".gitignore")], check=True)

    result = ralph_in(repo, tmp_path / "state", "init", "--name", "demo", "--commit")
    assert result.returncode == 0, result.stderr
    assert "committed what init wrote" in result.stdout
    committed = subprocess.run(
        ["git", "show", "--name-only", "--format=%s", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.split()
    assert committed[:3] == ["ralph", "init:", "demo"]
    assert sorted(committed[3:]) == [".gitignore", "ralph/prd.md", "ralph/progress.txt", "ralph/prompt.md", "ralph/tasks.json"]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert status.strip() == "?? mine.txt"  # the user's own file was not committed


def test_item3_dry_run_warns_about_an_uncommitted_tree(project: RalphProject, tmp_path: Path) -> None:
    (project.path / "scratch.txt").write_text("x")
    result = project.run("run", "--dry-run", "--runner", "direct", "--agent", "replay", env=replay(tmp_path, {}))
    assert result.returncode == 0, result.stderr
    assert "warning: uncommitted changes (scratch.txt)" in result.stderr
    assert "`ralph run` will refuse to start" in result.stderr


def test_item3_run_works_on_the_branch_init_named(project: RalphProject, tmp_path: Path) -> None:
    assert project.tasks()["branchName"] == "ralph/demo"
    dry = run(project, replay(tmp_path, {}), "--dry-run")
    assert "branch:  ralph/demo (`ralph run` starts by creating the task list's branch ralph/demo from main" in dry.stdout
    result = run(project, replay(tmp_path, {1: IMPLEMENT, 2: APPROVE}))
    assert result.returncode == 0, result.stderr
    assert "creating the task list's branch ralph/demo from main and switching to it" in result.stderr
    assert project.git("symbolic-ref", "--short", "HEAD").strip() == "ralph/demo"
    assert "feat: [US-001] - a" in project.git("log", "--format=%s", "ralph/demo")
    assert "feat: [US-001] - a" not in project.git("log", "--format=%s", "main")


def test_item3_report_html_default_goes_outside_the_project(project: RalphProject, tmp_path: Path) -> None:
    assert run(project, replay(tmp_path, {1: IMPLEMENT, 2: APPROVE})).returncode == 0
    result = project.run("report", "--html")
    assert result.returncode == 0, result.stderr
    written = Path(result.stdout.strip().splitlines()[-1].removeprefix("wrote ").strip())
    assert written.is_file() and not written.is_relative_to(project.path)
    assert project.git("status", "--porcelain").strip() == ""
    inside = project.run("report", "--html", "report.html")
    assert inside.returncode == 0, inside.stderr
    assert "warning: report.html is inside the project" in inside.stderr


# -- item 5: unknown dependsOn, cycles, duplicate ids ----------------------------------------------


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize(
    "stories, expected",
    [
        ([story("US-001", dependsOn=["US-404"])], ["US-001 depends on 'US-404', which is not a story"]),
        (
            [story("US-001", dependsOn=["US-003"]), story("US-002", dependsOn=["US-001"]), story("US-003", dependsOn=["US-002"])],
            ["dependency cycle: US-001 -> US-003 -> US-002 -> US-001"],
        ),
        ([story("US-001"), story("US-001", title="again")], ["US-001"]),
    ],
    ids=["unknown", "cycle", "duplicate"],
)
def test_item5_graph_errors_exit_2_naming_the_stories(ralph_project, tmp_path, stories, expected, dry) -> None:
    ralph_project.write_stories(stories)
    result = run(ralph_project, replay(tmp_path, {1: IMPLEMENT}), *(["--dry-run"] if dry else []))
    assert result.returncode == 2, result.stdout + result.stderr
    for needle in expected:
        assert needle in result.stderr
    assert ralph_project.run_dirs() == []  # no run started, no agent


# -- item 6: all stories passes=true, nothing selectable: say why -------------------------------------


def test_item6_passes_without_approval_says_why(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories(
        [story("US-001", passes=True, notes="done"), story("US-002", passes=True, notes="done")]
    )
    result = run(ralph_project, replay(tmp_path, {}))
    assert result.returncode == 1
    line = next(l for l in result.stdout.splitlines() if "no story can be selected:" in l)
    assert not line.rstrip().endswith(":")
    assert "US-001, US-002 have passes=true but no approval (reviewStatus null)" in line
    assert "--skip-review" in line
    dry = run(ralph_project, replay(tmp_path, {}), "--dry-run")
    assert "nothing to run: no story can be selected: US-001, US-002 have passes=true" in dry.stdout


def test_item6_empty_notes_on_a_done_story_is_named(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001", passes=True, notes="")])
    result = run(ralph_project, replay(tmp_path, {}))
    assert result.returncode == 2
    assert "US-001 has passes=true but empty notes" in result.stderr


# -- ralph run --story ID ------------------------------------------------------------------------------


def test_story_runs_one_story_alone(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
    impl2 = [{**a, "set": {**a["set"], "story": "US-002"}} if "set" in a else a for a in IMPLEMENT]
    appr2 = [{**a, "set": {**a["set"], "story": "US-002"}} if "set" in a else a for a in APPROVE]
    result = run(ralph_project, replay(tmp_path, {1: impl2, 2: appr2}), "--story", "US-002")
    assert result.returncode == 0, result.stderr
    assert ralph_project.story("US-002")["passes"] is True
    assert ralph_project.story("US-001")["passes"] is False  # never selected
    assert [e["story"] for e in ralph_project.events("iteration_started")] == ["US-002", "US-002"]


def test_story_with_open_dependencies_is_exit_2_naming_them(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", dependsOn=["US-001"])])
    for extra in (["--dry-run"], []):
        result = run(ralph_project, replay(tmp_path, {1: IMPLEMENT}), "--story", "US-002", *extra)
        assert result.returncode == 2
        assert "--story US-002: it depends on US-001, not done yet" in result.stderr
    unknown = run(ralph_project, replay(tmp_path, {}), "--story", "US-999")
    assert unknown.returncode == 2 and "no such story" in unknown.stderr and "US-001, US-002" in unknown.stderr
    assert ralph_project.run_dirs() == []
