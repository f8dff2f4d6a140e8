"""How the previous run of a project ended: ``last-run.json`` in ralph's state directory, written when a
run reaches its end (any exit code) and removed when one starts, so a crash leaves none behind.  The next
run reads it to decide whether earlier story state can simply be continued.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class LastRun:
    """The end marker at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def previous(self) -> dict[str, Any] | None:
        """How the previous run ended, or None (no run, or it never reached its end)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def clear(self) -> None:
        """A run is starting: until it ends, a crash must leave no end marker behind."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def record(self, data: dict[str, Any]) -> None:
        """The run reached its end: write the end marker (how it ended, the task file's hash)."""
        from ralph.fsutil import atomic_write_text

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(data))
        except OSError:
            pass  # the next run asks --resume/--fresh, as after a crash
