"""The end-of-run report (seed 002 "Failure Report"), written as markdown and JSON."""

from __future__ import annotations

import operator
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from ralph.wording import counted, fit_column

if TYPE_CHECKING:
    from ralph.contracts import Policy
    from ralph.loop.gates import GateKeeper
    from ralph.tasks import TaskList


def summary_stories(tasks: TaskList, policy: Policy | None = None) -> list[dict[str, Any]]:
    """Each story's state as ``summary.json`` holds it (``ralph report`` reads the same shape); ``state`` is the
    policy's word for it (:meth:`Policy.story_state`; without a policy, :func:`ralph.storydisplay.shown_state`'s)."""
    from ralph.contracts import AUTO_APPROVED_PREFIX  # here: `ralph status` imports this module, not the contracts
    from ralph.storydisplay import shown_state

    stories = [
        {
            "id": s.id,
            "title": s.title,
            "passes": s.passes,
            "reviewStatus": s.reviewStatus,
            "reviewCount": s.reviewCount,
            "autoApproved": s.reviewFeedback.startswith(AUTO_APPROVED_PREFIX),
            "failed": s.failed,
            "failureReason": s.failureReason,
            "waiting": s.waiting,
            "state": policy.story_state(s) if policy is not None else "",
        }
        for s in tasks.userStories
    ]
    if policy is None:
        for entry in stories:
            entry["state"] = shown_state(entry)
    return stories


_SHOWN = operator.attrgetter(
    "id", "title", "passes", "reviewStatus", "reviewCount", "reviewFeedback", "failed", "failureReason", "waiting"
)
"""The story fields :func:`summary_stories` reads (all scalars), as one tuple."""


def shown_key(tasks: TaskList, policy: Policy) -> tuple[list[tuple[Any, ...]], list[str]]:
    """What :func:`summary_stories` is made of, at a fraction of its cost: equal keys make equal summaries.  Each
    story's fields the summary reads (their values: the loop changes stories in place) and its state."""
    stories = tasks.userStories
    return list(map(_SHOWN, stories)), list(map(policy.story_state, stories))


def build_run_report(
    tasks: TaskList, keeper: GateKeeper, reason: str, exit_code: int, *, task_file: str, dir_arg: str
) -> dict[str, Any]:
    """Completed n/m, and per failed story: attempts, last gate, branch, error, stuck, quality warnings.

    ``task_file`` and ``dir_arg`` (see :func:`ralph_dir_arg`) go into each failed story's retry command.
    """
    done = [s for s in tasks.userStories if s.passes]
    failed_by_id = {f.story_id: f for f in keeper.failed}
    failed = []
    for story in tasks.userStories:
        if not story.failed:
            continue
        info = failed_by_id.get(story.id)
        state = keeper.state(story.id)
        last_output = state.attempts[-1].output if state.attempts else (info.error if info else story.failureReason)
        error_lines = [line for line in (last_output or "").splitlines() if line.strip()][:ERROR_LINES]
        failed.append(
            {
                "id": story.id,
                "title": story.title,
                "attempts": info.attempts if info else state.iteration,
                "max_attempts": info.max_attempts if info else state.max_iterations,
                "last_gate": info.last_gate if info else state.last_gate,
                "branch": info.branch if info else None,
                "error": info.error if info else story.failureReason,
                "stuck": info.stuck if info else state.stuck_count >= 3,
                "strategy_shifts": state.strategy_shifts,
                "quality_warnings": len(keeper.quality_warnings.get(story.id, [])),
                "working_branch": info.reset if info else "",
                "error_lines": error_lines,
                "tier": 3,
                "retry": retry_command(story.id, task_file, dir_arg),
            }
        )
    warnings = {sid: items for sid, items in keeper.quality_warnings.items() if items}
    failed_ids = {s.id for s in tasks.userStories if s.failed}
    done_ids = {s.id for s in done}
    blocked = [
        {"id": s.id, "title": s.title, "waits_on": [d for d in s.dependsOn if d in failed_ids]}
        for s in tasks.userStories
        if not s.passes and not s.failed and any(d in failed_ids and d not in done_ids for d in s.dependsOn)
    ]
    return {
        "verdicts": list(keeper.verdicts),
        "blocked": blocked,
        "exit_code": exit_code,
        "reason": reason,
        "completed": len(done),
        "total": len(tasks.userStories),
        "failed": failed,
        "quality_warnings": warnings,
    }


#: How many lines of a failed story's last gate output the reports show.
ERROR_LINES = 6


def ralph_dir_arg(ralph_dir: Path, project_dir: Path) -> str:
    """`` --ralph-dir X`` (or `` --prd N``) for commands printed to the user; empty for the default."""
    from ralph.loop.prompt import relative_dir

    rel = relative_dir(ralph_dir, project_dir)
    if rel == "ralph":
        return ""
    match = re.fullmatch(r"\.ralph/PRD-(\d+)", rel)
    return f" --prd {match.group(1)}" if match else f" --ralph-dir {rel}"


def retry_command(story_id: str, task_file: str, ralph_dir_arg: str = "") -> str:
    """What a person runs to try a stopped story again (after looking at its failure branch)."""
    return (
        f"set \"failed\": false on {story_id} in {task_file} and commit, then: "
        f"ralph run{ralph_dir_arg} --story {story_id} --fresh"
    )


def needs_a_person(report: dict[str, Any]) -> list[str]:
    """The lines that lead a failed run's report: failed and blocked stories, and what to do."""
    lines: list[str] = []
    for item in report.get("failed", []):
        tier = f"tier {item.get('tier', 3)} (stopped)" + (
            f" after {item.get('strategy_shifts', 0)} strategy shift(s)" if item.get("strategy_shifts") else ""
        )
        lines.append(
            f"FAILED {item['id']}: {item.get('title', '')} - {item['attempts']}/{item['max_attempts']} attempts at the "
            f"{item.get('last_gate') or '?'} gate, escalation {tier}"
        )
        lines.append(f"  work kept on: {item.get('branch') or '- (no failure branch)'}")
        error_lines = item.get("error_lines") or ([item["error"]] if item.get("error") else [])
        if error_lines:
            lines.append("  last error:")
            lines += [f"    {line}" for line in error_lines]
        if item.get("retry"):
            lines.append(f"  to retry: {item['retry']}")
    for item in report.get("blocked", []):
        lines.append(f"BLOCKED {item['id']}: {item.get('title', '')} - waits on failed {', '.join(item['waits_on'])}")
    return lines


def render_run_report(report: dict[str, Any]) -> str:
    """The end-of-run report (``run_finished``'s ``report``) as markdown: failed stories, quality warnings."""
    lines = ["# Ralph Loop Execution Summary", "", f"## Completed: {report['completed']}/{report['total']} stories", ""]
    lines.append(f"Result: {report['reason']} (exit {report['exit_code']})")
    if report["failed"]:
        lines += ["", "## Failed Stories (require human attention):"]
        for item in report["failed"]:
            stuck = (
                f"Yes (same error {3}x, {item['strategy_shifts']} strategy shift(s) failed)"
                if item["stuck"]
                else "No"
            )
            lines += [
                "",
                f"### {item['id']}: {item['title']}",
                f"- Attempts: {item['attempts']}/{item['max_attempts']}",
                f"- Last gate: {item['last_gate']}",
                f"- Branch: {item['branch'] or '-'}",
                f"- Error: {item['error'] or '-'}",
                f"- Stuck: {stuck}",
                f"- Quality warnings: {item['quality_warnings']}",
                f"- Working branch: {item['working_branch'] or '-'}",
            ]
            if item.get("error_lines"):
                lines += ["- Last error (first lines):", "", "```", *item["error_lines"], "```"]
            if item.get("retry"):
                lines.append(f"- To retry: {item['retry']}")
    if report.get("blocked"):
        lines += ["", "## Blocked by failed stories"]
        lines += [f"- {item['id']}: waits on {', '.join(item['waits_on'])}" for item in report["blocked"]]
    if report.get("verdicts"):
        lines += ["", "## Spec verdicts (independent reviewer, read by the loop)"]
        for item in report["verdicts"]:
            state = "met" if item.get("passed") else "NOT met"
            why = f" — malformed: {item['malformed']}" if item.get("malformed") else ""
            lines.append(f"- iteration {item['iteration']}, {item['story']}: {state} ({item.get('reviewer', '-')}){why}")
            for unmet in item.get("unmet") or []:
                lines.append(f"  - missing: {unmet.get('criterion', '')} (where: {unmet.get('where') or '-'})")
            for violation in item.get("violations") or []:
                lines.append(f"  - violation: {violation}")
    if report["quality_warnings"]:
        lines += ["", "## Quality warnings (logged, not blocking)"]
        for story_id, items in report["quality_warnings"].items():
            lines += ["", f"### {story_id}"] + [f"- {item}" for item in items]
    return "\n".join(lines) + "\n"


def render_run_summary(data: dict[str, Any], width: int | None = None) -> str:
    """The end-of-run table from a ``run_finished`` payload (or summary.json): a row per story, then totals.
    Titles are cut only where the table would not fit ``width`` columns (the terminal's by default)."""
    stories = data.get("stories", [])
    from ralph.storydisplay import shown_state

    rows: list[tuple[str, ...]] = [("story", "title", "state", "reviews")]
    for story in stories:
        rows.append((story["id"], story["title"], shown_state(story), str(story["reviewCount"])))
    rows = fit_column(rows, 1, width)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    done = sum(1 for s in stories if s["passes"])
    lines.append("")
    lines.append(
        f"{done}/{counted(len(stories), 'story')} done | {counted(data.get('iterations'), 'iteration')} | "
        f"cost ${data.get('cost_usd', 0):.4f} | {format_elapsed(data.get('elapsed', 0))} | {data.get('reason')}"
    )
    usage = data.get("usage")
    if isinstance(usage, dict) and usage:
        names = (("input", "input"), ("cache_read", "cache read"), ("cache_write", "cache write"), ("output", "output"))
        lines.append("tokens: " + ", ".join(f"{label} {usage.get(key, 0):,}" for key, label in names))
    return "\n".join(lines)


def format_elapsed(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
