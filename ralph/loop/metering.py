"""The run's model meter as the loop uses it: one meter session per agent process.

The loop asks each agent where its CLI would talk to the model (:meth:`model_upstream`); when it
can be pointed elsewhere, the loop starts its :class:`~ralph.metering.ModelMeter` (once per run,
on first use), opens a session for the process, gives the agent the session's URL as its model
endpoint, and after the process is gone reads the session's totals into the iteration's record:
tokens, cost, whether the model answered at all, and a rate limit, usage limit or context overflow
the session ended on.  Those, never the agent's output stream, decide counting, waits and budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ralph.config import RalphConfig
    from ralph.contracts import Agent, Runner
    from ralph.loop.records import IterationRecord
    from ralph.metering import Exchange, MeterSession, ModelMeter, SessionUsage

def model_upstream(agent: Agent) -> str | None:
    """The model API base URL ``agent``'s CLI would use, when the agent can be pointed at another one."""
    method = getattr(agent, "model_upstream", None)
    if not callable(method):
        return None
    value = method()
    return value if isinstance(value, str) and value else None


def meter_host(runner: Runner) -> str | None:
    """The address the meter must listen on for the runner's agents to reach it (None: they cannot).

    A runner says it with ``model_endpoint_host()``; one that does not (it may run the agent on
    another machine) is not metered.
    """
    method = getattr(runner, "model_endpoint_host", None)
    if callable(method):
        value = method()
        return value if isinstance(value, str) and value else None
    return None


class LoopMeter:
    """Starts the run's meter when a metered agent first runs; opens and closes its sessions."""

    def __init__(self, config: RalphConfig, runner: Runner, emit: Callable[..., None]) -> None:
        self.config = config
        self.runner = runner
        self.emit = emit
        self.meter: ModelMeter | None = None
        self._lock = threading.Lock()
        self._iteration: int | None = None
        from ralph.loop.quota import QuotaUse

        self.quota = QuotaUse()
        """The run's use of the subscription's windows, from every metered response (``--max-quota``)."""
        self._quota_lock = threading.Lock()

    def enabled_for(self, agent: Agent) -> str | None:
        """Why ``agent`` is not metered in this run, or None when it is (``metering = false`` ...)."""
        if not getattr(self.config, "metering", True):
            return "metering = false in the config"
        if model_upstream(agent) is None:
            return f"agent {agent.name!r} cannot be pointed at a model endpoint"
        if meter_host(self.runner) is None:
            return f"runner {self.runner.name!r} cannot reach a loop-owned endpoint"
        return None

    def open(self, agent: Agent, label: str, iteration: int) -> MeterSession | None:
        """A session for one process of ``agent`` (None: not metered; the agent's own reports count)."""
        if self.enabled_for(agent) is not None:
            return None
        upstream = model_upstream(agent)
        assert upstream is not None
        meter = self._started()
        self._iteration = iteration
        return meter.open_session(label, upstream)

    def close(self, session: MeterSession) -> SessionUsage:
        """Close ``session`` once its process is gone; requests for it are refused from now on."""
        assert self.meter is not None
        usage = self.meter.close_session(session)
        if usage.refused or usage.blocked:
            self.emit("model_requests_refused", session=session.label, refused=usage.refused,
                      blocked=list(usage.blocked))
        return usage

    def quota_over(self, limits: dict[str, float] | None) -> str | None:
        """Why ``--max-quota`` stops the run now (None: it does not)."""
        with self._quota_lock:
            return self.quota.over(limits)

    def quota_summary(self) -> dict[str, Any]:
        """The run's use of each window (``summary.json``'s ``metering.quota_used``)."""
        with self._quota_lock:
            return self.quota.summary()

    def stop(self) -> None:
        """Stop the meter (the run ended); what it met inside itself goes to the event log."""
        if self.meter is None:
            return
        self.meter.stop()
        for error in self.meter.errors:
            self.emit("metering_error", error=error[-2000:])

    def _started(self) -> ModelMeter:
        with self._lock:
            if self.meter is None:
                from ralph.errors import UnavailableError
                from ralph.metering import MeterError, ModelMeter

                host = meter_host(self.runner) or "127.0.0.1"
                meter = ModelMeter(host=host, prices=price_table(self.config), on_exchange=self._on_exchange)
                try:
                    self.meter = meter.start()
                except MeterError as exc:
                    raise UnavailableError(
                        f"{exc}; the loop does not run an agent unmetered behind your back: free the address, "
                        "or set metering = false in [tool.ralph] (cost and limits then come from the agent's reports)"
                    ) from None
                self.emit("metering_started", url=self.meter.url)
            return self.meter

    def _on_exchange(self, exchange: Exchange) -> None:
        """One model call finished: the event log gets a line (tokens, cost, limits, quota; no credentials)."""
        summary = exchange.summary()
        if summary.get("quota"):
            import time

            with self._quota_lock:
                self.quota.add(summary["quota"], time.time())
        self.emit("model_request", iteration=self._iteration, **summary)


def price_table(config: RalphConfig) -> Any:
    """The price table of the run: ``[tool.ralph.prices]`` first, then the built-in one."""
    from ralph.metering import Price, PriceTable

    overrides = {}
    for pattern, entry in (getattr(config, "prices", None) or {}).items():
        values = entry if isinstance(entry, dict) else entry.model_dump()
        overrides[pattern] = Price(
            input=values["input"], output=values["output"],
            cache_read=values["cache_read"] if values.get("cache_read") is not None else values["input"] * 0.1,
            cache_write=values["cache_write"] if values.get("cache_write") is not None else values["input"] * 1.25,
            cache_write_1h=values.get("cache_write_1h"),
        )
    return PriceTable(overrides)


def apply_usage(record: IterationRecord, usage: SessionUsage) -> None:
    """Add one metered session's totals to the iteration's record (an empty response's retry adds a second)."""
    record.metered = True
    record.answered = (record.answered or 0) + usage.answered
    record.model_requests += usage.requests
    for kind, count in usage.usage.items():
        record.usage[kind] = record.usage.get(kind, 0) + count
    record.cost_usd += usage.cost
    record.unpriced = sorted(set(record.unpriced) | set(usage.unpriced))
    if usage.quota:
        record.quota = usage.quota
    # the last session decides how the iteration ended
    record.api_error = usage.error
    record.usage_limit = record.rate_limit = None
    record.retry_after = record.limit_resets_at = None
    record.context_overflow = usage.limit == "context_overflow"
    if usage.limit == "usage_limit":
        record.usage_limit = usage.limit_message or "usage limit reached"
        record.limit_resets_at = usage.resets_at
    elif usage.limit == "rate_limit":
        record.rate_limit = usage.limit_message or "rate limited"
        record.retry_after = usage.retry_after
