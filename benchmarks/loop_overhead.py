"""The loop's own work per iteration (everything but the agent), for 10 / 1,000 / 10,000 stories.

For each size a temporary git repository is scaffolded with ``ralph.lifecycle.init.init_project``,
its ``tasks.json`` replaced by N generated stories (all open, valid per the seed schema) and
committed.  Then the real ``Loop`` runs K iterations through ``open_session(...).build_loop().run()``
with

* the ``replay`` agent (its command building and its stream-json parser are exercised; the script
  given in ``RALPH_REPLAY_SCRIPT`` has no actions), and
* an in-process ``noop`` runner, registered with ``PluginHost(extra_plugins=[...])``, whose ``run()``
  never starts the agent process: it feeds ``on_line`` one assistant text line and one ``result``
  line (the text line keeps the loop from treating the iteration as an empty response and
  retrying it) and returns ``ProcessOutcome(0)``.

Nothing changes between iterations, so the loop implements the same story K times and ends with
exit code 1 ("max iterations reached"); every iteration still does the full trusted work:
the pre-iteration snapshot, state.json and ``.ralph-active`` writes, prompt render, re-read + parse of the
task list, every validator (including ``git status --porcelain`` of the git-clean check) and the
events (console reporter and JSONL event log).  The default plugins (entry points) are loaded as in
``ralph run``.  Console output goes to /dev/null and run directories to a temporary
``RALPH_STATE_DIR``.

Reported per size:

* run total / K, and the steady-state time per iteration (median gap between consecutive
  ``iteration_started`` events, i.e. without the per-run set-up and summary);
* the components of one iteration measured on their own (min / median over repeats): file read,
  parse (json + pydantic), validators without git, ``git status``, ``policy.select``, prompt
  render, state writes.

    python benchmarks/loop_overhead.py [--sizes 10,1000,10000] [--iterations 30] [--profile] [--runner direct]

``--runner direct`` runs the replay agent's real process through the ``direct`` runner instead of
the noop runner: the figures then include starting that Python process and the direct runner's
own work (environment with the push block, process group, reader threads, the sweep of leftovers).
``--iterations`` overrides K for every size (default: 30, 30 and 10).  ``--profile`` also prints
the top functions of a cProfile of one run at the largest size.

Target: under 50 ms of loop overhead per iteration at 1,000 stories.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, list_arg, ms, open_task_list, repeat, table  # noqa: E402

from ralph import hookimpl  # noqa: E402
from ralph.contracts import Availability, LoopEvent, ProcessOutcome, ProcessSpec, Runner  # noqa: E402
from ralph.lifecycle.init import init_project  # noqa: E402
from ralph.loop.records import IterationRecord  # noqa: E402
from ralph.plugin.manager import PluginHost  # noqa: E402
from ralph.session import open_session  # noqa: E402

SIZES = [10, 1_000, 10_000]
DEFAULT_ITERATIONS = {10: 30, 1_000: 30, 10_000: 10}
TARGET_MS = 50.0
TARGET_SIZE = 1_000

# What a minimal agent prints: one assistant text block, then the result (Claude Code stream-json).
AGENT_LINES = [
    json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}}),
    json.dumps(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "Done.",
            "num_turns": 1,
            "total_cost_usd": 0.0,
            "duration_ms": 0,
        }
    ),
]


class NoopRunner(Runner):
    """Never starts the agent's process: replays two stream-json lines and reports success."""

    name = "noop"
    description = "benchmark runner: returns at once"

    def availability(self) -> Availability:
        return Availability.yes()

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        for line in AGENT_LINES:
            on_line(line)
        return ProcessOutcome(0)


class BenchPlugin:
    """Registers the noop runner and timestamps loop events."""

    def __init__(self) -> None:
        self.stamps: list[tuple[str, float]] = []

    @hookimpl
    def ralph_register_runners(self, register: Callable[[type], None]) -> None:
        register(NoopRunner)

    @hookimpl
    def ralph_loop_event(self, event: LoopEvent) -> None:
        if event.kind in {"run_started", "iteration_started", "iteration_finished", "run_finished"}:
            self.stamps.append((event.kind, time.perf_counter()))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_project(root: Path, stories: int) -> Path:
    project = root / f"project-{stories}"
    project.mkdir()
    git(project, "init", "-q")
    git(project, "config", "user.name", "Bench")
    git(project, "config", "user.email", "bench@localhost")
    git(project, "config", "commit.gpgsign", "false")
    result = init_project(project, name="bench")
    tasks = open_task_list(stories)
    (result.ralph_dir / "tasks.json").write_text(json.dumps(tasks, indent=2) + "\n", encoding="utf-8")
    git(project, "add", "-A")
    git(project, "commit", "-q", "--no-verify", "-m", "ralph init + generated stories")
    return project


@contextlib.contextmanager
def quiet():
    """Send the console reporter (and anything else printing) to /dev/null."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


RUNNER = ["noop"]
"""The runner the loop uses: ``noop`` (in-process, default) or ``direct`` (``--runner direct``)."""


def open_loop(project: Path, iterations: int, plugin: BenchPlugin):  # type: ignore[no-untyped-def]
    host = PluginHost(extra_plugins=[plugin])
    overrides = {"runner": RUNNER[0], "agent": "replay", "max_iterations": iterations, "output": "quiet"}
    session = open_session(project, overrides=overrides, host=host)
    return session.build_loop()


def run_loop(project: Path, iterations: int) -> dict[str, Any]:
    plugin = BenchPlugin()
    start = time.perf_counter()
    with quiet():
        loop = open_loop(project, iterations, plugin)
        opened = time.perf_counter()
        result = loop.run()
    end = time.perf_counter()
    if len(result.iterations) != iterations or any(r.violations for r in result.iterations):
        raise SystemExit(f"unexpected run: {result.reason}; violations {[r.violations for r in result.iterations]}")
    starts = [t for kind, t in plugin.stamps if kind == "iteration_started"]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    return {
        "session": opened - start,
        "run": end - opened,
        "exit": result.exit_code,
        "reason": result.reason,
        "gaps": gaps,
    }


def components(project: Path, root: Path) -> dict[str, list[float]]:
    """Each piece of one iteration's trusted work, timed on its own."""
    plugin = BenchPlugin()
    with quiet():
        loop = open_loop(project, 1, plugin)
        tasks = loop.preflight()
    run_dir = loop.run_dir = root / f"components-{len(tasks.userStories)}"
    run_dir.mkdir()
    raw = loop.tasks_path.read_text(encoding="utf-8")
    selection = loop.policy.select(tasks)
    assert selection is not None
    before = tasks
    record = IterationRecord(1, selection.mode, selection.story_id)
    status_cmd = ["git", "status", "--porcelain"]
    pieces: dict[str, Callable[[], Any]] = {
        "read tasks.json": lambda: loop.tasks_path.read_text(encoding="utf-8"),
        "parse (json + pydantic)": lambda: loop.store.parse(raw, loop.tasks_path),
        "validators, no git": lambda: loop.validate(raw, tasks, selection.mode, before, check_git=False),
        "git status --porcelain": lambda: subprocess.run(status_cmd, cwd=project, capture_output=True, text=True),
        "policy.select": lambda: loop.policy.select(tasks),
        "policy.is_complete": lambda: loop.policy.is_complete(tasks),
        "prompt render": lambda: loop.render(1, selection, tasks, []),
        "state.json + marker": lambda: loop.state.write(run_dir, record, selection, before.snapshot()),
    }
    if RUNNER[0] != "noop":  # the runner's own cost around a process that does nothing
        spec = ProcessSpec(["true"], {}, project)
        pieces[f"{RUNNER[0]} runner: run `true`"] = lambda: loop.runner.run(spec, lambda line: None, 60, threading.Event())
        pieces["subprocess.run `true` (reference)"] = lambda: subprocess.run(["true"], cwd=project)
    results = {}
    for label, func in pieces.items():
        results[label] = repeat(func, min_runs=5, max_runs=100, budget=0.3)
    loop.state.remove_marker()
    return results


def profile_run(project: Path, iterations: int) -> None:
    plugin = BenchPlugin()
    profiler = cProfile.Profile()
    with quiet():
        loop = open_loop(project, iterations, plugin)
        profiler.enable()
        loop.run()
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(25)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


def main(argv: list[str]) -> None:
    sizes = list_arg(argv, "--sizes", SIZES)
    forced = int_arg(argv, "--iterations", 0)
    RUNNER[0] = argv[argv.index("--runner") + 1] if "--runner" in argv else "noop"
    if RUNNER[0] == "noop":
        header("loop overhead per iteration (agent excluded: in-process noop runner, replay agent)")
    else:
        header(f"loop overhead per iteration ({RUNNER[0]} runner: the replay agent's real process included)")
    root = Path(tempfile.mkdtemp(prefix="ralph-bench-"))
    saved_env = {key: os.environ.get(key) for key in ("RALPH_STATE_DIR", "RALPH_REPLAY_SCRIPT")}
    try:
        script = root / "replay-script.json"
        # what the noop runner replays, for a real replay process (--runner direct)
        script.write_text(json.dumps({"iterations": {}, "default": [{"say": "Done."}]}), encoding="utf-8")
        os.environ["RALPH_STATE_DIR"] = str(root / "state")
        os.environ["RALPH_REPLAY_SCRIPT"] = str(script)

        runs = []
        parts: dict[int, dict[str, list[float]]] = {}
        projects = {}
        for size in sizes:
            started = time.perf_counter()
            projects[size] = make_project(root, size)
            setup = time.perf_counter() - started
            iterations = forced or DEFAULT_ITERATIONS.get(size, 10)
            outcome = run_loop(projects[size], iterations)
            outcome.update(size=size, iterations=iterations, setup=setup)
            runs.append(outcome)
            parts[size] = components(projects[size], root)

        rows = [
            (
                "stories",
                "K",
                "exit",
                "session ms",
                "run total ms",
                "run/K ms",
                "steady/iter ms (median)",
                "min",
                "max",
            )
        ]
        for r in runs:
            gaps = r["gaps"] or [r["run"] / r["iterations"]]
            rows.append(
                (
                    f"{r['size']:,}",
                    r["iterations"],
                    r["exit"],
                    ms(r["session"]),
                    ms(r["run"]),
                    ms(r["run"] / r["iterations"]),
                    ms(statistics.median(gaps)),
                    ms(min(gaps)),
                    ms(max(gaps)),
                )
            )
        table(rows)
        print(
            "session = open_session (plugins + config) + build_loop, once per run; run total = Loop.run() "
            "(preflight, lock, K iterations, summary);\nsteady/iter = gap between consecutive "
            "iteration_started events.  Exit 1 (max iterations reached) is expected: the noop agent "
            "changes nothing."
        )
        for r in runs:
            if r["size"] == TARGET_SIZE and RUNNER[0] == "noop":
                value = statistics.median(r["gaps"]) * 1000 if r["gaps"] else r["run"] / r["iterations"] * 1000
                verdict = "within" if value < TARGET_MS else "ABOVE"
                print(f"target: < {TARGET_MS:.0f} ms/iteration at {TARGET_SIZE:,} stories: {value:.1f} ms, {verdict} target")

        print()
        print("components of one iteration, each timed alone: min / median ms")
        labels = list(next(iter(parts.values())))
        header_row = ["component"] + [f"{size:,} stories" for size in sizes]
        rows = [header_row]
        for label in labels:
            rows.append([label] + [f"{ms(min(parts[s][label]))} / {ms(statistics.median(parts[s][label]))}" for s in sizes])
        sums = []
        for size in sizes:
            # per iteration the loop parses once, validates once (+ git status), selects once, checks
            # completion once, renders once and writes the state once
            sums.append(sum(statistics.median(v) for label, v in parts[size].items() if "(reference)" not in label))
        rows.append(["sum of medians"] + [ms(v) for v in sums])
        table(rows)
        for r, size in zip(runs, sizes):
            median_gap = statistics.median(r["gaps"]) if r["gaps"] else r["run"] / r["iterations"]
            biggest = sorted(parts[size].items(), key=lambda kv: statistics.median(kv[1]), reverse=True)[:3]
            print(
                f"{size:>7,} stories: biggest components "
                + ", ".join(f"{label} {ms(statistics.median(v))} ms" for label, v in biggest)
                + f"; events, agent line parsing and file writes not listed: ~{ms(max(0.0, median_gap - sums[sizes.index(size)]))} ms"
            )

        if "--profile" in argv:
            size = sizes[-1]
            print()
            print(f"cProfile of one run at {size:,} stories ({forced or DEFAULT_ITERATIONS.get(size, 10)} iterations):")
            profile_run(projects[size], forced or DEFAULT_ITERATIONS.get(size, 10))
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
