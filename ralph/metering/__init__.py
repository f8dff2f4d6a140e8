"""Metering the model traffic: the loop's own view of tokens, cost and limits.

The agent can write to the stream the loop parses (its CLI's stdout), so nothing the loop
decides may rest on it.  Instead the agent's CLI talks to the model API through a loop-owned
endpoint (:class:`~ralph.metering.endpoint.ModelMeter`), which forwards the calls it can book
(:mod:`ralph.metering.routes`; every other request is refused), streams the answer back unchanged
and books what the API itself said: tokens, cost at the price
table's rate (:mod:`ralph.metering.prices`), rate and usage limits with their reset times, the
subscription windows.  docs/metering.md tells the whole story.
"""

from ralph.metering.endpoint import MeterError, ModelMeter
from ralph.metering.ledger import TOKEN_KINDS, MeterSession, SessionUsage
from ralph.metering.prices import DEFAULT_PRICES, Price, PriceTable
from ralph.metering.traffic import Exchange

__all__ = [
    "DEFAULT_PRICES", "TOKEN_KINDS", "Exchange", "MeterError", "MeterSession", "ModelMeter", "Price", "PriceTable",
    "SessionUsage",
]
