"""Extra cost per iteration of the trust-boundary checks, on a project of 1,000 files.

- the git metadata check (``.git/config``, ``commondir``, ``hooks/``, ``info/``,
  ``alternates``) that runs before every host git call of the loop, and the
  hardened git call itself against a plain one;
- direct mode: the process sweep after an agent run (a /proc snapshot before,
  the sweep after), the agent's push-blocking git environment, the agent's
  run-owned config home (made with the login linked in, removed after the
  session with what the CLI wrote) and the check of the compiled hook client;
- docker-sandbox: a fresh container per agent run (the project's state shipped
  into the agent's checkout and its work brought back) and per gate command,
  against one bare container and the same gate command on the host.

Per iteration the loop makes about ``GIT_CALLS`` git calls (checkpoint, untracked
files, the git-clean check, changed files, a commit); the totals use that.

    python benchmarks/trust_overhead.py [--runs 20] [--files 1000]

The sandbox part needs a Docker engine and the image (``ralph sandbox build
--offline-base``); without them it prints "skipped: ..." for that part.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, ms, percentile, table  # noqa: E402

GIT_CALLS = 8
TARGET_DIRECT_MS = 50.0
TARGET_SANDBOX_MS = 300.0


def timed(func: Callable[[], Any], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    return samples


def row(label: str, samples: list[float]) -> tuple[str, ...]:
    return (label, str(len(samples)), ms(min(samples)), ms(statistics.median(samples)), ms(percentile(samples, 0.9)))


def make_project(root: Path, files: int) -> Path:
    project = root / "project"
    project.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project, check=True)
    for index in range(files):
        folder = project / f"pkg{index % 20:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"module_{index:04d}.py").write_text(f"VALUE = {index}\n" * 20)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "files"], cwd=project, check=True, env=env)
    return project


def main() -> None:
    runs = int_arg(sys.argv, "--runs", 20)
    files = int_arg(sys.argv, "--files", 1000)
    header(f"trust-boundary checks: extra cost per iteration ({files} files)")
    from ralph import gitutil
    from ralph.process import become_subreaper, descendants, kill_new_descendants
    from ralph_plugins.runners.direct import agent_environment

    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp:
        project = make_project(Path(tmp), files)
        gitutil.protect(project)
        become_subreaper()
        check = timed(gitutil.check_metadata, runs * 5)
        plain = timed(lambda: subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True), runs)
        hardened = timed(lambda: gitutil.git(project, "status", "--porcelain"), runs)
        snapshot = timed(descendants, runs)
        existing = descendants()
        sweep = timed(lambda: kill_new_descendants(existing), runs)
        push_env = timed(lambda: agent_environment(dict(os.environ), project), runs)
        home, client = agent_config_parts(Path(tmp), runs)
        rows = [("direct mode", "runs", "min", "median", "p90"),
                row("metadata check (before each loop git call)", check),
                row("git status, plain (reference)", plain),
                row("git status, hardened (incl. check)", hardened),
                row("process sweep after the agent (per iteration)", sweep),
                row("process snapshot (once per run)", snapshot),
                row("agent git env, push block (once per run)", push_env),
                row("agent config home: made, login linked, removed with what the CLI wrote", home),
                row("hook client: checked (put back if changed) before the agent", client)]
        print("times in ms")
        table(rows)
        git_extra = GIT_CALLS * statistics.median(check)
        agent_config = statistics.median(home) + statistics.median(client)
        direct_total = git_extra + statistics.median(sweep) + agent_config
        print(f"\ndirect: {GIT_CALLS} git calls x {ms(statistics.median(check))} ms check + sweep "
              f"{ms(statistics.median(sweep))} + config home and hook client {ms(agent_config)} = "
              f"{ms(direct_total)} ms per iteration (target <= "
              f"{TARGET_DIRECT_MS:.0f} ms: {'met' if direct_total * 1000 <= TARGET_DIRECT_MS else 'NOT met'}); "
              f"hardened minus plain git status: {ms(statistics.median(hardened) - statistics.median(plain))} ms")
        sandbox_part(project, runs, git_extra)
        gitutil.unprotect(project)


def agent_config_parts(root: Path, runs: int) -> tuple[list[float], list[float]]:
    """The run-owned config home of one agent process (made with the person's login linked in, then
    removed with what Claude Code writes into it in a short session), and the hook client's check."""
    from ralph.hooks.wiring import CompiledClient
    from ralph.loop.agenthome import remove_config_home, stable_config_home

    run_dir = root / "run"
    run_dir.mkdir()
    login = root / "person" / ".claude" / ".credentials.json"
    login.parent.mkdir(parents=True)
    login.write_text('{"claudeAiOauth": {"accessToken": "x"}}')

    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        home = stable_config_home(run_dir, "claude", {".credentials.json": login})
        made = time.perf_counter() - started
        for name, size in ((".claude.json", 2_000), ("projects/p/session.jsonl", 100_000), ("sessions/s.json", 500),
                           ("shell-snapshots/snapshot.sh", 20_000), ("session-env/s/hook.sh", 0), ("backups/b.json", 2_000)):
            path = home / name  # what the CLI writes during the session (not timed: it would write it anyway)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x" * size)
        started = time.perf_counter()
        remove_config_home(home)
        samples.append(made + time.perf_counter() - started)
    client = CompiledClient(run_dir)
    return samples, timed(client.restore, runs)


def sandbox_part(project: Path, runs: int, git_extra: float) -> None:
    from ralph_plugins.runners.docker import engine

    try:
        client = engine.connect()
    except engine.SandboxError as exc:
        print(f"\nsandbox: skipped: {exc}")
        return
    if not engine.image_present(client, "ralph-sandbox:latest"):
        print("\nsandbox: skipped: the sandbox image is missing: ralph sandbox build --offline-base")
        return
    from ralph.config import load_config
    from ralph.process import run_shell
    from ralph.settings import Settings
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    config, _, _ = load_config(project, {}, environ={})
    runner = DockerSandboxRunner(Settings(project, config, {"docker-sandbox": SandboxConfig(network="none")}))
    runner.prepare(project)
    try:
        import threading

        from ralph.contracts import ProcessSpec

        sandbox = runner.sandbox
        spec = ProcessSpec(["true"], {}, project)
        sandbox.run(spec, lambda line: None, 60, threading.Event())  # the first run ships the whole history

        def plain_container() -> None:  # the reference: one container of `true`, nothing shipped
            container = sandbox._container("bench", ["true"], [sandbox._checkout_mount()], {}, str(project), False)
            try:
                sandbox._attach_and_run(container, None, lambda line: None, lambda line: None, 60, None)
            finally:
                sandbox._remove(container)

        container_ref = timed(plain_container, runs)
        agent_phases: list[dict[str, float]] = []

        def agent_run() -> None:
            sandbox.run(spec, lambda line: None, 60, threading.Event())
            agent_phases.append(dict(sandbox.timings))

        agent_run_times = timed(agent_run, runs)
        gate_host = timed(lambda: run_shell("true", project, 60), runs)
        gate_sandbox = timed(lambda: runner.run_command("true", project, 60), runs)
        status_host = timed(lambda: run_shell("git status --porcelain >/dev/null", project, 60), runs)
        status_sandbox = timed(lambda: runner.run_command("git status --porcelain >/dev/null", project, 60), runs)
    finally:
        runner.cleanup()
    rows = [("docker-sandbox", "runs", "min", "median", "p90"),
            row("one fresh container of `true` (reference)", container_ref),
            row("agent run of `true`: ship-in, fresh container, bring-back", agent_run_times),
            row("gate `true` on the host (reference)", gate_host),
            row("gate `true` in the sandbox (ship-in, fresh container)", gate_sandbox),
            row("gate `git status` on the host", status_host),
            row("gate `git status` in the sandbox", status_sandbox)]
    print()
    table(rows)
    phases = ", ".join(f"{name} {ms(statistics.median(p.get(name, 0.0) for p in agent_phases))}"
                       for name in agent_phases[0])
    agent_extra = statistics.median(agent_run_times)
    gate_extra = max(0.0, statistics.median(gate_sandbox) - statistics.median(gate_host))
    total = git_extra + agent_extra + gate_extra
    print(f"\nsandbox: git checks {ms(git_extra)} + the agent run's container and workspace exchange {ms(agent_extra)} "
          f"({phases}) + gate in the sandbox over the host {ms(gate_extra)} = {ms(total)} ms per iteration "
          f"(target <= {TARGET_SANDBOX_MS:.0f} ms: {'met' if total * 1000 <= TARGET_SANDBOX_MS else 'NOT met'})")


if __name__ == "__main__":
    main()
