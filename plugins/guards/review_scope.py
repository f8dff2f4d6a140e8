"""Guard: a review iteration writes only the files of the ralph directory.

A review reads, runs and judges; its output is a verdict in the task list and an
entry in the progress log (seed 000 §6, hard rule 6).  In ``review`` mode the
claude agent offers no ``Write`` tool at all (``[tool.ralph.claude] tools``), and
this guard denies ``Edit``/``MultiEdit``/``Write``/``NotebookEdit`` of any file
outside the ralph directory, so a review cannot quietly fix the code it judges.
Shell commands are not analysed here: the other guards and the sandbox cover them.
"""

from __future__ import annotations

import os

from ralph.api import Denial, HookEvent, hookimpl
from ralph.api.shell import MAX_PATH, budget_scope, real_path

RULE = "review-scope"
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}


@hookimpl
def ralph_pre_tool_use(event: HookEvent) -> list[Denial]:
    """Deny file edits outside the ralph directory during a review iteration."""
    loop = event.loop
    if loop is None or loop.mode != "review" or event.tool_name not in EDIT_TOOLS:
        return []
    raw = event.tool_input.get(EDIT_TOOLS[event.tool_name])
    if not isinstance(raw, str) or not raw:
        return []
    cwd = event.payload.get("cwd")
    base = cwd if isinstance(cwd, str) and os.path.isabs(cwd) else str(event.project_dir)
    if len(raw) <= MAX_PATH:  # a longer path names no file the tool could write: denied below
        with budget_scope(MAX_PATH * 64):
            path = real_path(os.path.join(base, os.path.expanduser(raw)))
            ralph_dir = real_path(os.path.join(str(event.project_dir), str(loop.ralph_dir)))
        if path.startswith(ralph_dir.rstrip(os.sep) + os.sep):
            return []
    return [
        Denial(
            RULE,
            f"{raw}: a review iteration does not change code, tests or config; it writes only the verdict "
            "(the task list) and the progress log. Put what needs fixing in reviewFeedback instead.",
        )
    ]
