"""The agent-side hook entry point (``ralph-hook`` / ``python -m ralph.hook``).

Claude Code runs it with the event as JSON on stdin.  During ``ralph run``
the loop passes ``RALPH_STATE_FILE``: the trusted state (mode, snapshot,
review cap) in the run directory, outside the agent's reach.  The Stop hook
runs the same validators the loop runs after the iteration, so the agent can
fix problems in the same context before it stops.

Hooks are fail-open: any crash prints ``{}`` (allow) and is logged in the
run directory; the loop still validates on its own afterwards.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

STATE_FILE_ENV = "RALPH_STATE_FILE"


def stop_decision(payload: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Block the stop with the violations found, or allow it."""
    from ralph.config import RalphConfig
    from ralph.contracts import StoryState, ValidationContext
    from ralph.plugins import PluginHost
    from ralph.settings import Settings

    project_dir = Path(state["projectDir"])
    tasks_path = Path(state["tasksPath"])
    host = PluginHost()
    settings = Settings(project_dir=project_dir, config=RalphConfig(review_cap=int(state["reviewCap"])))
    policy = host.policies.get(state["policy"])(settings)
    store = host.stores.get(state["store"])()
    try:
        raw: str | None = tasks_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raw = None
    tasks = error = None
    if raw is not None:
        from ralph.errors import TaskListError

        try:
            tasks = store.parse(raw, tasks_path)
        except TaskListError as exc:
            error = str(exc)
    snapshot = {
        sid: StoryState(bool(v["passes"]), v["reviewStatus"], int(v["reviewCount"]))
        for sid, v in state.get("preIterationSnapshot", {}).items()
    }
    context = ValidationContext(
        project_dir=project_dir,
        tasks_path=tasks_path,
        raw=raw,
        tasks=tasks,
        parse_error=error,
        policy=policy,
        mode=state.get("iterationMode"),
        snapshot=snapshot,
        review_cap=int(state["reviewCap"]),
        skip_review=bool(state.get("skipReview")),
    )
    violations = [v for v in host.validate(context) if v.check != "transitions-skipped"]
    if not violations:
        return {}
    reason = "Ralph loop checks failed; fix these before stopping:\n" + "\n".join(
        f"- [{v.check}] {v.message}" for v in violations
    )
    return {"decision": "block", "reason": reason}


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    event = payload.get("hook_event_name")
    state_file = os.environ.get(STATE_FILE_ENV)
    if event != "Stop" or not state_file:
        return {}
    state = json.loads(Path(state_file).read_text(encoding="utf-8"))
    return stop_decision(payload, state)


def main() -> int:
    try:
        payload = json.loads(sys.stdin.read() or "{}")
        output = handle(payload)
    except Exception:  # fail-open: a broken hook must never wedge the agent
        _log_error(traceback.format_exc())
        output = {}
    sys.stdout.write(json.dumps(output))
    return 0


def _log_error(text: str) -> None:
    state_file = os.environ.get(STATE_FILE_ENV)
    target = Path(state_file).parent / "hook-errors.log" if state_file else None
    try:
        if target is not None:
            with target.open("a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        else:
            sys.stderr.write(text)
    except OSError:
        pass


if __name__ == "__main__":
    raise SystemExit(main())
