"""What the live footer shows, folded from loop events (stdlib and ralph.api only, so it is cheap to test).

The same events drive it in ``ralph run`` (in-process) and in ``ralph status
--follow`` (read back from the run's ``events.jsonl``).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from ralph.api.reporters import format_elapsed

__all__ = ["RunState", "fmt_elapsed"]


fmt_elapsed = format_elapsed


def _epoch(data: dict[str, Any]) -> float:
    """When an event happened: its ``ts`` (written by the event log, local time) or now."""
    stamp = data.get("ts")
    if isinstance(stamp, str):
        try:
            return dt.datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            pass
    return time.time()


@dataclass
class RunState:
    """The run as the footer shows it."""

    stories: int = 0
    done: int = 0
    iteration: int = 0
    max_iterations: int = 0
    mode: str = ""
    story: str = ""
    cost: float = 0.0
    gate: str = ""
    """The last gate result, e.g. ``tests passed (US-001)``."""
    note: str = ""
    """What the loop is doing besides running the agent (waiting for a rate limit ...)."""
    runner: str = ""
    agent: str = ""
    started_at: float | None = None
    """Wall-clock start of the run (``time.time()`` scale)."""
    finished: bool = False
    ended_elapsed: float | None = None

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since the run started; frozen once it finished."""
        if self.ended_elapsed is not None:
            return self.ended_elapsed
        if self.started_at is None:
            return 0.0
        return (time.time() if now is None else now) - self.started_at

    def update(self, kind: str, data: dict[str, Any]) -> None:
        """Fold one event in."""
        elapsed = data.get("elapsed")
        if kind == "run_started":
            self.__init__()  # type: ignore[misc]  # a new run: forget the previous one
            self.stories = int(data.get("stories") or 0)
            self.done = int(data.get("stories_done") or 0)
            self.max_iterations = int(data.get("max_iterations") or 0)
            self.runner, self.agent = str(data.get("runner") or ""), str(data.get("agent") or "")
            self.started_at = _epoch(data) - float(elapsed or 0)
        elif kind == "iteration_started":
            self.iteration = int(data.get("iteration") or 0)
            self.max_iterations = int(data.get("max_iterations") or self.max_iterations)
            self.mode, self.story = str(data.get("mode") or ""), str(data.get("story") or "")
            self.cost = float(data.get("cost_so_far") or self.cost)
            self.stories = int(data.get("stories") or self.stories)
            done = data.get("stories_done")
            self.done = int(done) if done is not None else self.done
            self.note = ""
        elif kind == "iteration_finished":
            self.cost = float(data.get("cost_so_far") or self.cost)
            if data.get("stories_done") is not None:
                self.done = int(data["stories_done"])
        elif kind == "gate":
            verdict = "passed" if data.get("passed") else ("timed out" if data.get("timed_out") else "FAILED")
            self.gate = f"{data.get('gate')} {verdict} ({data.get('story')})"
        elif kind == "rate_limit":
            self.note = f"rate limited: retrying at {data.get('retry_at')}"
        elif kind == "usage_limit_wait":
            self.note = f"usage limit: waiting until {data.get('until')}"
        elif kind == "interrupt":
            self.note = "stopping (interrupted)"
        elif kind == "run_finished":
            self.finished = True
            self.done = sum(1 for s in data.get("stories") or [] if s.get("passes")) if data.get("stories") else self.done
            self.cost = float(data.get("cost_usd") or self.cost)
            self.ended_elapsed = float(elapsed) if isinstance(elapsed, (int, float)) else self.elapsed()
            self.note = str(data.get("reason") or "")
