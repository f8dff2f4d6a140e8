"""The loop end to end through the real Claude Code CLI and the scripted model server.

Each test scripts the model per iteration (the prompt starts with "Ralph Loop
iteration N of M"); the CLI really executes the Bash tool calls, which edit
tasks.json and commit, exactly as a model would.
"""

from __future__ import annotations

from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, Turn, text
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import (
    approve_turns,
    bash_turns,
    commit_command,
    implement_turns,
    review_fix_turns,
    self_approving_turns,
    set_fields_command,
)

pytestmark = pytest.mark.real_claude


def set_fields(story_id: str, **fields: Any) -> str:
    """A Bash command that edits one story of ralph/tasks.json (what a model would do), with the
    ``python3`` on PATH: the docker-sandbox and ray-sandbox tests run it in the container."""
    return set_fields_command(story_id, python="python3", **fields)


commit = commit_command


def iteration(*commands: str, say: str = "Done.") -> list[Turn]:
    """Turns of one iteration: each command as a Bash tool call, then a closing text."""
    return bash_turns(list(commands), say)


def implement(story_id: str, filename: str, content: str) -> list[Turn]:
    """An implement iteration (``implement_turns``) with the ``python3`` on PATH."""
    return implement_turns(story_id, filename, content, python="python3")


def review_fix_cycle(story_id: str, filename: str, feedback: str) -> dict[int, list[Turn]]:
    """Iterations 1-4 of a review cycle (``review_fix_turns``) with the ``python3`` on PATH."""
    return review_fix_turns(story_id, filename, feedback, python="python3")


def approve(story_id: str, count: int, feedback: str = "") -> list[Turn]:
    """An approving review (``approve_turns``), ``reviewFeedback`` set to ``feedback``, with the ``python3`` on PATH."""
    return approve_turns(story_id, count, python="python3", reviewFeedback=feedback)


def run_loop(project: RalphProject, server_url: str, env_factory: Any, *args: str) -> Any:
    return project.run("run", "--runner", "direct", "--agent", "claude", "--timeout", "120", *args, env=env_factory(server_url))


@pytest.fixture
def one_story(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    return ralph_project


def test_one_story_implement_then_review_approves(one_story, scripted_model, claude_binary, claude_agent_env) -> None:
    script = IterationScript({1: implement("US-001", "hello.txt", "hello"), 2: approve("US-001", 1)})
    server = scripted_model(script)
    result = run_loop(one_story, server.url, claude_agent_env)

    assert result.returncode == 0, result.stderr
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 1)
    assert (one_story.path / "hello.txt").read_text() == "hello"
    log = one_story.git("log", "--format=%s")
    assert "feat: [US-001] - implement" in log and "review: [US-001] - approved" in log
    modes = [e["mode"] for e in one_story.events("iteration_started")]
    assert modes == ["implement", "review"]
    assert one_story.summary()["reason"].startswith("complete: promise tag")
    assert not (one_story.path / ".ralph-active").exists()
    # the loop told the agent its mode and story in the prompt it really sent
    first = [r for r in server.requests if script.key_of(r) == 1][0]
    assert "Mode: **implement**" in first.text and "US-001" in first.text
    assert script.unscripted == 0


def test_changes_requested_fix_and_rereview(one_story, scripted_model, claude_binary, claude_agent_env) -> None:
    script = IterationScript(review_fix_cycle("US-001", "hello.txt", "Typo: helo -> hello"))
    server = scripted_model(script)
    result = run_loop(one_story, server.url, claude_agent_env)

    assert result.returncode == 0, result.stderr
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 2)
    assert [e["mode"] for e in one_story.events("iteration_started")] == ["implement", "review", "review-fix", "review"]
    fix_prompt = [r for r in server.requests if script.key_of(r) == 3][0].text
    assert "Typo: helo -> hello" in fix_prompt and "Mode: **review-fix**" in fix_prompt
    assert (one_story.path / "hello.txt").read_text() == "hello"


def test_implement_that_approves_itself_is_undone(one_story, scripted_model, claude_binary, claude_agent_env) -> None:
    cheat = self_approving_turns("US-001", "hello.txt", python="python3")
    script = IterationScript({1: cheat, 2: implement("US-001", "hello.txt", "hello"), 3: approve("US-001", 1)})
    server = scripted_model(script)
    result = run_loop(one_story, server.url, claude_agent_env)

    assert result.returncode == 0, result.stderr
    undone = one_story.events("transition_undone")
    assert [e["stories"] for e in undone] == [["US-001"]]
    assert one_story.events("false_completion")[0]["iteration"] == 1
    # the Stop hook told the model in the same session, before the loop undid it
    cheat_requests = [r.text for r in server.requests if script.key_of(r) == 1]
    assert any("Implement iterations cannot set passes=true" in t for t in cheat_requests)
    # and the next iteration's prompt carried the loop's feedback
    second = [r.text for r in server.requests if script.key_of(r) == 2][0]
    assert "undid the review-field changes of US-001" in second
    assert "illegal transition" in (one_story.ralph_dir / "progress.txt").read_text()
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 1)
    assert [e["mode"] for e in one_story.events("iteration_started")] == ["implement", "implement", "review"]


def test_promise_with_open_stories_does_not_end_the_loop(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
    early_promise = implement("US-001", "a.txt", "a")
    early_promise[-1] = Turn([text("<promise>COMPLETE</promise>")])
    script = IterationScript({1: early_promise, 2: approve("US-001", 1)})
    server = scripted_model(script)
    result = run_loop(ralph_project, server.url, claude_agent_env, "-n", "3")

    assert result.returncode == 1, result.stderr
    assert [e["iteration"] for e in ralph_project.events("false_completion")] == [1, 2]
    assert len(ralph_project.events("iteration_started")) == 3
    assert "max iterations (3) reached" in ralph_project.summary()["reason"]
    assert ralph_project.story("US-002")["passes"] is False


def test_skip_review_sets_passes_directly(one_story, scripted_model, claude_binary, claude_agent_env) -> None:
    script = IterationScript(
        {
            1: iteration(
                "printf hi > hi.txt",
                set_fields("US-001", passes=True, notes="wrote hi.txt"),
                commit("feat: [US-001] - implement"),
                say="<promise>COMPLETE</promise>",
            )
        },
        # the spec gate's reviewer (on by default under skip-review): a fresh session, no iteration number
        default=[Turn([text('Checked.\n```json\n{"verdict": "met", "unmet": [], "extra": []}\n```')])],
    )
    server = scripted_model(script)
    result = run_loop(one_story, server.url, claude_agent_env, "--skip-review")

    assert result.returncode == 0, result.stderr
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, None, 0)
    assert one_story.events("violation") == []
    marker_payload = [r.text for r in server.requests if script.key_of(r) == 1][0]
    assert "skip-review" in marker_payload
    assert [(v["gate"], v["verdict"]) for v in one_story.events("gate_verdict")] == [("spec", "met")]


def test_review_cap_auto_approves(one_story, scripted_model, claude_binary, claude_agent_env) -> None:
    note = "[AUTO-APPROVED AT CAP] error handling still thin"
    script = IterationScript({1: implement("US-001", "x.txt", "x"), 2: approve("US-001", 1, feedback=note)})
    server = scripted_model(script)
    result = run_loop(one_story, server.url, claude_agent_env, "--review-cap", "1")

    assert result.returncode == 0, result.stderr
    review_prompt = [r.text for r in server.requests if script.key_of(r) == 2][0]
    assert "reaches the cap of 1" in review_prompt
    final = one_story.story("US-001")
    assert final["reviewFeedback"].startswith("[AUTO-APPROVED AT CAP]")
    assert one_story.summary()["stories"][0]["autoApproved"] is True
    assert "approved (at cap)" in result.stdout
