"""What a run produces: one record per iteration, the run's result and exit codes, token sums.

Kept apart from the engine so that the parts of the loop (the gate keeper, the
reports) can name these without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.tasks import TaskList

EXIT_COMPLETE = 0
EXIT_EXHAUSTED = 1
EXIT_USAGE = 2
EXIT_FAILED_STORIES = 3
EXIT_GLOBAL_TIMEOUT = 4
EXIT_BUDGET = 5
EXIT_USAGE_LIMIT = 6
EXIT_AGENT_FAILING = 7
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as shells and seed 001 report it; 130 is SIGINT's


@dataclass
class IterationRecord:
    """What one iteration did, for the summary and ``ralph status``."""

    number: int
    mode: str
    story_id: str | None
    exit_code: int | None = None
    timed_out: bool = False
    cost_usd: float = 0.0
    seconds: float = 0.0
    promise: bool = False
    violations: list[str] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)
    usage_limit: str | None = None
    context_overflow: bool = False
    agent: str = ""
    model: str | None = None
    rate_limit: str | None = None
    """The API's rate-limit or overload rejection that ended the iteration (waited out, not counted)."""
    retry_after: float | None = None
    """Seconds the API asked to wait, when the agent passed it on."""
    agent_error: str | None = None
    """The agent's own last error message (e.g. "Not logged in · Please run /login")."""
    usage: dict[str, int] = field(default_factory=dict)
    """Tokens the agent reported (``input``, ``cache_read``, ``cache_write``, ``output``)."""


@dataclass
class RunResult:
    """How the run ended."""

    exit_code: int
    reason: str
    run_dir: Path | None
    iterations: list[IterationRecord]
    cost_usd: float
    tasks: TaskList | None


USAGE_KEYS = {
    "input_tokens": "input",
    "cache_read_input_tokens": "cache_read",
    "cache_creation_input_tokens": "cache_write",
    "output_tokens": "output",
}
"""Token counts of a stream-json ``usage`` object, and the names ralph records them under."""


def add_usage(into: dict[str, int], usage: Any) -> None:
    """Add the token counts of an agent's ``usage`` report to ``into`` (other fields ignored)."""
    if not isinstance(usage, dict):
        return
    for key, name in USAGE_KEYS.items():
        value = usage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            into[name] = into.get(name, 0) + int(value)


def total_usage(records: list[IterationRecord]) -> dict[str, int]:
    """The token counts of all ``records``, summed."""
    total: dict[str, int] = {}
    for record in records:
        for name, value in record.usage.items():
            total[name] = total.get(name, 0) + value
    return total
