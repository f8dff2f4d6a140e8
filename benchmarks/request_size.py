"""What ralph makes the agent send: bytes of the first API request of each iteration, per mode.

Part 1 runs a two-story lifecycle through the **real Claude Code CLI** against ralph's scripted
model server (``ralph.testing.model_server``), which records every request body:

    1 implement US-001   2 review (changes requested)   3 review-fix   4 review (approve)
    5 implement US-002   6 review (approve)

For the first request of each iteration (the one before any tool call) it prints the body's
bytes split into ``tools`` (the tool definitions), ``system`` (the system prompt), ``messages``
(the conversation: ralph's prompt plus what the CLI adds) and, inside the messages, ralph's own
prompt (the ``iteration-NNN.prompt.md`` the loop wrote), plus the number of tools and their
names.  The CLI resends this prefix with every turn, so it is the per-turn floor of an
iteration's input.  Then the usage the CLI reported for each iteration (stream-json ``result``
event: input, cache read, cache write, output tokens; the scripted server estimates ~4 bytes per
token and simulates prompt caching of the tools + system prefix, so these are not a real model's
counts, but they show where the input goes).

Part 2 renders ralph's prompt in-process (no agent) for each mode with a two-story task list and
with a 1,000-story task list whose progress log holds 200 entries, and prints the growth.

    python benchmarks/request_size.py [--keep]

Targets: ralph's prompt <= 6 KB per mode; first request <= 40 KB in implement mode and <= 30 KB
in review mode; prompt bytes at 1,000 stories / 200 progress entries within 20% of the
two-story figure.  ``--keep`` leaves the temporary project and run directory for inspection.
Prints ``skipped: ...`` and exits 0 when no Claude Code CLI is found (part 2 still runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, mixed_task_list, table  # noqa: E402

PROMPT_TARGET = 6 * 1024
REQUEST_TARGET = {"implement": 40 * 1024, "review": 30 * 1024}
GROWTH_TARGET = 0.20

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def two_stories() -> list[dict[str, Any]]:
    base = {"priority": 1, "passes": False, "reviewStatus": None, "reviewCount": 0, "reviewFeedback": "",
            "notes": "", "dependsOn": []}  # fmt: skip
    return [
        {**base, "id": "US-001", "title": "greet() says hello",
         "description": "A greet(name) function for the welcome banner.",
         "acceptanceCriteria": ['greet("Ada") returns "Hello, Ada!"', "greet has type hints and a docstring"]},
        {**base, "id": "US-002", "title": "farewell() says goodbye", "priority": 2, "dependsOn": ["US-001"],
         "description": "A farewell(name) function for the logout page.",
         "acceptanceCriteria": ['farewell("Ada") returns "Goodbye, Ada!"']},
    ]  # fmt: skip


def lifecycle_steps() -> dict[int, tuple[list[str], str]]:
    """Per iteration: the shell steps the scripted model takes, and what it says at the end."""
    from ralph.testing.scripting import commit_command, set_fields_command

    def note(n: int, mode: str, sid: str, what: str) -> str:
        return f'printf "\\n## Iteration {n} - {mode} - {sid}\\n- {what}\\n---\\n" >> ralph/progress.txt'

    greet = "def greet(name):\n    return 'Hello ' + name\n"
    fixed = "def greet(name: str) -> str:\n    \"\"\"Greet.\"\"\"\n    return f'Hello, {name}!'\n"
    bye = "def farewell(name: str) -> str:\n    return f'Goodbye, {name}!'\n"
    feedback = "1. greet.py: greet('Ada') returns 'Hello Ada' (missing comma and '!'). 2. Add type hints."
    return {
        1: ([f"printf %s {json.dumps(greet)} > greet.py", set_fields_command("US-001", reviewStatus="needs_review"),
             note(1, "implement", "US-001", "added greet.py"), commit_command("feat: [US-001] - greet() says hello")],
            "Implemented US-001."),
        2: ([set_fields_command("US-001", reviewStatus="changes_requested", reviewCount=1, reviewFeedback=feedback),
             note(2, "review", "US-001", "changes requested"), commit_command("review: [US-001] - changes requested")],
            "Changes requested."),
        3: ([f"printf %s {json.dumps(fixed)} > greet.py",
             set_fields_command("US-001", reviewStatus="needs_review", reviewFeedback=""),
             note(3, "review-fix", "US-001", "fixed"), commit_command("fix: [US-001] - address review feedback")],
            "Fixed."),
        4: ([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=2, notes="verified"),
             note(4, "review", "US-001", "approved"), commit_command("review: [US-001] - approved")],
            "Approved."),
        5: ([f"printf %s {json.dumps(bye)} > bye.py", set_fields_command("US-002", reviewStatus="needs_review"),
             note(5, "implement", "US-002", "added bye.py"), commit_command("feat: [US-002] - farewell() says goodbye")],
            "Implemented US-002."),
        6: ([set_fields_command("US-002", reviewStatus="approved", passes=True, reviewCount=1, notes="verified"),
             note(6, "review", "US-002", "approved"), commit_command("review: [US-002] - approved")],
            "Approved. <promise>COMPLETE</promise>"),
    }  # fmt: skip


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def make_project(root: Path, stories: list[dict[str, Any]]) -> Path:
    from ralph.lifecycle.init import init_project

    project = root / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    init_project(project, name="bench")
    tasks_path = project / "ralph" / "tasks.json"
    data = json.loads(tasks_path.read_text(encoding="utf-8"))
    data["userStories"] = stories
    tasks_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "ralph init")
    return project


def kb(n: float) -> str:
    return f"{n / 1024:.1f}"


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode()) if value is not None else 0


# -- part 1: the real CLI ------------------------------------------------------------------


def through_cli(root: Path) -> int:
    from ralph.testing.model_server import IterationScript, ScriptedModelServer, claude_env
    from ralph.testing.scripting import bash_turns
    from ralph.claude_cli import resolve_binary

    binary, source = resolve_binary()
    if binary is None:
        print("skipped: no Claude Code CLI found (pip install claude-agent-sdk)")
        return 0
    print(f"claude: {binary} (via {source})")
    project = make_project(root, two_stories())
    steps = lifecycle_steps()
    script = IterationScript({n: bash_turns(cmds, say) for n, (cmds, say) in steps.items()})
    home = root / "home"
    home.mkdir()
    state = root / "state"
    with ScriptedModelServer(script, cache=True) as server:
        env = {**os.environ, **GIT_ENV, **claude_env(server.url, home), "RALPH_STATE_DIR": str(state),
               "RALPH_HOOK_DAEMON_IDLE": "5"}  # fmt: skip
        command = [sys.executable, "-P", "-m", "ralph", "run", "--runner", "direct", "--agent", "claude",
                   "--timeout", "180", "-n", "10", "-q"]  # fmt: skip
        result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900)
        requests = server.requests
    runs = sorted((state / "projects").glob("*/runs/*"))
    if result.returncode != 0 or not runs:
        print(f"the lifecycle run failed (exit {result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        return 1
    run_dir = runs[-1]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines() if line]
    modes = {e["iteration"]: e["mode"] for e in events if e.get("kind") == "iteration_started"}

    rows = [["it", "mode", "request", "tools", "system", "messages", "ralph prompt", "n tools"]]
    firsts: dict[int, Any] = {}
    for request in requests:
        key = script.key_of(request)
        if key is not None and key not in firsts and request.assistant_turns == 0:
            firsts[key] = request
    per_mode: dict[str, list[tuple[int, int]]] = {}
    tool_names: dict[str, list[str]] = {}
    for number in sorted(modes):
        request = firsts.get(number)
        prompt_path = run_dir / f"iteration-{number:03d}.prompt.md"
        if request is None or not prompt_path.is_file():
            print(f"iteration {number}: no first request recorded")
            return 1
        prompt = prompt_path.read_text(encoding="utf-8")
        body = request.body
        tools = body.get("tools") or []
        total = len(request.text.encode())
        mode = modes[number]
        if prompt.strip()[:200] not in json.dumps(body.get("messages"), ensure_ascii=False).replace("\\n", "\n"):
            print(f"note: iteration {number}: ralph's prompt not found verbatim in the request's messages")
        rows.append([str(number), mode, kb(total), kb(size(tools)), kb(size(body.get("system"))),
                     kb(size(body.get("messages"))), kb(len(prompt.encode())), str(len(tools))])  # fmt: skip
        per_mode.setdefault(mode, []).append((total, len(prompt.encode())))
        tool_names[mode] = sorted(t.get("name", "?") for t in tools if isinstance(t, dict))
    print("\nFirst API request of each iteration (KB; 'messages' includes ralph's prompt):")
    table(rows, left=(1,))
    print("\nTools offered per mode:")
    for mode, names in tool_names.items():
        print(f"  {mode:<11} {', '.join(names)}")

    print("\nAgent usage per iteration (stream-json result; scripted server: ~4 bytes/token, simulated cache):")
    urows = [["it", "mode", "input", "cache read", "cache write", "output", "turns"]]
    for e in events:
        if e.get("kind") == "agent_event" and e.get("type") == "result":
            usage = (e.get("data") or {}).get("usage") or {}
            urows.append([str(e["iteration"]), modes.get(e["iteration"], "?"), str(usage.get("input_tokens", "-")),
                          str(usage.get("cache_read_input_tokens", "-")), str(usage.get("cache_creation_input_tokens", "-")),
                          str(usage.get("output_tokens", "-")), str((e.get("data") or {}).get("num_turns", "-"))])  # fmt: skip
    table(urows, left=(1,))

    print("\nTargets (largest first request / prompt per mode):")
    for mode, figures in per_mode.items():
        biggest = max(t for t, _ in figures)
        prompt_max = max(p for _, p in figures)
        target = REQUEST_TARGET.get(mode.replace("review-fix", "implement"))
        verdict = "" if target is None else f" (target <= {kb(target)} KB: {'met' if biggest <= target else 'NOT met'})"
        print(f"  {mode:<11} request {kb(biggest)} KB{verdict}; ralph prompt {kb(prompt_max)} KB "
              f"(target <= {kb(PROMPT_TARGET)} KB: {'met' if prompt_max <= PROMPT_TARGET else 'NOT met'})")
    return 0


# -- part 2: prompt bytes at scale, rendered in-process -----------------------------------------


def progress_entries(count: int) -> str:
    entries = []
    for n in range(1, count + 1):
        entries.append(
            f"\n## 2026-01-{n % 28 + 1:02d} 10:{n % 60:02d} - Iteration {n} - implement - US-{n:06d}: Story number {n}\n"
            f"- What was done: implemented feature {n} in src/feature_{n}.py with tests in tests/test_feature_{n}.py\n"
            f"- Files changed: src/feature_{n}.py, tests/test_feature_{n}.py, ralph/tasks.json, ralph/progress.txt\n"
            "- Verification: pytest -q passed (all tests); ruff check passed\n"
            f"- Learnings for future iterations: feature {n} reuses the helper in src/common.py; keep it pure\n"
            "---\n"
        )
    return "".join(entries)


def render_modes(root: Path, name: str, data: dict[str, Any], progress_extra: str) -> dict[str, int]:
    from ralph.contracts import Selection
    from ralph.session import open_session

    project = root / name
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    from ralph.lifecycle.init import init_project

    init_project(project, name="bench")
    (project / "ralph" / "tasks.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    with (project / "ralph" / "progress.txt").open("a", encoding="utf-8") as handle:
        handle.write(progress_extra)
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "init")
    loop = open_session(project, {"runner": "direct", "agent": "replay"}).build_loop()
    tasks = loop.store.parse(loop.tasks_path.read_text(encoding="utf-8"), loop.tasks_path)
    wanted = {"implement": lambda s: not s.passes and s.reviewStatus is None,
              "review": lambda s: s.reviewStatus == "needs_review",
              "review-fix": lambda s: s.reviewStatus == "changes_requested"}  # fmt: skip
    sizes = {}
    for mode, match in wanted.items():
        story = next(s for s in tasks.userStories if match(s))
        selection = Selection(mode, story.id, "benchmark")  # type: ignore[arg-type]
        sizes[mode] = len(loop.render(1, selection, tasks, []).encode())
    return sizes


def at_scale(root: Path) -> None:
    from _common import story

    small = mixed_task_list(3)
    small["userStories"] = [story(0), story(1, reviewStatus="needs_review"),
                            story(2, reviewStatus="changes_requested", reviewCount=1,
                                  reviewFeedback="Handle the empty case.")]  # fmt: skip
    big = mixed_task_list(1000)
    small_sizes = render_modes(root, "small", small, progress_entries(2))
    big_sizes = render_modes(root, "big", big, progress_entries(200))
    print("\nralph's rendered prompt (KB): 3 stories + 2 progress entries vs 1,000 stories + 200 entries")
    rows = [["mode", "small", "1,000 / 200", "growth", f"target <= {GROWTH_TARGET:.0%}"]]
    for mode in small_sizes:
        growth = big_sizes[mode] / small_sizes[mode] - 1
        rows.append([mode, kb(small_sizes[mode]), kb(big_sizes[mode]), f"{growth:+.1%}",
                     "met" if growth <= GROWTH_TARGET else "NOT met"])  # fmt: skip
    table(rows)
    print(f"(progress.txt: {kb(len(progress_entries(200).encode()))} KB of entries; tasks.json: "
          f"{kb(len(json.dumps(big, indent=2).encode()))} KB)")


def main(argv: list[str]) -> int:
    header("request size: what ralph makes the agent send")
    root = Path(tempfile.mkdtemp(prefix="ralph-bench-request-"))
    try:
        (root / "cli").mkdir()
        code = through_cli(root / "cli")
        at_scale(root)
        return code
    finally:
        if "--keep" in argv:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
