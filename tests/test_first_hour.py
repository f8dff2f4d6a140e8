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
from ralph.testing.replay import replay_env

from test_loop_robustness import APPROVE, IMPLEMENT

def replay(tmp_path: Path, iterations: dict[int, list[dict[str, Any]]]) -> dict[str, str]:
    """The environment that makes ``--agent replay`` act out ``iterations``."""
    return replay_env(tmp_path / "script.json", iterations)


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
    first = project.run_replay("-n", "1", env=replay(tmp_path, {1: IMPLEMENT}))
    assert first.returncode == 1, first.stderr
    assert "max iterations (1) reached" in first.stdout
    # the next run continues (no --resume/--fresh question) and completes the story
    second = project.run_replay(env=replay(tmp_path, {1: APPROVE}))
    assert second.returncode == 0, second.stderr
    assert "continuing with the story state the previous run left for 1 story" in second.stderr


def test_item12_changed_task_list_after_a_run_still_asks(project: RalphProject, tmp_path: Path) -> None:
    assert project.run_replay("-n", "1", env=replay(tmp_path, {1: IMPLEMENT})).returncode == 1
    project.write_stories([story("US-001"), story("US-002")])
    again = project.run_replay(env=replay(tmp_path, {1: APPROVE}))
    assert again.returncode == 2
    assert "the task list changed since that run ended" in again.stderr
    assert "--resume" in again.stderr and "--fresh" in again.stderr


def test_item12_new_repository_at_the_same_path_starts_clean(project: RalphProject, tmp_path: Path) -> None:
    import shutil

    assert project.run_replay("-n", "1", env=replay(tmp_path, {1: IMPLEMENT})).returncode == 1
    # a crash leaves state without an end marker: make it look like one, then replace the repository
    shutil.rmtree(project.path / ".git")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project.path, check=True)
    project.write_stories([story("US-001")])  # commits: a new root commit
    result = project.run_replay(env=replay(tmp_path, {1: IMPLEMENT, 2: APPROVE}))
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
    result = project.run_replay(env={**replay(tmp_path, {1: IMPLEMENT}), "RALPH_STATE_DIR": str(state)})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"cannot use {state} as ralph's state directory ($RALPH_STATE_DIR)" in result.stderr


def test_item13_status_looks_for_runs_where_the_configs_state_dir_put_them(project, tmp_path) -> None:
    state = tmp_path / "configured-state"
    project.path.joinpath("ralph.toml").write_text(f'state_dir = "{state}"\n', encoding="utf-8")
    project.commit_all("state_dir in ralph.toml")
    no_env = {"RALPH_STATE_DIR": ""}  # the config file decides, as for a user without the variable
    assert project.run_replay(env={**replay(tmp_path, {1: IMPLEMENT, 2: APPROVE}), **no_env}).returncode == 0
    runs = sorted(state.glob("projects/*/runs/*"))
    assert len(runs) == 1  # ralph run put its record under the configured state_dir
    status = project.run("status", "--json", env=no_env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["run_dir"] == str(runs[0])
    assert "state: finished" in project.run("status", env=no_env).stdout
    # RALPH_STATE_DIR wins over the file, for ralph status as for ralph run
    elsewhere = project.run("status", env={"RALPH_STATE_DIR": str(tmp_path / "elsewhere")})
    assert elsewhere.stdout.startswith("no ralph run recorded for this project yet")


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
    dry = project.run_replay("--dry-run", env=replay(tmp_path, {}))
    assert "branch:  ralph/demo (`ralph run` starts by creating the task list's branch ralph/demo from main" in dry.stdout
    result = project.run_replay(env=replay(tmp_path, {1: IMPLEMENT, 2: APPROVE}))
    assert result.returncode == 0, result.stderr
    assert "creating the task list's branch ralph/demo from main and switching to it" in result.stderr
    assert project.git("symbolic-ref", "--short", "HEAD").strip() == "ralph/demo"
    assert "feat: [US-001] - a" in project.git("log", "--format=%s", "ralph/demo")
    assert "feat: [US-001] - a" not in project.git("log", "--format=%s", "main")


def test_item3_report_html_default_goes_outside_the_project(project: RalphProject, tmp_path: Path) -> None:
    assert project.run_replay(env=replay(tmp_path, {1: IMPLEMENT, 2: APPROVE})).returncode == 0
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
    result = ralph_project.run_replay(*(["--dry-run"] if dry else []), env=replay(tmp_path, {1: IMPLEMENT}))
    assert result.returncode == 2, result.stdout + result.stderr
    for needle in expected:
        assert needle in result.stderr
    assert ralph_project.run_dirs() == []  # no run started, no agent


# -- item 6: all stories passes=true, nothing selectable: say why -------------------------------------


def test_item6_passes_without_approval_says_why(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories(
        [story("US-001", passes=True, notes="done"), story("US-002", passes=True, notes="done")]
    )
    result = ralph_project.run_replay(env=replay(tmp_path, {}))
    assert result.returncode == 1
    line = next(l for l in result.stdout.splitlines() if "no story can be selected:" in l)
    assert not line.rstrip().endswith(":")
    assert "US-001, US-002 have passes=true but no approval (reviewStatus null)" in line
    assert "--skip-review" in line
    dry = ralph_project.run_replay("--dry-run", env=replay(tmp_path, {}))
    assert "nothing to run: no story can be selected: US-001, US-002 have passes=true" in dry.stdout


def test_item6_empty_notes_on_a_done_story_is_named(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001", passes=True, notes="")])
    result = ralph_project.run_replay(env=replay(tmp_path, {}))
    assert result.returncode == 2
    assert "US-001 has passes=true but empty notes" in result.stderr


# -- ralph run --story ID ------------------------------------------------------------------------------


def test_story_runs_one_story_alone(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
    impl2 = [{**a, "set": {**a["set"], "story": "US-002"}} if "set" in a else a for a in IMPLEMENT]
    appr2 = [{**a, "set": {**a["set"], "story": "US-002"}} if "set" in a else a for a in APPROVE]
    result = ralph_project.run_replay("--story", "US-002", env=replay(tmp_path, {1: impl2, 2: appr2}))
    assert result.returncode == 0, result.stderr
    assert ralph_project.story("US-002")["passes"] is True
    assert ralph_project.story("US-001")["passes"] is False  # never selected
    assert [e["story"] for e in ralph_project.events("iteration_started")] == ["US-002", "US-002"]


def test_story_with_open_dependencies_is_exit_2_naming_them(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", dependsOn=["US-001"])])
    for extra in (["--dry-run"], []):
        result = ralph_project.run_replay("--story", "US-002", *extra, env=replay(tmp_path, {1: IMPLEMENT}))
        assert result.returncode == 2
        assert "--story US-002: it depends on US-001, not done yet" in result.stderr
    unknown = ralph_project.run_replay("--story", "US-999", env=replay(tmp_path, {}))
    assert unknown.returncode == 2 and "no such story" in unknown.stderr and "US-001, US-002" in unknown.stderr
    assert ralph_project.run_dirs() == []


# -- item 1: installing what exists -------------------------------------------------------------------


def test_item1_readme_installs_from_a_clone_or_a_built_wheel(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("## Install"):readme.index("## Quick start on a real project")]
    assert "pip install 'ralph-trustloop[claude]'" not in readme  # not on the index
    assert "git clone" in install and "pip wheel" in install and "claude-agent-sdk" in install
    assert "/login" in install and "ANTHROPIC_API_KEY" in install
    # the wheel the README tells people to build builds offline and carries what `ralph` needs
    root = Path(__file__).resolve().parent.parent
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(root)],
        capture_output=True, text=True, timeout=600,
    )
    if built.returncode != 0 and any(s in built.stderr for s in ("Could not find a version", "NewConnectionError", "No matching distribution")):
        from ralph.testing.requirements import require

        require(False, f"building the wheel needs setuptools>=77 from the package index: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    import zipfile

    wheel = next(tmp_path.glob("ralph_trustloop-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ralph/__main__.py" in names and "ralph_templates/prompt.md" in names
    meta = next(n for n in names if n.endswith("METADATA"))
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Requires-Dist: docker>=7.0" in metadata


# -- item 4: plan --check exit codes, plan --print-command ------------------------------------------------


def test_item4_plan_check_on_the_fresh_template_exits_1_as_its_help_says(ralph_project: RalphProject) -> None:
    ralph_project.tasks_path.write_text(
        json.dumps(json.loads((Path(__file__).resolve().parent.parent / "templates" / "tasks.json").read_text()))
    )
    result = ralph_project.run("plan", "--check")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error: userStories[0] (US-001).acceptanceCriteria: must not be empty" in result.stdout
    help_text = ralph_project.run("plan", "--help").stdout
    assert "1 when there are errors" in help_text and "2 when there is nothing to" in help_text
    ralph_project.tasks_path.write_text("{ not json")
    assert ralph_project.run("plan", "--check").returncode == 2


def test_item4_print_command_prints_a_plugin_dir_that_exists(ralph_project: RalphProject, tmp_path: Path) -> None:
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    result = ralph_project.run("plan", "--print-command", env={"RALPH_CLAUDE_BINARY": str(fake)})
    assert result.returncode == 0, result.stderr
    import shlex

    argv = shlex.split(result.stdout.strip().splitlines()[-1])
    plugin_dir = Path(argv[argv.index("--plugin-dir") + 1])
    assert (plugin_dir / "skills" / "ralph-plan" / "SKILL.md").is_file()  # still there after ralph exited
    assert (plugin_dir / ".claude-plugin" / "plugin.json").is_file()
    assert not plugin_dir.is_relative_to(ralph_project.path)


# -- item 8: the demo's closing hint, ralph not on PATH, its temporary directory -----------------------------


def test_item8_demo_hint_finds_the_run_and_says_where_things_are(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}  # the venv's bin is not on PATH
    result = ralph_in(tmp_path, state, "demo", "--agent", "replay", env=env)
    assert result.returncode == 0, result.stderr
    hint = next(line for line in result.stdout.splitlines() if line.startswith("Look around:"))
    venv_ralph = str(Path(sys.executable).parent / "ralph")
    assert f"{venv_ralph} status -d " in hint
    assert f"`ralph` is not on your PATH; it is {venv_ralph}" in result.stdout
    project = Path(hint.split("status -d ")[1].split(";")[0].strip())
    status = ralph_in(tmp_path, state, "status", "-d", str(project))
    assert status.returncode == 0 and "run directory:" in status.stdout, status.stdout
    kept = next(line for line in result.stdout.splitlines() if line.startswith("The example project is kept in"))
    work = Path(kept.split("kept in ")[1].split(" so you")[0])
    assert f"rm -rf {work}" in kept
    assert sorted(p.name for p in work.iterdir()) == ["greeting"]  # the scripted model's files are gone


def test_item8_demo_with_dir_leaves_no_temporary_directory(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    result = ralph_in(tmp_path, tmp_path / "state", "demo", "--agent", "replay", "--dir", str(tmp_path / "d"), env={"TMPDIR": str(tmp)})
    assert result.returncode == 0, result.stderr
    assert list(tmp.iterdir()) == []
    assert "kept in" not in result.stdout


# -- item 9: shell completion as documented ---------------------------------------------------------------------


def test_item9_shell_completion_as_the_readme_says(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    assert '_RALPH_COMPLETE=bash_source ralph' in readme
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ralph")], env={**os.environ, "_RALPH_COMPLETE": "bash_source"},
        capture_output=True, text=True,
    )
    assert result.returncode == 0 and "_ralph_completion" in result.stdout


# -- item 10: adopting snarktank/ralph's layout ---------------------------------------------------------------


SNARK_PRD = {
    "project": "MyApp",
    "branchName": "ralph/task-priority",
    "description": "Task priority",
    "userStories": [
        {"id": "US-001", "title": "Add priority", "description": "x", "acceptanceCriteria": ["priority column exists"],
         "priority": 1, "passes": False, "notes": "", "estimate": "S"},
    ],
}


@pytest.fixture
def snark(tmp_path: Path) -> RalphProject:
    """A repository with snarktank/ralph's layout under scripts/ralph/ (no prompt.md, no prd.md)."""
    path = tmp_path / "app"
    (path / "scripts" / "ralph").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    (path / "scripts" / "ralph" / "prd.json").write_text(json.dumps(SNARK_PRD, indent=2) + "\n")
    (path / "scripts" / "ralph" / "progress.txt").write_text("# Ralph Progress Log\n## Codebase Patterns\n")
    (path / ".gitignore").write_text(".ralph-active\n")
    project = RalphProject(path=path, state_dir=tmp_path / "state")
    project.commit_all("snarktank layout")
    return project


def test_item10_run_works_on_snarktanks_layout_as_it_is(snark: RalphProject, tmp_path: Path) -> None:
    implement = [{**a, "write": a["write"]} if "write" in a else a for a in IMPLEMENT]
    env = replay(tmp_path, {1: implement, 2: APPROVE})
    dry = snark.run_replay("--ralph-dir", "scripts/ralph", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "note:    no prompt.md in scripts/ralph: using ralph's built-in prompt" in dry.stdout
    assert "`scripts/ralph/prd.json`" in dry.stdout  # the prompt names the task list it really is
    result = snark.run_replay("--ralph-dir", "scripts/ralph", env=env)
    assert result.returncode == 0, result.stderr
    assert "no prompt.md in scripts/ralph: using ralph's built-in prompt" in result.stderr
    data = json.loads((snark.path / "scripts" / "ralph" / "prd.json").read_text())
    assert data["userStories"][0]["passes"] is True and data["userStories"][0]["estimate"] == "S"
    assert not (snark.path / "scripts" / "ralph" / "tasks.json").exists()
    plain = snark.run_replay(env=env)
    assert plain.returncode == 2 and "pass --ralph-dir scripts/ralph" in plain.stderr


def test_item10_init_adds_only_what_is_missing_and_names_what_it_kept(snark: RalphProject) -> None:
    guessed = snark.run("init")
    assert guessed.returncode == 2 and "ralph init --ralph-dir scripts/ralph" in guessed.stderr
    assert not (snark.path / "ralph").exists()
    before = {p.name: p.read_bytes() for p in (snark.path / "scripts" / "ralph").iterdir()}
    result = snark.run("init", "--ralph-dir", "scripts/ralph")
    assert result.returncode == 0, result.stderr
    assert "wrote scripts/ralph/prompt.md" in result.stdout and "wrote scripts/ralph/prd.md" in result.stdout
    assert "kept scripts/ralph/prd.json: your task list" in result.stdout
    assert "kept scripts/ralph/progress.txt" in result.stdout
    assert not (snark.path / "scripts" / "ralph" / "tasks.json").exists()  # never a second task list
    for name, data in before.items():
        assert (snark.path / "scripts" / "ralph" / name).read_bytes() == data


def test_item10_force_keeps_a_backup_of_every_file_it_replaces(snark: RalphProject) -> None:
    rdir = snark.path / "scripts" / "ralph"
    (rdir / "prompt.md").write_text("my own prompt\n")
    (rdir / "prd.md").write_text("my own PRD\n")
    result = snark.run("init", "--ralph-dir", "scripts/ralph", "--force")
    assert result.returncode == 0, result.stderr
    backups = {line.split(" to ")[0].removeprefix("backed up "): line.split(" to ")[1]
               for line in result.stdout.splitlines() if line.startswith("backed up ")}
    assert set(backups) == {"scripts/ralph/prompt.md", "scripts/ralph/prd.md", "scripts/ralph/progress.txt"}
    assert (snark.path / backups["scripts/ralph/prompt.md"]).read_text() == "my own prompt\n"
    assert (snark.path / backups["scripts/ralph/prd.md"]).read_text() == "my own PRD\n"
    assert json.loads((rdir / "prd.json").read_text()) == SNARK_PRD  # the task list is never replaced
    assert not (rdir / "tasks.json").exists()


# -- item 11: seed details ---------------------------------------------------------------------------------------


def test_item11_prd_folder_without_prompt_uses_the_builtin_prompt_naming_progress_md(ralph_project, tmp_path) -> None:
    folder = ralph_project.path / ".ralph" / "PRD-1"
    folder.mkdir(parents=True)
    (folder / "tasks.json").write_text(ralph_project.tasks_path.read_text())
    (folder / "progress.md").write_text("# progress\n")
    ralph_project.write_stories([story("US-001")])
    (folder / "tasks.json").write_text(ralph_project.tasks_path.read_text())
    ralph_project.commit_all("PRD-1")
    result = ralph_project.run("run", "--prd", "1", "--dry-run", "--runner", "direct", "--agent", "replay", env=replay(tmp_path, {}))
    assert result.returncode == 0, result.stderr
    prompt = result.stdout.split("--- prompt (iteration 1) ---")[1]
    assert "no prompt.md in .ralph/PRD-1: using ralph's built-in prompt" in result.stdout
    assert "progress.md" in prompt and "progress.txt" not in prompt


def test_item11_seed_001_tokens_are_filled(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-007", "Filter by status")], commit=False)
    (ralph_project.ralph_dir / "prompt.md").write_text(
        "Plan: {{PLAN_PATH}}\nProgress: {{PROGRESS_PATH}}\nPRD: {{PRD_NUMBER}}\nStory: {{STORY_ID}} {{STORY_TITLE}}\n"
    )
    ralph_project.commit_all("seed 001 prompt")
    result = ralph_project.run_replay("--dry-run", env=replay(tmp_path, {}))
    assert result.returncode == 0, result.stderr
    assert f"Plan: {ralph_project.tasks_path}\n" in result.stdout
    assert f"Progress: {ralph_project.ralph_dir / 'progress.txt'}\n" in result.stdout
    assert "PRD: \n" in result.stdout  # not a .ralph/PRD-N folder
    assert 'Story: US-007 "Filter by status"\n' in result.stdout  # task-list text: quoted
    assert "{{" not in result.stdout


def test_item11_sigterm_exits_143_and_sigint_130(project: RalphProject, tmp_path: Path) -> None:
    import signal

    from ralph.testing.project import wait_for

    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        proc = project.start("run", "--runner", "direct", "--agent", "replay", env=replay(tmp_path, {1: [{"sleep": 60}]}))
        wait_for(lambda: (project.path / ".ralph-active").exists())
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        assert proc.returncode == code


def test_item11_timed_out_and_failed_iterations_reach_the_progress_file(project: RalphProject, tmp_path: Path) -> None:
    timed = project.run_replay("-n", "1", "--timeout", "2", env=replay(tmp_path, {1: [{"sleep": 30}]}))
    assert timed.returncode == 1, timed.stderr
    failed = project.run_replay("-n", "1", env=replay(tmp_path, {1: [{"say": "oops"}, {"exit": 3}]}))
    assert failed.returncode == 1, failed.stderr
    progress = (project.ralph_dir / "progress.txt").read_text()
    assert "iteration 1 (implement US-001): timed out after 2s; the loop stopped the agent" in progress
    # issue 22 item 5: an agent that failed adds no note and no commit (sessions.log and the events have it)
    assert "the agent failed (exit code 3)" not in progress
    assert project.git("status", "--porcelain").strip() == ""  # the loop committed its note
    subjects = project.git("log", "--format=%s")
    assert "ralph: iteration 1 - timed out after 2s" in subjects and "the agent failed" not in subjects


FAILING_GATE = "python3 -c \"import sys; print('AssertionError: greeting is wrong'); print('at greet.py:3'); sys.exit(1)\""


def test_item11_a_rerun_archives_earlier_failure_branches_and_item14_report_leads_with_them(ralph_project, tmp_path) -> None:
    ralph_project.write_stories(
        [story("US-001", "Greeting"), story("US-002", "Banner", priority=2, dependsOn=["US-001"])],
        verifyCommands=[FAILING_GATE],
    )
    impl = [{"write": {"path": "greet.txt", "content": "helo"}},
            {"set": {"story": "US-001", "fields": {"reviewStatus": "needs_review"}}},
            {"commit": "feat: [US-001] - attempt"}, {"say": "done"}]
    env = {**replay(tmp_path, {1: impl, 2: impl}), "RALPH_MAX_ATTEMPTS": "2"}
    first = ralph_project.run_replay(env=env)
    assert first.returncode == 3, first.stderr
    branch = ralph_project.git("branch", "--list", "wip/ralph-fail-US-001-*").split()[-1]

    report = ralph_project.run("report")
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert lines.index("NEEDS A PERSON:") < next(i for i, l in enumerate(lines) if l.startswith("story "))
    text = report.stdout
    assert "FAILED US-001: Greeting - 2/2 attempts at the tests gate, escalation tier 3 (stopped)" in text
    assert f"work kept on: {branch}" in text
    assert "AssertionError: greeting is wrong" in text and "at greet.py:3" in text
    assert "to retry: set \"failed\": false on US-001 in tasks.json and commit, then: ralph run --story US-001 --fresh" in text
    assert "BLOCKED US-002: Banner - waits on failed US-001" in text
    row = next(line for line in lines if line.startswith("US-001 "))
    assert row.split()[2] == "failed"  # was shown as "open"
    html = ralph_project.run("report", "--html", str(tmp_path / "r.html"))
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "r.html").read_text()
    assert "Needs a person" in page and branch in page
    assert "No reviews in this report, so no review chart." in page and 'class="histogram"' not in page

    again = ralph_project.run_replay(env=env)
    assert again.returncode == 3, again.stderr
    assert "archived the failure branches of earlier runs (nothing deleted)" in again.stderr
    assert ralph_project.git("branch", "--list", "wip/ralph-fail-*").strip() == ""
    archived = ralph_project.git("branch", "--list", "wip/archive/*").split()
    assert archived == [f"wip/archive/{branch.removeprefix('wip/')}"]


# -- item 15: help texts, ralph plugins, the file an unknown runner came from -------------------------------------


def test_item15_help_lists_registered_policies_and_prd_help_is_plain(project: RalphProject) -> None:
    help_text = " ".join(project.run("run", "--help").stdout.split())
    assert "Registered: review, skip-review." in help_text
    assert "Registered: auto," in help_text and "direct" in help_text
    assert "seed 001" not in help_text
    assert "--prd N Use the folder .ralph/PRD-N/ as the ralph directory" in help_text


def test_item15_plugins_shows_what_the_gates_provide(project: RalphProject) -> None:
    rows = {line.split()[0]: line for line in project.run("plugins").stdout.splitlines()[1:] if line.strip()}
    assert "gate tests" in rows["tests-gate"]
    assert "gate quality" in rows["quality-gate"]
    assert "runner ray, fleet engine ray" in rows["ray"]  # every registry, fleet engines too


def test_item15_unknown_runner_in_pyproject_names_the_file(project: RalphProject, tmp_path: Path) -> None:
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text('[tool.ralph]\nrunner = "nope"\n')
    project.commit_all("config")
    result = project.run("run", "--dry-run", "--agent", "replay", env=replay(tmp_path, {}))
    assert result.returncode == 2
    assert f"(set by {pyproject} (runner = 'nope' in [tool.ralph]))" in result.stderr
    assert "unknown runner 'nope'" in result.stderr


# -- docs/migrating.md -----------------------------------------------------------------------------------------------


def test_migrating_doc_commands_are_real(snark: RalphProject) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "migrating.md").read_text(encoding="utf-8")
    for needle in ("ralph run --ralph-dir scripts/ralph", "ralph init --ralph-dir scripts/ralph", "/ralph-loop", "/cancel-ralph",
                   "--completion-promise", ".claude/ralph-loop.local.md", "--skip-review"):
        assert needle in doc, needle
    for block in __import__("re").findall(r"```sh\n(.*?)```", doc, __import__("re").S):
        for line in block.splitlines():
            argv = line.split("  #")[0].split()
            if argv and argv[0] == "ralph":
                result = snark.run(*argv[1:], "--help")
                assert result.returncode == 0, f"{line}: {result.stderr}"
