"""The docker-sandbox runner against the real Docker engine (and the real Claude Code CLI).

Skipped with a reason where there is no engine / no way to build the image;
under CI=true (or RALPH_REQUIRE_REAL=1) a missing requirement is a failure.
The sandbox image is built (or reused: cached by recipe hash) with
``ralph sandbox build --offline-base`` once per session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, ScriptedModelServer, Turn, text
from ralph.testing.project import RalphProject, story
from ralph.testing.requirements import require

from test_loop_claude import set_fields
from ralph.testing.scripting import bash_turn as bash

pytestmark = pytest.mark.slow

SANDBOX_CLI = [sys.executable, "-P", "-m", "ralph.cli.main"]  # `ralph sandbox` comes from the docker plugin (its ralph.commands entry point)
IMAGE = "ralph-sandbox:latest"
CLAUDE_TEST_ENV = ["CLAUDE_CODE_MAX_RETRIES", "API_TIMEOUT_MS"]


# -- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_client() -> Any:
    try:
        import docker
    except ImportError:
        require(False, "the docker Python package is not installed (pip install -e '.[test]')")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        require(False, f"no Docker engine answers: {exc}")
    return client


@pytest.fixture(scope="session")
def sandbox_image(docker_client: Any) -> str:
    """The default sandbox image, built offline (or reused) through the real CLI command."""
    import shutil

    try:
        docker_client.images.get(IMAGE)
    except Exception:  # noqa: BLE001
        require(
            bool(shutil.which("mmdebstrap") or shutil.which("debootstrap")),
            "the sandbox image is missing and neither mmdebstrap nor debootstrap is installed",
        )
    result = subprocess.run([*SANDBOX_CLI, "sandbox", "build", "--offline-base"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return IMAGE


@pytest.fixture(scope="session")
def gateway(docker_client: Any) -> str:
    """The docker bridge gateway: this machine, as the containers see it."""
    import ipaddress

    config = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))  # the engine's default: the first address


def containers_of(client: Any, project: Path) -> list[Any]:
    """The project's sandbox containers (retried: docker-py inspects each listed container, and one
    removed between the listing and its inspect raises NotFound)."""
    import docker.errors

    for _ in range(5):
        try:
            return client.containers.list(all=True, filters={"label": ["ralph.sandbox=1", f"ralph.project={project}"]})
        except docker.errors.NotFound:
            time.sleep(0.1)
    return client.containers.list(all=True, filters={"label": ["ralph.sandbox=1", f"ralph.project={project}"]})


def volumes_of(client: Any, project: Path) -> list[Any]:
    """The project's checkout volumes (the agent's own checkout of a run)."""
    return client.volumes.list(filters={"label": ["ralph.sandbox=1", f"ralph.project={project}"]})


def networks_of(client: Any, project: Path) -> list[Any]:
    return client.networks.list(filters={"label": ["ralph.sandbox=1", f"ralph.project={project}"]})


@pytest.fixture
def sandbox_project(ralph_project: RalphProject, docker_client: Any, sandbox_image: str):  # type: ignore[no-untyped-def]
    yield ralph_project
    for container in containers_of(docker_client, ralph_project.path):
        container.remove(force=True)
    for network in networks_of(docker_client, ralph_project.path):
        network.remove()
    for volume in volumes_of(docker_client, ralph_project.path):
        volume.remove(force=True)


def configure(project: RalphProject, **section: Any) -> None:
    """Write ralph.toml's [docker-sandbox] section and commit it."""
    lines = ["[docker-sandbox]"] + [f"{key} = {json.dumps(value)}" for key, value in section.items()]
    (project.path / "ralph.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    project.commit_all("sandbox config")


def make_runner(project: Path, **section: Any) -> Any:
    from ralph.config import load_config
    from ralph.settings import Settings
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    config, _, _ = load_config(project, {}, environ={})
    return DockerSandboxRunner(Settings(project, config, {"docker-sandbox": SandboxConfig(**section)}))


def run_in(runner: Any, project: Path, argv: list[str], timeout: float = 60, **kw: Any) -> tuple[Any, list[str]]:
    from ralph.contracts import ProcessSpec

    lines: list[str] = []
    outcome = runner.run(ProcessSpec(argv, kw.pop("env", {}), project, **kw), lines.append, timeout, threading.Event())
    return outcome, lines


# -- the loop end to end: real claude in the container ----------------------------------


def implement_and_approve(after_commit: str = "") -> IterationScript:
    """US-001 in two iterations run in the container: write hello.txt and the agent's uid
    (whoami.txt), commit (then ``after_commit``), mark it needs_review; approve it."""
    implement = "printf hello > hello.txt && id -u > whoami.txt && git add -A && git commit -qm 'feat: [US-001] - implement'"
    return IterationScript(
        {
            1: [
                bash(f"{implement} {after_commit}".rstrip()),
                bash(set_fields("US-001", reviewStatus="needs_review") + " && git add -A && git commit -qm 'mark needs_review'"),
                Turn([text("Implemented US-001.")]),
            ],
            2: [
                bash(set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok")
                     + " && git add -A && git commit -qm 'review: [US-001] - approved'"),
                Turn([text("Approved. <promise>COMPLETE</promise>")]),
            ],
        }
    )


def run_to_approval(project: RalphProject, agent: str, env: dict[str, str]) -> None:
    """``ralph run`` with ``agent`` in the sandbox (``env`` points its CLI at a scripted server):
    it must end with exit 0 and US-001 approved."""
    result = project.run("run", "--runner", "docker-sandbox", "--agent", agent, "--timeout", "120", env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    final = project.story("US-001")
    assert (final["passes"], final["reviewStatus"]) == (True, "approved")


@pytest.mark.real_claude
def test_full_loop_in_sandbox_reaches_approved_story(
    sandbox_project: RalphProject, docker_client: Any, gateway: str, claude_binary: Path, claude_agent_env: Any
) -> None:
    project = sandbox_project
    project.write_stories([story("US-001", "Greeting file")])
    configure(project, network="allowlist", env=CLAUDE_TEST_ENV)
    script = implement_and_approve("&& git log -1 --format=%an,%ae > author.txt")
    with ScriptedModelServer(script, host=gateway) as server:
        run_to_approval(project, "claude", claude_agent_env(server.url))
    assert (project.path / "hello.txt").read_text() == "hello"
    # the agent ran as the host user; the files it wrote are the host user's
    assert (project.path / "whoami.txt").read_text().strip() == str(os.getuid())
    for name in ("hello.txt", "whoami.txt"):
        st = (project.path / name).stat()
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    # the git identity configured inside the image (the host's GIT_AUTHOR_* never went in)
    assert (project.path / "author.txt").read_text().strip() == "Ralph Loop,ralph@localhost"
    assert project.events("run_started")[0]["runner"] == "docker-sandbox"
    assert [e["mode"] for e in project.events("iteration_started")] == ["implement", "review"]
    assert script.unscripted == 0
    # the loop's cleanup removed the containers, the proxy, the network and the agent's checkout
    assert containers_of(docker_client, project.path) == []
    assert networks_of(docker_client, project.path) == []
    assert volumes_of(docker_client, project.path) == []


# -- ownership, hardening ------------------------------------------------------------------


def test_files_written_belong_to_the_agent_user(sandbox_project: RalphProject) -> None:
    path = sandbox_project.path
    runner = make_runner(path, network="none", user="1234:2345")
    runner.prepare(path)
    try:
        outcome, lines = run_in(runner, path, ["sh", "-c", "echo x > by-agent.txt && id -u && id -g && stat -c %u:%g . by-agent.txt"])
    finally:
        runner.cleanup()
    assert outcome.exit_code == 0, outcome.stderr
    assert list(runner.timings) == ["ship_in", "container", "bring_back"]  # what the benchmarks read
    # in its own checkout the agent's user owns what it writes (and the checkout itself) ...
    assert lines == ["1234", "2345", "1234:2345", "1234:2345"]
    # ... and its work reaches the project only as the loop's own copy, written by this user
    st = (path / "by-agent.txt").stat()
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert (path / "by-agent.txt").read_text() == "x\n"
    # and by default: the host user's uid:gid
    assert make_runner(path, network="none").options().user == f"{os.getuid()}:{os.getgid()}"


def test_hardening_and_the_project_is_never_mounted(sandbox_project: RalphProject, docker_client: Any) -> None:
    path = sandbox_project.path
    config_before = (path / ".git/config").read_bytes()
    runner = make_runner(path, network="none", pids=64, memory="256m", cpus=0.5)
    runner.prepare(path)
    seen: list[dict[str, Any]] = []
    remove = runner.sandbox._remove

    def remember(container: Any, stopped: bool = False) -> None:  # the agent's container as the engine made it
        container.reload()
        seen.append(container.attrs["HostConfig"])
        remove(container, stopped)

    runner.sandbox._remove = remember
    try:
        script = (
            "echo '#!/bin/sh' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
            "echo '[core]' >> .git/config; echo '\tfsmonitor = /tmp/evil' >> .git/config; "
            "echo ok > project-file.txt; echo project=$?; "
            "touch /etc/evil 2>/dev/null; echo rootfs=$?; "
            "touch /tmp/scratch; echo tmp=$?; "
            "grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; "
            "test -e /var/run/docker.sock; echo docker_sock=$?; "
            "echo mounts=$(grep -c \" $PWD \" /proc/self/mountinfo); "
            "cat /proc/1/comm"
        )
        outcome, lines = run_in(runner, path, ["sh", "-c", script])
        after = run_in(runner, path, ["sh", "-c", "cat .git/config; ls .git/hooks"])[1]
    finally:
        runner.cleanup()
    out = dict(line.split("=", 1) for line in lines if "=" in line)
    # the agent's .git changes stay in its checkout: the project's .git never sees them ...
    assert not (path / ".git/hooks/pre-commit").exists()
    assert (path / ".git/config").read_bytes() == config_before
    # ... and its checkout's config and hooks are put back before the next container
    assert "fsmonitor" not in "\n".join(after) and "pre-commit" not in after
    assert out["project"] == "0" and out["tmp"] == "0" and (path / "project-file.txt").read_text() == "ok\n"
    assert out["rootfs"] != "0"
    assert out["docker_sock"] != "0"
    assert "CapEff:\t0000000000000000" in lines and "NoNewPrivs:\t1" in lines
    assert lines[-1] == "docker-init"
    attrs = seen[0]
    assert attrs["PidsLimit"] == 64 and attrs["Memory"] == 256 * 1024 * 1024 and attrs["NanoCpus"] == 500_000_000
    assert attrs["ReadonlyRootfs"] is True and attrs["CapDrop"] == ["ALL"] and not attrs.get("CapAdd")
    assert not attrs.get("Binds") and not any(str(path) in m for m in attrs.get("Binds") or [])
    assert out["mounts"] == "1"  # the project's path is one mount: the agent's checkout volume, nothing of the host
    assert not [c for c in containers_of(docker_client, path) if c.labels.get("ralph.role") == "agent" and c.status == "running"]


# -- network policy -------------------------------------------------------------------------

PROBE = """
import sys, urllib.request
def get(url, proxy=True):
    handler = urllib.request.ProxyHandler() if proxy else urllib.request.ProxyHandler({})
    try:
        return urllib.request.build_opener(handler).open(url, timeout=5).read().decode()
    except Exception as exc:
        return "ERR " + str(exc)[:100]
listed, unlisted = sys.argv[1], sys.argv[2]
print("listed", get(listed))
print("unlisted", get(unlisted))
print("bypass", get(listed, proxy=False))
"""


def _http_servers(host: str, n: int) -> list[Any]:
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"HELLO")

        def log_message(self, *args: Any) -> None:
            pass

    servers = [HTTPServer((host, 0), Hello) for _ in range(n)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return servers


@pytest.mark.parametrize(
    "network, expected",
    [
        ("none", {"listed": "ERR", "unlisted": "ERR", "bypass": "ERR"}),
        ("allowlist", {"listed": "HELLO", "unlisted": "ERR HTTP Error 403", "bypass": "ERR"}),
        ("open", {"listed": "HELLO", "unlisted": "HELLO", "bypass": "HELLO"}),
    ],
)
def test_network_policy(sandbox_project: RalphProject, gateway: str, network: str, expected: dict[str, str]) -> None:
    listed, unlisted = _http_servers(gateway, 2)
    listed_url = f"http://{gateway}:{listed.server_port}/"
    unlisted_url = f"http://{gateway}:{unlisted.server_port}/"
    path = sandbox_project.path
    runner = make_runner(path, network=network, allow_hosts=[f"{gateway}:{listed.server_port}"])
    runner.prepare(path)
    try:
        # "bypass": the agent ignores the proxy variables and connects directly
        outcome, lines = run_in(runner, path, ["python3", "-c", PROBE, listed_url, unlisted_url])
    finally:
        runner.cleanup()
        for server in (listed, unlisted):
            server.shutdown()
    assert outcome.exit_code == 0, outcome.stderr
    got = dict(line.split(" ", 1) for line in lines)
    for key, prefix in expected.items():
        assert got[key].startswith(prefix), (key, got)


# -- timeout, Ctrl-C, crash leftovers -------------------------------------------------------


def test_timeout_kills_hanging_process(sandbox_project: RalphProject, docker_client: Any) -> None:
    path = sandbox_project.path
    runner = make_runner(path, network="none")
    runner.prepare(path)
    try:
        started = time.monotonic()
        outcome, _ = run_in(runner, path, ["sh", "-c", "trap '' TERM; sleep 300"], timeout=3)
        elapsed = time.monotonic() - started
        assert outcome.timed_out and outcome.exit_code != 0
        assert elapsed < 20
        running = [c for c in containers_of(docker_client, path)
                   if c.labels.get("ralph.role") == "agent" and c.status == "running"]
        assert running == []  # killed with everything in it
        again, lines = run_in(runner, path, ["sh", "-c", "echo alive; exit 7"])  # the next iteration gets a fresh one
        assert again.exit_code == 7 and lines == ["alive"]
    finally:
        runner.cleanup()
    assert containers_of(docker_client, path) == []


HANG = "python3 -c 'import time; time.sleep(600)'"  # the CLI refuses a plain `sleep 600`


def _hanging_script() -> IterationScript:
    return IterationScript({1: [bash(HANG), Turn([text("never")])], 2: [bash(HANG), Turn([text("never")])]})


def _wait_for_agent_container(client: Any, project: Path, process: Any, seconds: float = 60) -> Any:
    import docker.errors

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"ralph ended early ({process.returncode}): {out[-2000:]} {err[-2000:]}")
        for container in containers_of(client, project):
            try:
                if container.labels.get("ralph.role") == "agent" and container.status == "running":
                    top = container.top().get("Processes") or []
                    if any("time.sleep(600)" in " ".join(p) for p in top):
                        return container
            except docker.errors.NotFound:
                continue
        time.sleep(0.3)
    raise AssertionError("the agent never reached its hanging command in the sandbox")


@pytest.mark.real_claude
def test_loop_timeout_stops_hanging_agent(
    sandbox_project: RalphProject, docker_client: Any, gateway: str, claude_binary: Path, claude_agent_env: Any
) -> None:
    project = sandbox_project
    project.write_stories([story("US-001")])
    configure(project, network="open", env=CLAUDE_TEST_ENV)
    with ScriptedModelServer(_hanging_script(), host=gateway) as server:
        started = time.monotonic()
        result = project.run(
            "run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "8", "-n", "1",
            env=claude_agent_env(server.url), timeout=180,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    assert project.events("iteration_timeout"), project.events()
    assert elapsed < 90
    assert containers_of(docker_client, project.path) == []


@pytest.mark.real_claude
def test_ctrl_c_leaves_no_container_and_crash_leftovers_are_swept(
    sandbox_project: RalphProject, docker_client: Any, gateway: str, claude_binary: Path, claude_agent_env: Any
) -> None:
    project = sandbox_project
    project.write_stories([story("US-001")])
    configure(project, network="allowlist", env=CLAUDE_TEST_ENV)
    with ScriptedModelServer(_hanging_script(), host=gateway) as server:
        env = claude_agent_env(server.url)
        # Ctrl-C: the loop stops the agent and removes container, proxy and network
        process = project.start("run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "300", env=env)
        try:
            _wait_for_agent_container(docker_client, project.path, process)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 130, out + err
        assert containers_of(docker_client, project.path) == []
        assert networks_of(docker_client, project.path) == []
        assert volumes_of(docker_client, project.path) == []

        # a crash (SIGKILL: no cleanup) leaves the container; the next run finds it by label and removes it
        # (--fresh: the interrupted run's state would otherwise ask for --resume)
        process = project.start("run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "300", "--fresh", env=env)
        try:
            leftover = _wait_for_agent_container(docker_client, project.path, process)
            process.kill()
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        assert leftover.id in [c.id for c in containers_of(docker_client, project.path)]
        result = project.run(
            "run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "5", "-n", "1", "--fresh", env=env, timeout=180
        )
        assert result.returncode == 1, result.stdout + result.stderr
    assert leftover.id not in [c.id for c in docker_client.containers.list(all=True)]
    assert containers_of(docker_client, project.path) == []
    assert volumes_of(docker_client, project.path) == []


# -- clear errors ---------------------------------------------------------------------------


def test_missing_image_is_a_clear_error_and_auto_falls_back(sandbox_project: RalphProject, claude_binary: Path) -> None:
    project = sandbox_project
    project.write_stories([story("US-001")])
    configure(project, image="ralph-sandbox:does-not-exist")
    result = project.run("run", "--runner", "docker-sandbox", "--agent", "claude")
    assert result.returncode == 2
    assert "ralph-sandbox:does-not-exist" in result.stderr and "ralph sandbox build" in result.stderr
    dry = project.run("run", "--runner", "auto", "--agent", "claude", "--dry-run", env={"RALPH_DISABLE_PLUGINS": "bwrap"})
    assert dry.returncode == 0, dry.stderr
    assert "runner:  direct (fallback: docker-sandbox: the sandbox image 'ralph-sandbox:does-not-exist'" in dry.stdout


def test_stopped_engine_is_a_clear_error(sandbox_project: RalphProject, tmp_path: Path, claude_binary: Path) -> None:
    dead = f"unix://{tmp_path}/no-engine.sock"
    sandbox_project.write_stories([story("US-001")])
    result = sandbox_project.run("run", "--runner", "docker-sandbox", "--agent", "claude", env={"DOCKER_HOST": dead})
    assert result.returncode == 2
    assert "Docker engine does not answer" in result.stderr and dead in result.stderr
    doctor = subprocess.run([*SANDBOX_CLI, "doctor", "--runner", "docker-sandbox"], cwd=sandbox_project.path,
                            capture_output=True, text=True, env={**os.environ, "DOCKER_HOST": dead})
    assert doctor.returncode == 1
    assert "[FAIL] runner docker-sandbox: the Docker engine does not answer" in doctor.stdout and "fix:" in doctor.stdout


def test_doctor_reports_each_check(sandbox_project: RalphProject, claude_binary: Path) -> None:
    sandbox_project.write_stories([story("US-001")])  # `ralph doctor` checks the task list too, as `ralph run` does
    env = {**os.environ, "ANTHROPIC_API_KEY": "x"}
    doctor = [*SANDBOX_CLI, "doctor", "--runner", "docker-sandbox", "--agent", "claude"]
    result = subprocess.run(doctor, cwd=sandbox_project.path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout
    assert f"[ok  ] Docker engine answers; sandbox image {IMAGE} present" in result.stdout
    assert "[ok  ] claude binary runs:" in result.stdout
    assert "credentials the agent sees on the sandbox container: ANTHROPIC_API_KEY" in result.stdout
    assert "network policy: allowlist" in result.stdout
    for name in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"):
        env.pop(name, None)
    # a key only in the host's ~/.claude does not count: the sandbox does not mount it
    bare = subprocess.run(doctor, cwd=sandbox_project.path, capture_output=True, text=True, env=env)
    assert bare.returncode == 1
    assert "[FAIL] no credentials the agent can use on the sandbox container" in bare.stdout
    assert "fix: export ANTHROPIC_API_KEY" in bare.stdout and "state_dir" in bare.stdout


def test_replay_script_outside_the_project_fails_before_iteration_one(sandbox_project: RalphProject,
                                                                      tmp_path: Path) -> None:
    """Issue 12 item 7: the sandbox mounts only the project, so the script must be inside it."""
    project = sandbox_project
    project.write_stories([story("US-001")])
    configure(project, network="none")
    outside = tmp_path / "script.json"
    outside.write_text(json.dumps({"iterations": {"1": [{"say": "hi"}]}}))
    result = project.run("run", "--runner", "docker-sandbox", "--agent", "replay", env={"RALPH_REPLAY_SCRIPT": str(outside)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"replay script {outside} is not visible in the sandbox container" in result.stderr
    assert "fix: move the script into the project" in result.stderr
    assert project.run_dirs() == []  # before iteration 1: nothing ran
    # moved into the project, as the fix says, the same run goes through the pre-flight and runs
    inside = project.ralph_dir / "script.json"
    inside.write_text(outside.read_text())
    project.commit_all("script")
    moved = project.run("run", "--runner", "docker-sandbox", "--agent", "replay", "-n", "1",
                        env={"RALPH_REPLAY_SCRIPT": str(inside)})
    assert "pre-flight" not in moved.stderr, moved.stderr
    assert [e["iteration"] for e in project.events("iteration_started")] == [1]
    assert project.events("agent_failed") == [], project.events("agent_failed")


def test_state_dir_is_created_with_json_and_never_claude_home(tmp_path: Path) -> None:
    from ralph_plugins.runners.docker_sandbox import prepare_state_dir

    state = prepare_state_dir(tmp_path / ".dclaude_state")
    assert json.loads((state / ".claude.json").read_text()) == {}
    assert (state / ".claude").is_dir()
    with pytest.raises(ValueError, match="~/.claude itself"):
        prepare_state_dir(Path.home() / ".claude")


@pytest.mark.real_claude
def test_stop_checks_reach_the_loop_from_inside_the_sandbox(
    sandbox_project: RalphProject, gateway: str, claude_binary: Path, claude_agent_env: Any
) -> None:
    """The hook socket is mounted: the loop's Stop checks answer the agent in the container."""
    project = sandbox_project
    project.write_stories([story("US-001")])
    configure(project, network="allowlist", env=CLAUDE_TEST_ENV)
    script = IterationScript({1: [bash("echo stray > stray-file.txt"), Turn([text("done")])]})
    with ScriptedModelServer(script, host=gateway) as server:
        result = project.run(
            "run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "60", "-n", "1",
            env=claude_agent_env(server.url), timeout=180,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    feedback = [e["text"] for e in project.events("agent_event") if "Stop hook feedback" in e.get("text", "")]
    assert any("stray-file.txt" in t for t in feedback), [e.get("text", "")[:200] for e in project.events("agent_event")]
    # and the model saw the loop's answer in its next request
    assert any("stray-file.txt" in r.text for r in server.requests[1:])


@pytest.mark.real_claude
def test_guards_answer_inside_the_sandbox_as_in_direct_mode(
    sandbox_project: RalphProject, gateway: str, claude_binary: Path, claude_agent_env: Any
) -> None:
    """PreToolUse guards reach the loop from the container: a git push and a prd.md overwrite are denied."""
    project = sandbox_project
    project.write_stories([story("US-001")])
    configure(project, network="allowlist", env=CLAUDE_TEST_ENV)
    prd_before = (project.ralph_dir / "prd.md").read_bytes()
    script = IterationScript(
        {1: [bash("touch PUSHED && git push origin main"), bash("echo hacked > ralph/prd.md"), Turn([text("done")])]}
    )
    with ScriptedModelServer(script, host=gateway) as server:
        result = project.run(
            "run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "60", "-n", "1",
            env=claude_agent_env(server.url), timeout=180,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert not (project.path / "PUSHED").exists()
    assert (project.ralph_dir / "prd.md").read_bytes() == prd_before
    denied = [e for e in project.events("hook") if e["event"] == "PreToolUse"]
    rules = " ".join(str(e["output"]) for e in denied)
    assert "git-push" in rules and "protected-file" in rules
    assert any("git-push" in r.text for r in server.requests[1:])


@pytest.mark.real_codex
def test_full_loop_with_codex_in_sandbox(
    sandbox_project: RalphProject, docker_client: Any, gateway: str, codex_binary: Path, codex_agent_env: Any
) -> None:
    from ralph.testing.responses_server import ScriptedResponsesServer

    project = sandbox_project
    project.write_stories([story("US-001", "Greeting file")])
    configure(project, network="allowlist")
    script = implement_and_approve()
    with ScriptedResponsesServer(script, host=gateway) as server:
        run_to_approval(project, "codex", codex_agent_env(server.url))
    assert (project.path / "whoami.txt").read_text().strip() == str(os.getuid())
    # Codex's own sandbox was off in the container: the container was the boundary
    raw = (project.run_dirs()[-1] / "iteration-001.agent.jsonl").read_text()
    assert '"command_execution"' in raw
    assert project.events("run_started")[0]["runner"] == "docker-sandbox"
    assert {e["agent"] for e in project.events("iteration_started")} == {"codex"}
    assert containers_of(docker_client, project.path) == []
