"""The ``ray`` runner on a real Ray cluster with two worker nodes on this machine.

The loop runs here (``ralph run`` as a real process, a Ray driver); the real
Claude Code CLI runs on the node the test pins with a custom resource, in the
workspace actor's checkout, against the scripted model server.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from ralph.testing.model_server import IterationScript, Turn, text, tool
from ralph.testing.project import RalphProject, story, wait_for
from ralph.testing.requirements import require

from test_loop_claude import approve, commit, implement, iteration, review_fix_cycle, set_fields

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]


def _ray_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Head + node2 + node3, each worker offering the custom resource ``agent``."""
    require(_ray_installed(), "ray is not installed (pip install 'ralph-trustloop[ray]')")
    from ralph.testing.ray_cluster import local_cluster

    with local_cluster(node2={"agent": 1}, node3={"agent": 1}) as handle:
        yield handle


def configure(project: RalphProject, cluster: Any, **ray_settings: Any) -> None:
    env = ["ANTHROPIC_*", "CLAUDE_*", "DISABLE_*", "API_TIMEOUT_MS", "IS_SANDBOX", "GIT_*", "HOME", "RALPH_HOOK_DAEMON_IDLE"]
    settings = {"address": cluster.address, "resources": {"node2": 1}, "env": env, **ray_settings}
    lines = ["[tool.ralph.ray]"]
    for key, value in settings.items():
        lines.append(f"{key} = {json.dumps(value) if not isinstance(value, dict) else _inline(value)}")
    # the replay agent of the fleet test gives no spec verdict (the spec gate is on under skip-review)
    lines += ["", "[tool.ralph.spec]", "enabled = false"]
    (project.path / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    project.commit_all("ray settings")


def _inline(table: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items()) + "}"


def run_on_ray(project: RalphProject, url: str, env_factory: Any, *args: str, timeout: float = 240) -> Any:
    return project.run("run", "--runner", "ray", "--agent", "claude", "--timeout", "120", *args,
                       env=env_factory(url), timeout=timeout)


def placements(project: RalphProject) -> list[dict[str, Any]]:
    path = project.run_dirs()[-1] / "ray.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def one_story(ralph_project: RalphProject, cluster: Any) -> RalphProject:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    configure(ralph_project, cluster)
    return ralph_project


def test_one_story_lifecycle_runs_on_node2_in_its_own_checkout(one_story, cluster, scripted_model, claude_binary,
                                                                 claude_agent_env) -> None:
    where = iteration(
        "pwd > where.txt",
        set_fields("US-001", reviewStatus="needs_review"),
        commit("feat: [US-001] - implement"),
    )
    script = IterationScript({1: where, 2: approve("US-001", 1)})
    server = scripted_model(script)
    result = run_on_ray(one_story, server.url, claude_agent_env)

    assert result.returncode == 0, result.stderr
    final = one_story.story("US-001")
    assert (final["passes"], final["reviewStatus"], final["reviewCount"]) == (True, "approved", 1)
    # the agent's commit came back to the project as a bundle
    log = one_story.git("log", "--format=%s")
    assert "feat: [US-001] - implement" in log and "review: [US-001] - approved" in log
    ran_in = (one_story.path / "where.txt").read_text().strip()
    assert ran_in != str(one_story.path) and "ralph-ray-" in ran_in
    placed = [p for p in placements(one_story) if p["event"] == "iteration_placed"]
    assert len(placed) == 2 and {p["node_id"] for p in placed} == {cluster.node_id("node2")}
    assert placed[0]["workspace"] == ran_in
    assert one_story.git("status", "--porcelain").strip() == ""
    assert script.unscripted == 0


def test_review_fix_cycle_through_the_cluster(one_story, cluster, scripted_model, claude_binary,
                                              claude_agent_env) -> None:
    script = IterationScript(review_fix_cycle("US-001", "hello.txt", "Typo: helo"))
    server = scripted_model(script)
    result = run_on_ray(one_story, server.url, claude_agent_env)

    assert result.returncode == 0, result.stderr
    assert (one_story.path / "hello.txt").read_text() == "hello"
    final = one_story.story("US-001")
    assert (final["reviewStatus"], final["reviewCount"]) == ("approved", 2)
    modes = [e["mode"] for e in one_story.events("iteration_started")]
    assert modes == ["implement", "review", "review-fix", "review"]


def test_guard_denial_reaches_the_model_through_the_relay(one_story, cluster, scripted_model, claude_binary,
                                                          claude_agent_env) -> None:
    bare = one_story.path.parent / "remote.git"
    one_story.git("init", "-q", "--bare", str(bare))
    one_story.git("remote", "add", "origin", str(bare))
    push = "git push origin HEAD:main"
    script = IterationScript(
        {1: [Turn([tool("Bash", {"command": push, "description": "push"})]), Turn([text("Stopping.")])]}
    )
    server = scripted_model(script)
    result = run_on_ray(one_story, server.url, claude_agent_env, "-n", "1")

    assert result.returncode == 1, result.stderr  # one iteration, story not done
    # the deny reason went back to the model in its next request, and nothing was pushed
    follow_up = [r for r in server.requests if r.assistant_turns == 1]
    assert follow_up and "git-push" in follow_up[0].text
    assert one_story.git("--git-dir", str(bare), "rev-parse", "--all").strip() == ""
    hooks = [e for e in one_story.events("hook") if e.get("event") == "PreToolUse"]
    assert hooks, "the loop answered no PreToolUse call"


def test_ctrl_c_kills_the_remote_process_tree_and_removes_the_actor(one_story, cluster, scripted_model,
                                                                    claude_binary, claude_agent_env) -> None:
    marker = one_story.path.parent / "sleeper.pid"
    sleeper = f"sh -c 'echo $$ > {marker}; exec sleep 600'"
    script = IterationScript({1: [Turn([tool("Bash", {"command": sleeper, "description": "wait"})]), Turn([text("x")])]})
    server = scripted_model(script)
    process = one_story.start("run", "--runner", "ray", "--agent", "claude", "--timeout", "300",
                              env=claude_agent_env(server.url))
    try:
        wait_for(marker.exists, timeout=120)
        pid = int(marker.read_text().strip())
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    wait_for(lambda: not _alive(pid), timeout=30)  # the agent's process tree on the node is gone
    placed = [p for p in placements(one_story) if p["event"] == "iteration_placed"][0]
    wait_for(lambda: not _alive(placed["pid"]), timeout=60)  # the actor was removed
    assert not Path(placed["workspace"]).exists()
    assert one_story.git("status", "--porcelain").strip() == ""


def test_node_killed_mid_iteration_is_retried_once_on_another_node(ralph_project, cluster, scripted_model,
                                                                   claude_binary, claude_agent_env) -> None:
    ralph_project.write_stories([story("US-001", "Greeting file")])
    configure(ralph_project, cluster, resources={"agent": 1})
    reached = ralph_project.path.parent / "reached"
    first_time = [True]

    def responder(request: Any) -> Any:
        key = request.assistant_turns
        if key == 0 and "iteration 1 of" in request.text and first_time[0]:
            first_time[0] = False
            reached.write_text("1")
            time.sleep(600)  # the node dies while this request is open
        return script(request)

    script = IterationScript({1: implement("US-001", "hello.txt", "hello"), 2: approve("US-001", 1)})
    server = scripted_model(responder)
    process = ralph_project.start("run", "--runner", "ray", "--agent", "claude", "--timeout", "300",
                                  env=claude_agent_env(server.url))
    try:
        wait_for(reached.exists, timeout=120)
        first = [p for p in placements(ralph_project) if p["event"] == "iteration_placed"][0]
        victim = next(name for name, node in cluster.nodes.items() if node.node_id == first["node_id"])
        workspace = first["workspace"]
        cluster.kill_node(victim)
        # on a real machine everything on the node dies at once: the actor first, then what it started
        _kill(first["pid"])
        _kill_processes_in(workspace)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
        cluster.add_node(victim, agent=1)
    assert process.returncode == 0, stderr
    events = placements(ralph_project)
    lost = [p for p in events if p["event"] == "node_lost"]
    placed = [p for p in events if p["event"] == "iteration_placed"]
    assert len(lost) == 1 and lost[0]["node_id"] == first["node_id"]
    assert placed[1]["node_id"] != first["node_id"]
    assert ralph_project.story("US-001")["passes"] is True
    assert len([e for e in ralph_project.events("iteration_started")]) == 2


def _alive(pid: int) -> bool:
    from ralph.testing.project import process_alive

    return process_alive(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_processes_in(directory: str) -> None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd.startswith(directory):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_without_ray_the_runner_says_how_to_install_it(ralph_project, monkeypatch) -> None:
    from ralph_plugins.runners.ray_cluster.runner import NO_RAY, RayRunner

    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert RayRunner(None).availability().reason == NO_RAY


def test_auto_never_picks_ray_even_when_it_is_available(tmp_path) -> None:
    from ralph.config import RalphConfig
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings
    from ralph_plugins.runners.auto import AutoRunner

    host = PluginHost()
    assert "ray" in host.runners.names()
    chosen = AutoRunner(Settings(tmp_path, RalphConfig(), {})).resolve(host.runners)
    assert chosen.name in {"docker-sandbox", "bwrap", "direct"}


def test_fleet_of_three_prds_on_two_nodes_brings_each_branch_back(ralph_project, cluster, tmp_path) -> None:
    from test_parallel import add_prd, agent_env

    for n in (1, 2, 3):
        add_prd(ralph_project, n, [f"US-{n}01"])
    configure(ralph_project, cluster, resources={"agent": 1},
              env=["RALPH_REPLAY_SCRIPT", "GIT_*", "HOME"])
    result = ralph_project.run("run", "--parallel", "--engine", "ray", "--runner", "direct", "--agent", "replay",
                               "--skip-review", env=agent_env(tmp_path), timeout=300)

    assert result.returncode == 0, result.stdout + result.stderr
    nodes = set()
    for n in (1, 2, 3):
        branch = f"ralph/parallel/PRD-{n}"
        files = ralph_project.git("ls-tree", "-r", "--name-only", branch).split()
        assert f"PRD-{n}.txt" in files, (branch, files)
        tasks = json.loads(ralph_project.git("show", f"{branch}:.ralph/PRD-{n}/tasks.json"))
        assert tasks["userStories"][0]["passes"] is True
    for line in result.stdout.splitlines():
        if ": loop on node " in line:
            nodes.add(line.split("loop on node ")[1].split()[0])
    assert nodes == {cluster.node_id("node2")[:12], cluster.node_id("node3")[:12]}
    assert "fleet finished (engine ray)" in result.stdout
    # nothing was merged: the project's own branch and working tree are as they were
    assert ralph_project.git("status", "--porcelain").strip() == ""
    assert not (ralph_project.path / "PRD-1.txt").exists()
    # each loop's record came back with it, where ralph serve reads a fleet (this machine's state directory)
    fleet = fleet_dir(ralph_project)
    assert f"their records: {fleet} (ralph serve shows them)" in result.stdout
    assert sorted(p.name for p in fleet.iterdir() if p.is_dir()) == ["PRD-1", "PRD-2", "PRD-3"]
    for n in (1, 2, 3):
        unit = fleet / f"PRD-{n}"
        kinds = [json.loads(line)["kind"] for line in (unit / "events.jsonl").read_text().splitlines()]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished" and "iteration_finished" in kinds
        summary = json.loads((unit / "summary.json").read_text())
        assert summary["exit_code"] == 0 and summary["stories"][0]["id"] == f"US-{n}01"
    from ralph.loop.lock import ProjectLock

    assert not ProjectLock(fleet).is_held()  # the fleet ended


def fleet_dir(project: Any) -> Path:
    """The one fleet directory the head of ``ralph run --parallel --engine ray`` made for ``project``."""
    from ralph.loop.rundir import project_state_dir

    fleets = sorted((project_state_dir(project.path, str(project.state_dir)) / "fleet").iterdir())
    assert len(fleets) == 1, fleets
    return fleets[0]


def test_a_fleets_loops_show_in_the_dashboard(ralph_project, cluster, tmp_path, chromium_page) -> None:
    """ralph serve (in headless Chromium) lists each loop of a fleet the head mirrored, with its stories."""
    from test_parallel import add_prd, agent_env
    from test_serve import start_serve, stop

    for n in (1, 2):
        add_prd(ralph_project, n, [f"US-{n}01"])
    configure(ralph_project, cluster, resources={"agent": 1}, env=["RALPH_REPLAY_SCRIPT", "GIT_*", "HOME"])
    result = ralph_project.run("run", "--parallel", "--engine", "ray", "--runner", "direct", "--agent", "replay",
                               "--skip-review", env=agent_env(tmp_path), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    fleet = fleet_dir(ralph_project)
    served = start_serve(ralph_project.state_dir)
    try:
        page = chromium_page
        page.goto(served.url("/"))
        rows = page.locator("tr.run")
        rows.first.wait_for()
        texts = rows.all_inner_texts()
        assert len(texts) == 2, texts
        for n in (1, 2):
            row = next(text for text in texts if f"[fleet PRD-{n}]" in text)
            assert "complete" in row, row
        rows.filter(has_text="[fleet PRD-1]").locator("a").first.click()
        page.wait_for_selector("tr.story[data-story=US-101]")
        assert "PRD 1 story US-101" in page.locator("tr.story[data-story=US-101]").inner_text()
        assert page.locator("#stream li[data-kind=run_finished]").count() == 1
        assert f"fleet~{fleet.name}~PRD-1" in page.url
    finally:
        stop(served)


def test_doctor_reports_the_cluster_and_whether_a_node_fits(ralph_project, cluster) -> None:
    configure(ralph_project, cluster)
    script = ralph_project.path.parent / "script.json"
    script.write_text(json.dumps({"iterations": {}, "default": [{"say": "done"}]}))
    ralph_project.env["RALPH_REPLAY_SCRIPT"] = str(script)
    report = ralph_project.run("doctor", "--runner", "ray", "--agent", "replay")
    assert f"ray: cluster at {cluster.address}" in report.stdout, report.stdout + report.stderr
    assert cluster.node_id("node2")[:12] in report.stdout and "node2=1" in report.stdout
    configure(ralph_project, cluster, resources={"gpu-node": 1})
    report = ralph_project.run("doctor", "--runner", "ray", "--agent", "replay")
    assert report.returncode != 0 and "no alive node offers" in report.stdout + report.stderr
