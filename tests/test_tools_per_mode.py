"""Tools per mode: the claude agent offers each iteration mode only the tools it needs.

Unit tests check the command line; the ``real_claude`` tests run the real Claude Code
CLI against the scripted model server and look at the tools of the requests it really
sends, and at what it refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.contracts import AgentInvocation
from ralph.settings import Settings
from ralph.testing.model_server import IterationScript, ModelRequest, Turn, text, tool
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import bash_turns, commit_command, set_fields_command
from ralph_plugins.agents.claude import ClaudeAgent
from ralph_plugins.agents.claude_config import DEFAULT_TOOLS, ClaudeConfig


def _agent(tmp_path: Path, **claude: Any) -> ClaudeAgent:
    binary = tmp_path / "claude"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    config = ClaudeConfig(binary=str(binary), **claude)
    # the binary is outside the project (tmp_path/project): ralph never runs a program from the project tree
    return ClaudeAgent(Settings(project_dir=tmp_path / "project", config=RalphConfig(), plugin_config={"claude": config}))


def _argv(agent: ClaudeAgent, tmp_path: Path, mode: str | None = None, purpose: str = "iteration") -> list[str]:
    invocation = AgentInvocation(prompt="p", project_dir=tmp_path, run_dir=tmp_path, iteration=1, mode=mode, purpose=purpose)
    return agent.process(invocation).argv


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_default_tool_sets_per_mode(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    assert _option(_argv(agent, tmp_path, "implement"), "--tools") == "Bash,Read,Edit,Write"
    assert _option(_argv(agent, tmp_path, "review-fix"), "--tools") == "Bash,Read,Edit,Write"
    assert _option(_argv(agent, tmp_path, "review"), "--tools") == "Bash,Read,Edit"
    assert _option(_argv(agent, tmp_path, None, purpose="quality"), "--tools") == "Bash,Read"
    read_only = AgentInvocation(prompt="p", project_dir=tmp_path, run_dir=tmp_path, iteration=1, purpose="x", read_only=True)
    assert _option(agent.process(read_only).argv, "--tools") == "Bash,Read"
    # an invocation without a mode (a third-party caller) keeps the CLI's own set
    assert "--tools" not in _argv(agent, tmp_path)
    for names in DEFAULT_TOOLS.values():
        assert not {"Agent", "Task", "ScheduleWakeup", "Skill", "Workflow"} & set(names)


def test_tools_are_configurable_per_mode(tmp_path: Path) -> None:
    agent = _agent(
        tmp_path, tools={"review": ["Bash", "Read"], "implement": ["default"], "docs": []},
        disallowed_tools=["Bash(git push:*)", "WebFetch"],
    )  # fmt: skip
    review = _argv(agent, tmp_path, "review")
    assert _option(review, "--tools") == "Bash,Read"
    assert review[review.index("--disallowedTools") + 1 :][:2] == ["Bash(git push:*)", "WebFetch"]
    assert "--tools" not in _argv(agent, tmp_path, "implement")  # ["default"]: the CLI's own set
    assert _option(_argv(agent, tmp_path, "review-fix"), "--tools") == "Bash,Read,Edit,Write"  # default kept
    assert _option(_argv(agent, tmp_path, "docs"), "--tools") == ""  # no built-in tool at all


def test_bad_tool_names_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tools\.review: 'Bash Read' is not a tool name"):
        ClaudeConfig(tools={"review": ["Bash Read"]})
    (tmp_path / "ralph.toml").write_text('[claude]\ntools = { review = ["Edit", ""] }\n')
    from ralph.errors import ConfigError
    from ralph.session import open_session

    with pytest.raises(ConfigError, match="tools"):
        open_session(tmp_path)


# -- through the real CLI ---------------------------------------------------------------------


def _first_requests(requests: list[ModelRequest], script: IterationScript) -> dict[int, ModelRequest]:
    firsts: dict[int, ModelRequest] = {}
    for request in requests:
        key = script.key_of(request)
        if key is not None and key not in firsts and request.assistant_turns == 0:
            firsts[key] = request
    return firsts


def _tool_names(request: ModelRequest) -> set[str]:
    return {t["name"] for t in request.body.get("tools", []) if t.get("name") != "DeferredToolPlaceholder"}


def _run(project: RalphProject, url: str, env_factory: Any, *args: str) -> Any:
    return project.run("run", "--runner", "direct", "--agent", "claude", "--timeout", "120", *args, env=env_factory(url))


@pytest.mark.real_claude
def test_each_mode_sends_only_its_tools(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    feedback = "1. hello.txt says helo"
    script = IterationScript(
        {
            1: bash_turns(["printf helo > hello.txt", set_fields_command("US-001", reviewStatus="needs_review"),
                           commit_command("feat: [US-001] - greeting")], "Implemented."),
            2: bash_turns([set_fields_command("US-001", reviewStatus="changes_requested", reviewCount=1,
                                              reviewFeedback=feedback),
                           commit_command("review: [US-001] - changes requested")], "Changes requested."),
            3: bash_turns(["printf hello > hello.txt",
                           set_fields_command("US-001", reviewStatus="needs_review", reviewFeedback=""),
                           commit_command("fix: [US-001] - address review feedback")], "Fixed."),
            4: bash_turns([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=2,
                                              notes="ok"),
                           commit_command("review: [US-001] - approved")], "<promise>COMPLETE</promise>"),
        }
    )  # fmt: skip
    server = scripted_model(script)
    result = _run(ralph_project, server.url, claude_agent_env)
    assert result.returncode == 0, result.stdout + result.stderr

    firsts = _first_requests(server.requests, script)
    assert _tool_names(firsts[1]) == {"Bash", "Read", "Edit", "Write"}
    assert _tool_names(firsts[2]) == {"Bash", "Read", "Edit"}
    assert _tool_names(firsts[3]) == {"Bash", "Read", "Edit", "Write"}
    assert _tool_names(firsts[4]) == {"Bash", "Read", "Edit"}
    for request in firsts.values():
        # what was left out is not even described to the model: no skills or agent-type listings
        assert '"name": "Agent"' not in request.text and "ScheduleWakeup" not in request.text
        assert "The following skills are available" not in request.text
    # the CLI's own init event lists what the session really had
    inits = [e for e in ralph_project.events("agent_event") if e["type"] == "system" and "tools" in e["data"]]
    assert [sorted(e["data"]["tools"]) for e in inits] == [
        ["Bash", "Edit", "Read", "Write"], ["Bash", "Edit", "Read"], ["Bash", "Edit", "Read", "Write"], ["Bash", "Edit", "Read"],
    ]  # fmt: skip


@pytest.mark.real_claude
def test_review_cannot_write_or_edit_code_but_records_its_verdict(
    ralph_project, scripted_model, claude_binary, claude_agent_env
) -> None:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    project = ralph_project.path
    tasks = str(ralph_project.tasks_path)

    def edit(old: str, new: str, path: str = tasks) -> Turn:
        return Turn([tool("Edit", {"file_path": path, "old_string": old, "new_string": new})])

    review = [
        Turn([tool("Write", {"file_path": str(project / "sneaky.txt"), "content": "fixed it myself"})]),
        Turn([tool("Read", {"file_path": str(project / "hello.txt")})]),
        edit("helo", "hello", str(project / "hello.txt")),
        Turn([tool("Read", {"file_path": tasks})]),
        edit('"reviewStatus": "needs_review"', '"reviewStatus": "approved"'),
        edit('"passes": false', '"passes": true'),
        edit('"reviewCount": 0', '"reviewCount": 1'),
        edit('"notes": ""', '"notes": "reviewed with Edit"'),
        Turn([tool("Bash", {"command": commit_command("review: [US-001] - approved"), "description": "commit"})]),
        Turn([text("Approved. <promise>COMPLETE</promise>")]),
    ]
    script = IterationScript(
        {
            1: bash_turns(["printf helo > hello.txt", set_fields_command("US-001", reviewStatus="needs_review"),
                           commit_command("feat: [US-001] - greeting")], "Implemented."),
            2: review,
        }
    )  # fmt: skip
    server = scripted_model(script)
    result = _run(ralph_project, server.url, claude_agent_env)
    assert result.returncode == 0, result.stdout + result.stderr

    # Write is not offered in review mode: the CLI itself refuses it, nothing is written
    assert not (project / "sneaky.txt").exists()
    results = [e["data"] for e in ralph_project.events("agent_event") if e["type"] == "tool_result" and e["iteration"] == 2]
    assert "No such tool available: Write" in results[0]["content"] and results[0]["is_error"]
    # Edit of code is denied by the review-scope guard; Edit of the task list works
    assert "review-scope" in results[2]["content"] and results[2]["is_error"]
    assert (project / "hello.txt").read_text() == "helo"
    final = ralph_project.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"], final["notes"]) == (
        True, "approved", 1, "reviewed with Edit",
    )  # fmt: skip
    assert "review: [US-001] - approved" in ralph_project.git("log", "--format=%s")
    assert script.unscripted == 0


# -- the review-scope guard ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "tool", "target", "denied"),
    [
        ("review", "Edit", "src/app.py", True),
        ("review", "Write", "new.txt", True),
        ("review", "MultiEdit", "../outside.txt", True),
        ("review", "Edit", "ralph/tasks.json", False),
        ("review", "Edit", "ralph/progress.txt", False),
        ("review", "Read", "src/app.py", False),
        ("implement", "Edit", "src/app.py", False),
        ("review-fix", "Write", "src/app.py", False),
    ],
)
def test_review_scope_guard(tmp_path: Path, mode: str, tool: str, target: str, denied: bool) -> None:
    from ralph.contracts import LoopView
    from ralph.testing.hooks import make_event
    from ralph_plugins.guards import review_scope

    loop = LoopView(runner="direct", mode=mode, story_id="US-001", ralph_dir=tmp_path / "ralph", run_dir=tmp_path / "run")
    event = make_event("PreToolUse", {"tool_name": tool, "tool_input": {"file_path": target}}, tmp_path, tmp_path, loop=loop)
    denials = review_scope.ralph_pre_tool_use(event)
    assert bool(denials) is denied
    if denied:
        assert denials[0].rule == "review-scope" and "reviewFeedback" in denials[0].reason
    # outside a loop the guard never speaks
    assert review_scope.ralph_pre_tool_use(make_event("PreToolUse", event.payload, tmp_path, tmp_path)) == []
