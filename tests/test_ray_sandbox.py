"""``[tool.ralph.ray] agent_runs = "docker-sandbox"``: the agent in the sandbox container on the node.

A real Ray cluster (head, node2, node3 on this machine), the real Docker engine
with the ``ralph-sandbox`` image, the real Claude Code CLI on node2 against the
scripted model server (listening on the Docker bridge's gateway, the only host
address the container's allowlist proxy lets it reach).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, ScriptedModelServer, Turn, text, tool
from ralph.testing.project import RalphProject, story

from test_docker_sandbox import docker_client, gateway, sandbox_image  # noqa: F401  (fixtures)
from test_loop_claude import approve, commit, iteration, set_fields
from test_ray_runner import cluster, placements  # noqa: F401  (fixture)

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]

ENV = ["ANTHROPIC_*", "CLAUDE_*", "DISABLE_*", "API_TIMEOUT_MS", "GIT_*"]
IN_CONTAINER = (
    # PID 1 of the sandbox container is its init running the keeper; no capability is left
    "grep -q sleep /proc/1/cmdline && grep -Eq 'CapEff:[[:space:]]+0+$' /proc/self/status"
)


def configure(project: RalphProject, cluster: Any, gateway: str, port: int, **sandbox: Any) -> None:  # noqa: F811
    """The ray runner on node2 with the agent in the sandbox; the allowlist proxy lets only the model server through."""
    settings = {"network": "allowlist", "allow_hosts": [f"{gateway}:{port}"], **sandbox}
    lines = [
        "[tool.ralph.ray]",
        f"address = {json.dumps(cluster.address)}",
        'resources = {"node2" = 1}',
        f"env = {json.dumps(ENV)}",
        'agent_runs = "docker-sandbox"',
        "",
        "[tool.ralph.docker-sandbox]",
        *(f"{key} = {json.dumps(value)}" for key, value in settings.items()),
        "",
        "[tool.ralph.spec]",
        "enabled = false",
    ]
    (project.path / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    project.commit_all("ray + sandbox settings")


def _port(url: str) -> int:
    from urllib.parse import urlsplit

    return int(urlsplit(url).port or 80)


def sandbox_containers(client: Any, workspace: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": ["ralph.sandbox=1", f"ralph.project={workspace}"]})


def test_one_story_runs_in_the_sandbox_container_on_node2_and_gates_run_there_too(
    ralph_project, cluster, docker_client, sandbox_image, gateway, claude_binary, claude_agent_env  # noqa: F811
) -> None:
    project = ralph_project
    # the loop's own test gate: it passes only inside the hardened container on the node
    project.write_stories([story("US-001", "Greeting file")], verifyCommands=[IN_CONTAINER + " && pwd"])
    script = IterationScript(
        {
            1: iteration(
                "pwd > where.txt && id -u > uid.txt && tr '\\0' ' ' < /proc/1/cmdline > init.txt "
                "&& grep CapEff /proc/self/status > caps.txt",
                set_fields("US-001", reviewStatus="needs_review"),
                commit("feat: [US-001] - implement"),
            ),
            2: approve("US-001", 1),
        }
    )
    with ScriptedModelServer(script, host=gateway) as server:
        configure(project, cluster, gateway, _port(server.url))
        result = project.run("run", "--runner", "ray", "--agent", "claude", "--timeout", "120",
                             env=claude_agent_env(server.url), timeout=300)

    assert result.returncode == 0, result.stdout + result.stderr
    assert project.story("US-001")["passes"] is True
    placed = [p for p in placements(project) if p["event"] == "iteration_placed"]
    assert len(placed) == 2 and {p["node_id"] for p in placed} == {cluster.node_id("node2")}
    assert {p["agent_runs"] for p in placed} == {"docker-sandbox"}
    workspace = placed[0]["workspace"]
    # the agent ran in the actor's checkout, inside the container: init + keeper as PID 1, no capabilities
    assert (project.path / "where.txt").read_text().strip() == workspace
    init = (project.path / "init.txt").read_text()
    assert "docker-init" in init and "sleep" in init, init
    assert (project.path / "caps.txt").read_text().split() == ["CapEff:", "0000000000000000"]
    assert (project.path / "uid.txt").read_text().strip() == str(os.getuid())
    # the test gate ran in that container too (never here), on the project's state, paths shown as the project's
    gates = [e for e in project.events("gate") if e["gate"] == "tests"]
    assert gates and all(g["passed"] and g["where"] == "sandbox" for g in gates), gates
    assert project.events("run_started")[0]["runner"] == "ray"
    # the container went with the actor
    assert sandbox_containers(docker_client, workspace) == []
    assert not Path(workspace).exists()
    assert script.unscripted == 0


def test_guard_denial_from_inside_the_node_container_reaches_the_model(
    ralph_project, cluster, docker_client, sandbox_image, gateway, claude_binary, claude_agent_env  # noqa: F811
) -> None:
    project = ralph_project
    project.write_stories([story("US-001", "Greeting file")])
    push = "git push origin HEAD:main"
    script = IterationScript(
        {1: [Turn([tool("Bash", {"command": push, "description": "push"})]), Turn([text("Stopping.")])]}
    )
    with ScriptedModelServer(script, host=gateway) as server:
        configure(project, cluster, gateway, _port(server.url))
        result = project.run("run", "--runner", "ray", "--agent", "claude", "--timeout", "120", "-n", "1",
                             env=claude_agent_env(server.url), timeout=300)
        requests = list(server.requests)

    assert result.returncode == 1, result.stdout + result.stderr  # one iteration, story not done
    follow_up = [r for r in requests if r.assistant_turns == 1]
    assert follow_up and "git-push" in follow_up[0].text
    hooks = [e for e in project.events("hook") if e.get("event") == "PreToolUse"]
    assert hooks, "the loop answered no PreToolUse call"
    placed = [p for p in placements(project) if p["event"] == "iteration_placed"]
    assert placed[0]["hook_command"].startswith("python3 -I -S /opt/ralph/lib/")  # the in-container client
    assert sandbox_containers(docker_client, placed[0]["workspace"]) == []


def test_missing_image_on_the_node_is_exit_2_with_the_fix(
    ralph_project, cluster, docker_client, sandbox_image, gateway, claude_binary, claude_agent_env  # noqa: F811
) -> None:
    project = ralph_project
    project.write_stories([story("US-001", "Greeting file")])
    script = IterationScript({})
    with ScriptedModelServer(script, host=gateway) as server:
        configure(project, cluster, gateway, _port(server.url), image="ralph-sandbox:does-not-exist")
        result = project.run("run", "--runner", "ray", "--agent", "claude", "--timeout", "60",
                             env=claude_agent_env(server.url), timeout=180)
        asked = len(server.requests)
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stdout + result.stderr
    assert "ralph-sandbox:does-not-exist" in message and "ralph sandbox build --offline-base" in message, message
    assert "node" in message and asked == 0  # no iteration started
    assert project.events("iteration_started") == []
