"""Guard (seed 001): an existing file may be edited or overwritten only after it was read in this session.

``Read`` (and ``NotebookRead``) calls are recorded in the session store under
``files_read`` as resolved absolute paths; ``Edit``, ``MultiEdit``, ``Write`` and
``NotebookEdit`` of an existing file that is not in that list are denied.  A new
file may be written, and a file the agent wrote or edited counts as read from
then on.  A new session (``SessionStart``) and a new prompt
(``UserPromptSubmit``) start with an empty list: after a restart or a
compaction the agent no longer has the file's content in its context.
"""

from __future__ import annotations

import os

from ralph.api import Denial, HookEvent, hookimpl
from ralph.api.shell import MAX_PATH, budget_scope, real_path

SESSION_KEY = "files_read"
RULE = "read-before-edit"
READ_TOOLS = {"Read": "file_path", "NotebookRead": "notebook_path"}
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
MAX_ENTRIES = 5000


def resolve(event: HookEvent, raw: str) -> str:
    """``raw`` as an absolute path with symlinks resolved (relative to the tool call's cwd); a path longer than
    the kernel takes (it names no file) is kept as it is, so the work per call stays bounded."""
    cwd = event.payload.get("cwd")
    base = cwd if isinstance(cwd, str) and os.path.isabs(cwd) else str(event.project_dir)
    joined = os.path.join(base, os.path.expanduser(raw))
    if len(joined) > MAX_PATH:
        return joined
    with budget_scope(MAX_PATH * 64):
        return real_path(joined)


def _known(event: HookEvent) -> list[str]:
    value = event.session.get(SESSION_KEY) or []
    return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []


def _remember(event: HookEvent, path: str, known: list[str]) -> None:
    if path not in known:
        event.session.set(SESSION_KEY, [*known[-(MAX_ENTRIES - 1) :], path])


@hookimpl
def ralph_pre_tool_use(event: HookEvent) -> list[Denial]:
    tool = event.tool_name
    key = READ_TOOLS.get(tool) or EDIT_TOOLS.get(tool)
    if key is None:
        return []
    raw = event.tool_input.get(key)
    if not isinstance(raw, str) or not raw:
        return []
    path = resolve(event, raw)
    known = _known(event)
    if tool in READ_TOOLS or len(path) > MAX_PATH or not os.path.exists(path) or path in known:
        _remember(event, path, known)
        return []
    return [
        Denial(
            RULE,
            f"Read {raw} first: {tool} of an existing file is only allowed after you read it in this session, "
            "so the change is based on its current content. Use the Read tool, then retry.",
        )
    ]


@hookimpl
def ralph_session_start(event: HookEvent) -> None:
    event.session.set(SESSION_KEY, [])


@hookimpl
def ralph_user_prompt_submit(event: HookEvent) -> None:
    event.session.set(SESSION_KEY, [])
