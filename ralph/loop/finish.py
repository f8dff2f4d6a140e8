"""The end of a run: its summary and report files, the end marker, ``run_finished``.

Every way a run ends (complete, a limit, interrupted, stopped by a broken plugin or an
internal error) goes through :func:`finish_run`, so ``ralph status`` / ``ralph report``
and the next run's ``--resume`` check always find the same files.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.fsutil import atomic_write_text
from ralph.loop.records import (
    EXIT_EXHAUSTED,
    EXIT_FAILED_STORIES,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_WAITING,
    IterationRecord,
    RunResult,
    total_usage,
)
from ralph.loop.runreport import summary_stories

if TYPE_CHECKING:
    from ralph.contracts import Policy
    from ralph.loop.gates import GateKeeper
    from ralph.loop.taskfile import TaskFile
    from ralph.tasks import TaskList


def finish_run(
    exit_code: int,
    reason: str,
    tasks: TaskList,
    *,
    records: list[IterationRecord],
    cost: float,
    elapsed: float,
    max_iterations: int,
    run_dir: Path | None,
    keeper: GateKeeper,
    taskfile: TaskFile,
    dir_arg: str,
    stash_message: str | None,
    interrupt_signal: int | None,
    emit: Callable[..., None],
    quota_used: dict[str, Any] | None = None,
    project_dir: Path | None = None,
) -> RunResult:
    """Write the summary and report (when there is a run directory), the end marker; emit ``run_finished``.

    An interrupted run that a SIGTERM stopped ends with 143, not 130.  What is left uncommitted in
    ``project_dir`` (an iteration whose agent failed commits nothing) goes into the summary and the end
    marker as ``left_uncommitted``, so the console and the next run's refusal can say where it came from.
    """
    if exit_code == EXIT_INTERRUPTED and interrupt_signal == signal.SIGTERM:
        exit_code, reason = EXIT_TERMINATED, f"{reason} (SIGTERM)"
    result = RunResult(exit_code, reason, run_dir, records, cost, tasks)
    stories = summary_stories(tasks, keeper.loop.policy)
    summary: dict[str, Any] = {
        "exit_code": exit_code,
        "reason": reason,
        "iterations": len(records),
        "max_iterations": max_iterations,
        "cost_usd": round(cost, 6),
        "usage": total_usage(records),
        "elapsed": round(elapsed, 3),
        "stories": stories,
        "records": [record.__dict__ for record in records],
        "metering": {**metering_summary(records), "quota_used": quota_used or {}},
    }
    from ralph.loop.runreport import build_run_report, render_run_report

    report = build_run_report(tasks, keeper, reason, exit_code, task_file=taskfile.path.name, dir_arg=dir_arg)
    summary["report"] = report
    if stash_message:
        summary["stash"] = stash_message
    left = left_uncommitted(project_dir)
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        summary["left_uncommitted"] = left
        summary["left_uncommitted_note"] = (
            f"left uncommitted: {shown} (the agent's: an iteration that failed or was stopped commits nothing); the "
            f"next `ralph run` starts only on a clean tree: {LEFT_UNCOMMITTED_FIX}"
        )
    if run_dir is not None:
        atomic_write_text(run_dir / "report.json", json.dumps(report, indent=2))
        atomic_write_text(run_dir / "report.md", render_run_report(report))
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    keeper.last_run.record({"run_dir": str(run_dir), "exit_code": exit_code, "reason": reason, "tasks_sha256": taskfile.sha256(),
                            "left_uncommitted": left})
    emit("run_finished", **summary)
    return result


def left_uncommitted(project_dir: Path | None) -> list[str]:
    """The paths ``git status`` lists in ``project_dir`` (empty when it cannot tell)."""
    if project_dir is None:
        return []
    from ralph.gitutil import dirty_paths

    try:
        return [line[3:] for line in dirty_paths(project_dir)]
    except Exception:  # noqa: BLE001 - the run's end is written whatever git says
        return []


LEFT_UNCOMMITTED_FIX = (
    "look at them (`git status`, `git diff`), then keep them (`git add -A && git commit`) or set them aside "
    "(`git stash -u`; `git stash pop` brings them back), and `ralph run` again"
)
"""What to do with the uncommitted changes a run left, said at its end and by the next run's refusal."""


def metering_summary(records: list[IterationRecord]) -> dict[str, Any]:
    """How the run's cost was known: iterations metered from the model traffic, what the agents' own
    output claimed (display only), and the subscription windows the API last reported (docs/metering.md)."""
    quota = next((r.quota for r in reversed(records) if r.quota), {})
    return {
        "metered_iterations": sum(1 for r in records if r.metered),
        "reported_cost_usd": round(sum(r.reported_cost for r in records), 6),
        "model_requests": sum(r.model_requests for r in records),
        "quota": quota,
    }


def unselectable_end(tasks: TaskList, policy: Policy | bool, questions: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Exit code and reason when no story can be selected: failed stories (3), stories waiting for a
    person's answer (8), else why the policy selects none (1).

    ``policy`` says why (:meth:`Policy.unselectable_reason`); a bool is the older form (uses a review cycle).
    ``questions`` maps waiting stories to their question (quoted), for the reason.
    """
    from ralph.loop.start import unselectable_reason
    from ralph.tasks import blocked_reason

    failed = [s.id for s in tasks.userStories if s.failed]
    parked = [s.id for s in tasks.userStories if s.waiting and not s.done]
    waiting = [s for s in tasks.userStories if not s.passes and not s.failed and not s.waiting]
    asked = "; ".join(f"{sid} asked {(questions or {}).get(sid, '(see ralph status)')}" for sid in parked)
    if failed:
        reason = f"finished with failed stories: {', '.join(failed)}"
        if parked:
            reason += f"; waiting for a person: {asked}"
        if waiting:
            reason += f"; blocked: {blocked_reason(tasks, waiting)}"
        return EXIT_FAILED_STORIES, reason
    if parked:
        reason = f"waiting for a person: {asked}; answer with `ralph answer STORY \"ANSWER\"`, then `ralph run` again"
        if waiting:
            reason += f"; blocked: {blocked_reason(tasks, waiting)}"
        return EXIT_WAITING, reason
    if not isinstance(policy, bool) and tasks.userStories and policy.is_complete(tasks):
        # the loop does not end "complete" on an iteration with violations, even when what is left is complete
        return EXIT_EXHAUSTED, (
            "no story left to select: every story is done, but the iteration that finished them broke a rule "
            "(its changes were undone: see its violations), so the run does not end \"complete\"; `ralph run` "
            "again confirms it"
        )
    return EXIT_EXHAUSTED, f"no story can be selected: {unselectable_reason(tasks, policy)}"
