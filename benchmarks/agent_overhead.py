"""Per-iteration overhead of the codex agent beside the claude agent, on the same scripted lifecycle.

Both real CLIs run the same scripted one-story lifecycle (implement → review with approval: two
iterations, three shell tool calls each) against ralph's scripted local model servers (the
Messages API for Claude Code, the Responses API for Codex), through ``ralph run --runner direct``
with every hook wired to the loop.  The model answers instantly, so what is measured is the
CLI's own work plus ralph's hooks: start-up, request building, tool execution, hook calls.

Reported per agent: each iteration's seconds (the loop's ``iteration_finished`` figure), the
mean per iteration, the hook calls the loop answered, and the codex/claude ratio of the means.

    python benchmarks/agent_overhead.py [--rounds 1]

Needs both CLIs (pip install claude-agent-sdk openai-codex-cli-bin); an agent whose CLI is missing
is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ralph.testing.model_server import IterationScript, ScriptedModelServer, claude_env
from ralph.testing.project import make_project, story
from ralph.testing.responses_server import ScriptedResponsesServer, codex_env
from ralph.testing.scripting import bash_turns, commit_command, set_fields_command


def lifecycle_script() -> IterationScript:
    implement = bash_turns(
        ["printf hello > hello.txt", set_fields_command("US-001", reviewStatus="needs_review"),
         commit_command("feat: [US-001] - implement")],
        say="Implemented US-001.",
    )
    approve = bash_turns(
        [set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
         "git status --short", commit_command("review: [US-001] - approved")],
        say="Approved. <promise>COMPLETE</promise>",
    )
    return IterationScript({1: implement, 2: approve})


def run_once(agent: str, root: Path) -> dict[str, object]:
    project = make_project(root)
    project.write_stories([story("US-001", "Greeting file")])
    home = root / "home"
    home.mkdir()
    script = lifecycle_script()
    server = (ScriptedModelServer if agent == "claude" else ScriptedResponsesServer)(script).start()
    try:
        env = claude_env(server.url, home) if agent == "claude" else codex_env(server.url, home)
        started = time.monotonic()
        result = project.run("run", "--runner", "direct", "--agent", agent, "--timeout", "300", "-q", env=env,
                             timeout=600)
        wall = time.monotonic() - started
    finally:
        server.stop()
    if result.returncode != 0:
        raise SystemExit(f"{agent}: the loop failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    seconds = [float(e["seconds"]) for e in project.events("iteration_finished")]
    hooks = len(project.events("hook"))
    return {"iterations": seconds, "wall": wall, "hook_answers": hooks, "requests": len(server.requests)}


def available(agent: str) -> bool:
    """Whether the agent's CLI is found (as the agent finds it: environment, PATH, its wheel)."""
    from ralph.api.agents import CLAUDE_CLI, CODEX_CLI

    return (CLAUDE_CLI if agent == "claude" else CODEX_CLI).locate()[0] is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="lifecycles per agent (default 1)")
    args = parser.parse_args()
    means: dict[str, float] = {}
    for agent in ("claude", "codex"):
        if not available(agent):
            print(f"{agent}: skipped (CLI not installed)")
            continue
        per_iteration: list[float] = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix=f"ralph-bench-{agent}-") as tmp:
                figures = run_once(agent, Path(tmp))
            per_iteration += figures["iterations"]  # type: ignore[arg-type]
            print(
                f"{agent}: iterations {', '.join(f'{s:.2f}s' for s in figures['iterations'])} | "  # type: ignore[union-attr]
                f"ralph run wall {figures['wall']:.2f}s | model requests {figures['requests']} | "
                f"hook calls answered with output {figures['hook_answers']}"
            )
        means[agent] = statistics.mean(per_iteration)
        print(f"{agent}: mean per iteration {means[agent]:.2f}s over {len(per_iteration)} iterations")
    if len(means) == 2:
        print(json.dumps({"codex_over_claude_per_iteration": round(means["codex"] / means["claude"], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
