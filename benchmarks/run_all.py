"""Run every benchmark script in ``benchmarks/`` one after the other.

Every ``benchmarks/*.py`` whose name does not start with ``_`` (and is not this
file) runs in sorted order, each in its own process with the same interpreter
(``sys.executable``), with its output streamed as it comes.  A failing script
is reported and the others still run; the exit code is 1 if any failed.

    python benchmarks/run_all.py [--quick] [--only startup,hook_latency]

``--quick`` runs each script with fewer repetitions / smaller sizes: the
scripts have no ``--quick`` flag of their own (they read only the flags they
know), so it is translated into the flags each one understands (see
``QUICK_ARGS``).  A script not listed there gets ``--quick`` passed through if
its source mentions ``--quick``, and no flags otherwise.  The figures of a quick
run are only a smoke test, not numbers to compare with the targets.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Flags each known script understands, for --quick.
QUICK_ARGS: dict[str, list[str]] = {
    "startup": ["--runs", "5"],
    "codex_sandbox": ["--rounds", "1"],
    "loop_overhead": ["--sizes", "10,1000", "--iterations", "5"],
    "task_selection": ["--sizes", "10,1000,10000"],
    "hook_latency": ["--runs", "5"],
    "sandbox_overhead": ["--runs", "3"],
    "trust_overhead": ["--runs", "5"],
    "trust_checks": ["--sizes", "10,1000"],
    "metering": ["--calls", "40", "--runs", "2"],
    "notify": ["--events", "500", "--sends", "5"],
    "containment_overhead": ["--runs", "5"],
    "integrity_overhead": ["--runs", "3", "--files", "300"],
    "sandbox_toolchain": ["--runs", "2"],
    "bwrap_overhead": ["--runs", "3", "--files", "200"],
}


def scripts() -> list[Path]:
    me = Path(__file__).resolve()
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.resolve() != me)


def arguments(script: Path, quick: bool) -> list[str]:
    if not quick:
        return []
    if script.stem in QUICK_ARGS:
        return list(QUICK_ARGS[script.stem])
    if "--quick" in script.read_text(encoding="utf-8"):
        return ["--quick"]
    return []


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    only: set[str] | None = None
    if "--only" in argv:
        only = {name.strip().removesuffix(".py") for name in argv[argv.index("--only") + 1].split(",") if name.strip()}
    selected = [s for s in scripts() if only is None or s.stem in only]
    if only is not None and (missing := only - {s.stem for s in selected}):
        print(f"run_all: no such benchmark: {', '.join(sorted(missing))}", file=sys.stderr)
        return 2
    results: list[tuple[str, int, float]] = []
    for script in selected:
        command = [sys.executable, str(script), *arguments(script, quick)]
        print(f"\n### {script.name} {' '.join(command[2:])}".rstrip(), flush=True)
        started = time.perf_counter()
        code = subprocess.run(command, cwd=HERE.parent).returncode
        results.append((script.name, code, time.perf_counter() - started))
    print("\n### summary")
    for name, code, seconds in results:
        print(f"{name:<24} {'ok' if code == 0 else f'FAILED (exit {code})':<16} {seconds:6.1f} s")
    return 1 if any(code for _, code, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
