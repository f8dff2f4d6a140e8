"""``ralph status --follow``: the live view of a run started elsewhere, from its event log.

The run (in another terminal, in the background, with the agent in the sandbox)
appends every event to ``events.jsonl`` in its run directory; this tails that file
and gives each event to the reporters, as ``ralph run`` does (the console view, footer
included; the event log skips them: they carry no run directory).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["follow_run"]

POLL_SECONDS = 0.2


def _new_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON lines appended since ``offset``, and the offset after them."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset  # a line still being written
    events = []
    for line in chunk[: end + 1].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("kind"), str):
            events.append(record)
    return events, offset + end + 1


def follow_run(project_dir: Path, live: bool | None = None, state_dir: str | None = None) -> int:
    """Show the latest run of ``project_dir`` as it goes; returns when it finishes (0), stops (1) or on Ctrl-C (130)."""
    import sys

    from ralph.contracts import LoopEvent
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock
    from ralph.loop.rundir import latest_run
    from ralph.plugin.manager import PluginHost

    run_dir = latest_run(project_dir, state_dir)
    if run_dir is None:
        sys.stderr.write("ralph: no ralph run recorded for this project yet (start one with `ralph run`)\n")
        return 1
    lock = ProjectLock(git_dir(project_dir))
    host = PluginHost()
    for warning in host.failure_warnings():  # once: a broken reporter is left out, not silently
        sys.stderr.write(warning + "\n")
    path = run_dir / "events.jsonl"
    offset = 0
    try:
        while True:
            running = lock.is_held()  # asked before reading, so nothing written after is missed
            events, offset = _new_events(path, offset)
            for record in events:
                kind = record.pop("kind")
                if kind == "run_started" and live is False:
                    record["live"] = False  # --no-live: plain lines even on a terminal
                host.emit(LoopEvent(kind, record, None))
                if kind == "run_finished":
                    return 0
            if not running and not events:
                sys.stderr.write(f"ralph | the run in {run_dir} stopped without finishing (killed?)\n")
                return 1
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        sys.stderr.write("ralph | stopped following (the run goes on)\n")
        return 130
    finally:
        host.emit(LoopEvent("follow_ended", {}, None))  # the console view takes its footer down
