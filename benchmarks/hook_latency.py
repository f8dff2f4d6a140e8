"""Latency of one agent-side hook call per Claude Code event, process start to JSON out.

Each call runs the hook command exactly as Claude Code does (a new process,
the event JSON on stdin) against a project whose task list has 1,000 stories:

- inside a loop: the stdlib client forwards to a running loop's hook server
  (a real ``Loop`` with its plugins and trusted state, mid-iteration);
- outside a loop (the plugin used interactively; Stop checks read
  ``.ralph-active``): through the per-user hook helper that the first call
  starts, and, for comparison, in-process with the helper turned off (with and
  without a bytecode cache).  The helper starts no program, so a Stop whose checks
  run ``git status`` is declined by it and answered in-process ("no loop, helper"
  Stop is the in-process figure plus one round trip).

Targets: median under 30 ms for PreToolUse and PostToolUse (25 ms for PreToolUse in a loop), under
60 ms for Stop.  Also measured: loading the bash grammar the guards parse with (once per loop or hook
helper process) and analysing a 1 KB command (target under 2 ms).

    python benchmarks/hook_latency.py [--runs 30] [--stories 1000] [--loop-only]

``--loop-only`` skips the calls outside a loop.  The "in the loop's process" rows time the
answer alone (what the guards and the Stop checks add on the loop's side), without the hook process's start.
"in loop" runs the client compiled into the run directory inside the fail-closed ``/bin/sh`` wrapper
(``ralph.hooks.wiring.fail_closed_command``), as ``ralph run`` wires it for a runner without a hook
command of its own; "in loop, source" runs ``client.py`` itself (wrapped), as sandbox runners do; "in
loop, no wrapper" is the compiled client alone, for the wrapper's cost.  "cpu ms" is the hook process's own CPU time (median), steadier than wall time on a busy machine.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import header, int_arg, ms, open_task_list, percentile, table  # noqa: E402

from ralph.hooks.wiring import compiled_hook_command, fail_closed_command, hook_command  # noqa: E402

EVENTS = {
    "SessionStart": {"source": "startup"},
    "UserPromptSubmit": {"prompt": "Ralph Loop iteration 1 of 15 ..."},
    "PreToolUse": {"tool_name": "Bash", "tool_input": {"command": "git status && pytest -q"}},
    "PreToolUse 1 KB": {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": ""}},
    "PostToolUse": {
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_response": {"stdout": "....\n4 passed in 0.12s\n", "stderr": "", "interrupted": False},
    },
    "Stop": {"stop_hook_active": False, "last_assistant_message": "done"},
}
# A realistic 1 KB command line: tests, a heredoc, a commit, pipelines, a loop (benign; only ever parsed).
COMMAND_1KB = (
    "cd \"$CLAUDE_PROJECT_DIR\" && python -m pytest -x -q tests/test_parser.py 2>&1 | tail -30 && "
    "cat > src/config.py <<'EOF'\nDEBUG = False\nLEVELS = ['info', 'warning', 'error']\nEOF\n"
    "for f in src/*.py; do python -m py_compile \"$f\" || echo \"bad: $f\"; done; "
    "grep -rn 'TODO' src tests | sort | uniq -c | sort -rn | head -20; "
    "find . -name '__pycache__' -type d -prune -exec rm -rf {} +; "
    "sed -i 's/old_name/new_name/g' src/app.py src/cli.py && "
    "git add src/app.py src/cli.py src/config.py tests/test_parser.py && "
    "git commit -m \"$(cat <<'EOF'\nUS-004: rename old_name to new_name\n\nKeeps the CLI flags unchanged.\nEOF\n)\" && "
    "git log --oneline -5 && git diff --stat HEAD~1 && "
    "if [ -f package.json ]; then npm test -- --watchAll=false 2>&1 | tail -20; fi; "
    "x=$(git rev-parse --short HEAD); echo \"built $x\" >> build/log.txt; "
    "ls -la build | wc -l; du -sh src tests | sort -h"
)
COMMAND_1KB = (COMMAND_1KB + "; " + "echo " + "x" * 1024)[:1024] if len(COMMAND_1KB) < 1024 else COMMAND_1KB

GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


def make_project(root: Path, stories: int) -> Path:
    from ralph.lifecycle.init import init_project

    project = root / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    init_project(project, name="bench")
    (project / "ralph" / "tasks.json").write_text(json.dumps(open_task_list(stories), indent=2) + "\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "bench"], cwd=project, check=True, env={**os.environ, **GIT_ENV})
    return project


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_calls(command: str, payload: dict, env: dict[str, str], cwd: Path, runs: int) -> tuple[list[float], str, list[float]]:
    """Wall times, the last output and the CPU times of ``runs`` calls (through ``sh -c``, as Claude Code
    runs hooks)."""
    data = json.dumps(payload).encode()
    times, cpu = [], []
    # one untimed call: bytecode caches, and (outside a loop) the hook helper's start
    subprocess.run(command, shell=True, input=data, capture_output=True, env=env, cwd=cwd)
    time.sleep(0.5)
    out = b""
    for _ in range(runs):
        cpu_before = _children_cpu()
        start = time.perf_counter()
        result = subprocess.run(command, shell=True, input=data, capture_output=True, env=env, cwd=cwd)
        times.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - cpu_before)
        out = result.stdout
    return times, out.decode()[:60], cpu


def main(argv: list[str]) -> None:
    runs = int_arg(argv, "--runs", 30)
    stories = int_arg(argv, "--stories", 1000)
    header(f"hook latency: one call per event, {stories}-story task list, {runs} runs each")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["RALPH_STATE_DIR"] = str(root / "state")
        project = make_project(root, stories)
        from ralph.loop.hookbridge import HookBridge
        from ralph.loop.records import IterationRecord
        from ralph.loop.rundir import new_run_dir
        from ralph.session import open_session

        with open(os.devnull, "w") as null:
            saved = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = null
            try:
                loop = open_session(project, {"runner": "direct", "agent": "replay"}).build_loop()
                os.environ.setdefault("RALPH_REPLAY_SCRIPT", str(root / "none.json"))
                (root / "none.json").write_text("{}")
                tasks = loop.preflight()
            finally:
                sys.stdout, sys.stderr = saved
        run_dir = loop.context.run_dir = new_run_dir(project, str(root / "state"))
        selection = loop.policy.select(tasks)
        assert selection is not None
        bridge = HookBridge(loop.context, run_dir, loop.state.marker)
        bridge.current = (selection, tasks, None)
        loop.state.write(run_dir, IterationRecord(1, selection.mode, selection.story_id), selection, tasks.snapshot())
        bridge.start()
        command = hook_command()
        # A normal install caches bytecode; one without a cache it can use (a read-only install that was
        # never compiled) compiles ralph in every hook process, so both are measured.  The hook runs with
        # -I, which ignores PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX: -B and -X pycache_prefix
        # (an empty directory) on its command line stand for that install.
        no_cache = command.replace(" -I -S ", f" -I -S -B -X pycache_prefix={shlex.quote(str(root / 'nopyc'))} ", 1)
        base_env = {
            k: v for k, v in os.environ.items() if not k.startswith("RALPH_HOOK") and k != "PYTHONDONTWRITEBYTECODE"
        }
        rows: list[tuple[str, ...]] = [("event", "where", "min ms", "median ms", "p90 ms", "cpu ms", "output")]
        try:
            runtime = root / "xdg-runtime"
            runtime.mkdir(mode=0o700)
            helper_env = {**base_env, "XDG_RUNTIME_DIR": str(runtime), "RALPH_HOOK_DAEMON_IDLE": "30"}
            alone = {**base_env, "RALPH_HOOK_DAEMON": "0"}
            in_loop = {**base_env, **bridge.channel(loop.tasks_path).env()}
            setups: tuple[tuple[str, str, dict[str, str]], ...] = (
                ("in loop", fail_closed_command(compiled_hook_command(run_dir)), in_loop),
                ("in loop, source", fail_closed_command(command), in_loop),
                ("in loop, no wrapper", compiled_hook_command(run_dir), in_loop),
                ("no loop, helper", command, helper_env),
                ("no loop, in-process", command, alone),
                ("no loop, in-process, no .pyc", no_cache, alone),
            )
            if "--loop-only" in argv:
                setups = setups[:3]
            rows.extend(answers_in_the_loop(bridge, project, runs))
            rows.extend(answers_beside_a_stall(bridge, project, runs))
            for where, hook, env in setups:
                for name, extra in EVENTS.items():
                    if name == "PreToolUse 1 KB":
                        if not where.startswith("in loop"):
                            continue
                        extra = {**extra, "tool_input": {"command": COMMAND_1KB}}
                    payload = {
                        "hook_event_name": name.split()[0],
                        "session_id": "bench",
                        "cwd": str(project),
                        "transcript_path": str(root / "none.jsonl"),
                        **extra,
                    }
                    env_here = {**env, "CLAUDE_PROJECT_DIR": str(project)}
                    times, out, cpu = time_calls(hook, payload, env_here, project, runs)
                    rows.append((name, where, ms(min(times)), ms(statistics.median(times)), ms(percentile(times, 0.9)),
                                 ms(statistics.median(cpu)), out or "{}"))
        finally:
            bridge.stop()
            loop.state.remove_marker()
        table(rows, left=(0, 1, 6))
        print("targets: PreToolUse in a loop median <= 25 ms, PreToolUse/PostToolUse < 30 ms, Stop < 60 ms")
        grammar_and_parse(runs, base_env)
        bounded_work(base_env)
        bare, _, bare_cpu = time_calls(f"{shlex.quote(sys.executable)} -S -P -c pass", {}, base_env, project, runs)
        print(f"for scale: bare `python -S -P -c pass` median {ms(statistics.median(bare))} ms "
              f"(min {ms(min(bare))}, cpu {ms(statistics.median(bare_cpu))})")


def answers_in_the_loop(bridge: object, project: Path, runs: int) -> list[tuple[str, ...]]:
    """The loop's own time to answer PreToolUse/PostToolUse/Stop (in-process: no hook process start)."""
    rows = []
    cases = (
        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "git status && pytest -q"}}),
        ("PreToolUse 1 KB", {"tool_name": "Bash", "tool_input": {"command": COMMAND_1KB}}),
        ("PostToolUse", EVENTS["PostToolUse"]),
        ("Stop", EVENTS["Stop"]),
    )
    for name, extra in cases:
        payload = {"hook_event_name": name.split()[0], "session_id": "bench", "cwd": str(project), **extra}
        request = {"payload": payload, "env": {"CLAUDE_PROJECT_DIR": str(project), "HOME": os.environ.get("HOME", "")}}
        bridge.answer(request)  # type: ignore[attr-defined]
        times = []
        for _ in range(runs * 10):
            start = time.perf_counter()
            out = bridge.answer(request)  # type: ignore[attr-defined]
            times.append(time.perf_counter() - start)
        rows.append((name, "in the loop's process", ms(min(times)), ms(statistics.median(times)),
                     ms(percentile(times, 0.9)), "", json.dumps(out)[:60] or "{}"))
    return rows


def grammar_and_parse(runs: int, env: dict[str, str]) -> None:
    """Loading tree-sitter and the bash grammar (fresh processes), and analysing a 1 KB command (in-process)."""
    from ralph.shell import analyze

    probe = (
        "import time; t = time.perf_counter(); import tree_sitter, tree_sitter_bash; t1 = time.perf_counter(); "
        "tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language())); t2 = time.perf_counter(); "
        "print((t1 - t) * 1e3, (t2 - t1) * 1e3)"
    )
    imports, builds = [], []
    for _ in range(max(5, runs // 3)):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
        a, b = out.stdout.split()
        imports.append(float(a) / 1e3)
        builds.append(float(b) / 1e3)
    analyze("true")  # grammar loaded once, as in the loop's hook server
    times, cpus = [], []
    for _ in range(runs * 10):
        start, cpu = time.perf_counter(), time.process_time()
        result = analyze(COMMAND_1KB, "/tmp", "/tmp")
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    assert result.unparseable is None and not result.opaque, (result.unparseable, result.opaque)
    rows = [
        ("what", "min ms", "median ms", "p90 ms"),
        ("import tree_sitter + tree_sitter_bash (new process)", ms(min(imports)), ms(statistics.median(imports)),
         ms(percentile(imports, 0.9))),
        ("build the bash parser", ms(min(builds)), ms(statistics.median(builds)), ms(percentile(builds, 0.9))),
        (f"analyze a {len(COMMAND_1KB)}-byte command", ms(min(times)), ms(statistics.median(times)),
         ms(percentile(times, 0.9))),
        ("  (its CPU time)", ms(min(cpus)), ms(statistics.median(cpus)), ms(percentile(cpus, 0.9))),
    ]
    table(rows, left=(0,))
    print("target: analysing a 1 KB command median <= 2 ms (grammar loading happens once per loop/helper process)")


# Inputs that made the guards do unbounded work before they had budgets (data only: checked, never run).
HEAVY = {
    "the issue's stall: 24 doublings, 200 chars": "a=x;" + "a=$a$a;" * 24 + "echo $a",
    "40,000 references to a 16 KB value": "a=" + "x" * 16_384 + "; echo " + "$a" * 40_000,
    "brace sequence {1..99999999}": "echo {1..99999999}",
    "10 nested 8-value for loops": "for a in 1 2 3 4 5 6 7 8; do " * 10 + "echo $a" + "; done" * 10,
    "eval of eval (4-way, 6 deep)": "a='eval $a;eval $a;eval $a;eval $a'; eval $a",
    "8,000-pipe pipeline left open": "x|" * 8000 + "x && '",
    "3,000 nested functions": "f(){ " * 3000 + "x" + "; }" * 3000,
    "sed script of 30,000 delimiters": "sed '" + "".join("s" + chr(0x4E00 + i) for i in range(30_000)) + "'",
    "awk: 16,000 prints": "awk '" + "print " * 16_000 + "'",
    "90 KB heredoc (ordinary)": "cat > f.py <<'EOF'\n" + "VALUES = [1, 2, 3]  # a | b\n" * 3200 + "EOF\n",
    # the guards' own path work: resolving, following symlinks, looking files up
    "95 KB: 32 cd, 8,000 ../x/.. paths": "cd src; " * 32 + "rm -f " + " ".join(f"../x{i}/.." for i in range(8000)),
    "89 KB: 6,000 src/N/../.. paths": "rm -f " + " ".join(f"src/{i}/../.." for i in range(6000)),
    "90 KB: 5,000 paths in the project": "rm -f " + " ".join(f"build/d{i}/x/../y" for i in range(5000)),
    "98 KB: one 49,000-level path": "echo x > " + "a/" * 49_000 + "f",
    "65 KB: 3,000 redirections": "; ".join(f"echo x > build/o{i}" for i in range(3000)),
    "29 KB: cp of 3,000 files (ordinary)": "cp " + " ".join(f"src/a{i}" for i in range(3000)) + " build/",
    "59 KB: rm of 6,000 files (ordinary)": "rm -f " + " ".join(f"src/f{i}" for i in range(6000)),
    "1 MB Write file_path": {"tool_name": "Write", "tool_input": {"file_path": "a/" * 500_000, "content": "x"}},
}
_PROBE = """
import json, resource, sys, tempfile, time
from pathlib import Path
from ralph.plugin.manager import PluginHost
from ralph.testing.hooks import make_event
import ralph_plugins.guards.dangerous_commands as dc
from contextlib import contextmanager

spent = []
original = dc.budget_scope
@contextmanager
def counting(limit):
    with original(limit) as budget:
        yield budget
        spent.append(budget.steps)
dc.budget_scope = counting
root = Path(tempfile.mkdtemp())
project = root / "proj"
for sub in ("src", "build", ".git"):
    (project / sub).mkdir(parents=True)
(project / ".git" / "HEAD").write_text("ref: refs/heads/feature\\n")
host = PluginHost(environ={})
def call(payload):
    event = make_event("PreToolUse", {**payload, "cwd": str(project)}, project, root / "state", loop=None,
                       environ={"HOME": str(root / "home")})
    return sorted({d.rule for r in host.pm.hook.ralph_pre_tool_use(event=event) for d in (r or [])})
call({"tool_name": "Bash", "tool_input": {"command": "true"}})
from ralph.shell import analyze
payload = json.loads(sys.stdin.read())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
spent.clear()
cpu, wall = time.process_time(), time.perf_counter()
rules = call(payload)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
command = payload["tool_input"].get("command")
steps = analyze(command, str(project), str(project)).steps if command is not None else 0
print(json.dumps([cpu, wall, (after - before) / 1024, before / 1024, steps, max(spent or [0]), rules]))
"""


def bounded_work(env: dict[str, str]) -> None:
    """Each input that once stalled the guards, checked by all of them in a fresh process (direct mode): CPU and
    wall time, peak memory growth, the analysis's and the guards' work units, the rules that denied it."""
    rows = [("input", "chars", "cpu ms", "wall ms", "peak RSS +MB", "analysis units", "guard units", "denied")]
    base = 0.0
    for name, given in HEAVY.items():
        payload = given if isinstance(given, dict) else {"tool_name": "Bash", "tool_input": {"command": given}}
        size = len(json.dumps(payload["tool_input"]))
        out = subprocess.run([sys.executable, "-P", "-c", _PROBE], input=json.dumps(payload), capture_output=True,
                             text=True, env=env, check=True)
        cpu, wall, grown, base, steps, guard_steps, rules = json.loads(out.stdout)
        rows.append((name, str(size), ms(cpu), ms(wall), f"{grown:.1f}", str(steps), str(guard_steps),
                     ", ".join(rules) or "-"))
    table(rows, left=(0, 7))
    print(f"(each in a fresh process whose peak RSS was {base:.0f} MB before the call; the budgets are "
          "ralph.shell.budget.MAX_STEPS units for the analysis and dangerous_commands.CHECK_STEPS for the guards' "
          "own path work; target: every one well under a second, memory bounded)")


def answers_beside_a_stall(bridge: object, project: Path, runs: int) -> list[tuple[str, ...]]:
    """An ordinary PreToolUse answered while another thread answers the issue's stalling command."""
    import threading

    def payload(command: str) -> dict[str, object]:
        return {"payload": {"hook_event_name": "PreToolUse", "session_id": "bench", "cwd": str(project),
                            "tool_name": "Bash", "tool_input": {"command": command}},
                "env": {"CLAUDE_PROJECT_DIR": str(project), "HOME": os.environ.get("HOME", "")}}

    stall = payload(str(next(iter(HEAVY.values()))))
    ordinary = payload("git status && pytest -q")
    times, stalls = [], []
    for _ in range(runs):
        def answer_stall() -> None:
            start = time.perf_counter()
            bridge.answer(stall)  # type: ignore[attr-defined]
            stalls.append(time.perf_counter() - start)

        worker = threading.Thread(target=answer_stall)
        worker.start()
        start = time.perf_counter()
        bridge.answer(ordinary)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - start)
        worker.join()
    return [
        ("PreToolUse (stall)", "in the loop's process", ms(min(stalls)), ms(statistics.median(stalls)),
         ms(percentile(stalls, 0.9)), "", "the issue's stalling command"),
        ("PreToolUse beside it", "in the loop's process", ms(min(times)), ms(statistics.median(times)),
         ms(percentile(times, 0.9)), "", "answered while the stall is checked"),
    ]


if __name__ == "__main__":
    main(sys.argv[1:])
