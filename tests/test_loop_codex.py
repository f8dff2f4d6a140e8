"""The loop end to end through the real Codex CLI and the scripted Responses API server.

Each iteration's model replies are scripted (the prompt starts with "Ralph Loop
iteration N of M"); Codex really executes the shell calls (``exec_command``),
which edit tasks.json and commit, inside its own workspace-write sandbox.
"""

from __future__ import annotations

from typing import Any

import pytest

from ralph.testing.model_server import IterationScript
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import approve_turns as approve
from ralph.testing.scripting import bash_turns, commit_command, review_fix_turns, self_approving_turns
from ralph.testing.scripting import implement_turns as implement

pytestmark = pytest.mark.real_codex


def run_loop(project: RalphProject, url: str, env_factory: Any, *args: str) -> Any:
    return project.run("run", "--runner", "direct", "--agent", "codex", "--timeout", "120", *args, env=env_factory(url))


def texts_of(server: Any, script: IterationScript, key: int) -> list[str]:
    return [r.text for r in server.requests if script.key_of(r) == key]


@pytest.fixture
def one_story(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    return ralph_project


def test_one_story_implement_then_review_approves(one_story, scripted_responses, codex_binary, codex_agent_env) -> None:
    script = IterationScript({1: implement("US-001", "hello.txt", "hello"), 2: approve("US-001", 1)})
    server = scripted_responses(script)
    result = run_loop(one_story, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 1)
    assert (one_story.path / "hello.txt").read_text() == "hello"
    log = one_story.git("log", "--format=%s")
    assert "feat: [US-001] - implement" in log and "review: [US-001] - approved" in log
    started = one_story.events("iteration_started")
    assert [e["mode"] for e in started] == ["implement", "review"]
    assert {e["agent"] for e in started} == {"codex"}
    assert one_story.summary()["reason"].startswith("complete: promise tag")
    first = texts_of(server, script, 1)[0]
    assert "Mode: **implement**" in first and "US-001" in first
    # the parsed events are the same kinds the claude agent produces
    kinds = {e["type"] for e in one_story.events("agent_event")}
    assert {"text", "tool_use", "tool_result", "result"} <= kinds
    assert script.unscripted == 0


def test_changes_requested_fix_and_rereview(one_story, scripted_responses, codex_binary, codex_agent_env) -> None:
    script = IterationScript(review_fix_turns("US-001", "hello.txt", "Typo: helo -> hello"))
    server = scripted_responses(script)
    result = run_loop(one_story, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 2)
    assert [e["mode"] for e in one_story.events("iteration_started")] == ["implement", "review", "review-fix", "review"]
    fix_prompt = texts_of(server, script, 3)[0]
    assert "Typo: helo -> hello" in fix_prompt and "Mode: **review-fix**" in fix_prompt
    assert (one_story.path / "hello.txt").read_text() == "hello"


def test_implement_that_approves_itself_is_undone(one_story, scripted_responses, codex_binary, codex_agent_env) -> None:
    cheat = self_approving_turns("US-001", "hello.txt")
    script = IterationScript({1: cheat, 2: implement("US-001", "hello.txt", "hello"), 3: approve("US-001", 1)})
    server = scripted_responses(script)
    result = run_loop(one_story, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    assert [e["stories"] for e in one_story.events("transition_undone")] == [["US-001"]]
    assert one_story.events("false_completion")[0]["iteration"] == 1
    # Codex's Stop hook carried the loop's check to the model in the same session
    assert any("Implement iterations cannot set passes=true" in t for t in texts_of(server, script, 1))
    assert "undid the review-field changes of US-001" in texts_of(server, script, 2)[0]
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 1)


def test_guard_denial_reaches_the_model_through_codex_hook(
    one_story, scripted_responses, codex_binary, codex_agent_env
) -> None:
    # built in Python, passed as one argv element by the CLI: never through a shell line here
    push = "git push origin main"
    script = IterationScript(
        {
            1: bash_turns([push], say="Could not push.") ,
            2: implement("US-001", "hello.txt", "hello"),
            3: approve("US-001", 1),
        }
    )
    server = scripted_responses(script)
    result = run_loop(one_story, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    denials = [e for e in one_story.events("hook") if e.get("event") == "PreToolUse" and e.get("output")]
    assert denials, "the loop answered no PreToolUse denial"
    reason = denials[0]["output"]["hookSpecificOutput"]["permissionDecisionReason"]
    # the denial reason is in the next model request of that session
    later = texts_of(server, script, 1)[1:]
    assert any("Command blocked by PreToolUse hook" in t and reason.splitlines()[0][:40] in t for t in later)


def test_false_completion_is_not_accepted(one_story, scripted_responses, codex_binary, codex_agent_env) -> None:
    liar = bash_turns(["printf hello > hello.txt", commit_command("wip")], say="Everything is done <promise>COMPLETE</promise>")
    script = IterationScript({1: liar, 2: implement("US-001", "hello.txt", "hello"), 3: approve("US-001", 1)})
    server = scripted_responses(script)
    result = run_loop(one_story, server.url, codex_agent_env, "-n", "3")

    assert result.returncode == 0, result.stderr + result.stdout
    assert [e["iteration"] for e in one_story.events("false_completion")] == [1]
    assert len(one_story.events("iteration_started")) == 3
    assert one_story.story("US-001")["passes"] is True


@pytest.mark.real_claude
def test_mixed_run_claude_implements_codex_reviews(
    one_story, scripted_model, scripted_responses, claude_binary, codex_binary, claude_agent_env, codex_agent_env
) -> None:
    claude_script = IterationScript({1: implement("US-001", "hello.txt", "hello")})
    codex_script = IterationScript({2: approve("US-001", 1)})
    claude_server = scripted_model(claude_script)
    codex_server = scripted_responses(codex_script)
    env = {**codex_agent_env(codex_server.url), **claude_agent_env(claude_server.url), "RALPH_REVIEW_MODEL": "scripted-reviewer"}
    result = one_story.run("run", "--runner", "direct", "--agent", "claude", "--review-agent", "codex",
                           "--timeout", "120", env=env)

    assert result.returncode == 0, result.stderr + result.stdout
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"]) == (True, "approved")
    started = one_story.events("iteration_started")
    assert [(e["mode"], e["agent"], e["model"]) for e in started] == [
        ("implement", "claude", None), ("review", "codex", "scripted-reviewer")
    ]
    # each CLI talked to its own server only, about its own iteration
    assert {claude_script.key_of(r) for r in claude_server.requests} == {1}
    assert {codex_script.key_of(r) for r in codex_server.requests} == {2}
    assert all(r.model == "scripted-reviewer" for r in codex_server.requests)
    report = one_story.run("report", env=env)
    assert report.returncode == 0, report.stderr
    assert "#1 implement US-001 — claude (default model)" in report.stdout
    assert "#2 review US-001 — codex (scripted-reviewer)" in report.stdout
    status = one_story.run("status", env=env).stdout
    assert "#2 review US-001 — codex (scripted-reviewer)" in status


def test_test_failure_monitor_reaches_the_model_through_post_tool_use(
    one_story, scripted_responses, codex_binary, codex_agent_env
) -> None:
    # a test run's summary line, as pytest prints it (no real test suite needed)
    failing = "printf '%s\\n' '========== 1 failed, 2 passed in 0.12s =========='"
    script = IterationScript(
        {1: bash_turns([failing], say="Tests fail; stopping."), 2: implement("US-001", "hello.txt", "hello"),
         3: approve("US-001", 1)}
    )
    server = scripted_responses(script)
    result = run_loop(one_story, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    answered = [e for e in one_story.events("hook") if e.get("event") == "PostToolUse"]
    assert answered and "Tests failed (pytest)" in answered[0]["output"]["hookSpecificOutput"]["additionalContext"]
    # Codex put the PostToolUse context into the session's next request
    assert any("Tests failed (pytest)" in t for t in texts_of(server, script, 1)[1:])
