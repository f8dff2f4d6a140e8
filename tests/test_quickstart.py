"""The README's "Quick start on a real project", command by command, in order, in a fresh git
repository: the real ``ralph`` CLI as a process, the real Claude Code CLI for ``ralph plan`` and
``ralph run``, the scripted model server (ralph.testing) instead of the API.  Each command's exit
code is checked, and what a user would look at after it.

``ralph plan`` is interactive: it is run exactly as the README says, with the Claude Code binary
wrapped to add ``-p --dangerously-skip-permissions`` (print mode, so the scripted model's moves
run without a person at the keyboard); everything else about the command is as typed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, Turn, text
from ralph.testing.project import GIT_IDENTITY, ralph_command, story
from ralph.testing.scripting import bash_turn as bash

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart_commands() -> list[str]:
    """The command lines of the README's quick-start block, comments removed, in order."""
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("## Quick start on a real project"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the quick start has no ```sh block"
    commands = []
    for line in block.group(1).splitlines():
        command = re.split(r"\s{2,}#", line)[0].strip()
        if command:
            commands.append(command)
    return commands


def write_file(path: str, content: str) -> Turn:
    code = "import sys,pathlib;pathlib.Path(sys.argv[1]).write_text(sys.argv[2])"
    return bash(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} {shlex.quote(path)} {shlex.quote(content)}")


PRD = """# PRD: my-feature

## Overview
A `greet(name)` function for the welcome banner, so support staff see a friendly greeting.

## Goals
- greet("Ada") returns "Hello, Ada!"
"""

STORY = story(
    "US-001",
    "greet() says hello",
    description="A greet(name) function for the welcome banner.",
    acceptanceCriteria=['greet("Ada") returns "Hello, Ada!"', "greet.py exists at the project root"],
)


def plan_turns() -> list[Turn]:
    """What the model does in the `ralph plan` session: write prd.md and the stories."""
    tasks_code = (
        "import json,sys;p='ralph/tasks.json';d=json.load(open(p));"
        "d.update(description='greeting', verifyCommands=['true'], userStories=[json.loads(sys.argv[1])]);"
        "open(p,'w').write(json.dumps(d,indent=2)+'\\n')"
    )
    return [
        write_file("ralph/prd.md", PRD),
        bash(f"{shlex.quote(sys.executable)} -c {shlex.quote(tasks_code)} {shlex.quote(json.dumps(STORY))}"),
        Turn([text("Wrote ralph/prd.md and one story in ralph/tasks.json. Check it with `ralph plan --check`.")]),
    ]


def set_fields(**fields: Any) -> Turn:
    code = (
        "import json,sys;p='ralph/tasks.json';d=json.load(open(p));"
        "[s.update(json.loads(sys.argv[1])) for s in d['userStories'] if s['id']=='US-001'];"
        "open(p,'w').write(json.dumps(d,indent=2)+'\\n')"
    )
    return bash(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} {shlex.quote(json.dumps(fields))}")


def loop_script() -> IterationScript:
    implement = [
        write_file("greet.py", 'def greet(name):\n    return f"Hello, {name}!"\n'),
        set_fields(reviewStatus="needs_review"),
        bash("git add -A && git commit -q -m 'feat: [US-001] - greet'"),
        Turn([text("Implemented US-001.")]),
    ]
    approve = [
        set_fields(reviewStatus="approved", passes=True, reviewCount=1, notes="greet() verified"),
        bash("git add -A && git commit -q -m 'review: [US-001] - approved'"),
        Turn([text("Approved. <promise>COMPLETE</promise>")]),
    ]
    return IterationScript({1: implement, 2: approve}, default=plan_turns())


def print_mode_wrapper(tmp_path: Path, claude: Path) -> Path:
    """A `claude` that runs the real one in print mode (no terminal in a test)."""
    wrapper = tmp_path / "claude-print-mode"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(str(claude))} -p --dangerously-skip-permissions "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_readme_quickstart_runs_in_order(tmp_path: Path, scripted_model, claude_binary, claude_agent_env) -> None:
    commands = quickstart_commands()
    assert commands[0] == "cd your-repo" and any(c.startswith("ralph run") for c in commands)
    server = scripted_model(loop_script())
    repo = tmp_path / "your-repo"
    repo.mkdir()
    env = {
        **os.environ,
        **GIT_IDENTITY,
        **claude_agent_env(server.url),
        "RALPH_STATE_DIR": str(tmp_path / "state"),
        "RALPH_RUNNER": "direct",  # the quick start's default `auto` would pick the sandbox where one is built
        "RALPH_CLAUDE_BINARY": str(claude_binary),
    }
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=tmp_path / "your-repo", check=True)
    (repo / "README.md").write_text("# your repo\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "first"], cwd=repo, check=True, env=env)

    transcript: list[str] = []
    for line in (part.strip() for command in commands for part in command.split(" && ")):
        argv = shlex.split(line)
        if argv[0] == "cd":
            assert argv[1] == "your-repo"
            continue
        step_env = dict(env)
        if argv[:2] == ["ralph", "plan"] and len(argv) == 2:
            step_env["RALPH_CLAUDE_BINARY"] = str(print_mode_wrapper(tmp_path, claude_binary))
        program = [*ralph_command(), *argv[1:]] if argv[0] == "ralph" else argv
        result = subprocess.run(
            program, cwd=repo, env=step_env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
        transcript.append(f"$ {line}\n-> exit {result.returncode}\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
        assert result.returncode == 0, "\n\n".join(transcript)
        check_after(argv, repo, result)
    print("\n\n".join(transcript))


def check_after(argv: list[str], repo: Path, result: subprocess.CompletedProcess[str]) -> None:
    """What a user would look at after each quick-start command."""
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True).stdout  # noqa: E731
    command = " ".join(argv[:3])
    if argv[:2] == ["ralph", "init"]:
        assert git("status", "--porcelain").strip() == ""  # --commit left nothing uncommitted
        assert json.loads((repo / "ralph" / "tasks.json").read_text())["branchName"] == "ralph/my-feature"
    elif argv == ["ralph", "plan"]:
        assert json.loads((repo / "ralph" / "tasks.json").read_text())["userStories"][0]["id"] == "US-001"
        assert "greet(name)" in (repo / "ralph" / "prd.md").read_text()
    elif command == "ralph plan --check":
        assert "0 errors" in result.stdout
    elif argv[:2] == ["git", "commit"]:
        assert git("status", "--porcelain").strip() == ""
    elif command == "ralph run --dry-run":
        assert "mode:    implement" in result.stdout and "story:   US-001" in result.stdout
        assert "branch:  ralph/my-feature" in result.stdout
    elif argv == ["ralph", "run"]:
        assert git("symbolic-ref", "--short", "HEAD").strip() == "ralph/my-feature"
        assert "review: [US-001] - approved" in git("log", "--format=%s")
    elif argv[:2] == ["ralph", "status"]:
        assert "run directory:" in result.stdout
    elif argv[:2] == ["ralph", "report"]:
        written = Path(result.stdout.strip().splitlines()[-1].removeprefix("wrote ").strip())
        assert written.is_file() and not written.is_relative_to(repo)
        assert "US-001" in result.stdout
    elif argv[:2] == ["ralph", "archive"]:
        assert any((repo / "ralph-archive").iterdir())
