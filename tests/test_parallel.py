"""``ralph run --parallel`` and ``ralph worktrees``: independent loops in separate git worktrees.

Real git repositories, the real CLI as a process, the replay agent as a real subprocess.

One replay script serves every unit (``RALPH_REPLAY_SCRIPT`` is shared by all children):
each iteration runs ``unit_agent.py``, a small Python "agent" written by the test.  It
learns which unit it works for from ``RALPH_PARALLEL_UNIT`` (which ``ralph run
--parallel`` sets in each child's environment and the direct runner hands to the agent)
and which task list from ``RALPH_TASKS_FILE`` (set by the loop).  It implements the first
open story of its own task list: writes ``<unit>.txt``, sets ``passes``, appends to its
unit's progress file, commits.  So the script is the same, the work differs by unit, and
nothing in the script names a unit or a story.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ralph.testing.project import RalphProject, process_alive, story, wait_for

UNIT_AGENT = '''\
import json, os, pathlib, subprocess, sys, time

unit = os.environ["RALPH_PARALLEL_UNIT"]
tasks_path = pathlib.Path(os.environ["RALPH_TASKS_FILE"])
hold = os.environ.get("UNIT_AGENT_HOLD")
if hold:  # say it is running (its pid is its namespace's: the test finds it from outside), then hang until stopped
    pathlib.Path(hold, unit + ".held").write_text(str(os.getpid()))
    time.sleep(120)
    sys.exit(0)
data = json.loads(tasks_path.read_text())
story = next(s for s in data["userStories"] if not s.get("passes"))
pathlib.Path(unit + ".txt").write_text(unit + " " + story["id"] + "\\n")
story.update(passes=True, notes="implemented in " + unit)
tasks_path.write_text(json.dumps(data, indent=2) + "\\n")
with (tasks_path.parent / "progress.txt").open("a") as handle:
    handle.write(unit + ": " + story["id"] + " done\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "feat: [" + story["id"] + "] - " + unit], check=True)
'''

RUN_OPTIONS = ("--runner", "direct", "--agent", "replay", "--skip-review")


@pytest.fixture(autouse=True)
def no_spec_gate(ralph_project: RalphProject) -> None:
    """These tests are about worktrees: the replay agent gives no spec verdict, so the spec gate
    (on by default under skip-review) is switched off in the project's ralph.toml."""
    (ralph_project.path / "ralph.toml").write_text("[spec]\nenabled = false\n", encoding="utf-8")
    ralph_project.commit_all("no spec gate")


def agent_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    helper = tmp_path / "unit_agent.py"
    helper.write_text(UNIT_AGENT)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(helper))}"
    step = [{"run": command}, {"say": "done"}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {}, "default": step}))
    return {"RALPH_REPLAY_SCRIPT": str(script), **extra}


def add_prd(project: RalphProject, n: int, story_ids: list[str]) -> Path:
    folder = project.path / ".ralph" / f"PRD-{n}"
    folder.mkdir(parents=True)
    for name in ("prompt.md", "prd.md", "progress.txt"):
        shutil.copyfile(project.ralph_dir / name, folder / name)
    data = project.tasks()
    data["project"] = f"prd-{n}"
    data["userStories"] = [story(s, f"PRD {n} story {s}") for s in story_ids]
    (folder / "tasks.json").write_text(json.dumps(data, indent=2) + "\n")
    return folder


def worktree(project: RalphProject, unit: str) -> Path:
    return project.path / ".git" / "ralph-worktrees" / unit


def worktrees_cmd(project: RalphProject, *args: str) -> subprocess.CompletedProcess[str]:
    """``ralph worktrees ARGS`` (through the module until the command is registered on the group)."""
    from ralph.cli.main import cli

    if "worktrees" in cli.commands:
        return project.run("worktrees", *args)
    return subprocess.run(
        [sys.executable, "-P", "-c", "from ralph.cli.worktrees import worktrees; worktrees(prog_name='ralph worktrees')", *args],
        cwd=project.path, env=project.process_env(), capture_output=True, text=True, timeout=60,
    )


def changed_on_branch(project: RalphProject, branch: str) -> set[str]:
    return set(project.git("diff", "--name-only", f"main...{branch}").split())


def run_dirs_of(project: RalphProject, path: Path) -> list[Path]:
    from ralph.loop.rundir import runs_dir

    parent = runs_dir(path, str(project.state_dir))
    return sorted(parent.iterdir()) if parent.is_dir() else []


@pytest.fixture
def two_prds(ralph_project: RalphProject) -> RalphProject:
    add_prd(ralph_project, 1, ["US-001"])
    add_prd(ralph_project, 2, ["US-001"])
    ralph_project.commit_all("two PRDs")
    return ralph_project


def test_two_prds_finish_in_separate_worktrees_without_touching_each_other(two_prds: RalphProject, tmp_path: Path) -> None:
    project = two_prds
    main_head = project.git("rev-parse", "HEAD").strip()
    progress_before = {n: (project.path / f".ralph/PRD-{n}/progress.txt").read_text() for n in (1, 2)}

    result = project.run("run", "--parallel", *RUN_OPTIONS, env=agent_env(tmp_path))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "[PRD-1] " in result.stdout and "[PRD-2] " in result.stdout
    assert "nothing was merged or pushed" in result.stdout
    wt1, wt2 = worktree(project, "PRD-1"), worktree(project, "PRD-2")
    # each branch has its own commits and only its own files
    assert changed_on_branch(project, "ralph/parallel/PRD-1") == {"PRD-1.txt", ".ralph/PRD-1/tasks.json", ".ralph/PRD-1/progress.txt"}
    assert changed_on_branch(project, "ralph/parallel/PRD-2") == {"PRD-2.txt", ".ralph/PRD-2/tasks.json", ".ralph/PRD-2/progress.txt"}
    assert (wt1 / "PRD-1.txt").read_text() == "PRD-1 US-001\n" and not (wt1 / "PRD-2.txt").exists()
    assert (wt2 / "PRD-2.txt").read_text() == "PRD-2 US-001\n" and not (wt2 / "PRD-1.txt").exists()
    for wt, mine, other in ((wt1, 1, 2), (wt2, 2, 1)):
        assert json.loads((wt / f".ralph/PRD-{mine}/tasks.json").read_text())["userStories"][0]["passes"] is True
        assert (wt / f".ralph/PRD-{mine}/progress.txt").read_text().endswith(f"PRD-{mine}: US-001 done\n")
        assert (wt / f".ralph/PRD-{other}/progress.txt").read_text() == progress_before[other]
        assert project.git("-C", str(wt), "status", "--porcelain") == ""
    # the main working tree and branch are untouched
    assert project.git("rev-parse", "HEAD").strip() == main_head
    assert project.git("status", "--porcelain") == ""
    assert not (project.path / "PRD-1.txt").exists() and not (project.path / "PRD-2.txt").exists()
    assert {n: (project.path / f".ralph/PRD-{n}/progress.txt").read_text() for n in (1, 2)} == progress_before
    # one run directory per unit, none for the main tree; separate locks in separate git dirs
    runs1, runs2 = run_dirs_of(project, wt1), run_dirs_of(project, wt2)
    assert len(runs1) == 1 and len(runs2) == 1 and runs1[0] != runs2[0]
    assert json.loads((runs1[0] / "summary.json").read_text())["exit_code"] == 0
    assert project.run_dirs() == []
    assert (project.path / ".git/worktrees/PRD-1/ralph-run.lock").is_file()
    assert (project.path / ".git/worktrees/PRD-2/ralph-run.lock").is_file()

    listing = worktrees_cmd(project)
    assert listing.returncode == 0, listing.stderr
    assert "PRD-1" in listing.stdout and "PRD-2" in listing.stdout and "ralph/parallel/PRD-1" in listing.stdout
    rows = {row["unit"]: row for row in json.loads(worktrees_cmd(project, "--json").stdout)}
    assert set(rows) == {"PRD-1", "PRD-2"}
    for row in rows.values():
        assert row["base"] == "main" and row["ahead"] >= 1 and row["behind"] == 0
        assert row["running"] is False and row["dirty"] == [] and row["exit_code"] == 0

    # a rerun reuses the worktrees: nothing left to do
    again = project.run("run", "--parallel", *RUN_OPTIONS, env=agent_env(tmp_path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(reused)" in again.stdout and "already complete" in again.stdout


def test_clean_refuses_dirty_worktree_without_force_and_keeps_unmerged_branches(two_prds: RalphProject, tmp_path: Path) -> None:
    project = two_prds
    assert project.run("run", "--parallel", *RUN_OPTIONS, env=agent_env(tmp_path)).returncode == 0
    (worktree(project, "PRD-1") / "scratch.txt").write_text("unsaved work\n")

    clean = worktrees_cmd(project, "--clean")
    assert clean.returncode == 1
    assert "kept PRD-1: it has uncommitted changes: scratch.txt" in clean.stdout
    assert "removed worktree PRD-2" in clean.stdout
    assert worktree(project, "PRD-1").is_dir() and not worktree(project, "PRD-2").exists()

    project.git("merge", "-q", "--ff-only", "ralph/parallel/PRD-2")  # the user merges one branch
    forced = worktrees_cmd(project, "--clean", "--force", "--delete-branches", "PRD-1")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert not worktree(project, "PRD-1").exists()
    assert "kept branch ralph/parallel/PRD-1: not merged into main" in forced.stdout
    assert "ralph/parallel/PRD-1" in project.git("branch", "--list", "ralph/parallel/*")
    assert worktrees_cmd(project).stdout.strip() == "no ralph worktrees (ralph run --parallel creates them)"
    assert not (project.path / ".git" / "ralph-worktrees").exists()


def test_story_groups_split_one_task_list(ralph_project: RalphProject, tmp_path: Path) -> None:
    project = ralph_project
    project.write_stories([story("US-001"), story("US-002"), story("US-003", dependsOn=["US-001"])])

    plan = project.run("run", "--parallel", "--groups", "--dry-run", *RUN_OPTIONS)
    assert plan.returncode == 0, plan.stderr
    assert "ralph-US-001: ralph stories US-001, US-003" in plan.stdout
    assert "ralph-US-002: ralph stories US-002" in plan.stdout
    assert not (project.path / ".git" / "ralph-worktrees").exists()

    result = project.run("run", "--parallel", "--groups", *RUN_OPTIONS, env=agent_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    wt_a, wt_b = worktree(project, "ralph-US-001"), worktree(project, "ralph-US-002")
    tasks_a = json.loads((wt_a / "ralph/tasks.json").read_text())["userStories"]
    tasks_b = json.loads((wt_b / "ralph/tasks.json").read_text())["userStories"]
    assert [(s["id"], s["passes"]) for s in tasks_a] == [("US-001", True), ("US-003", True)]
    assert [(s["id"], s["passes"]) for s in tasks_b] == [("US-002", True)]
    first_commit = project.git("log", "--reverse", "--format=%s", "main..ralph/parallel/ralph-US-002").splitlines()[0]
    assert first_commit.startswith("ralph: story group ralph-US-002 (US-002)")
    assert (wt_a / "ralph-US-001.txt").read_text() == "ralph-US-001 US-003\n"
    assert not (wt_a / "ralph-US-002.txt").exists() and not (wt_b / "ralph-US-001.txt").exists()
    assert len(project.tasks()["userStories"]) == 3 and project.git("status", "--porcelain") == ""


def test_refusals(ralph_project: RalphProject) -> None:
    project = ralph_project
    add_prd(project, 1, ["US-001"])
    project.commit_all("one PRD")
    single = project.run("run", "--parallel")
    assert single.returncode == 2
    assert "--parallel needs at least 2 units and found only .ralph/PRD-1; run it alone with `ralph run --prd 1`" in single.stderr

    project.write_stories([story("US-001"), story("US-002", dependsOn=["US-001"])])
    one_group = project.run("run", "--parallel", "--groups")
    assert one_group.returncode == 2 and "2 stories forming one group" in one_group.stderr

    add_prd(project, 2, ["US-001"])  # not committed: the main tree is dirty
    dirty = project.run("run", "--parallel")
    assert dirty.returncode == 2
    assert "uncommitted changes" in dirty.stderr and ".ralph/PRD-2/" in dirty.stderr
    assert not (project.path / ".git" / "ralph-worktrees").exists()

    assert project.run("run", "--groups").returncode == 2
    assert "--ralph-dir and --prd only go with --groups" in project.run("run", "--parallel", "--prd", "1").stderr
    misused = worktrees_cmd(project, "--force")
    assert (misused.returncode, misused.stderr) == (2, "ralph: error: --force and --delete-branches only go with --clean\n")


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` as this machine's /proc shows it (host pids, also of processes in pid
    namespaces below), with its command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    below, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, of in parents.items():
            if of == parent and child not in below:
                try:
                    below[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    below[child] = ""
                todo.append(child)
    return below


def test_sigint_stops_every_child(two_prds: RalphProject, tmp_path: Path) -> None:
    """SIGINT to `ralph run --parallel` ends every process under it: the child loops, their agents' pid
    namespaces and the agents (found from outside: inside its namespace an agent sees other pids)."""
    project = two_prds
    holds = tmp_path / "holds"
    holds.mkdir()
    proc = project.start("run", "--parallel", *RUN_OPTIONS, env=agent_env(tmp_path, UNIT_AGENT_HOLD=str(holds)))
    try:
        wait_for(lambda: {p.name for p in holds.iterdir()} == {"PRD-1.held", "PRD-2.held"}, timeout=60)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.communicate()) from None
    below_parent = descendants(proc.pid)
    agents = [pid for pid, cmdline in below_parent.items() if cmdline.startswith(sys.executable) and "unit_agent.py" in cmdline]
    assert len(agents) == 2, below_parent  # one held agent per unit, each in its own pid namespace below the parent
    loops = [pid for pid, cmdline in below_parent.items() if " run " in f" {cmdline} " and "--ralph-dir" in cmdline]
    assert len(loops) == 2, below_parent
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "[PRD-1]" in stderr and "[PRD-2]" in stderr and "SIGINT" in stderr
    wait_for(lambda: not any(process_alive(pid) for pid in below_parent), timeout=20)
    for unit in ("PRD-1", "PRD-2"):
        summary = json.loads((run_dirs_of(project, worktree(project, unit))[-1] / "summary.json").read_text())
        assert summary["reason"] == "interrupted"


def test_children_get_the_users_run_options(tmp_path: Path) -> None:
    import click

    from ralph.cli.main import run
    from ralph.lifecycle.parallel import passthrough_args

    args = ["--parallel", "--no-sandbox", "--agent", "replay", "-n", "3", "-q", "--resume", "--skip-review",
            "--max-cost", "2.5", "--dry-run", "-d", str(tmp_path)]
    ctx = run.make_context("run", args)
    skip = {"project_dir", "ralph_dir", "prd", "parallel", "groups", "dry_run"}
    assert passthrough_args(ctx, skip) == [
        "--max-iterations", "3", "--no-sandbox", "--agent", "replay", "--skip-review", "--max-cost", "2.5",
        "--resume", "--quiet",
    ]
    assert passthrough_args(run.make_context("run", ["--parallel"]), skip) == []
    assert isinstance(ctx, click.Context)


def test_story_groups_are_dependson_components() -> None:
    from ralph.lifecycle.parallel import story_groups
    from ralph.tasks import Story

    stories = [Story.model_validate(story(i, dependsOn=deps)) for i, deps in [
        ("US-001", []), ("US-002", []), ("US-003", ["US-002"]), ("US-004", []), ("US-005", ["US-004", "US-001"]),
        ("US-006", ["US-099"]),
    ]]
    assert story_groups(stories) == [["US-001", "US-004", "US-005"], ["US-002", "US-003"], ["US-006"]]
