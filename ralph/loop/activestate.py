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
        self._snapshot_json: tuple[Snapshot, str] | None = None
        """The last snapshot written and its JSON: an unchanged snapshot is not serialised again."""
        self._state_json: dict[tuple[str, Any], str] = {}
        """Each story's entry as written before, by (id, state): a story whose state is unchanged is not
        serialised again."""

    def _header(self, record: IterationRecord, selection: Selection) -> dict[str, Any]:
        """What the marker shows of the iteration besides the snapshot."""
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
            "ralphDir": str(self.ralph_dir),
            "policy": self.policy.name,
            "stateFields": list(self.policy.state_fields),
            "store": self.store.name,
        }

    def write(self, run_dir: Path, record: IterationRecord, selection: Selection, snapshot: Snapshot) -> None:
        """Write ``state.json`` in ``run_dir`` and the marker in the project: the iteration and its pre-iteration
        snapshot (``preIterationSnapshot``: each story's state fields), the trusted copy also the paths.

        The snapshot is serialised once for both, and only the stories whose state changed since the
        last write are serialised again.  Neither file is synced to disk: each describes the running
        iteration only and is rewritten at the next one."""
        header = self._header(record, selection)
        trusted = {**header, "projectDir": str(self.project_dir), "tasksPath": str(self.tasks_path), "runDir": str(run_dir)}
        stories = self._snapshot_text(snapshot)
        # compact JSON: json's indenting encoder is pure Python and slow on large task lists
        atomic_write_text(run_dir / "state.json", _with_snapshot(trusted, stories), sync=False)
        data = (_with_snapshot({**header, "runDir": str(run_dir)}, stories) + "\n").encode()
        safeio.write_bytes(self.marker, self.project_dir, data, replace_dir=True, sync=False)
        self.written = data

    def _snapshot_text(self, snapshot: Snapshot) -> str:
        """``snapshot`` as JSON (the text of the last write when it is the same snapshot)."""
        last = self._snapshot_json
        if last is not None and last[0] == snapshot:
            return last[1]
        if len(self._state_json) > 4 * len(snapshot) + 64:
            self._state_json.clear()
        cache, dumps = self._state_json, json.dumps
        parts = []
        for item in snapshot.items():
            part = cache.get(item)
            if part is None:
                part = cache[item] = f"{dumps(item[0])}: {dumps(item[1].as_dict())}"
            parts.append(part)
        text = "{" + ", ".join(parts) + "}"
        self._snapshot_json = (dict(snapshot), text)
        return text

    def remove_marker(self) -> None:
        """Remove the marker, unless another process (a later run) wrote it; a link is removed, not followed."""
        try:
            data = json.loads(safeio.read_bytes(self.marker, self.project_dir))
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or data.get("pid") in (None, os.getpid()):
            safeio.remove(self.marker, self.project_dir)


def _with_snapshot(fields: dict[str, Any], stories: str) -> str:
    """``fields`` as a JSON object with ``preIterationSnapshot`` (already JSON) as its last key."""
    return json.dumps(fields)[:-1] + ', "preIterationSnapshot": ' + stories + "}"
