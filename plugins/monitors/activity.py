"""Prompt activity and the per-conversation read log (seed 001, UserPromptSubmit).

On every prompt the read log (session key ``files_read``, used by the
read-before-edit guard) starts empty, so a file read in an earlier conversation
does not count as read now; the same happens on every SessionStart.  Each
prompt adds one line to ``<state_dir>/activity.jsonl`` with the time, the
session and the prompt's length: never the prompt text.
"""

from __future__ import annotations

from ralph.api import HookEvent, hookimpl

READ_LOG_KEY = "files_read"
ACTIVITY_LOG = "activity.jsonl"


@hookimpl
def ralph_user_prompt_submit(event: HookEvent) -> list[str] | None:
    import json
    from datetime import datetime, timezone

    event.session.set(READ_LOG_KEY, [])
    prompt = event.payload.get("prompt")
    record = {
        "ts": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "session": event.session_id,
        "prompt_length": len(prompt) if isinstance(prompt, str) else 0,
    }
    try:
        event.state_dir.mkdir(parents=True, exist_ok=True)
        with open(event.state_dir / ACTIVITY_LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError:
        pass  # analytics only: never break the prompt
    return None


@hookimpl
def ralph_session_start(event: HookEvent) -> list[str] | None:
    event.session.set(READ_LOG_KEY, [])
    return None
