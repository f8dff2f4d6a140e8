"""Agent-side hooks through the real Claude Code CLI and the scripted model server.

Inside `ralph run` (the hook client asks the loop over its socket) and without a
loop (the exported plugin bundle, hooks answered in-process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ralph.testing.model_server import IterationScript, SequenceScript, Turn, text, tool
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import bash_turns, commit_command, set_fields_command
from ralph.testing.scripting import bash_turn as bash

pytestmark = pytest.mark.real_claude


def requests_after(server, script, iteration: int) -> list[str]:
    return [r.text for r in server.requests if script.key_of(r) == iteration]


@pytest.fixture
def project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001", "Greeting")])
    return ralph_project


def run_loop(project: RalphProject, url: str, env_factory, *args: str, env: dict | None = None):
    return project.run(
        "run", "--runner", "direct", "--agent", "claude", "--timeout", "120", *args, env={**env_factory(url), **(env or {})}
    )


def finish_story() -> dict[int, list[Turn]]:
    """Iterations 2 and 3: implement and approve, so the run ends cleanly."""
    implement = bash_turns(
        ["printf hi > hi.txt", set_fields_command("US-001", reviewStatus="needs_review"), commit_command("feat: [US-001] - hi")],
        "implemented",
    )
    approve = bash_turns(
        [
            set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
            commit_command("review: [US-001] - approved"),
        ],
        "approved <promise>COMPLETE</promise>",
    )
    return {2: implement, 3: approve}


def test_denied_git_push_never_runs_and_the_reason_reaches_the_model(project, scripted_model, claude_binary, claude_agent_env) -> None:
    marker = project.path / "PUSHED"
    script = IterationScript({1: [bash(f"touch {marker} && git push origin main"), Turn([text("ok")])], **finish_story()})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env)

    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "the denied command ran"
    after_denial = requests_after(server, script, 1)[1]
    assert "git push" in after_denial.lower() or "pushing" in after_denial.lower()
    denials = [e for e in project.events("hook") if e["event"] == "PreToolUse"]
    assert denials and "deny" in json.dumps(denials[0]["output"])


def test_an_opaque_command_is_denied_in_direct_mode_and_never_runs(
    project, scripted_model, claude_binary, claude_agent_env
) -> None:
    marker = project.path / "RAN"
    # the command name comes from `read`: the guard cannot know it, so direct mode denies the whole line
    # (what it would run is harmless: `git status`)
    command = f"touch {marker}; read -r c <<< 'git status'; $c"
    script = IterationScript({1: [bash(command), Turn([text("ok")])], **finish_story()})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env)
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), "the denied command ran"
    after_denial = requests_after(server, script, 1)[1]
    assert "opaque-code" in after_denial and "only known at run time" in after_denial


def test_protected_prd_cannot_be_overwritten_during_the_loop(project, scripted_model, claude_binary, claude_agent_env) -> None:
    prd = project.ralph_dir / "prd.md"
    before = prd.read_bytes()
    script = IterationScript({1: [bash("echo hacked > ralph/prd.md"), Turn([text("ok")])], **finish_story()})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env)
    assert result.returncode == 0, result.stderr
    assert prd.read_bytes() == before
    assert "prd.md" in requests_after(server, script, 1)[1]


def test_additional_context_reaches_the_model_and_failures_the_next_prompt(
    project, scripted_model, claude_binary, claude_agent_env
) -> None:
    failing = "printf 'FAILED tests/test_a.py::test_a - assert 1 == 2\\n=== 1 failed, 3 passed in 0.10s ===\\n'"
    script = IterationScript({1: [bash(failing), Turn([text("ok")])], **finish_story()})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env, env={"CLAUDE_CONTEXT_WINDOW": "4000"})
    assert result.returncode == 0, result.stderr
    after_tool = requests_after(server, script, 1)[1]
    assert "Tests failed (pytest): 1 failed" in after_tool  # PostToolUse additionalContext
    assert "CONTEXT CRITICAL" in after_tool  # a 4,000-token window is soon full
    next_prompt = requests_after(server, script, 2)[0]
    assert "Tests failed during the previous iteration" in next_prompt
    assert "=== 1 failed, 3 passed in 0.10s ===" in next_prompt


def test_a_hook_that_crashes_in_a_loop_denies_the_tool(project, scripted_model, claude_binary, claude_agent_env, tmp_path) -> None:
    """Fail-closed during a loop (docs/design.md, trust boundary rule 7): a crashing guard denies, with the error."""
    site = tmp_path / "site"
    (site / "crashy_guard-1.0.dist-info").mkdir(parents=True)
    (site / "crashy_guard-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: crashy-guard\nVersion: 1.0\n")
    (site / "crashy_guard-1.0.dist-info" / "entry_points.txt").write_text("[ralph]\ncrashy = crashy_guard\n")
    (site / "crashy_guard.py").write_text(
        textwrap.dedent(
            """
            from ralph import hookimpl

            @hookimpl
            def ralph_pre_tool_use(event):
                raise RuntimeError("guard exploded")
            """
        )
    )
    marker = project.path / "RAN"
    script = IterationScript({1: [bash(f"touch {marker}"), Turn([text("ok")])]})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env, "-n", "1", env={"PYTHONPATH": str(site)})
    assert result.returncode == 2, result.stderr  # a check that cannot run stops the run
    assert "guard exploded" in result.stderr.strip().splitlines()[-1]
    assert not marker.exists(), "a crashing hook let the tool run during a loop"


def test_exported_bundle_guards_an_interactive_session(tmp_path, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.hooks.bundle import export_bundle

    export_bundle(tmp_path / "bundle")
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    marker = work / "PUSHED"
    script = SequenceScript([bash(f"touch {marker} && git push --force origin main"), Turn([text("done")])])
    server = scripted_model(script)
    env = {**os.environ, **claude_agent_env(server.url)}
    env.pop("RALPH_HOOK_SOCKET", None)
    # the bundle's hooks find ralph's Python through the `ralph` on PATH, as on a person's machine
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        [str(claude_binary), "-p", "push it", "--output-format", "stream-json", "--verbose",
         "--dangerously-skip-permissions", "--plugin-dir", str(tmp_path / "bundle" / "ralph")],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "push" in server.requests[1].text.lower()


def test_edit_of_an_unread_file_is_denied_by_read_before_edit(project, scripted_model, claude_binary, claude_agent_env) -> None:
    target = project.path / "notes.md"
    target.write_text("original\n")
    project.commit_all("notes")
    edit = Turn([tool("Edit", {"file_path": str(target), "old_string": "original", "new_string": "changed"})])
    script = IterationScript({1: [edit, Turn([text("ok")])], **finish_story()})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env)
    assert result.returncode == 0, result.stderr
    assert target.read_text() == "original\n"
    denials = [e for e in project.events("hook") if e["event"] == "PreToolUse" and e["tool"] == "Edit"]
    assert denials and "read-before-edit" in json.dumps(denials[0]["output"])


def test_deleting_outside_the_project_is_denied(project, scripted_model, claude_binary, claude_agent_env, tmp_path) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.txt").write_text("keep")
    script = IterationScript({1: [bash(f"rm -rf {outside}"), Turn([text("ok")])], **finish_story()})
    server = scripted_model(script)
    result = run_loop(project, server.url, claude_agent_env)
    assert result.returncode == 0, result.stderr
    assert (outside / "data.txt").read_text() == "keep"
    after = requests_after(server, script, 1)[1]
    assert "delete-outside-project" in after
