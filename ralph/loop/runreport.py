"""The end-of-run report (seed 002 "Failure Report"), written as markdown and JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ralph.loop.gates import GateKeeper
    from ralph.tasks import TaskList


def build_report(tasks: TaskList, keeper: GateKeeper, reason: str, exit_code: int) -> dict[str, Any]:
    """Completed n/m, and per failed story: attempts, last gate, branch, error, stuck, quality warnings."""
    done = [s for s in tasks.userStories if s.passes]
    failed_by_id = {f.story_id: f for f in keeper.failed}
    failed = []
    for story in tasks.userStories:
        if not story.failed:
            continue
        info = failed_by_id.get(story.id)
        state = keeper.state(story.id)
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
            }
        )
    warnings = {sid: items for sid, items in keeper.quality_warnings.items() if items}
    return {
        "verdicts": list(getattr(keeper, "verdicts", [])),
        "exit_code": exit_code,
        "reason": reason,
        "completed": len(done),
        "total": len(tasks.userStories),
        "failed": failed,
        "quality_warnings": warnings,
    }


def render_markdown(report: dict[str, Any]) -> str:
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
