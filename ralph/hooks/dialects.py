"""Hook input of other agent CLIs, translated into the Claude Code JSON ralph's hooks speak.

The Codex CLI (0.163) sends Claude Code's hook JSON almost unchanged (plus
``turn_id`` and ``model``): shell calls are ``tool_name: "Bash"`` with
``tool_input.command``, and its outputs (``permissionDecision``,
``additionalContext``, Stop's ``decision: block``) are Claude Code's.  What
differs is ``apply_patch``: one call carries a whole patch in
``tool_input.command``.  Guards model file writes as ``Write``/``Edit`` with a
``file_path``, or as shell commands, so a patch is shown to them as the
equivalent shell command — ``: > path`` for an added or updated file, ``rm --
path`` for a deleted one, ``mv -- old new`` for a move — which the guards that
read shell commands (protected files, deletion outside the project) already
judge, while read-before-edit (which concerns the edit tools) does not apply:
a patch carries its own context lines.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

__all__ = ["DIALECT_ENV", "from_dialect", "patch_as_shell"]

DIALECT_ENV = "RALPH_HOOK_DIALECT"
_PATCH_LINE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$")


def patch_as_shell(patch: str) -> str:
    """The shell command with the same file effects as a Codex ``apply_patch`` body."""
    steps: list[str] = []
    current: str | None = None
    for line in patch.splitlines():
        match = _PATCH_LINE.match(line)
        if not match:
            continue
        action, path, moved = match.group(1), match.group(2), match.group(3)
        if moved is not None and current is not None:
            steps.append(f"mv -- {shlex.quote(current)} {shlex.quote(moved)}")
            current = moved
        elif action == "Delete":
            steps.append(f"rm -- {shlex.quote(path)}")
            current = None
        elif action in ("Add", "Update"):
            steps.append(f": > {shlex.quote(path)}")
            current = path
    return " ; ".join(steps) or ":"


def from_dialect(payload: dict[str, Any], environ: dict[str, str]) -> dict[str, Any]:
    """``payload`` as Claude Code would have sent it (unchanged for Claude Code itself)."""
    if environ.get(DIALECT_ENV) != "codex":
        return payload
    tool = payload.get("tool_name")
    raw_input = payload.get("tool_input")
    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    if tool == "apply_patch" or (tool in ("Edit", "Write") and "command" in tool_input and "file_path" not in tool_input):
        patch = str(tool_input.get("command") or tool_input.get("patch") or "")
        return {**payload, "tool_name": "Bash", "tool_input": {"command": patch_as_shell(patch)},
                "codex_tool_name": tool, "codex_patch": patch}
    return payload
