"""Run directories: where a run's events, prompts and raw agent output go.

They live outside the project (``$RALPH_STATE_DIR`` or
``$XDG_STATE_HOME/ralph``, default ``~/.local/state/ralph``) so the agent,
which can write anything in the project, cannot rewrite the loop's record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

STATE_DIR_ENV = "RALPH_STATE_DIR"


def state_root(configured: str | None = None) -> Path:
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ralph"


def project_key(project_dir: Path) -> str:
    """``<dir name>-<hash of the absolute path>``: stable and collision-free."""
    resolved = str(project_dir.resolve())
    name = re.sub(r"[^A-Za-z0-9._-]", "_", project_dir.resolve().name) or "root"
    return f"{name}-{hashlib.sha1(resolved.encode()).hexdigest()[:10]}"


def runs_dir(project_dir: Path, configured: str | None = None) -> Path:
    return state_root(configured) / "projects" / project_key(project_dir) / "runs"


def new_run_dir(project_dir: Path, configured: str | None = None) -> Path:
    parent = runs_dir(project_dir, configured)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = parent / f"{stamp}-{os.getpid()}"
    path.mkdir()
    return path


def latest_run(project_dir: Path, configured: str | None = None) -> Path | None:
    parent = runs_dir(project_dir, configured)
    if not parent.is_dir():
        return None
    runs = sorted((p for p in parent.iterdir() if p.is_dir()), key=lambda p: p.name)
    return runs[-1] if runs else None


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash
    return events
