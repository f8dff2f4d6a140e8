"""The running iteration's state: ``state.json`` in the run directory and the ``.ralph-active`` marker.

``state.json`` is the trusted copy (outside the project; the hooks and ``RALPH_STATE_FILE``
point at it).  The marker in the project is written for visibility only: the agent can
change it, so nothing the loop decides reads it back; the loop keeps what it last wrote there
in process, and writes and removes the marker through :mod:`ralph.safeio` (a symlink the agent
put in its place is replaced or removed, never followed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph import safeio
from ralph.fsutil import atomic_write_text

if TYPE_CHECKING:
    from ralph.contracts import Policy, Runner, Selection, Snapshot, TaskStore
    from ralph.loop.records import IterationRecord
    from ralph.settings import Settings

MARKER_NAME = ".ralph-active"
STATE_FILE_ENV = "RALPH_STATE_FILE"


class ActiveState:
    """Writes the state of each iteration (trusted copy and marker) and removes the marker at the end."""

    def __init__(self, settings: Settings, runner: Runner, policy: Policy, store: TaskStore, tasks_path: Path) -> None:
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.runner = runner
        self.policy = policy
        self.store = store
        self.tasks_path = tasks_path
        self.marker = self.project_dir / MARKER_NAME
        self.written: bytes | None = None
        """The marker's bytes as the loop last wrote them (None: not written by this run)."""

    def payload(self, record: IterationRecord, selection: Selection, snapshot: Snapshot) -> dict[str, Any]:
        """What the marker shows of the iteration (the trusted copy adds the paths); ``snapshot``: the pre-iteration list's."""
        return {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "pid": os.getpid(),
            "max_iterations": self.config.max_iterations,
            "mode": "sandbox" if self.runner.isolates else "direct",
            "runner": self.runner.name,
            "skipReview": not self.policy.uses_review,
            "reviewCap": self.config.review_cap,
            "iteration": record.number,
            "iterationMode": selection.mode,
            "story": selection.story_id,
            "preIterationSnapshot": {sid: state.as_dict() for sid, state in snapshot.items()},
            "ralphDir": str(self.ralph_dir),
            "policy": self.policy.name,
            "store": self.store.name,
        }

    def write(self, run_dir: Path, record: IterationRecord, selection: Selection, snapshot: Snapshot) -> None:
        """Write ``state.json`` in ``run_dir`` and the marker in the project."""
        payload = self.payload(record, selection, snapshot)
        trusted = {**payload, "projectDir": str(self.project_dir), "tasksPath": str(self.tasks_path), "runDir": str(run_dir)}
        # compact JSON: json's indenting encoder is pure Python and slow on large task lists
        atomic_write_text(run_dir / "state.json", json.dumps(trusted))
        data = (json.dumps({**payload, "runDir": str(run_dir)}) + "\n").encode()
        safeio.write_bytes(self.marker, self.project_dir, data, replace_dir=True)
        self.written = data

    def remove_marker(self) -> None:
        """Remove the marker, unless another process (a later run) wrote it; a link is removed, not followed."""
        try:
            data = json.loads(safeio.read_bytes(self.marker, self.project_dir))
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or data.get("pid") in (None, os.getpid()):
            safeio.remove(self.marker, self.project_dir)
