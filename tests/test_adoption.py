"""Issue 22 item 2: from someone else's Ralph folder to a ralph loop.

- snarktank/ralph (``scripts/ralph/``: ``prompt.md`` or ``CLAUDE.md``, ``prd.json``, ``progress.txt``):
  its prompt tells the agent to set ``passes: true`` itself.  Run as the migration guide says
  (``ralph run --ralph-dir scripts/ralph``), every iteration used to follow it and be undone by the
  review policy.  Now a prompt without ralph's markers that contradicts the default policy runs
  under ``skip-review`` (said at the start and by ``--dry-run``, with the line); a policy the
  person chose is refused before iteration 1, naming the lines and the ways out.
- ralph-claude-code (``.ralph/PROMPT.md``, ``.ralph/fix_plan.md``) and ralph-orchestrator
  (``PROMPT.md``, ``ralph.yml``): ``ralph init`` takes their loop over into ``ralph/``, their files
  untouched, and the loop runs.

Folders shaped like theirs (text of our own with the same kind of lines), the real ``ralph`` CLI,
the replay agent acting as their prompt says.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ralph.testing import commit, say, set_fields, write_file
from ralph.testing.project import RalphProject
from ralph.testing.replay import replay_env

SNARK_PROMPT = """# Agent Instructions

You are an autonomous coding agent working on a software project.

## Your Task

1. Read the PRD at `prd.json` (in the same directory as this file)
2. Read the progress log at `progress.txt` (check Codebase Patterns first)
3. Pick the **highest priority** user story where `passes: false`
4. Implement that single user story
5. If checks pass, commit ALL changes with message: `feat: [Story ID] - [Story Title]`
6. Update the PRD to set `passes: true` for the completed story
7. Append your progress to `progress.txt`

## Stop Condition

After completing a user story, check if ALL stories have `passes: true`.
If ALL stories are complete and passing, reply with:
<promise>COMPLETE</promise>
"""

SNARK_PRD = {
    "project": "MyApp",
    "branchName": "ralph/task-priority",
    "description": "Task priority",
    "userStories": [
        {"id": "US-001", "title": "Add priority", "description": "x", "acceptanceCriteria": ["priority column exists"],
         "priority": 1, "passes": False, "notes": ""},
    ],
}

AS_THEIR_PROMPT_SAYS = [write_file("priority.sql", "ALTER TABLE tasks ADD priority;"),
                        set_fields("US-001", passes=True, notes="added the column"),
                        commit("feat: [US-001] - Add priority"), say("done <promise>COMPLETE</promise>")]


def repository(path: Path, files: dict[str, str], state: Path) -> RalphProject:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    for name, text in {**files, ".gitignore": ".ralph-active\n"}.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    project = RalphProject(path=path, state_dir=state)
    project.commit_all("their layout")
    return project


@pytest.fixture
def snark(tmp_path: Path) -> RalphProject:
    return repository(tmp_path / "app", {
        "scripts/ralph/prompt.md": SNARK_PROMPT,
        "scripts/ralph/prd.json": json.dumps(SNARK_PRD, indent=2) + "\n",
        "scripts/ralph/progress.txt": "# Ralph Progress Log\n## Codebase Patterns\n",
    }, tmp_path / "state")


def test_the_migration_guides_first_command_works_end_to_end(snark: RalphProject, tmp_path: Path) -> None:
    env = {**replay_env(tmp_path / "script.json", {1: AS_THEIR_PROMPT_SAYS}), "RALPH_DISABLE_PLUGINS": "spec-gate"}
    dry = snark.run_replay("--ralph-dir", "scripts/ralph", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "policy:  skip-review" in dry.stdout
    warning = next(line for line in dry.stderr.splitlines() if "tells the agent to set passes: true" in line)
    assert "scripts/ralph/prompt.md line 12" in warning and "Update the PRD to set `passes: true`" in warning
    assert "this run uses policy skip-review instead of review" in warning and "--skip-review" in warning
    prompt = dry.stdout.split("--- prompt (iteration 1) ---")[1]
    assert "do NOT set passes" not in prompt and "never set `passes: true`" not in prompt  # nothing contradicts it

    result = snark.run_replay("--ralph-dir", "scripts/ralph", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "this run uses policy skip-review" in result.stderr
    data = json.loads((snark.path / "scripts" / "ralph" / "prd.json").read_text())
    assert data["userStories"][0]["passes"] is True  # kept, not undone
    assert snark.events("transition_undone") == [] and snark.events("violation") == []
    assert snark.summary()["exit_code"] == 0


def test_a_policy_the_person_chose_is_refused_with_the_lines(snark: RalphProject, tmp_path: Path) -> None:
    env = replay_env(tmp_path / "script.json", {1: AS_THEIR_PROMPT_SAYS})
    for flags in (["--policy", "review"], []):
        if not flags:
            (snark.path / "ralph.toml").write_text('ralph_dir = "scripts/ralph"\npolicy = "review"\n')
            snark.commit_all("the person chose review")
        result = snark.run_replay(*(["--ralph-dir", "scripts/ralph"] if flags else []), *flags, env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "scripts/ralph/prompt.md tells the agent to set passes: true itself" in result.stderr
        assert "every iteration would be undone" in result.stderr
        assert "scripts/ralph/prompt.md line 12: 6. Update the PRD to set `passes: true`" in result.stderr
        assert "--skip-review runs these instructions as written" in result.stderr
        assert "`ralph init --ralph-dir scripts/ralph` adds ralph's prompt.md" in result.stderr
        assert snark.run_dirs() == []
        dry = snark.run_replay(*(["--ralph-dir", "scripts/ralph"] if flags else []), *flags, "--dry-run", env=env)
        assert dry.returncode == 2 and "every iteration would be undone" in dry.stderr
        doctor = snark.run("doctor", "--runner", "direct", "--agent", "replay",
                           *(["-d", str(snark.path)]), env={**env, **({"RALPH_POLICY": "review", "RALPH_RALPH_DIR": "scripts/ralph"} if flags else {})})
        assert doctor.returncode == 1 and "every iteration would be undone" in doctor.stdout, doctor.stdout


def test_snarktanks_claude_md_is_read_by_claude_code_so_it_counts_too(tmp_path: Path) -> None:
    project = repository(tmp_path / "app", {
        "scripts/ralph/CLAUDE.md": SNARK_PROMPT,  # their prompt for Claude Code; no prompt.md
        "scripts/ralph/prd.json": json.dumps(SNARK_PRD, indent=2) + "\n",
        "scripts/ralph/progress.txt": "# Ralph Progress Log\n",
    }, tmp_path / "state")
    env = {**replay_env(tmp_path / "script.json", {1: AS_THEIR_PROMPT_SAYS}), "RALPH_DISABLE_PLUGINS": "spec-gate"}
    dry = project.run_replay("--ralph-dir", "scripts/ralph", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "policy:  skip-review" in dry.stdout and "scripts/ralph/CLAUDE.md line 12" in dry.stderr
    init = project.run("init", "--ralph-dir", "scripts/ralph")
    assert init.returncode == 0, init.stderr
    assert "kept scripts/ralph/CLAUDE.md: Claude Code reads it whenever the agent works in this folder" in init.stdout
    assert (project.path / "scripts" / "ralph" / "CLAUDE.md").read_text() == SNARK_PROMPT
    project.commit_all("adopted")
    refused = project.run_replay("--ralph-dir", "scripts/ralph", "--policy", "review", env=env)
    assert refused.returncode == 2 and "move scripts/ralph/CLAUDE.md out of scripts/ralph" in refused.stderr
    result = project.run_replay("--ralph-dir", "scripts/ralph", env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prompts_that_do_not_contradict_are_left_alone(snark: RalphProject, tmp_path: Path) -> None:
    """ralph's own prompt (markers), a marker-less prompt that knows the review cycle, a negated line."""
    env = replay_env(tmp_path / "script.json", {})
    rdir = snark.path / "scripts" / "ralph"
    (rdir / "prd.md").write_text("# PRD\nPriorities for tasks.\n")  # ralph's prompt names it
    own = [
        (Path(__file__).resolve().parents[1] / "templates" / "prompt.md").read_text(),
        "Implement the story, then set `reviewStatus: \"needs_review\"`. A review sets `passes: true` when it approves.\n",
        "Implement the story. Do NOT set `passes: true` yourself: a review does.\n",
    ]
    for text in own:
        (rdir / "prompt.md").write_text(text)
        snark.commit_all("prompt")
        dry = snark.run_replay("--ralph-dir", "scripts/ralph", "--dry-run", env=env)
        assert dry.returncode == 0, dry.stderr
        assert "policy:  review" in dry.stdout and "tells the agent" not in dry.stderr, (text, dry.stderr)
    (rdir / "prompt.md").write_text(SNARK_PROMPT)
    snark.commit_all("theirs again")
    skip = snark.run_replay("--ralph-dir", "scripts/ralph", "--skip-review", "--dry-run", env=env)
    assert skip.returncode == 0 and "tells the agent" not in skip.stderr  # chosen, and nothing contradicts it


# -- ralph-claude-code (frankbria) -------------------------------------------------------------------

FRANKBRIA_PROMPT = """# Ralph Development Instructions

## Context
You are Ralph, building a command-line todo application in Python.

## Key Principles
- Single responsibility: each command does one thing well
- Fail gracefully: a missing file is an empty list

## Status Reporting (CRITICAL - Ralph needs this!)
At the end of your response, ALWAYS include this status block:
---RALPH_STATUS---
EXIT_SIGNAL: false
---END_RALPH_STATUS---

### When to set EXIT_SIGNAL: true
When every item in fix_plan.md is marked [x].

## Quality Standards
- Unit tests for the storage module
"""

FIX_PLAN = """# Fix Plan - Todo CLI

## Priority 1: Foundation
- [ ] Create todo.py with load/save functions for todos.json
  - [ ] A missing todos.json loads as an empty list
- [x] Set up the repository

## Priority 2: Core Commands
- [ ] Implement `todo add "description"`

```
- [ ] not a task: inside a code fence
```

## Optional
- [ ] Colour output

## Discovered
<!-- Ralph will add discovered tasks here
- [ ] not a task either -->
"""


def frankbria(tmp_path: Path) -> RalphProject:
    return repository(tmp_path / "todo", {
        ".ralph/PROMPT.md": FRANKBRIA_PROMPT, ".ralph/fix_plan.md": FIX_PLAN,
        ".ralph/AGENT.md": "# Build\nRun `python3 -m pytest -q`.\n", ".ralph/specs/storage.md": "JSON in todos.json\n",
        ".ralphrc": "PROJECT_NAME=todo\nMAX_CALLS_PER_HOUR=100\n",
    }, tmp_path / "state")


def test_ralph_claude_codes_loop_is_taken_over_by_init(tmp_path: Path) -> None:
    project = frankbria(tmp_path)
    theirs = {p: p.read_bytes() for p in (project.path / ".ralph").rglob("*") if p.is_file()}
    before = project.run("run", "--runner", "direct", "--agent", "replay")
    assert before.returncode == 2 and "run `ralph init` first: it takes over ralph-claude-code's loop" in before.stderr
    inside = project.run("init", "--ralph-dir", ".ralph")
    assert inside.returncode == 2 and "is ralph-claude-code's folder" in inside.stderr
    assert not (project.path / ".ralph" / "prompt.md").exists()

    init = project.run("init", "--name", "todo")
    assert init.returncode == 0, init.stderr
    assert "took over ralph-claude-code's loop (its files are left as they are):" in init.stdout
    assert "imported 3 tasks of .ralph/fix_plan.md as stories FP-001 ... (1 checked off: done" in init.stdout
    assert "left out 1 items of its optional/future/notes sections" in init.stdout
    assert "left out its loop instructions: Status Reporting (CRITICAL - Ralph needs this)" in init.stdout
    tasks = json.loads((project.path / "ralph" / "tasks.json").read_text())
    stories = {s["id"]: s for s in tasks["userStories"]}
    assert list(stories) == ["FP-001", "FP-002", "FP-003"]
    assert stories["FP-001"]["acceptanceCriteria"] == ["Create todo.py with load/save functions for todos.json",
                                                       "A missing todos.json loads as an empty list"]
    assert stories["FP-002"]["passes"] is True and stories["FP-002"]["reviewStatus"] == "approved"
    assert stories["FP-003"]["title"] == 'Implement `todo add "description"`'
    assert tasks["branchName"] == "ralph/todo"
    prd = (project.path / "ralph" / "prd.md").read_text()
    assert "You are Ralph, building a command-line todo application" in prd and "Unit tests for the storage" in prd
    assert "RALPH_STATUS" not in prd and "EXIT_SIGNAL" not in prd
    assert "`.ralph/specs/`" in prd and "`.ralph/AGENT.md`" in prd
    assert {p: p.read_bytes() for p in (project.path / ".ralph").rglob("*") if p.is_file()} == theirs

    project.commit_all("ralph init")
    check = project.run("plan", "--check")
    assert check.returncode in (0, 1) and "Traceback" not in check.stderr  # the import parses; sharpening is theirs
    env = replay_env(tmp_path / "script.json", {
        1: [write_file("todo.py", "def load(): return []\n"), set_fields("FP-001", reviewStatus="needs_review"),
            commit("feat: [FP-001] - storage"), say("implemented")],
        2: [set_fields("FP-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
            commit("review: [FP-001] - approved"), say("approved")],
    })
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "2", env={
        **env, "RALPH_DISABLE_PLUGINS": "spec-gate"})
    assert result.returncode == 1, result.stdout + result.stderr  # two iterations: FP-003 is still open
    assert project.story("FP-001")["passes"] is True
    assert [e["story"] for e in project.events("iteration_started")] == ["FP-001", "FP-001"]


# -- ralph-orchestrator -------------------------------------------------------------------------------

RALPH_YML = """event_loop:
  completion_promise: LOOP_COMPLETE
  max_iterations: 50

cli:
  backend: claude

backpressure:
  gates:
    - name: test
      command: "python3 -c 'print(1)'"
      on_fail: "Tests failed. Fix them before proceeding."
    - name: lint
      command: true   # nothing to lint yet
"""

ORCHESTRATOR_PROMPT = """# Task: Create a Todo List CLI

Build a Python command-line todo list with:
- Add tasks
- List tasks
- Save to a JSON file

Include error handling and unit tests.
"""


def test_ralph_orchestrators_loop_is_taken_over_by_init(tmp_path: Path) -> None:
    project = repository(tmp_path / "todo", {"ralph.yml": RALPH_YML, "PROMPT.md": ORCHESTRATOR_PROMPT}, tmp_path / "state")
    init = project.run("init")
    assert init.returncode == 0, init.stderr
    assert "took over ralph-orchestrator's loop" in init.stdout
    assert "took ralph.yml's backpressure gates as verifyCommands: python3 -c 'print(1)', true" in init.stdout
    tasks = json.loads((project.path / "ralph" / "tasks.json").read_text())
    assert tasks["verifyCommands"] == ["python3 -c 'print(1)'", "true"]
    assert tasks["userStories"][0]["title"] == "Create a Todo List CLI"
    assert tasks["userStories"][0]["acceptanceCriteria"] == ["Add tasks", "List tasks", "Save to a JSON file"]
    assert "Build a Python command-line todo list" in (project.path / "ralph" / "prd.md").read_text()
    assert (project.path / "ralph.yml").read_text() == RALPH_YML and (project.path / "PROMPT.md").read_text() == ORCHESTRATOR_PROMPT
    project.commit_all("ralph init")
    env = replay_env(tmp_path / "script.json", {
        1: [write_file("todo.py", "TASKS = []\n"), set_fields("US-001", passes=True, notes="done"),
            commit("feat: [US-001] - todo"), say("done")],
    })
    result = project.run("run", "--runner", "direct", "--agent", "replay", "--skip-review", env={
        **env, "RALPH_DISABLE_PLUGINS": "spec-gate"})
    assert result.returncode == 0, result.stdout + result.stderr
    tests_gate = [e for e in project.events("gate") if e["gate"] == "tests"]
    assert tests_gate and tests_gate[0]["passed"] is True  # ralph.yml's gates ran as verifyCommands
    assert project.events("gate_failed") == []


def test_the_fix_plan_reader_and_gate_reader_on_their_own() -> None:
    from ralph.lifecycle.adopt import fix_plan_stories, orchestrator_gates

    stories, skipped = fix_plan_stories(FIX_PLAN)
    assert [s["title"] for s in stories][:1] == ["Create todo.py with load/save functions for todos.json"]
    assert skipped == 1
    assert orchestrator_gates("backpressure:\n  gates:\n    - name: t\n      command: [\"cargo\", \"test\", \"--all\"]\n"
                              "hooks:\n  x:\n    - command: not-a-gate\n") == ["cargo test --all"]


def test_the_migration_guides_try_without_credentials_runs_as_written(snark: RalphProject, tmp_path: Path) -> None:
    """docs/migrating.md's "Try it first, without credentials": its replay script (spec reviewer included)
    and its command, as written, on a snarktank folder: the story is done and the run ends complete."""
    import re

    page = (Path(__file__).parent.parent / "docs" / "migrating.md").read_text(encoding="utf-8")
    section = page.split("### Try it first, without credentials", 1)[1].split("\n### ", 1)[0]
    [script] = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]
    (tmp_path / "ralph-try.json").write_text(json.dumps(script))
    [command] = re.findall(r"^RALPH_REPLAY_SCRIPT=\S+ ralph (run [^#\n]*?)\s*(?:#.*)?$", section, re.M)
    result = snark.run(*command.split(), env={"RALPH_REPLAY_SCRIPT": str(tmp_path / "ralph-try.json")})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "uses policy skip-review" in result.stderr and "spec gate failed" not in result.stderr
    stories = json.loads((snark.path / "scripts" / "ralph" / "prd.json").read_text())["userStories"]
    assert stories[0]["passes"] is True and (snark.path / "hello.txt").read_text() == "hello\n"
    status = snark.run("status")
    assert status.returncode == 0 and "US-001" in status.stdout and "done" in status.stdout, status.stdout
