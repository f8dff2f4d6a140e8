"""`ralph --help` start-up time, every command's against it, and the imports that dominate it.

Spawns the installed ``ralph`` console script (the one next to ``sys.executable``)
N times and prints min / median / p90 wall time and the median CPU time: ``--help`` (lists the
plugins' commands too), ``--version``, ``status --help`` (one of ralph's own commands),
``run --help`` (the registered runner, agent and policy names, read from the distributions'
declarations: ralph/plugin/declared.py) and ``ralph status`` in a project with one finished run
(made first, with the replay agent).  For scale it also times a bare ``python -c pass`` and
``python -c "import ralph.cli.main"``.  Then it prints each command's ratio to ``ralph --help``
(median wall time and median CPU time: on a shared machine the CPU ratio is the steadier one),
runs ``python -X importtime -c "import ralph.cli.main"`` and prints the 10 imports with the
largest cumulative time.

    python benchmarks/startup.py [--runs 20]

Targets: ``ralph --help`` under 150 ms (median); ``ralph run --help`` and ``ralph status`` at most
1.5x ``ralph --help``.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, percentile, table  # noqa: E402

TARGET_MS = 150.0
TARGET_RATIO = 1.5
"""``ralph run --help`` and ``ralph status`` against ``ralph --help``."""


def ralph_script() -> Path:
    name = "ralph.exe" if os.name == "nt" else "ralph"
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f"no ralph console script next to {sys.executable}: is ralph-trustloop installed here?")
    return path


def project_with_a_run(root: Path) -> Path:
    """A project (``ralph init``) with one finished run of the replay agent, for ``ralph status``."""
    from ralph.testing import ReplayScript, make_project, say, story

    project = make_project(root)
    project.write_stories([story("US-001")])
    script = ReplayScript().iteration(1, say("nothing to do")).write(root / "script.json")
    env = {**project.process_env(), "RALPH_REPLAY_SCRIPT": str(script)}
    subprocess.run([str(ralph_script()), "run", "--agent", "replay", "--runner", "direct", "--skip-review", "-n", "1"],
                   cwd=project.path, env=env, capture_output=True, check=False)
    if not project.run_dirs():
        raise SystemExit("could not make a run for `ralph status`")
    return project.path


def spawn_times(argv: list[str], runs: int, cwd: Path | None = None) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (user + system) seconds of each run.  On a shared machine the
    CPU time is the steadier figure: waiting for a core counts in the wall time only."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", "")}
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)  # warm the page cache
    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if result.returncode != 0:
            raise SystemExit(f"{argv} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    return times, cpu


def import_times(module: str) -> list[tuple[int, int, str, str]]:
    """(self us, cumulative us, name, imported by) per import, from ``-X importtime``."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, check=True
    )
    parsed = []
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)", line)
        if match:
            depth = (len(match.group(3)) - 1) // 2
            parsed.append((int(match.group(1)), int(match.group(2)), depth, match.group(4)))
    rows = []
    for index, (own, cum, depth, name) in enumerate(parsed):
        # children are printed before their parent: the parent is the next line one level up
        parent = next((p[3] for p in parsed[index + 1 :] if p[2] == depth - 1), "(top level)") if depth else "(top level)"
        rows.append((own, cum, name, parent))
    return rows


def main(argv: list[str]) -> None:
    runs = int_arg(argv, "--runs", 20)
    header(f"start-up time ({runs} runs each)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    script = ralph_script()
    with tempfile.TemporaryDirectory() as tmp:
        project = project_with_a_run(Path(tmp))
        cases = [
            ("ralph --help", [str(script), "--help"], None),
            ("ralph --version", [str(script), "--version"], None),
            ("ralph status --help", [str(script), "status", "--help"], None),
            ("ralph run --help", [str(script), "run", "--help"], None),
            ("ralph status (a project with a run)", [str(script), "status"], project),
            ("python -c 'import ralph.cli.main'", [sys.executable, "-c", "import ralph.cli.main"], None),
            ("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"], None),
        ]
        rows = [("command", "min ms", "median ms", "p90 ms", "median cpu ms")]
        medians, cpus = {}, {}
        for label, command, cwd in cases:
            times, cpu = spawn_times(command, runs, cwd)
            medians[label] = statistics.median(times) * 1000
            cpus[label] = statistics.median(cpu) * 1000
            rows.append(
                (label, f"{min(times) * 1000:.1f}", f"{medians[label]:.1f}", f"{percentile(times, 0.9) * 1000:.1f}",
                 f"{cpus[label]:.1f}")
            )
    table(rows)
    help_ms = medians["ralph --help"]
    print(
        f"ralph --help median {help_ms:.1f} ms vs target {TARGET_MS:.0f} ms: "
        f"{'within' if help_ms < TARGET_MS else 'ABOVE'} target "
        f"({help_ms - medians['python -c pass (interpreter floor)']:.1f} ms above the bare interpreter)"
    )
    for label in ("ralph run --help", "ralph status (a project with a run)"):
        wall, cpu = medians[label] / help_ms, cpus[label] / cpus["ralph --help"]
        verdict = "within" if max(wall, cpu) <= TARGET_RATIO else ("ABOVE (wall time only)" if cpu <= TARGET_RATIO else "ABOVE")
        print(f"{label}: {wall:.2f}x ralph --help (wall, median), {cpu:.2f}x (cpu, median); "
              f"target {TARGET_RATIO}x: {verdict}")

    print()
    print("top 10 imports by cumulative time (python -X importtime -c 'import ralph.cli.main', one run):")
    imports = import_times("ralph.cli.main")
    top = sorted(imports, key=lambda row: row[1], reverse=True)[:10]
    table(
        [("module", "cumulative ms", "self ms", "imported by")]
        + [(name, f"{cum / 1000:.1f}", f"{own / 1000:.1f}", parent) for own, cum, name, parent in top],
        left=(0, 3),
    )
    total = sum(row[0] for row in imports)
    print(f"{len(imports)} modules imported, {total / 1000:.1f} ms self time in total")


if __name__ == "__main__":
    main(sys.argv[1:])
