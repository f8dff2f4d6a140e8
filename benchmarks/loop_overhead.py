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
exit code 1 ("max iterations reached"); every iteration still does the full trusted work: the
person's-changes look, the ref guard, the pre-iteration snapshot, state.json and ``.ralph-active``,
the prompt, the read-back (parse, every validator, the policy's whitelist), the trusted-copy and
loop-file checks, the gates (their tree guard, the test-integrity look) and the events (console
reporter and JSONL event log).  The default plugins (entry points) are loaded as in ``ralph run``.
Console output goes to /dev/null and run directories to a temporary ``RALPH_STATE_DIR``.

Before the 2nd iteration the script pauses 2.1 s, as an agent session would: what the run's start wrote is
then past the 2-second windows of the ``.git`` checks and of the ref guard's key.

Reported per size, over the steady iterations (between the 2nd and the last ``iteration_started``):

* wall time per iteration (median gap between ``iteration_started`` events) and **CPU time** per
  iteration, this process's and its children's (git): the machine's load inflates wall time, much
  less CPU time; the target is checked on CPU time (own + children);
* the iteration's steps, each measured in the real run (CPU ms per iteration, own + git), with the
  hardened git calls each makes; ``rest`` is what no listed step covers;
* every git process per iteration by command and by the part of the loop that ran it, and the
  ``.git`` metadata and layout checks made before each.

    python benchmarks/loop_overhead.py [--sizes 10,1000,10000] [--iterations 30] [--profile] [--runner direct]

``--runner direct`` runs the replay agent's real process through the ``direct`` runner instead of
the noop runner: the figures then include starting that Python process and the direct runner's
own work (environment with the push block, process group, reader threads, the sweep of leftovers).
``--iterations`` overrides K for every size (default: 30, 30 and 10).  ``--profile`` also prints
the top functions of a cProfile of one run at the largest size.

Targets (CPU time per iteration, own + git): 10 ms at 10 stories, 20 ms at 1,000, 50 ms at 10,000.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, list_arg, ms, open_task_list, table  # noqa: E402

from ralph import hookimpl  # noqa: E402
from ralph.contracts import Availability, LoopEvent, ProcessOutcome, ProcessSpec, Runner  # noqa: E402
from ralph.lifecycle.init import init_project  # noqa: E402
from ralph.plugin.manager import PluginHost  # noqa: E402
from ralph.session import open_session  # noqa: E402

SIZES = [10, 1_000, 10_000]
DEFAULT_ITERATIONS = {10: 30, 1_000: 30, 10_000: 10}
TARGETS_MS = {10: 10.0, 1_000: 20.0, 10_000: 50.0}
"""CPU time per iteration (this process and its git children) the loop's own work should stay under."""

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


def cpu_now() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's) now."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time(), children.ru_utime + children.ru_stime


class BenchPlugin:
    """Registers the noop runner; stamps wall and CPU time at each ``iteration_started``."""

    def __init__(self) -> None:
        self.stamps: list[tuple[float, float, float]] = []
        self.on_iteration: Callable[[int], None] | None = None

    @hookimpl
    def ralph_register_runners(self, register: Callable[[type], None]) -> None:
        register(NoopRunner)

    @hookimpl
    def ralph_loop_event(self, event: LoopEvent) -> None:
        if event.kind == "iteration_started":
            if self.on_iteration is not None:
                self.on_iteration(len(self.stamps) + 1)
            own, children = cpu_now()
            self.stamps.append((time.perf_counter(), own, children))


# -- where the time goes: the iteration's steps, measured in the real run -----------------------

STEPS: list[tuple[str, str]] = [
    ("person's changes between iterations", "gap.look gap.iteration_over"),
    ("select (policy.select_next)", "select"),
    ("done? (policy.is_complete)", "is_complete"),
    ("pre-iteration snapshot (policy.snapshot)", "context.checks.begin"),
    ("ref guard: refresh before", "refs.refresh"),
    ("HEAD + untracked before (git status)", "@ralph.loop.engine.tree_status"),
    ("review freeze: before", "freeze.before_iteration"),
    ("state.json + marker", "state.write"),
    ("prompt render", "render"),
    ("agent session (noop runner)", "agents.run_iteration"),
    ("ref guard: checks after agent, gates", "refs.check"),
    ("review freeze: after", "freeze.after_iteration"),
    ("loop files kept regular", "loopfiles.secure"),
    ("read back: parse + validators + whitelist", "repairs.read_back"),
    ("trusted copy: prd, prompt, settings", "trusted.restore"),
    ("progress notes", "notes.unfinished notes.trim_before"),
    ("gates (tree guard, test-integrity, ...)", "keeper.after_iteration keeper.before_iteration keeper.story_context"),
    ("story limits, parking, sessions log", "limits.story_limits parking.settle parking.after_iteration "
                                            "@ralph.loop.engine.log_incomplete"),
    ("story_states event", "_story_states"),
    ("plugins' prompt context", "host.prompt_context"),
]
"""(label, what to time: attributes of the loop, ``@module.function`` for a module-level function).  The
steps do not overlap; events are emitted inside them."""

INSIDE: list[tuple[str, str]] = [
    ("  read back: task file read + parse", "taskfile.read"),
    ("  read back: validators + whitelist", "repairs.validate"),
    ("  gates: tree guard", "@ralph.loop.treeguard.TreeSnapshot.take @ralph.loop.treeguard.TreeSnapshot.changes"),
    ("  events (all steps)", "emit"),
    (".git metadata + layout checks (all git calls)", "@ralph.gitutil.check_metadata @ralph.gitutil.check_layout"),
]
"""Parts of the steps above, shown under them (not added to the sum)."""

PARTS = [
    ("treeguard.py", "gates: tree guard"),
    ("testintegrity", "gates: test-integrity look"),
    ("plugins/gates", "gates: the gates"),
    ("personrefs.py", "ref guard"),
    ("personchanges.py", "person's changes"),
    ("git_clean.py", "validator git-clean"),
    ("reviewtree.py", "review freeze"),
    ("progressnotes.py", "progress notes"),
    ("trustedcopy.py", "trusted copy"),
    ("engine.py", "loop (engine)"),
]
"""Which part of the loop ran a git process: the first of these found on its stack, innermost first."""


class Meter:
    """CPU (own, children) and git processes per step, counted only while :attr:`on` (the steady iterations)."""

    def __init__(self) -> None:
        self.on = False
        self.cpu: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.git_by_step: Counter[str] = Counter()
        self.git_calls: Counter[tuple[str, str]] = Counter()
        self.stack: list[str] = []
        self.undo: list[Callable[[], None]] = []

    def timed(self, label: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.on or threading.current_thread() is not threading.main_thread():
                return func(*args, **kwargs)
            own0, child0 = cpu_now()
            self.stack.append(label)
            try:
                return func(*args, **kwargs)
            finally:
                self.stack.pop()
                own1, child1 = cpu_now()
                entry = self.cpu[label]
                entry[0] += own1 - own0
                entry[1] += child1 - child0

        return wrapper

    def patch(self, loop: Any, label: str, targets: str) -> None:
        """Time ``targets`` under ``label`` (one this ralph does not have is left out: an older version's run)."""
        for target in targets.split():
            try:
                owner, attr = _owner(loop, target)
                original = getattr(owner, attr)
            except (ImportError, AttributeError):
                continue
            setattr(owner, attr, self.timed(label, original))
            self.undo.append(lambda owner=owner, attr=attr, original=original: setattr(owner, attr, original))

    def count_processes(self) -> None:
        """Count every git process the loop starts, by command and by the part of the loop that ran it."""
        real = subprocess.Popen.__init__
        meter = self

        def counting(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
            if meter.on and threading.current_thread() is threading.main_thread():
                argv = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
                if argv and os.path.basename(argv[0]) == "git":
                    meter.git_calls[(_git_command(argv), _part())] += 1
                    for label in set(meter.stack):
                        meter.git_by_step[label] += 1
            real(self, args, *rest, **kwargs)

        subprocess.Popen.__init__ = counting  # type: ignore[method-assign]
        self.undo.append(lambda: setattr(subprocess.Popen, "__init__", real))

    def restore(self) -> None:
        for undo in reversed(self.undo):
            undo()


def _owner(loop: Any, target: str) -> tuple[Any, str]:
    """The object holding ``target`` (``refs.check``: an attribute path from the loop; ``@module.name`` or
    ``@module.Class.name``: a module's) and the attribute's name."""
    if not target.startswith("@"):
        *path, attr = target.split(".")
        owner = loop
        for name in path:
            owner = getattr(owner, name)
        return owner, attr
    module_name, _, attr = target[1:].rpartition(".")
    try:
        return __import__(module_name, fromlist=["_"]), attr
    except ImportError:  # ``module.Class.name``
        module_name, _, cls = module_name.rpartition(".")
        return getattr(__import__(module_name, fromlist=["_"]), cls), attr


def _git_command(argv: list[str]) -> str:
    """``status --porcelain=v2`` from a hardened git argv (``-c`` settings and ``--no-pager`` left out)."""
    words, skip = [], False
    for word in argv[1:]:
        if skip:
            skip = False
        elif word == "-c":
            skip = True
        elif word != "--no-pager":
            words.append(word)
    return " ".join(words[:2])[:48]


def _part() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        for needle, part in PARTS:
            if needle in frame.filename:
                return part
    return "other"


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
def quiet():  # type: ignore[no-untyped-def]
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
    """One run of ``iterations`` with every step metered over the steady ones (2nd start to last start)."""
    plugin = BenchPlugin()
    meter = Meter()
    start = time.perf_counter()
    with quiet():
        loop = open_loop(project, iterations, plugin)
        opened = time.perf_counter()
        for label, targets in STEPS + INSIDE:
            meter.patch(loop, label, targets)
        meter.count_processes()
        def on_iteration(number: int) -> None:
            if number == 2:  # as after a real agent session: what the run's start wrote is past the 2-second windows
                time.sleep(2.1)  # of the .git checks and the ref guard's key (a change within them is read again)
            meter.on = 2 <= number < iterations

        plugin.on_iteration = on_iteration
        try:
            result = loop.run()
        finally:
            meter.restore()
    end = time.perf_counter()
    if len(result.iterations) != iterations or any(r.violations for r in result.iterations):
        raise SystemExit(f"unexpected run: {result.reason}; violations {[r.violations for r in result.iterations]}")
    stamps = plugin.stamps
    steady = stamps[1:]  # from the 2nd start: the first iteration pays for lazy imports
    return {
        "session": opened - start,
        "run": end - opened,
        "exit": result.exit_code,
        "gaps": [b[0] - a[0] for a, b in zip(steady, steady[1:])],
        "cpu": [(b[1] - a[1], b[2] - a[2]) for a, b in zip(steady, steady[1:])],
        "steady": max(1, len(steady) - 1),
        "meter": meter,
    }


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


def _per_iteration(run: dict[str, Any], label: str) -> tuple[float, float]:
    own, children = run["meter"].cpu.get(label, (0.0, 0.0))
    return own / run["steady"], children / run["steady"]


def report(runs: list[dict[str, Any]], sizes: list[int]) -> None:
    rows: list[list[Any]] = [["stories", "K", "exit", "session ms", "wall/iter median", "min", "CPU/iter own",
                              "git (children)", "CPU total", "target", ""]]
    for r in runs:
        gaps = r["gaps"] or [r["run"] / r["iterations"]]
        own = statistics.median(c[0] for c in r["cpu"]) if r["cpu"] else 0.0
        children = statistics.median(c[1] for c in r["cpu"]) if r["cpu"] else 0.0
        target = TARGETS_MS.get(r["size"])
        total = (own + children) * 1000
        verdict = "" if target is None or RUNNER[0] != "noop" else ("met" if total <= target else "ABOVE")
        rows.append([f"{r['size']:,}", r["iterations"], r["exit"], ms(r["session"]), ms(statistics.median(gaps)),
                     ms(min(gaps)), ms(own), ms(children), f"{total:.1f}", f"{target:g}" if target else "-", verdict])
    table(rows)
    print("wall/iter = gap between consecutive iteration_started events; CPU/iter = this process's CPU time and its\n"
          "children's (git) between them (medians over the steady iterations: from the 2nd start on).  Exit 1 (max\n"
          "iterations reached) is expected: the noop agent changes nothing.  Target: CPU total per iteration.")
    print()
    print("the iteration's steps, measured in the run: CPU ms per iteration (own + git children) and git processes")
    header_row = ["step"] + [f"{size:,}: own + git (calls)" for size in sizes]
    rows = [header_row]
    for label, _ in STEPS + INSIDE:
        cells = []
        for r in runs:
            own, children = _per_iteration(r, label)
            calls = r["meter"].git_by_step.get(label, 0) / r["steady"]
            cells.append(f"{ms(own)} + {ms(children)} ({calls:.1f})")
        rows.append([label] + cells)
    totals = []
    for r in runs:
        counted = [_per_iteration(r, label) for label, _ in STEPS]
        own_sum, child_sum = sum(c[0] for c in counted), sum(c[1] for c in counted)
        own_all = sum(c[0] for c in r["cpu"]) / max(1, len(r["cpu"]))
        child_all = sum(c[1] for c in r["cpu"]) / max(1, len(r["cpu"]))
        totals.append((own_sum, child_sum, max(0.0, own_all - own_sum), max(0.0, child_all - child_sum)))
    rows.append(["sum of the steps"] + [f"{ms(t[0])} + {ms(t[1])}" for t in totals])
    rows.append(["rest (in no step above)"] + [f"{ms(t[2])} + {ms(t[3])}" for t in totals])
    table(rows)
    print()
    print("git processes per iteration, by command and the part of the loop that ran it (each after the .git checks)")
    keys = sorted({key for r in runs for key in r["meter"].git_calls},
                  key=lambda key: -sum(r["meter"].git_calls.get(key, 0) for r in runs))
    rows = [["git command", "run by"] + [f"{size:,}" for size in sizes]]
    for command, part in keys:
        rows.append([command, part] + [f"{r['meter'].git_calls.get((command, part), 0) / r['steady']:.1f}" for r in runs])
    rows.append(["all", ""] + [f"{sum(r['meter'].git_calls.values()) / r['steady']:.1f}" for r in runs])
    table(rows, left=(0, 1))


def main(argv: list[str]) -> None:
    sizes = list_arg(argv, "--sizes", SIZES)
    forced = int_arg(argv, "--iterations", 0)
    RUNNER[0] = argv[argv.index("--runner") + 1] if "--runner" in argv else "noop"
    if RUNNER[0] == "noop":
        header("loop overhead per iteration (agent excluded: in-process noop runner, replay agent)")
    else:
        header(f"loop overhead per iteration ({RUNNER[0]} runner: the replay agent's real process included)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    root = Path(tempfile.mkdtemp(prefix="ralph-bench-"))
    saved_env = {key: os.environ.get(key) for key in ("RALPH_STATE_DIR", "RALPH_REPLAY_SCRIPT")}
    try:
        script = root / "replay-script.json"
        # what the noop runner replays, for a real replay process (--runner direct)
        script.write_text(json.dumps({"iterations": {}, "default": [{"say": "Done."}]}), encoding="utf-8")
        os.environ["RALPH_STATE_DIR"] = str(root / "state")
        os.environ["RALPH_REPLAY_SCRIPT"] = str(script)
        runs = []
        projects = {}
        for size in sizes:
            projects[size] = make_project(root, size)
            time.sleep(2.1)  # past the .git check's 2-second window for directories just written (as in a real run)
            iterations = max(4, forced or DEFAULT_ITERATIONS.get(size, 10))
            outcome = run_loop(projects[size], iterations)
            outcome.update(size=size, iterations=iterations)
            runs.append(outcome)
        report(runs, sizes)
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
