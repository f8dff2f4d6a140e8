"""Sandbox overhead per iteration: start of the runner's run() to the agent's first output line.

Compares, on the real Docker engine:
- ``direct``: a host subprocess (the reference);
- ``sandbox (fresh container)``: what the docker-sandbox runner does for every
  agent process: the project's state shipped into the agent's checkout, a fresh
  container, its work brought back (the first line arrives after the ship-in);
for a trivial command (``echo``) and for the real ``claude --version`` (the
~400 MB agent binary, bind-mounted read-only in the sandbox).  Then the one-off
costs per run: prepare (leftover sweep; proxy + internal network), the first
container, cleanup.  Last, one hook call inside the container (process start to
JSON out, timed in the container against a real hook server): the runner's
``python3 -S -P client.py`` and the same without ``-S``.

    python benchmarks/sandbox_overhead.py [--runs 10]

Needs a Docker engine and the image (``ralph sandbox build --offline-base``);
prints "skipped: ..." and exits 0 without them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, ms, percentile, table  # noqa: E402


def first_line_time(runner: Any, argv: list[str], project: Path, program: str | None = None) -> tuple[float, float]:
    """(seconds to the first stdout line, seconds to the end) of one run()."""
    from ralph.contracts import ProcessSpec

    first: list[float] = []
    started = time.perf_counter()

    def on_line(_line: str) -> None:
        if not first:
            first.append(time.perf_counter() - started)

    spec = ProcessSpec(argv, {}, project)
    if program is not None:
        spec.program = program  # type: ignore[attr-defined]
    outcome = runner.run(spec, on_line, 120, threading.Event())
    total = time.perf_counter() - started
    if outcome.exit_code != 0:
        raise SystemExit(f"{argv[0]} failed in {runner.name}: exit {outcome.exit_code}: {outcome.stderr[-500:]}")
    return (first[0] if first else total), total


def hook_call_times(runner: Any, project: Path, runs: int) -> dict[str, list[float]]:
    """Seconds per hook call in the container, the runner's command against the same without ``-S``."""
    import json

    from ralph.contracts import ProcessSpec
    from ralph.hooks.server import HookServer

    command = runner.hook_command()
    variants = [command, command.replace(" -S ", " ")]
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
    calls = "; ".join(f'[ $v = {i} ] && {{ s=$(date +%s%N); echo "$P" | {cmd} >/dev/null; '
                      f'echo {i} $(( $(date +%s%N) - s )); }}' for i, cmd in enumerate(variants))
    order = " ".join(str(i) for i in range(len(variants)))  # alternated, so both see the same machine load
    script = f"for r in $(seq {runs + 1}); do for v in {order}; do {calls}; done; done"
    server = HookServer(lambda request: {}, token="bench").start()
    lines: list[str] = []
    try:
        env = {"RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": "bench", "P": payload}
        runner.run(ProcessSpec(["sh", "-c", script], env, project), lines.append, 600, threading.Event())
    finally:
        server.stop()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for line in lines[len(variants):]:  # the first round warms the page cache
        index, nanos = line.split()
        times[variants[int(index)]].append(int(nanos) / 1e9)
    return times


def make_runner(kind: str, project: Path, network: str = "none") -> Any:
    from ralph.config import load_config
    from ralph.settings import Settings
    from ralph_plugins.runners.direct import DirectRunner
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    config, _, _ = load_config(project, {}, environ={})
    settings = Settings(project, config, {"docker-sandbox": SandboxConfig(network=network)})
    return DirectRunner(settings) if kind == "direct" else DockerSandboxRunner(settings)


def main() -> None:
    runs = int_arg(sys.argv, "--runs", 10)
    header("sandbox overhead per iteration (run() start -> agent's first output line)")
    from ralph.claude_cli import resolve_binary
    from ralph_plugins.runners.docker import engine

    try:
        client = engine.connect()
    except engine.SandboxError as exc:
        print(f"skipped: {exc}")
        return
    if not engine.image_present(client, "ralph-sandbox:latest"):
        print("skipped: the sandbox image is missing: ralph sandbox build --offline-base")
        return
    claude, _ = resolve_binary()
    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp:
        project = Path(tmp)
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        direct = make_runner("direct", project)
        sandbox = make_runner("sandbox", project)
        sandbox.prepare(project)
        first_line_time(sandbox, ["true"], project)  # warm: the container exists from here on
        commands: list[tuple[str, list[str], str | None]] = [("echo", ["echo", "started"], None)]
        if claude is not None:
            commands.append(("claude --version", [str(claude), "--version"], "claude"))
        rows = [("command", "runner", "runs", "first line min", "median", "p90", "total median")]
        for label, argv, program in commands:
            variants = [
                ("direct", lambda: first_line_time(direct, argv, project, program)),
                ("sandbox (fresh container)", lambda: first_line_time(sandbox, argv, project, program)),
            ]
            for name, func in variants:
                samples = [func() for _ in range(runs)]
                firsts = [s[0] for s in samples]
                rows.append((label, name, str(runs), ms(min(firsts)), ms(statistics.median(firsts)),
                             ms(percentile(firsts, 0.9)), ms(statistics.median(s[1] for s in samples))))
        hooks = hook_call_times(sandbox, project, max(runs, 20))
        sandbox.cleanup()
        print("times in ms")
        table(rows, left=(0, 1))
        print(f"\none hook call in the container (PreToolUse, loop answering; {max(runs, 20)} runs each, ms)")
        table([("command", "min", "median", "p90"),
               *((name, ms(min(t)), ms(statistics.median(t)), ms(percentile(t, 0.9))) for name, t in hooks.items())])

        once = []
        for network in ("none", "allowlist"):
            runner = make_runner("sandbox", project, network)
            started = time.perf_counter()
            runner.prepare(project)
            prepared = time.perf_counter() - started
            first_line_time(runner, ["true"], project)
            created = time.perf_counter() - started - prepared
            started = time.perf_counter()
            runner.cleanup()
            once.append((network, ms(prepared), ms(created), ms(time.perf_counter() - started)))
        print("\none-off per run (ms)")
        table([("network", "prepare (sweep, proxy, network)", "first iteration incl. container", "cleanup"), *once])


if __name__ == "__main__":
    main()
