"""What a run produces: one record per iteration, the run's result and exit codes, token sums.

Kept apart from the engine so that the parts of the loop (the gate keeper, the
reports) can name these without importing the engine.
"""

from __future__ import annotations

import math
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
EXIT_WAITING = 8
"""Only stories waiting for a person's answer are left (``ralph answer``, then ``ralph run`` again)."""
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
    api_error: str | None = None
    """The meter's view of the last failed model call (status, error type, the API's message); None when
    not metered or none failed.  What a metered agent's repeated failure is quoted with."""
    usage: dict[str, int] = field(default_factory=dict)
    """Tokens of the iteration (``input``, ``cache_read``, ``cache_write``, ``output``): the meter's
    count of the model traffic when :attr:`metered`, else what the agent reported."""
    metered: bool = False
    """Cost, tokens and limits come from the loop's own meter of the model traffic (ralph/metering),
    not from the agent's output stream."""
    answered: int | None = None
    """Model calls the meter saw answered (None: not metered); 0 means the agent could not have acted."""
    model_requests: int = 0
    """Model calls the meter saw (answered, rejected or failed)."""
    reported_cost: float = 0.0
    """USD the agent's own output claimed (display only when :attr:`metered`)."""
    reported_usage: dict[str, int] = field(default_factory=dict)
    """Tokens the agent's own output claimed (display only when :attr:`metered`)."""
    limit_resets_at: float | None = None
    """Epoch seconds when the usage limit resets, as the API said (a header or the error body)."""
    quota: dict[str, Any] = field(default_factory=dict)
    """The subscription windows the API last reported (``anthropic-ratelimit-unified-*``: 5h, 7d ...)."""
    rejected: bool = False
    """The iteration did no work: the meter saw the model answer none of its calls, and the tree (HEAD,
    changes, untracked files) was as before.  Only such an iteration does not count toward ``-n``."""
    unpriced: list[str] = field(default_factory=list)
    """Models the iteration called that have no price (``[tool.ralph.prices]``): their tokens cost 0."""
    tool_calls: int = 0
    """Tool calls whose result the agent's output reported (Claude Code's tool results, Codex's
    finished commands), the ones the loop's guards denied left out."""
    tool_errors: int = 0
    """Of :attr:`tool_calls`, those reported as failed (``is_error``, a non-zero exit)."""
    tool_denials: int = 0
    """Tool results of calls the loop's guards denied (matched by the hook's ``tool_use_id``)."""
    tool_error: str | None = None
    """The first failed call's output (at most 1000 characters)."""
    changed: bool | None = None
    """The iteration changed the project (HEAD, a change against it, the untracked files), as the loop
    looked right after the agent's session; None: not looked at (the agent's process exited 0 and the
    meter saw no limit)."""
    commands_failed: bool = False
    """The agent made tool calls, every one failed (denials apart), and the iteration changed nothing
    in the project: its environment is probably broken (a sandbox that cannot start a command, a
    missing program)."""


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
    """Add the token counts of an agent's ``usage`` report to ``into`` (other fields ignored).

    Only finite, non-negative counts are added: a report can never lower a total.
    """
    if not isinstance(usage, dict):
        return
    counts = {name: int(value) for key, name in USAGE_KEYS.items()
              if isinstance(value := usage.get(key), (int, float)) and not isinstance(value, bool)
              and math.isfinite(value) and value >= 0}
    cached = usage.get("cached_input_tokens")  # Codex: part of input_tokens, read from the cache
    if isinstance(cached, (int, float)) and not isinstance(cached, bool) and math.isfinite(cached) and cached > 0:
        cached = min(int(cached), counts.get("input", 0))
        counts["input"] = counts.get("input", 0) - cached
        counts["cache_read"] = counts.get("cache_read", 0) + cached
    for name, value in counts.items():
        into[name] = into.get(name, 0) + value


def reported_cost(value: Any) -> float:
    """A cost an agent reported, as USD that can only add: finite and positive, else 0 (and at most
    :data:`MAX_REPORTED_COST`, so that sums stay finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    cost = float(value)
    return min(cost, MAX_REPORTED_COST) if math.isfinite(cost) and cost > 0 else 0.0


MAX_REPORTED_COST = 1e9
"""The most one cost report counts for (USD): more is taken as this, never as infinity."""


def total_usage(records: list[IterationRecord]) -> dict[str, int]:
    """The token counts of all ``records``, summed."""
    total: dict[str, int] = {}
    for record in records:
        for name, value in record.usage.items():
            total[name] = total.get(name, 0) + value
    return total
