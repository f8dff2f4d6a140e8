"""The context monitor (seed 000 §5a): graduated alerts as the agent's context fills up.

After every tool call (PostToolUse) the transcript's size in tokens is estimated
and compared with the context window (``CLAUDE_CONTEXT_WINDOW``, default 200k).
Each threshold (50/60/70/80/90 %) fires once per session; SessionStart re-arms
them.  The estimate prefers the real counts Claude Code writes into the
transcript (the latest main-thread assistant entry's ``message.usage``) and falls
back to the seed's ``file size / 4`` heuristic.  The Codex CLI's rollout file (its
``transcript_path``) is read the same way: its latest ``token_count`` event counts.  Only the file's tail is read:
this runs on every tool call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ralph.api import HookEvent, hookimpl

DEFAULT_WINDOW = 200_000
WINDOW_ENV = "CLAUDE_CONTEXT_WINDOW"
THRESHOLDS = (50, 60, 70, 80, 90)
SESSION_KEY = "context_alerts"

TAIL_BYTES = 64 * 1024
FALLBACK_BYTES = 1024 * 1024
CHARS_PER_TOKEN = 4
"""The seed's heuristic when the transcript carries no usage counts."""
TRAILING_BYTES_PER_TOKEN = 8
"""Bytes written after the latest usage entry (tool results, the next prompt):
JSON-escaped text in JSONL costs roughly twice the seed's four chars a token."""

_USAGE_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")

_MESSAGES = {
    "NOTICE": (
        "Be mindful of remaining space. Plan to finish your current task within this session. "
        "If you discover follow-up work, add new stories to {tasks} — the next iteration will pick them up."
    ),
    "WARNING": (
        "Finish your current task and commit soon. Do not start additional tasks. If work remains, "
        "create new stories in {tasks} for the next iteration and capture any implementation details "
        "or insights in {progress} so the next iteration has full context."
    ),
    "CRITICAL": (
        "Wrap up immediately. Do NOT start new work. Instead: (1) create tasks in {tasks} for any "
        "remaining work, (2) write implementation details, insights, and handoff notes to {progress}, "
        "(3) commit all changes, (4) stop. The next iteration will continue from where you left off."
    ),
}


def severity(threshold: int) -> str:
    """NOTICE for 50/60 %, WARNING for 70/80 %, CRITICAL from 90 %."""
    if threshold >= 90:
        return "CRITICAL"
    if threshold >= 70:
        return "WARNING"
    return "NOTICE"


def context_window(environ: Mapping[str, str]) -> int:
    """The context window in tokens: ``CLAUDE_CONTEXT_WINDOW`` or 200000 (also for bad values)."""
    try:
        value = int(environ.get(WINDOW_ENV, DEFAULT_WINDOW))
    except (TypeError, ValueError):
        return DEFAULT_WINDOW
    return value if value > 0 else DEFAULT_WINDOW


def _usage_total(line: bytes) -> int | None:
    """The token count of one transcript line if it is a main-thread assistant entry with usage."""
    import json

    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("isSidechain"):
        return None
    payload = entry.get("payload")
    if entry.get("type") == "event_msg" and isinstance(payload, dict) and payload.get("type") == "token_count":
        return _codex_tokens(payload)
    if entry.get("type", "assistant") != "assistant":
        return None
    message = entry.get("message")
    usage = message.get("usage") if isinstance(message, dict) else None
    if not isinstance(usage, dict):
        return None
    total = 0
    for name in _USAGE_FIELDS:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total or None  # an all-zero placeholder is no measurement


def _codex_tokens(payload: dict[str, Any]) -> int | None:
    """The Codex CLI's rollout ``token_count`` event: the last request's input plus output tokens."""
    info = payload.get("info")
    last = info.get("last_token_usage") if isinstance(info, dict) else None
    if not isinstance(last, dict):
        return None
    total = sum(v for k in ("input_tokens", "output_tokens") if isinstance(v := last.get(k), int) and v > 0)
    return total or None


def _last_usage(data: bytes, partial_first: bool) -> tuple[int, int] | None:
    """(tokens, end offset) of the last usage entry in ``data``, scanning lines backwards."""
    pos = len(data)
    while pos > 0:
        newline = data.rfind(b"\n", 0, pos)
        if newline < 0 and partial_first:
            break  # the first line of a tail read is cut: not parseable
        line, end = data[newline + 1 : pos], pos
        pos = max(newline, 0)
        if (b'"usage"' not in line and b'"token_count"' not in line) or b'"isSidechain":true' in line:
            continue
        total = _usage_total(line)
        if total is not None:
            return total, end
    return None


def estimate_tokens(path: Path | str) -> int | None:
    """Estimated tokens in the transcript at ``path``; None when it cannot be read.

    The latest main-thread usage entry (searched in the last 64 KB, then the last
    1 MB) plus whatever was written after it at bytes/8; with no usage entry at
    all, the file size / 4.
    """
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            for span in (TAIL_BYTES, FALLBACK_BYTES):
                start = max(0, size - span)
                handle.seek(start)
                data = handle.read(size - start)
                found = _last_usage(data, partial_first=start > 0)
                if found is not None:
                    tokens, end = found
                    return tokens + (len(data) - end) // TRAILING_BYTES_PER_TOKEN
                if start == 0:
                    break
            return size // CHARS_PER_TOKEN
    except (OSError, TypeError, ValueError):
        return None


def _file_names(event: HookEvent) -> dict[str, str]:
    """The task list and progress file as the agent should name them."""
    loop = event.loop
    if loop is None:
        return {"tasks": "tasks.json", "progress": "progress.txt"}
    ralph_dir = Path(loop.ralph_dir)
    tasks_name = "tasks.json"
    for candidate in ("tasks.json", "prd.json", "plan.md"):
        if (ralph_dir / candidate).is_file():
            tasks_name = candidate
            break
    try:
        base = ralph_dir.relative_to(event.project_dir)
    except ValueError:
        try:
            base = ralph_dir.resolve().relative_to(Path(event.project_dir).resolve())
        except (OSError, ValueError):
            base = ralph_dir
    return {"tasks": (base / tasks_name).as_posix(), "progress": (base / "progress.txt").as_posix()}


def alert_message(threshold: int, percent: int, names: Mapping[str, str]) -> str:
    level = severity(threshold)
    return f"CONTEXT {level} ({percent}% used): " + _MESSAGES[level].format(**names)


@hookimpl
def ralph_post_tool_use(event: HookEvent) -> list[str] | None:
    transcript = event.payload.get("transcript_path")
    if not transcript or not isinstance(transcript, str):
        return None
    tokens = estimate_tokens(transcript)
    if tokens is None:
        return None
    window = context_window(event.environ)
    fired: Any = event.session.get(SESSION_KEY) or []
    fired_set = {int(t) for t in fired if isinstance(t, int)} if isinstance(fired, list) else set()
    crossed = [t for t in THRESHOLDS if tokens * 100 >= t * window and t not in fired_set]
    if not crossed:
        return None
    event.session.set(SESSION_KEY, sorted(fired_set.union(crossed)))
    percent = tokens * 100 // window
    return [alert_message(max(crossed), percent, _file_names(event))]


@hookimpl
def ralph_session_start(event: HookEvent) -> list[str] | None:
    """A new session (startup, resume, clear or compact): every threshold fires again."""
    event.session.set(SESSION_KEY, [])
    return None
