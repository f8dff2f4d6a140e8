"""What model tokens cost: a price table per model, the loop's own figure for the budget.

Prices are USD per million tokens: Anthropic's as Claude Code's own model catalog lists them
(the CLI ralph ships with), OpenAI's as published.  A model name is matched against the table's patterns (``fnmatch`` globs, the first
match wins); ``[tool.ralph.prices]`` in the project's config comes first, so a person can
correct a price or add a model (docs/metering.md).  The last patterns of the built-in table
are deliberately broad (``*opus*`` at the Opus 4 price): an unknown model of a known family is
priced high rather than free, so a budget stops early rather than late.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "cost_of"]


@dataclass(frozen=True)
class Price:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    """A 5-minute cache write (Anthropic); OpenAI has no separate write price (same as ``input``)."""
    cache_write_1h: float | None = None
    """A 1-hour cache write (Anthropic: twice the input price); None: ``2 * input``."""
    long_prompt_above: int | None = None
    """A request whose prompt (input + cache reads + cache writes) is larger is priced at :attr:`long_prompt`."""
    long_prompt: Price | None = None

    def of(self, usage: Mapping[str, int]) -> float:
        """The cost in USD of one call's ``usage`` (ralph's token names: input, cache_read, cache_write,
        cache_write_1h — part of cache_write —, output)."""
        prompt = usage.get("input", 0) + usage.get("cache_read", 0) + usage.get("cache_write", 0)
        if self.long_prompt is not None and self.long_prompt_above is not None and prompt > self.long_prompt_above:
            return self.long_prompt.of(usage)
        write_1h = self.cache_write_1h if self.cache_write_1h is not None else 2 * self.input
        hour = min(usage.get("cache_write_1h", 0), usage.get("cache_write", 0))
        total = (
            usage.get("input", 0) * self.input
            + usage.get("output", 0) * self.output
            + usage.get("cache_read", 0) * self.cache_read
            + (usage.get("cache_write", 0) - hour) * self.cache_write
            + hour * write_1h
        )
        return total / 1_000_000


def _anthropic(input_price: float, output_price: float, cache_read: float | None = None) -> Price:
    """Anthropic's scheme: cache reads 0.1x (unless given), 5-minute writes 1.25x, 1-hour writes 2x the input price."""
    read = input_price * 0.1 if cache_read is None else cache_read
    return Price(input_price, output_price, round(read, 6), round(input_price * 1.25, 6), input_price * 2)


def _openai(input_price: float, cached: float, output_price: float) -> Price:
    return Price(input_price, output_price, cached, input_price, input_price)


_HAIKU_55 = Price(0.1, 0.5, 0.01, 0.125, 0.2, long_prompt_above=100_000, long_prompt=Price(0.5, 2.5, 0.05, 0.625, 1.0))

DEFAULT_PRICES: tuple[tuple[str, Price], ...] = (
    # Anthropic, as Claude Code's own model catalog prices them (first-party names; Bedrock,
    # Vertex and gateway names match from "claude-" on)
    ("claude-opus-5-5*", _anthropic(4, 20, 0.2)),
    ("claude-opus-5*", _anthropic(5, 25)),
    ("claude-opus-4-[5-9]*", _anthropic(5, 25)),
    ("claude-opus-4*", _anthropic(15, 75)),
    ("claude-3-opus*", _anthropic(15, 75)),
    ("claude-sonnet-5-5*", _anthropic(2, 10, 0.1)),
    ("claude-sonnet-5*", _anthropic(2, 10)),
    ("claude-sonnet-4*", _anthropic(3, 15)),
    ("claude-3-7-sonnet*", _anthropic(3, 15)),
    ("claude-3-5-sonnet*", _anthropic(3, 15)),
    ("claude-haiku-5-5*", _HAIKU_55),
    ("claude-haiku-4-5*", _anthropic(1, 5)),
    ("claude-3-5-haiku*", _anthropic(0.8, 4)),
    ("claude-3-haiku*", _anthropic(0.25, 1.25)),
    ("claude-fable-5-2*", _anthropic(8, 40, 0.2)),
    ("claude-mythos-5-2*", _anthropic(8, 40, 0.2)),
    ("claude-fable-5-1*", _anthropic(10, 50, 0.25)),
    ("claude-mythos-5-1*", _anthropic(10, 50, 0.25)),
    ("claude-fable-5*", _anthropic(10, 50)),
    ("claude-mythos-5*", _anthropic(10, 50)),
    # OpenAI (Codex), as published
    ("gpt-5*-mini*", _openai(0.25, 0.025, 2)),
    ("gpt-5*-nano*", _openai(0.05, 0.005, 0.4)),
    ("gpt-5*", _openai(1.25, 0.125, 10)),
    ("codex-mini*", _openai(1.5, 0.375, 6)),
    ("gpt-4.1-mini*", _openai(0.4, 0.1, 1.6)),
    ("gpt-4.1*", _openai(2, 0.5, 8)),
    ("gpt-4o-mini*", _openai(0.15, 0.075, 0.6)),
    ("gpt-4o*", _openai(2.5, 1.25, 10)),
    ("o4-mini*", _openai(1.1, 0.275, 4.4)),
    ("o3*", _openai(2, 0.5, 8)),
    # families, priced at their dearest model: an unknown version is not free
    ("*opus*", _anthropic(15, 75)),
    ("*fable*", _anthropic(10, 50)),
    ("*mythos*", _anthropic(10, 50)),
    ("*sonnet*", _anthropic(3, 15)),
    ("*haiku*", _anthropic(1, 5)),
)
"""The built-in table: (model-name glob, price), most specific first."""


class PriceTable:
    """Prices for model names: the configured overrides first, then :data:`DEFAULT_PRICES`."""

    def __init__(self, overrides: Mapping[str, Price] | None = None, defaults: Iterable[tuple[str, Price]] = DEFAULT_PRICES):
        self.entries: list[tuple[str, Price]] = [*(overrides or {}).items(), *defaults]

    def price_for(self, model: str | None) -> Price | None:
        """The price of ``model`` (case-insensitive, a ``provider/`` or region prefix allowed), or None."""
        if not model:
            return None
        name = model.lower()
        names = [name, name.rsplit("/", 1)[-1]]
        if "claude-" in name:  # us.anthropic.claude-..., anthropic/claude-..., claude-...@20250929
            names.append(name[name.index("claude-"):].split("@", 1)[0])
        for pattern, price in self.entries:
            pattern = pattern.lower()
            if any(fnmatch.fnmatchcase(candidate, pattern) for candidate in names):
                return price
        return None


def cost_of(usage: Mapping[str, int], model: str | None, table: PriceTable) -> float | None:
    """USD for ``usage`` of ``model``, or None when the table has no price for it."""
    price = table.price_for(model)
    return None if price is None else price.of(usage)
