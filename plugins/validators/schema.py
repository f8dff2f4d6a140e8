"""Check 1 (seed 000 §5b): the task list exists, parses and has every required field."""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """Schema violations: missing file, bad JSON, missing/mistyped fields, duplicate ids, empty notes."""
    from ralph.api.stores import structural_problems

    if context.raw is None:
        return [Violation("schema", f"{context.tasks_path} does not exist: restore the task list.")]
    if context.tasks is None:
        return [Violation("schema", context.parse_error or f"{context.tasks_path} is malformed.")]
    return [Violation("schema", message, story_id) for story_id, message in structural_problems(context.tasks)]
