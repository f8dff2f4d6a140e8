"""``ralph status``: what the last run in a project did, or is doing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ralph.loop.gateoutput import why_lines
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
    from dataclasses import asdict

    from ralph.questions import load_book

    book = load_book(project_dir, state_dir)
    from ralph.lifecycle.spending import fold_spending

    spending = fold_spending([events], summary.get("stories") if summary else None)
    if as_json:
        return json.dumps({"run_dir": str(run_dir), "running": running, "summary": summary, "events": len(events),
                           "questions": [asdict(q) for q in book.open()], "spending": spending.as_dict(),
                           "quota_used": quota_use(events).summary()}, indent=2)
    if running:
        state = "running"
    elif summary is None:
        state = "stopped (no summary: the run was killed)"
    elif summary.get("exit_code") == 2:  # a plugin failure or an internal error stopped it
        state = f"stopped (exit 2): {summary.get('reason')}"
    else:
        state = f"finished: {summary.get('reason')}" if summary.get("reason") else "finished"
    lines = [f"run directory: {run_dir}", f"state: {state}", *question_lines(book.open())]
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
    lines += usage_lines(events)
    lines += spending.lines()
    lines += quota_lines(events)
    why = why_lines(events)
    if why:
        lines += ["", "why gates failed (the output's first and last lines; the rest is in the file named):", *why]
    if summary:
        from ralph.loop.runreport import render_run_summary

        lines += ["", render_run_summary(summary)]
    lines += saved_work_lines(run_dir)
    return "\n".join(lines)


def question_lines(questions: list[Any]) -> list[str]:
    """The questions waiting for a person: story, when, the question (the agent's words, quoted), what the
    agent was doing, and the command that answers."""
    from ralph.agenttext import one_line, quote

    if not questions:
        return []
    lines = ["", "waiting for a person (the agent's questions; answer each with `ralph answer STORY \"ANSWER\"`):"]
    for entry in questions:
        title = entry.context.get("title") if isinstance(entry.context, dict) else ""
        lines.append(f"  {entry.story}{' ' + quote(title, 80) if title else ''}: iteration {entry.iteration} "
                     f"({one_line(entry.mode)}), asked {one_line(entry.asked_at)}")
        lines.append(f"    question: {quote(entry.question, 2000)}")
        tools = entry.context.get("tools") if isinstance(entry.context, dict) else None
        if isinstance(tools, list) and tools:
            lines.append("    the agent was doing: " + "; ".join(quote(t, 120) for t in tools[-3:]))
        lines.append(f'    answer: ralph answer {entry.story} "ANSWER"')
    return lines


def quota_use(events: list[dict]) -> Any:
    """The run's use of a subscription's windows, folded from its ``model_request`` events (as the loop does)."""
    import datetime as dt

    from ralph.loop.quota import QuotaUse

    use = QuotaUse()
    for event in events:
        if event.get("kind") == "model_request" and event.get("quota"):
            try:
                now = dt.datetime.fromisoformat(str(event.get("ts"))).timestamp()
            except ValueError:
                continue
            use.add(event["quota"], now)
    return use


def quota_lines(events: list[dict]) -> list[str]:
    """``5-hour window: 12.0% used by this run (now 43%)``, per window the API reported (subscriptions only)."""
    lines = quota_use(events).lines()
    return ["", "subscription usage windows (from the API's figures):", *(f"  {line}" for line in lines)] if lines else []


def who_did(event: dict) -> str:
    """``agent (model)`` of an ``iteration_started`` event ("claude (default model)" when none was chosen)."""
    agent = event.get("agent") or "?"
    model = event.get("model")
    return f"{agent} ({model})" if model else f"{agent} (default model)"


def saved_work_lines(run_dir: Path) -> list[str]:
    """Where the run's copies of stashed / rolled-back work are, and the command that restores each."""
    from ralph.loop.savedwork import restore_command, saved_work

    entries = saved_work(run_dir)
    if not entries:
        return []
    lines = ["", "saved work (outside the project, safe from `git stash clear` and `git gc`):"]
    for entry in entries:
        lines.append(f"  {entry['number']}. {entry['what']}: {entry['patch']}")
        lines.append(f"     restore: ralph restore {run_dir.name} {entry['number']}   (or: {restore_command(entry)})")
    return lines


def run_with_saved_work(project_dir: Path, name: str | None, state_dir: str | None = None) -> Path:
    """The run directory called ``name``, or the latest run that saved work."""
    from ralph.errors import UsageError
    from ralph.loop.rundir import runs_dir
    from ralph.loop.savedwork import saved_work

    parent = runs_dir(project_dir, state_dir)
    if name:
        path = parent / name
        if not path.is_dir():
            raise UsageError(f"no run {name!r} in {parent} (`ralph status` names the latest run)")
        return path
    runs = sorted((p for p in parent.iterdir() if p.is_dir()), reverse=True) if parent.is_dir() else []
    for path in runs:
        if saved_work(path):
            return path
    raise UsageError("no run of this project saved any work (nothing was stashed or rolled back)")


def usage_lines(events: list[dict]) -> list[str]:
    """Per iteration and per story: the tokens the agent reported (from ``iteration_finished``)."""
    from ralph.lifecycle.tables import USAGE_COLUMNS, aligned_rows, usage_cells, usage_of

    finished = [e for e in events if e.get("kind") == "iteration_finished" and isinstance(e.get("usage"), dict)]
    if not finished:
        return []
    per_story: dict[str, dict[str, int]] = {}
    rows: list[tuple[str, ...]] = [("iteration", "mode", "story", *USAGE_COLUMNS)]
    for event in finished:
        usage = usage_of(event["usage"])
        rows.append((f"#{event.get('iteration')}", str(event.get("mode")), str(event.get("story") or "-"), *usage_cells(usage)))
        story = per_story.setdefault(str(event.get("story") or "-"), {})
        for name, value in usage.items():
            story[name] = story.get(name, 0) + value
    stories: list[tuple[str, ...]] = [("story", *USAGE_COLUMNS)] + [(sid, *usage_cells(usage)) for sid, usage in per_story.items()]
    return ["", "tokens the agent reported (input / cache read / cache write / output):", *aligned_rows(rows), *aligned_rows(stories)]
