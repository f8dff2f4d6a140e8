"""Helpers to exercise agent-side hook plugins without Claude Code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ralph.contracts import HookEvent, LoopView, SessionStore
from ralph.hooks.sessionstore import MemorySession

__all__ = ["MemorySession", "make_event"]


def make_event(
    name: str,
    payload: dict[str, Any],
    project_dir: Path,
    state_dir: Path,
    session: SessionStore | None = None,
    loop: LoopView | None = None,
    environ: dict[str, str] | None = None,
) -> HookEvent:
    """A HookEvent as the hook entry point builds it (``hook_event_name`` filled in)."""
    payload = {"hook_event_name": name, "session_id": "test-session", "cwd": str(project_dir), **payload}
    return HookEvent(
        name=name,
        payload=payload,
        project_dir=project_dir,
        session=session or MemorySession(),
        state_dir=state_dir,
        loop=loop,
        environ=environ or {},
    )
