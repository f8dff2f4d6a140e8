"""A fleet's loops as ``ralph serve`` reads them: the head of ``ralph run --parallel --engine NAME`` mirrors
what each loop records on its node (``events.jsonl``, ``state.json``, ``summary.json``) into this machine's
state directory, under ``<state root>/projects/<project key>/fleet/<fleet>/<unit>/``.

The fleet is named like a run directory (``<timestamp>-<pid>``); the head holds a lock in its directory
while it runs (the dashboard says "running" while it is held, :class:`ralph.dashboard.runs.Liveness`).
What comes from a node is data: only complete lines that are JSON objects with a ``kind`` are appended,
each at most :data:`MAX_LINE` bytes; the JSON files are written only when they parse as an object and are
under :data:`MAX_FILE` bytes.  Nothing here follows a symbolic link (``ralph.safeio`` under the state root).
Public through :mod:`ralph.api.fleet` for fleet engines.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

__all__ = ["FleetMirror", "MAX_FILE", "MAX_LINE", "NodeRecord"]

MAX_LINE = 1024 * 1024
"""The longest event line mirrored (a longer one is dropped)."""
MAX_FILE = 8 * 1024 * 1024
"""The largest ``state.json`` / ``summary.json`` mirrored."""
_UNIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
RECORD_FILES = ("state.json", "summary.json")


class FleetMirror:
    """One fleet's directory on this machine, and the lock its head holds while the fleet runs."""

    def __init__(self, project_dir: Path, state_dir: str | None = None) -> None:
        from ralph.loop.rundir import check_state_root, project_state_dir, state_root

        check_state_root(state_dir)
        self.state_root = state_root(state_dir)
        parent = project_state_dir(project_dir, state_dir) / "fleet"
        parent.mkdir(parents=True, exist_ok=True)
        self.path = parent / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.path.mkdir()
        from ralph.loop.lock import ProjectLock

        self._lock = ProjectLock(self.path)
        self._lock.acquire()
        self._sizes: dict[str, int] = {}

    def unit_dir(self, unit: str) -> Path:
        """The directory of loop ``unit`` (``PRD-1``); ValueError for a name that is not a plain one."""
        if not _UNIT.fullmatch(unit):
            raise ValueError(f"not a unit name: {unit!r}")
        return self.path / unit

    def add(self, unit: str, record: NodeRecord | dict[str, Any] | None) -> None:
        """Mirror what one poll of the node brought (``NodeRecord.read``): new event lines, changed JSON files."""
        from ralph import safeio

        if not record:
            return
        data = record.__dict__ if isinstance(record, NodeRecord) else record
        directory = self.unit_dir(unit)
        if not os.path.lexists(directory):
            os.mkdir(directory)  # in the fleet's own directory, made by this process
        lines = [line for line in data.get("events") or [] if _event_line(line)]
        if lines:
            path = directory / "events.jsonl"
            safeio.append_text(path, self.state_root, "".join(line.rstrip("\n") + "\n" for line in lines))
        for name in RECORD_FILES:
            text = (data.get("files") or {}).get(name)
            if isinstance(text, str) and len(text) <= MAX_FILE and _json_object(text):
                safeio.write_text(directory / name, self.state_root, text, parents=True)

    def close(self) -> None:
        """The fleet ended: release its lock (the dashboard then shows each loop as it ended)."""
        self._lock.release()


class NodeRecord:
    """On the node: what a loop's run directory holds that the head has not seen yet (poll by poll)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.run_dir: Path | None = None
        self.offset = 0
        self.seen: dict[str, float] = {}
        self.events: list[str] = []
        self.files: dict[str, str] = {}

    def read(self, limit: int = 4 * 1024 * 1024) -> dict[str, Any]:
        """``{"events": [new complete lines], "files": {name: text of a changed state.json / summary.json}}``."""
        if self.run_dir is None:
            found = sorted(self.state_dir.glob("projects/*/runs/*/events.jsonl"))
            if not found:
                return {}
            self.run_dir = found[-1].parent
        events: list[str] = []
        try:
            with open(self.run_dir / "events.jsonl", "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(limit)
        except OSError:
            chunk = b""
        end = chunk.rfind(b"\n")
        if end >= 0:
            events = [line.decode("utf-8", "replace") for line in chunk[: end + 1].splitlines()]
            self.offset += end + 1
        files = {}
        for name in RECORD_FILES:
            path = self.run_dir / name
            try:
                changed = path.stat().st_mtime_ns
            except OSError:
                continue
            if self.seen.get(name) != changed:
                try:
                    files[name] = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                self.seen[name] = changed
        return {"events": events, "files": files} if events or files else {}


def _event_line(line: Any) -> bool:
    if not isinstance(line, str) or len(line.encode("utf-8", "replace")) > MAX_LINE:
        return False
    try:
        data = json.loads(line)
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("kind"), str)


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
