"""The meter's books: the model exchanges of each agent session, and what they add up to.

A session is one agent process (an iteration's, or a gate's extra call).  The loop opens it
before the process starts and closes it when the process is gone; a request that arrives for a
closed (or unknown) session is refused and counted, so a process that outlived its iteration
cannot spend on the run's account, nor blur which iteration spent what.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ralph.metering.traffic import Exchange, billed_path

if TYPE_CHECKING:
    from ralph.metering.prices import PriceTable

__all__ = ["MeterSession", "SessionUsage", "TOKEN_KINDS"]

TOKEN_KINDS = ("input", "cache_read", "cache_write", "output")
"""The token counts the loop records (``cache_write`` includes 1-hour writes)."""


@dataclass(frozen=True)
class SessionUsage:
    """What one session's model traffic says, read by the loop after the agent process ended."""

    requests: int
    """Billed model calls (messages / responses), answered or not."""
    answered: int
    """Calls the model answered (2xx): without one, the agent could not have acted."""
    usage: dict[str, int]
    cost: float
    """USD of the priced calls (never negative)."""
    unpriced: tuple[str, ...] = ()
    """Models that were called but have no price in the table (their tokens cost 0 here)."""
    limit: str | None = None
    """``usage_limit`` / ``rate_limit`` / ``context_overflow`` when the session ended on one (the agent gave up on it)."""
    limit_message: str | None = None
    retry_after: float | None = None
    resets_at: float | None = None
    error: str | None = None
    """The last failed call as the API answered it (``the model API answered HTTP 401 (authentication_error):
    invalid x-api-key``), or why it could not be reached; for the record and an agent that keeps failing."""
    quota: dict[str, Any] = field(default_factory=dict)
    """The last subscription windows reported (``anthropic-ratelimit-unified-*``)."""
    refused: int = 0
    """Requests refused because they came for this session after it was closed."""
    rejected: int = 0
    """Calls rejected with a rate or usage limit during the session (retried or not)."""
    seen_limit: str | None = None
    """The last limit any call hit during the session, even when a retry then succeeded."""
    blocked: tuple[str, ...] = ()
    """Requests the meter did not forward because it could not book them (``POST /v1/messages/batches``)."""


class MeterSession:
    """One agent process's account at the meter: its secret path and its exchanges."""

    def __init__(self, label: str, upstream: str, base_url: str, prices: PriceTable | None = None) -> None:
        self.label = label
        self.prices = prices
        self.upstream = upstream.rstrip("/")
        """Where this session's calls are forwarded (the model API's base URL)."""
        self.key = secrets.token_urlsafe(18)
        self.url = f"{base_url.rstrip('/')}/s/{self.key}"
        """The base URL the agent's CLI is given (``ANTHROPIC_BASE_URL`` / the provider's base URL)."""
        self.open = True
        self.exchanges: list[Exchange] = []
        self.refused = 0
        self.blocked: list[str] = []
        """Requests refused for their path or method (the first 100): the meter forwards only what it can book."""
        self._lock = threading.Lock()

    def add(self, exchange: Exchange) -> bool:
        """Book a starting exchange; False when the session is closed (the request is refused)."""
        with self._lock:
            if not self.open:
                self.refused += 1
                return False
            self.exchanges.append(exchange)
            return True

    def block(self, request: str) -> None:
        """Note a request refused for its path or method (``METHOD /path``)."""
        with self._lock:
            if len(self.blocked) < 100:
                self.blocked.append(request)

    def close(self, settle: float = 2.0) -> SessionUsage:
        """Close the session (later requests are refused) and sum it up.

        The agent's process is gone when the loop closes its session, so an exchange still being
        relayed ends at once; ``settle`` seconds at most are given to the relay to book it.
        """
        with self._lock:
            self.open = False
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            with self._lock:
                if all(e.finished for e in self.exchanges):
                    break
            time.sleep(0.005)
        return self.usage()

    def usage(self) -> SessionUsage:
        """The session's totals so far."""
        with self._lock:
            exchanges = list(self.exchanges)
            refused = self.refused
            blocked = tuple(self.blocked)
        billed = [e for e in exchanges if billed_path(e.path) and (e.status is not None or e.error is not None)]
        usage = dict.fromkeys(TOKEN_KINDS, 0)
        cost, unpriced, quota = 0.0, [], {}
        for exchange in billed:
            for kind in TOKEN_KINDS:
                usage[kind] += exchange.usage.get(kind, 0)
            if exchange.cost is None and exchange.usage and self.prices is not None:
                price = self.prices.price_for(exchange.model)
                exchange.cost = price.of(exchange.usage) if price is not None else None
            if exchange.cost is not None:
                cost += exchange.cost
            elif exchange.model and any(exchange.usage.values()) and exchange.model not in unpriced:
                unpriced.append(exchange.model)
            exchange_quota = exchange.quota()
            if exchange_quota:
                quota = exchange_quota
        ended = sorted((e for e in billed if e.seconds or e.status is not None), key=lambda e: e.started + e.seconds)
        last = ended[-1] if ended else None
        limited = last is not None and last.limit is not None and not last.answered
        failed = [e for e in ended if e.error or (e.status is not None and e.status >= 400)]
        hits = [e for e in ended if e.limit in ("usage_limit", "rate_limit")]
        return SessionUsage(
            requests=len(billed),
            answered=sum(1 for e in billed if e.answered),
            usage=usage,
            cost=cost,
            unpriced=tuple(unpriced),
            limit=last.limit if limited and last is not None else None,
            limit_message=_rejection(last) if limited and last is not None else None,
            retry_after=last.retry_after() if limited and last is not None else None,
            resets_at=last.resets_at() if limited and last is not None else None,
            error=_failure(failed[-1]) if failed else None,
            quota=quota,
            refused=refused,
            rejected=len(hits),
            seen_limit=hits[-1].limit if hits else None,
            blocked=blocked,
        )


def _rejection(exchange: Exchange) -> str:
    """How a limit reads in events and the summary: ``Request rejected (429): <the API's message>``."""
    message = exchange.error or exchange.error_type or "no message"
    if exchange.status is not None and exchange.status >= 400:
        return f"Request rejected ({exchange.status}): {message}"
    return f"{exchange.error_type or 'error'} during the response: {message}"


def _failure(exchange: Exchange) -> str:
    """A failed call as the API answered it, for a person: the status, the error's type and message."""
    message = (exchange.error or "").strip() or "no message"
    kind = f" ({exchange.error_type})" if exchange.error_type and exchange.error_type != "error" else ""
    if exchange.status is not None and exchange.status >= 400:
        return f"the model API answered HTTP {exchange.status}{kind}: {message}"
    if exchange.status is not None:
        return f"the model API's response broke off{kind}: {message}"
    return message
