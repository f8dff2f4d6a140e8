"""What running each agent run and gate command in its own pid namespace adds (``ralph.containment``).

Times ``run_process`` (an agent run) and ``run_shell`` (a gate command) of
``true`` three ways: in a pid namespace (what ralph does on Linux), with the
subreaper sweep (the fallback where no namespace can be made, and what ralph
did before), and as a bare ``subprocess.run`` (the reference: no containment, no
streaming).  The added cost per agent run / gate command is the namespace's
median minus the bare one (target <= 50 ms).  Also the probe, paid once per
process (``ralph doctor``, the first run).

    python benchmarks/containment_overhead.py [--runs 30]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, ms, percentile, table  # noqa: E402

TARGET_MS = 50.0


CPU: dict[str, float] = {}
"""CPU seconds per run (this process and its children), by label: what the machine's load does not inflate."""


def timed(func: Callable[[], Any], runs: int, label: str = "") -> list[float]:
    samples = []
    before = _cpu()
    for _ in range(runs):
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    CPU[label] = (_cpu() - before) / runs
    return samples


def _cpu() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def row(label: str, samples: list[float]) -> tuple[str, ...]:
    return (label, str(len(samples)), ms(min(samples)), ms(statistics.median(samples)), ms(percentile(samples, 0.9)),
            ms(CPU[label]))


def main() -> None:
    runs = int_arg(sys.argv, "--runs", 30)
    header("containment: a pid namespace per agent run and gate command")
    import ralph.containment as containment
    from ralph.contracts import ProcessSpec
    from ralph.process import descendants, run_process, run_shell

    started = time.perf_counter()
    found = containment.containment()
    probe = time.perf_counter() - started
    print(f"in use: {found.mechanism}" + (f" ({found.reason})" if found.reason else ""))
    if not found.namespace:
        print("skipped: no pid namespace on this machine; only the sweep can be timed")
    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp:
        cwd = Path(tmp)
        spec = ProcessSpec(["true"], {}, cwd)
        bare_run = timed(lambda: subprocess.run(["true"], cwd=cwd), runs, 'bare subprocess.run(true) (reference)')
        bare_shell = timed(lambda: subprocess.run(["/bin/sh", "-c", "true"], cwd=cwd, capture_output=True), runs, 'bare sh -c true, output captured (reference)')
        rows = [("", "runs", "min", "median", "p90", "cpu"),
                row("bare subprocess.run(true) (reference)", bare_run),
                row("bare sh -c true, output captured (reference)", bare_shell)]
        if found.namespace:
            ns_run = timed(lambda: run_process(spec, lambda line: None), runs, 'agent run: run_process(true), pid namespace')
            ns_shell = timed(lambda: run_shell("true", cwd, 60), runs, 'gate: run_shell(true), pid namespace')
            rows += [row("agent run: run_process(true), pid namespace", ns_run),
                     row("gate: run_shell(true), pid namespace", ns_shell)]
        containment._probed = containment.Containment(False, reason="forced by the benchmark")
        try:
            spare = descendants()
            sweep_run = timed(lambda: run_process(spec, lambda line: None, spare=spare), runs, 'agent run: run_process(true), sweep (fallback)')
            sweep_shell = timed(lambda: run_shell("true", cwd, 60, spare), runs, 'gate: run_shell(true), sweep (fallback)')
        finally:
            containment._probed = found
        rows += [row("agent run: run_process(true), sweep (fallback)", sweep_run),
                 row("gate: run_shell(true), sweep (fallback)", sweep_shell)]
    print("times in ms (cpu: CPU time per run, this process and its children, which load does not inflate)")
    table(rows)
    print(f"\nthe probe (once per process): {ms(probe)} ms")
    if found.namespace:
        run_extra = statistics.median(ns_run) - statistics.median(bare_run)
        shell_extra = statistics.median(ns_shell) - statistics.median(bare_shell)
        worst = max(run_extra, shell_extra)
        cpu_extra = CPU["agent run: run_process(true), pid namespace"] - CPU["bare subprocess.run(true) (reference)"]
        print(f"added per agent run {ms(run_extra)} ms, per gate command {ms(shell_extra)} ms over a bare process "
              f"({ms(cpu_extra)} ms of CPU per agent run); "
              f"over the sweep: {ms(statistics.median(ns_run) - statistics.median(sweep_run))} ms per agent run "
              f"(target <= {TARGET_MS:.0f} ms added: {'met' if worst * 1000 <= TARGET_MS else 'NOT met'})")


if __name__ == "__main__":
    main()
