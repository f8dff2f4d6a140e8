"""The JSONL event log: every loop event, one JSON object a line, in the run directory."""

from __future__ import annotations

import json
import time

from ralph.api import LoopEvent, hookimpl


@hookimpl
def ralph_loop_event(event: LoopEvent) -> None:
    """Append ``event`` to ``<run dir>/events.jsonl`` (flushed per line, so a crash loses nothing)."""
    if event.run_dir is None:
        return
    record = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S"), "kind": event.kind, **event.data}
    with (event.run_dir / "events.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, default=str) + "\n")
