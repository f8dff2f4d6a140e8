"""Session stores for the agent-side hooks: in memory (the loop) or in a file (no loop)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ralph.contracts import SessionStore


class MemorySession(SessionStore):
    """A session store in a dict: what the running loop keeps per session."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key`` for this session, or ``default``."""
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON-serialisable) under ``key`` for this session."""
        self.data[key] = value


class FileSession(SessionStore):
    """A session store in ``<dir>/<session id>.json`` for hooks that run without a loop.

    Each hook call is a new process, so every ``set`` is written through
    (atomically); the file is small.
    """

    def __init__(self, directory: Path, session_id: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", session_id or "no-session")
        self.path = directory / f"{safe}.json"
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key`` for this session, or ``default``."""
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` and write the file through (atomically)."""
        from ralph.fsutil import atomic_write_text

        self.data[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(self.data))
