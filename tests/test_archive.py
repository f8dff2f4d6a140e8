"""``ralph archive`` (seed 000 §10, seed 004 §5.2) on real git projects after real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from ralph.templates import render, template_text
from ralph.testing.project import RalphProject, story

LIFECYCLE = (
    "from ralph.cli.main import cli; from ralph.cli.lifecycle import COMMANDS; "
    "[cli.add_command(c) for c in COMMANDS if c.name not in cli.commands]; cli(prog_name='ralph')"
)
TODAY = date.today().isoformat()


def ralph(project: RalphProject, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-c", LIFECYCLE, *args],
        cwd=project.path, env=project.process_env(env), capture_output=True, text=True, timeout=120,
    )


def complete_run(project: RalphProject, tmp_path: Path) -> None:
    """A real loop to completion: US-001 approved at the first review, US-002 after a fix."""
    project.write_stories([story("US-001", "Cart total"), story("US-002", "Receipt", priority=2)])
    s = lambda sid, **f: {"set": {"story": sid, "fields": f}}  # noqa: E731
    script = {
        "1": [{"write": {"path": "a.txt", "content": "a"}}, s("US-001", reviewStatus="needs_review"), {"commit": "a"}, {"say": "a"}],
        "2": [s("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"), {"commit": "ok a"}, {"say": "ok"}],
        "3": [{"write": {"path": "b.txt", "content": "b"}}, s("US-002", reviewStatus="needs_review"), {"commit": "b"}, {"say": "b"}],
        "4": [s("US-002", reviewStatus="changes_requested", reviewCount=1, reviewFeedback="x"), {"commit": "r b"}, {"say": "r"}],
        "5": [s("US-002", reviewStatus="needs_review", reviewFeedback=""), {"commit": "fix b"}, {"say": "f"}],
        "6": [s("US-002", reviewStatus="approved", passes=True, reviewCount=2, notes="ok"), {"commit": "ok b"},
              {"say": "<promise>COMPLETE</promise>"}],
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"iterations": script}))
    result = project.run("run", "--runner", "direct", "--agent", "replay", env={"RALPH_REPLAY_SCRIPT": str(path)})
    assert result.returncode == 0, result.stderr


def test_archive_after_a_completed_run(ralph_project: RalphProject, tmp_path: Path) -> None:
    project = ralph_project
    prompt = project.ralph_dir / "prompt.md"
    prompt.write_text(prompt.read_text() + "\n## Project rule\nAlways run `make lint`.\n")
    (project.ralph_dir / "prd.md").write_text("# PRD: demo\n\n## 1. Summary\nCheckout shows totals and mails receipts.\n")
    with (project.ralph_dir / "progress.txt").open("a") as progress:
        progress.write("\n## Iteration 1\n- added the cart total\n")
    project.commit_all("customise the prompt, write the PRD")
    complete_run(project, tmp_path)
    before = {name: (project.ralph_dir / name).read_bytes() for name in ("prd.md", "tasks.json", "progress.txt")}
    custom_prompt = prompt.read_bytes()
    head_before = project.git("rev-parse", "HEAD").strip()

    result = ralph(project, "archive")
    assert result.returncode == 0, result.stderr
    archive = project.path / "ralph-archive" / f"{TODAY}-demo"
    assert f"archived 2/2 completed stories to ralph-archive/{TODAY}-demo/" in result.stdout

    # moved, byte for byte
    for name, data in before.items():
        assert (archive / name).read_bytes() == data
    summary = (archive / "summary.md").read_text()
    assert "- Branch: `ralph/demo`" in summary and "- Stories completed: 2 of 2" in summary
    assert f"- Date range: {TODAY} to {TODAY}" in summary
    assert "| US-001 | Cart total | approved | 1 |" in summary and "| US-002 | Receipt | approved | 2 |" in summary
    assert "reviewCount of 2 completed stories: 1: 1, 2: 1 (cap 5)" in summary
    assert "Last run: 6 iterations" in summary

    # reset to fresh templates; prompt.md customisations kept
    values = {"DATE": TODAY, "PROJECT_NAME": "demo"}
    assert (project.ralph_dir / "prd.md").read_text() == render(template_text("prd.md"), values)
    assert (project.ralph_dir / "progress.txt").read_text() == render(template_text("progress.txt"), values)
    fresh = project.tasks()
    assert fresh["project"] == "demo" and fresh["branchName"] == "ralph/feature-name"
    assert [s["id"] for s in fresh["userStories"]] == ["US-001"] and fresh["userStories"][0]["passes"] is False
    assert prompt.read_bytes() == custom_prompt

    # one commit with exactly the archive and the reset; nothing left over
    assert project.git("rev-parse", "HEAD~1").strip() == head_before
    assert project.git("log", "-1", "--format=%s").strip() == f"ralph: archive {TODAY}-demo (2/2 stories complete)"
    changed = set(project.git("show", "--name-only", "--format=", "HEAD").split())
    assert changed == {
        f"ralph-archive/{TODAY}-demo/{name}" for name in ("prd.md", "tasks.json", "progress.txt", "summary.md")
    } | {"ralph/prd.md", "ralph/tasks.json", "ralph/progress.txt"}
    assert project.git("status", "--porcelain").strip() == ""

    # and again: there is nothing completed now; a second folder is never created
    again = ralph(project, "archive")
    assert again.returncode == 2
    assert "nothing completed to archive: no story in" in again.stderr
    assert sorted(p.name for p in (project.path / "ralph-archive").iterdir()) == [f"{TODAY}-demo"]


def test_refuses_when_nothing_is_completed(ralph_project: RalphProject) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", reviewStatus="needs_review")])
    head = ralph_project.git("rev-parse", "HEAD")
    tasks = ralph_project.tasks_path.read_bytes()
    result = ralph(ralph_project, "archive")
    assert result.returncode == 2
    assert "ralph: error: nothing completed to archive: 0 of 2 stories in" in result.stderr
    assert not (ralph_project.path / "ralph-archive").exists()
    assert ralph_project.tasks_path.read_bytes() == tasks
    assert ralph_project.git("rev-parse", "HEAD") == head


def test_refuses_while_a_run_holds_the_lock(ralph_project: RalphProject) -> None:
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    ralph_project.write_stories([story("US-001", passes=True, reviewStatus="approved", reviewCount=1, notes="n")])
    lock = ProjectLock(git_dir(ralph_project.path))
    lock.acquire()
    try:
        result = ralph(ralph_project, "archive")
    finally:
        lock.release()
    assert result.returncode == 2 and "a `ralph run` is active" in result.stderr
    assert not (ralph_project.path / "ralph-archive").exists()


def test_label_partial_completion_and_name_collision(ralph_project: RalphProject) -> None:
    done = story("US-001", passes=True, reviewStatus="approved", reviewCount=5, notes="n",
                 reviewFeedback="[AUTO-APPROVED AT CAP] naming")
    ralph_project.write_stories([done, story("US-002", priority=2)])
    (ralph_project.path / "ralph-archive" / f"{TODAY}-sprint-1").mkdir(parents=True)
    result = ralph(ralph_project, "archive", "--label", "Sprint 1", "--no-commit")
    assert result.returncode == 0, result.stderr
    target = ralph_project.path / "ralph-archive" / f"{TODAY}-sprint-1-2"
    assert (target / "summary.md").is_file()
    assert "warning: 1 of 2 stories is not complete; it is archived as open" in result.stdout
    summary = (target / "summary.md").read_text()
    assert "| US-001 | Story US-001 | approved (at cap) | 5 |" in summary and "| US-002 | Story US-002 | open | 0 |" in summary
    assert "1 cap hit (US-001)" in summary
    assert ralph_project.git("log", "-1", "--format=%s").strip() == "tasks"  # --no-commit


@pytest.mark.parametrize("filename", ["prd.json", "plan.md"])
def test_archive_keeps_the_task_format(ralph_project: RalphProject, filename: str) -> None:
    from ralph.plugin.manager import PluginHost

    ralph_project.tasks_path.unlink()
    path = ralph_project.ralph_dir / filename
    if filename == "prd.json":
        path.write_text(json.dumps({"project": "demo", "branchName": "ralph/x", "description": "", "userStories": [
            {"id": "US-001", "title": "A", "acceptanceCriteria": ["a"], "priority": 1, "passes": True, "notes": "done"}]}, indent=2))
    else:
        path.write_text('# Plan: demo\n\n- [x] US-001: A <!-- ralph: {"reviewStatus": "approved", "reviewCount": 1, "notes": "done"} -->\n')
    original = path.read_bytes()
    ralph_project.commit_all("other format")
    result = ralph(ralph_project, "archive")
    assert result.returncode == 0, result.stderr
    assert (ralph_project.path / "ralph-archive" / f"{TODAY}-x" if filename == "prd.json" else
            ralph_project.path / "ralph-archive" / f"{TODAY}-demo").joinpath(filename).read_bytes() == original
    fresh = path.read_text()
    store = next(PluginHost().stores.get(n)() for n in ("prd-json", "plan-md") if n.replace("-", ".") == filename)
    parsed = store.parse(fresh, path)
    assert [s.passes for s in parsed.userStories] == [False]
    if filename == "prd.json":
        assert "reviewStatus" not in fresh  # seed 003's format has no review fields
    assert not (ralph_project.ralph_dir / "tasks.json").exists()
