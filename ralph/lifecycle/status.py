"""``ralph status``: what the last run in a project did, or is doing."""

from __future__ import annotations

import json
from pathlib import Path

from ralph.loop.rundir import latest_run, read_events


def show_status(project_dir: Path, as_json: bool = False, state_dir: str | None = None) -> str:
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    running = ProjectLock(git_dir(project_dir)).is_held()
    run_dir = latest_run(project_dir, state_dir)
    if run_dir is None:
        return "no ralph run recorded for this project yet (start one with `ralph run`)"
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else None
    events = read_events(run_dir)
    if as_json:
        return json.dumps({"run_dir": str(run_dir), "running": running, "summary": summary, "events": len(events)}, indent=2)
    if running:
        state = "running"
    elif summary is None:
        state = "stopped (no summary: the run was killed)"
    elif summary.get("exit_code") == 2:  # a plugin failure or an internal error stopped it
        state = f"stopped (exit 2): {summary.get('reason')}"
    else:
        state = "finished"
    lines = [f"run directory: {run_dir}", f"state: {state}"]
    started = [e for e in events if e.get("kind") == "iteration_started"]
    if started:
        last = started[-1]
        lines.append(
            f"last iteration: {last['iteration']}/{last['max_iterations']} {last['mode']} {last.get('story')} "
            f"(cost so far ${last.get('cost_so_far', 0):.4f})"
        )
    if started:
        lines += ["", "iterations (mode, story, agent and model):"]
        for event in started[-30:]:
            lines.append(f"  #{event['iteration']} {event['mode']} {event.get('story')} — {who_did(event)}")
    if summary:
        from ralph.loop.runreport import render_run_summary

        lines += ["", render_run_summary(summary)]
    return "\n".join(lines)


def who_did(event: dict) -> str:
    """``agent (model)`` of an ``iteration_started`` event ("claude (default model)" when none was chosen)."""
    agent = event.get("agent") or "?"
    model = event.get("model")
    return f"{agent} ({model})" if model else f"{agent} (default model)"
