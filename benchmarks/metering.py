"""What the loop's model meter adds: per model call, per iteration, and to start a run.

* per call: the same streamed Messages request (a Claude-Code-sized body, ~100 KB) sent to the
  scripted model server directly and through the meter, alternated, over one keep-alive
  connection each (as the CLI holds one): full response time and time to the first byte;
* per iteration: the real Claude Code CLI running a four-turn scripted session (three Bash tool
  calls) with ``ANTHROPIC_BASE_URL`` at the server and at a meter session, alternated;
* start-up: importing the meter's stack and starting it, in a fresh interpreter.

    python benchmarks/metering.py [--calls 200] [--runs 5]

The iteration part needs the real CLI (pip install claude-agent-sdk); without it, it is skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ralph.metering import ModelMeter
from ralph.testing.model_server import ScriptedModelServer, SequenceScript, Turn, claude_env, text, tool

TARGET_PER_CALL_MS = 5.0
TARGET_PER_ITERATION_MS = 50.0


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.2f} ms (min {min(values) * 1000:.2f})"


def per_call(calls: int) -> None:
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 4096, "stream": True,
            "system": "s" * 20_000, "tools": [{"name": f"t{i}", "description": "d" * 2000} for i in range(30)],
            "messages": [{"role": "user", "content": "hello " * 2000}]}
    reply = Turn([text("word " * 300), tool("Bash", {"command": "ls -la " * 20})])
    with ScriptedModelServer(lambda request: reply) as server, ModelMeter() as meter:
        session = meter.open_session("bench", server.url)
        results: dict[str, tuple[list[float], list[float]]] = {"direct": ([], []), "metered": ([], [])}
        with httpx.Client(timeout=30) as direct, httpx.Client(timeout=30) as metered:
            for i in range(calls + 5):
                for name, client, base in (("direct", direct, server.url), ("metered", metered, session.url)):
                    started = time.perf_counter()
                    first = None
                    with client.stream("POST", f"{base}/v1/messages?beta=true", json=body,
                                       headers={"x-api-key": "k"}) as response:
                        for _ in response.iter_raw():
                            first = first or time.perf_counter()
                    if i >= 5:  # warm-up
                        results[name][0].append(time.perf_counter() - started)
                        results[name][1].append((first or time.perf_counter()) - started)
        usage = meter.close_session(session)
    print(f"per call ({calls} alternated, {len(str(body)) // 1024} KB request, streamed reply):")
    for name, (total, first) in results.items():
        print(f"  {name:8s} total {ms(total)}; first byte {ms(first)}")
    added = statistics.median(results["metered"][0]) - statistics.median(results["direct"][0])
    floor = min(results["metered"][0]) - min(results["direct"][0])
    print(f"  added per call: median {added * 1000:.2f} ms, min {floor * 1000:.2f} ms (target <= {TARGET_PER_CALL_MS} ms: "
          f"{'met' if added * 1000 <= TARGET_PER_CALL_MS else 'NOT met'}); booked {usage.requests} calls, "
          f"{sum(usage.usage.values())} tokens")


def per_iteration(runs: int) -> None:
    from ralph.claude_cli import resolve_binary

    binary = resolve_binary()[0]
    if binary is None:
        print("per iteration: skipped: the real Claude Code CLI was not found")
        return
    turns = [Turn([tool("Bash", {"command": f"echo step {n}"})]) for n in range(3)] + [Turn([text("done")])]
    times: dict[str, list[float]] = {"direct": [], "metered": []}
    with ScriptedModelServer(SequenceScript(turns)) as server, ModelMeter() as meter:
        for _ in range(runs):
            for name in ("direct", "metered"):
                session = meter.open_session("bench", server.url) if name == "metered" else None
                with tempfile.TemporaryDirectory() as home:
                    env = {**os.environ, **claude_env(session.url if session else server.url, Path(home))}
                    started = time.perf_counter()
                    subprocess.run([str(binary), "-p", "go", "--output-format", "stream-json", "--verbose",
                                    "--dangerously-skip-permissions"], env=env, cwd=home, capture_output=True,
                                   check=True, timeout=300)
                    times[name].append(time.perf_counter() - started)
                if session is not None:
                    meter.close_session(session)
    print(f"per iteration (real CLI, 4 model calls, {runs} alternated runs):")
    for name, values in times.items():
        print(f"  {name:8s} {ms(values)}")
    added = statistics.median(times["metered"]) - statistics.median(times["direct"])
    print(f"  added per iteration: median {added * 1000:.1f} ms, min {(min(times['metered']) - min(times['direct'])) * 1000:.1f} ms (target <= {TARGET_PER_ITERATION_MS:g} ms: "
          f"{'met' if added * 1000 <= TARGET_PER_ITERATION_MS else 'NOT met'}; the CLI's own run varies by more)")


def start_up(runs: int) -> None:
    code = ("import time; t=time.perf_counter(); from ralph.metering import ModelMeter; m=ModelMeter().start(); "
            "print(time.perf_counter()-t); m.stop()")
    values = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        values.append(float(out.stdout.strip().splitlines()[-1]))
    print(f"start-up (import uvicorn, starlette, httpx; bind; serve), once per run, {runs} runs: {ms(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    per_call(args.calls)
    start_up(args.runs)
    per_iteration(args.runs)


if __name__ == "__main__":
    main()
