"""What the bwrap sandbox and the docker sandbox add per iteration and per gate command.

On a project of ``--files`` committed files (10 KB each: 10 MB by default), through the runner
contract (``Runner.run`` and ``Runner.run_command``), the same protocol for each runner:

- an **agent run** of ``echo`` (to its first output line and to its end) and of the real
  ``claude --version`` (the agent's binary, ~200 MB, started in the sandbox): ``direct`` (a host
  subprocess in a pid namespace, the reference), ``bwrap`` (the project's state shipped into the run's
  checkout by a sandbox of its own, the command in a fresh sandbox, its work captured by another and
  checked and mirrored onto the project), and ``docker-sandbox`` when a Docker engine with the image is
  here (the same exchange, run in its workspace container, and a fresh container per run);
- a **gate command** (``true``): on the host (``direct``), in a fresh bwrap sandbox (after the ship-in),
  in a fresh container;
- the phases of both sandboxes' runs (``timings``: ship-in, the sandbox or container, bring-back), and the bare
  cost of one sandbox (``bwrap ... true``), of one with the network relay's forwarder first, and of
  the workspace side's ``python3 -I -S`` start inside one;
- the **added cost** per agent run and per gate command: the sandbox's median minus direct's.

Alternated runner by runner within each round, so all see the same machine load (a shared machine:
compare medians, not single runs).

    python benchmarks/bwrap_overhead.py [--runs 10] [--files 1000]

Prints "skipped: ..." and exits 0 where bubblewrap cannot make its sandbox.
"""

from __future__ import annotations

import os
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

IDENTITY = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "bench",
            "GIT_COMMITTER_EMAIL": "b@b"}
TARGET_ITERATION_MS = 1500.0
"""The sandbox's added cost per iteration the containment issue set (the docker sandbox's target too)."""


def make_project(root: Path, files: int, size: int = 10 * 1024) -> Path:
    project = root / "project"
    project.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True, env={**os.environ, **IDENTITY})

    git("init", "-q", "-b", "main")
    for index in range(files):
        path = project / f"src/pkg{index % 20:02d}/module_{index:04d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"value_{index} = {index!r}  # generated for the bwrap benchmark\n"
        path.write_text(line * max(1, size // len(line)))
    git("add", "-A")
    git("commit", "-q", "-m", "the project")
    return project


def make_runner(kind: str, project: Path) -> Any:
    from ralph.config import load_config
    from ralph.settings import Settings

    config, _, _ = load_config(project, {}, environ={})
    if kind == "direct":
        from ralph_plugins.runners.direct import DirectRunner

        return DirectRunner(Settings(project, config, {}))
    if kind == "bwrap":
        from ralph_plugins.runners.bwrap.config import BwrapConfig
        from ralph_plugins.runners.bwrap.runner import BwrapRunner

        return BwrapRunner(Settings(project, config, {"bwrap": BwrapConfig(network="none")}))
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    return DockerSandboxRunner(Settings(project, config, {"docker-sandbox": SandboxConfig(network="none")}))


def docker_usable(project: Path) -> str | None:
    """None when the docker sandbox can run here, else why not."""
    try:
        runner = make_runner("docker-sandbox", project)
    except Exception as exc:  # noqa: BLE001 - not installed, not importable
        return f"{type(exc).__name__}: {exc}"
    available = runner.availability()
    return None if available.ok else available.reason


def one_run(runner: Any, argv: list[str], project: Path, program: str | None = None) -> tuple[float, float]:
    """(seconds to the first stdout line, seconds to the end) of one ``run()``."""
    from ralph.contracts import ProcessSpec

    first: list[float] = []
    started = time.perf_counter()

    def on_line(_line: str) -> None:
        if not first:
            first.append(time.perf_counter() - started)

    outcome = runner.run(ProcessSpec(argv, {}, project, program=program), on_line, 300, threading.Event())
    total = time.perf_counter() - started
    if outcome.exit_code != 0:
        raise SystemExit(f"{argv[0]} failed in {runner.name}: exit {outcome.exit_code}: {outcome.stderr[-500:]}")
    return (first[0] if first else total), total


def one_gate(runner: Any, project: Path) -> float:
    started = time.perf_counter()
    result = runner.run_command("true", project, 300)
    if result.exit_code != 0:
        raise SystemExit(f"the gate failed in {runner.name}: {result.output[-500:]}")
    return time.perf_counter() - started


def bare_sandbox_times(runner: Any, runs: int) -> dict[str, list[float]]:
    """One sandbox with nothing in it, one with the relay's forwarder first, one running the workspace
    side's interpreter: what bubblewrap itself costs, apart from shipping."""
    from ralph_plugins.runners.bwrap.command import bwrap_argv
    from ralph_plugins.runners.bwrap.probe import probe
    from ralph_plugins.runners.bwrap.runner import _python

    layout = runner._layout(runner._project)
    inside = str(Path(sys.modules["ralph_plugins.runners.bwrap.runner"].__file__).resolve().parent / "inside.py")
    cases = {
        "bwrap true": ["/bin/true"],
        "bwrap + forwarder": [_python(), "-I", "-S", inside, "--", "/bin/true"],
        "bwrap python3 -I -S": [_python(), "-I", "-S", "-c", "pass"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, command in cases.items():
            argv = bwrap_argv(probe().binary, layout, command, probe().features)
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, env=runner._plain_env(), cwd=runner._state)
            times[name].append(time.perf_counter() - started)
    return times


def stats(values: list[float]) -> list[str]:
    return [ms(min(values)), ms(statistics.median(values)), ms(percentile(values, 0.9))]


def main() -> None:
    runs = int_arg(sys.argv, "--runs", 10)
    files = int_arg(sys.argv, "--files", 1000)
    header(f"bwrap sandbox overhead per iteration and per gate ({files} files, 10 KB each)")
    from ralph.claude_cli import resolve_binary
    from ralph_plugins.runners.bwrap.probe import probe

    found = probe()
    if not found.ok:
        print(f"skipped: {found.reason}")
        return
    print(f"{found.version} ({found.binary}); features: user namespace {found.features.user_namespace}, "
          f"--disable-userns {found.features.disable_userns}")
    claude = resolve_binary()[0]
    with tempfile.TemporaryDirectory(prefix="ralph-bwrap-bench-") as tmp:
        project = make_project(Path(tmp), files)
        kinds = ["direct", "bwrap"]
        why_not = docker_usable(project)
        if why_not is None:
            kinds.append("docker-sandbox")
        else:
            print(f"docker-sandbox: not measured ({why_not})")
        runners = {kind: make_runner(kind, project) for kind in kinds}
        prepared: dict[str, float] = {}
        for kind, runner in runners.items():
            started = time.perf_counter()
            runner.prepare(project)
            prepared[kind] = time.perf_counter() - started
        try:
            for kind, runner in runners.items():  # a first run each: the whole history ships once per run
                started = time.perf_counter()
                one_run(runner, ["echo", "warm"], project)
                prepared[kind + " first run"] = time.perf_counter() - started
            echo: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
            version: dict[str, list[float]] = {kind: [] for kind in kinds}
            gate: dict[str, list[float]] = {kind: [] for kind in kinds}
            phases: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds[1:]}
            gate_phases: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds[1:]}
            for _ in range(runs):
                for kind, runner in runners.items():
                    echo[kind].append(one_run(runner, ["echo", "hello"], project))
                    if kind in phases:
                        phases[kind].append(dict(runner.timings))
                    if claude is not None:
                        version[kind].append(one_run(runner, [str(claude), "--version"], project, program="claude")[1])
                    gate[kind].append(one_gate(runner, project))
                    if kind in gate_phases:
                        gate_phases[kind].append(dict(runner.timings))
            bare = bare_sandbox_times(runners["bwrap"], runs)
        finally:
            for runner in runners.values():
                runner.cleanup()

    rows = [["what", "runner", "min ms", "median ms", "p90 ms"]]
    for kind in kinds:
        rows.append(["agent run: echo, to its first line", kind, *stats([first for first, _ in echo[kind]])])
        rows.append(["agent run: echo, to its end", kind, *stats([total for _, total in echo[kind]])])
        if version[kind]:
            rows.append(["agent run: claude --version", kind, *stats(version[kind])])
        rows.append(["gate command: true", kind, *stats(gate[kind])])
    for name, values in bare.items():
        rows.append([name, "bwrap", *stats(values)])
    table(rows, left=(0, 1))
    print()
    for kind in kinds[1:]:
        for what, samples in (("agent run", phases[kind]), ("gate", gate_phases[kind])):
            if samples and samples[0]:
                print(f"{kind} {what} phases (median ms): "
                      + ", ".join(f"{name} {ms(statistics.median(p.get(name, 0.0) for p in samples))}" for name in samples[0]))
    print("one-off per run (ms): " + ", ".join(f"{name} {ms(value)}" for name, value in prepared.items()))
    direct_run = statistics.median(total for _, total in echo["direct"])
    direct_gate = statistics.median(gate["direct"])
    for kind in kinds[1:]:
        added_run = statistics.median(total for _, total in echo[kind]) - direct_run
        added_gate = statistics.median(gate[kind]) - direct_gate
        verdict = "met" if added_run * 1000 <= TARGET_ITERATION_MS else "NOT met"
        print(f"{kind}: added per agent run {ms(added_run)} ms (target <= {TARGET_ITERATION_MS:.0f} ms: {verdict}), "
              f"per gate command {ms(added_gate)} ms")


if __name__ == "__main__":
    main()
