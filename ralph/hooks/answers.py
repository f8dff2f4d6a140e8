"""Turn one Claude Code hook event into the JSON the CLI honours.

Used by the loop's hook server (trusted state in memory) and, with no loop
running, in-process by the hook client (the plugin used interactively).
``python -m ralph.hooks.answers`` / ``ralph-hook`` is the same client.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ralph.contracts import HookEvent, LoopView, SessionStore, Violation

EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
STOP_BLOCK_LIMIT = 3
"""Consecutive Stop blocks in one session before the hook lets the agent stop:
the loop validates after the iteration anyway and has the last word."""


@dataclass
class HookContext:
    """What answering a hook needs: plugins, session memory and (in a loop) trusted state."""

    host: Any  # ralph.plugin.manager.PluginHost
    project_dir: Path
    session: SessionStore
    state_dir: Path
    loop: LoopView | None
    stop_checks: Callable[[], list[Violation]] | None
    """Runs the Stop checks (Checks 1, 2, 2.5, 3) against trusted state; None = no checks."""


def answer(payload: dict[str, Any], context: HookContext, environ: dict[str, str]) -> dict[str, Any]:
    """The hook's JSON output for ``payload`` (another CLI's hook input is translated first)."""
    from ralph.hooks.dialects import from_dialect

    payload = from_dialect(payload, environ)
    name = str(payload.get("hook_event_name") or "")
    event = HookEvent(
        name=name,
        payload=payload,
        project_dir=context.project_dir,
        session=context.session,
        state_dir=context.state_dir,
        loop=context.loop,
        environ=environ,
    )
    hook = context.host.pm.hook
    if name == "PreToolUse":
        shapeless = _shapeless_shell_call(payload)
        if shapeless is not None:
            return deny(payload, shapeless)
        denials = _collect(context.host, hook.ralph_pre_tool_use, "guard", event)
        if not denials:
            return {}
        return deny(payload, "\n".join(f"[{d.rule}] {d.reason}" for d in denials))
    if name in ("PostToolUse", "SessionStart", "UserPromptSubmit"):
        caller = {
            "PostToolUse": hook.ralph_post_tool_use,
            "SessionStart": hook.ralph_session_start,
            "UserPromptSubmit": hook.ralph_user_prompt_submit,
        }[name]
        if name == "SessionStart":
            context.session.set("stop_blocks", 0)
        messages = [m for m in _collect(context.host, caller, "monitor", event) if m]
        if not messages:
            return {}
        return {"hookSpecificOutput": {"hookEventName": name, "additionalContext": "\n\n".join(messages)}}
    if name == "Stop":
        return _stop(payload, context)
    return {}


def _shapeless_shell_call(payload: dict[str, Any]) -> str | None:
    """Why a ``Bash`` call cannot be checked (no ``tool_input`` object, or a ``command`` that is not a
    string: the guards would see no command and allow it), or None."""
    if payload.get("tool_name") != "Bash":
        return None
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return f"ralph: a Bash call whose tool_input is {type(tool_input).__name__}, not an object, cannot be checked: denied"
    if not isinstance(tool_input.get("command"), str):
        return (f"ralph: a Bash call whose command is {type(tool_input.get('command')).__name__}, not a string, cannot be "
                "checked: denied")
    return None


def _collect(host: Any, caller: Any, kind: str, event: HookEvent) -> list[Any]:
    """Every implementation's items, through pluggy (wrappers included); one that raises is a
    ``PluginFailure`` naming it (the loop denies the call and stops; the hook client outside a loop
    fails open)."""
    from ralph.gitutil import GitMetadataChanged
    from ralph.plugin.calls import flatten

    try:
        results = caller(event=event)
    except GitMetadataChanged:  # the loop's own stop (tampered .git), not the plugin's fault
        raise
    except Exception as exc:
        raise host.failure(kind, caller, exc) from exc
    return flatten(results)


def deny(payload: dict[str, Any], reason: str) -> dict[str, Any]:
    """The output refusing the tool call of a PreToolUse ``payload`` (other events: a Stop block,
    or nothing)."""
    name = payload.get("hook_event_name")
    if name == "PreToolUse":
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    if name == "Stop":
        return {"decision": "block", "reason": reason}
    return {}


def _stop(payload: dict[str, Any], context: HookContext) -> dict[str, Any]:
    if context.stop_checks is None:
        return {}
    found = context.stop_checks()
    violations = [v for v in found if v.is_error]
    # a check that could not run (Check 2.5 without a snapshot) says so, to the person and, when blocking, the agent
    warnings = [f"[{v.check}] {v.message}" for v in found if not v.is_error]
    shown = {"systemMessage": "ralph: " + "; ".join(warnings)} if warnings else {}
    if not violations:
        context.session.set("stop_blocks", 0)
        return shown
    blocks = int(context.session.get("stop_blocks", 0) or 0)
    if payload.get("stop_hook_active") and blocks >= STOP_BLOCK_LIMIT:
        context.session.set("stop_blocks", 0)
        return {
            "systemMessage": f"ralph: stop allowed after {blocks} blocked attempts; the loop will validate "
            "the iteration and report what is still wrong."
        }
    context.session.set("stop_blocks", blocks + 1)
    reason = "Ralph loop checks failed; fix these before stopping:\n" + "\n".join(
        f"- [{v.check}] {v.message}" for v in violations
    )
    if warnings:
        reason += "\nNot checked:\n" + "\n".join(f"- {w}" for w in warnings)
    return {"decision": "block", "reason": reason, **shown}


# -- without a loop: the plugin used in an interactive Claude Code session ------------------


def handle_without_loop(payload: dict[str, Any], environ: dict[str, str], host: Any = None) -> dict[str, Any]:
    """Answer with the same plugins in-process; Stop checks only when ``.ralph-active`` exists.

    ``host``: the plugins to answer with (the hook helper keeps them between calls); by default
    every installed plugin is loaded for this call, without their config sections (a hook call
    reads no config, and the sections' models import pydantic).
    """
    from ralph.loop.rundir import project_key, state_root
    from ralph.hooks.sessionstore import FileSession

    project_dir = Path(environ.get("CLAUDE_PROJECT_DIR") or payload.get("cwd") or os.getcwd())
    state_dir = state_root() / "projects" / project_key(project_dir, with_repo=False) / "hooks"
    state_dir.mkdir(parents=True, exist_ok=True)
    session = FileSession(state_dir / "sessions", str(payload.get("session_id") or ""))
    if host is None:
        from ralph.plugin.manager import PluginHost

        host = PluginHost(environ=environ, sections=False)
    stop_checks = None
    if payload.get("hook_event_name") == "Stop":
        stop_checks = _marker_stop_checks(project_dir, host)
    context = HookContext(host, project_dir, session, state_dir, None, stop_checks)
    return answer(payload, context, environ)


def _marker_stop_checks(project_dir: Path, host: Any) -> Callable[[], list[Violation]] | None:
    """Stop checks from ``.ralph-active`` (seed behaviour when no trusted loop answers)."""
    from ralph import safeio

    marker = project_dir / ".ralph-active"
    try:  # never through a symlink (a host file) the agent put there
        state = json.loads(safeio.read_bytes(marker, project_dir))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None

    def run() -> list[Violation]:
        from ralph.config import RalphConfig
        from ralph.contracts import StoryState, ValidationContext
        from ralph.settings import Settings

        review_cap = int(state.get("reviewCap", 5))
        ralph_dir = Path(state.get("ralphDir") or project_dir / "ralph")
        settings = Settings(project_dir=project_dir, config=RalphConfig(review_cap=review_cap))
        # the policy the loop named; a marker written by hand in the seeds' format names none, only skipReview
        named = state.get("policy") or ("skip-review" if state.get("skipReview") else "review")
        policy = host.policies.get(str(named))(settings)
        store = host.stores.get(state.get("store", "tasks-json"))()
        tasks_path = store.path(ralph_dir)
        try:
            raw = safeio.read_text(tasks_path, safeio.root_for(tasks_path, project_dir))
        except (OSError, UnicodeDecodeError):
            raw = None
        tasks = error = None
        if raw is not None:
            from ralph.errors import TaskListError

            try:
                tasks = store.parse(raw, tasks_path)
            except TaskListError as exc:
                error = str(exc)
        snapshot = None  # seed: without a snapshot Check 2.5 is skipped with a warning
        recorded = state.get("preIterationSnapshot")
        if isinstance(recorded, dict) and all(isinstance(v, dict) for v in recorded.values()):
            fields = state.get("stateFields")  # the policy's state fields (one a story did not have is absent)
            carried = [str(name) for name in fields] if isinstance(fields, list) else []
            snapshot = {str(sid): StoryState.from_dict(v, carried) for sid, v in recorded.items()}
        context = ValidationContext(
            project_dir=project_dir,
            tasks_path=tasks_path,
            raw=raw,
            tasks=tasks,
            parse_error=error,
            policy=policy,
            mode=state.get("iterationMode"),
            snapshot=snapshot,
            review_cap=review_cap,
        )
        return host.validate(context)

    return run


def main() -> int:
    """``ralph-hook``: the same client Claude Code runs (see ralph.hooks.client)."""
    from ralph.hooks.client import main as client_main

    return client_main()


if __name__ == "__main__":
    raise SystemExit(main())
