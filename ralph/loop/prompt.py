"""Render one iteration's prompt: the project's prompt.md plus the loop's own section."""

from __future__ import annotations

from pathlib import Path

from ralph.contracts import Policy, Selection
from ralph.tasks import TaskList
from ralph.templates import render

THIS_ITERATION_HEADING = "## This iteration (set by the loop — authoritative)"


def render_prompt(
    template: str,
    *,
    iteration: int,
    max_iterations: int,
    ralph_dir: str,
    review_cap: int,
    skip_review: bool,
    policy: Policy,
    selection: Selection,
    tasks: TaskList,
    feedback: list[str],
    tasks_file: str = "",
) -> str:
    """Substitute the template tokens and append the loop's section and feedback."""
    body = render(
        template,
        {
            "RALPH_ITERATION": str(iteration),
            "RALPH_MAX_ITERATIONS": str(max_iterations),
            "RALPH_DIR": ralph_dir,
            "RALPH_REVIEW_CAP": str(review_cap),
            "RALPH_SKIP_REVIEW": "true" if skip_review else "false",
        },
    )
    parts = [body.rstrip(), "", THIS_ITERATION_HEADING, "", policy.prompt_section(selection, tasks)]
    if tasks_file and not tasks_file.endswith("/tasks.json"):
        parts.append(
            f"- Task list: `{tasks_file}` (this project's format; wherever this prompt says tasks.json, "
            "it means this file)"
        )
    if feedback:
        parts += ["", "### Feedback from the loop about the previous iteration", ""]
        parts += [f"- {item}" for item in feedback]
    return "\n".join(parts) + "\n"


def relative_dir(ralph_dir: Path, project_dir: Path) -> str:
    try:
        return str(ralph_dir.relative_to(project_dir))
    except ValueError:
        return str(ralph_dir)
