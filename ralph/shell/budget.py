"""Deterministic limits on the work of one analysis: the walk counts its steps, it never looks at a clock.

A command line is short, but what it expands to need not be: ``a=x; a=$a$a; ...`` doubles a value
with every seven characters, ``{1..99999999}`` names a hundred million words, nested ``for`` loops
multiply their bodies, aliases and ``eval`` reparse text.  The walker spends from one
:class:`Budget` per :func:`~ralph.shell.analyze` call wherever its work grows (characters parsed or
expanded, syntax nodes visited, states copied); the first spend past the limit raises
:class:`BudgetExceeded`, and ``analyze`` records the command as opaque (denied in direct mode) and
returns what it found so far.  The limits are counts, so the verdict on a given command is the same
on a fast machine and a loaded one.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

MAX_STEPS = 1_500_000
"""Work units one analysis may spend: 0.15-0.5 s of CPU at the most (``benchmarks/hook_latency.py``
measures the worst inputs); a plain 100 KB command line needs under half."""
MAX_VALUE = 16_384
"""Characters a variable's value may reach on the line before the analysis stops tracking it."""
NODE_COST = 16
"""Units for visiting one syntax node (creating its Python objects costs as much as copying ~16 characters)."""


class BudgetExceeded(Exception):
    """The analysis reached :data:`MAX_STEPS`."""


class Budget:
    """The work units one analysis has spent, and its limit."""

    __slots__ = ("limit", "steps", "memo")

    def __init__(self, limit: int = MAX_STEPS) -> None:
        self.limit = limit
        self.steps = 0
        self.memo: dict[Any, Any] = {}
        """Results of file-system lookups made under this budget (:mod:`ralph.shell.paths`): one hook call
        looks a path up once."""

    def spend(self, units: int) -> None:
        """Count ``units`` of work; past the limit, raise :class:`BudgetExceeded`."""
        self.steps += units
        if self.steps > self.limit:
            raise BudgetExceeded(self.limit)


_active = threading.local()


def active() -> Budget:
    """The budget of the analysis (or guard check) running in this thread: helpers that decode or traverse
    syntax or look paths up spend from it without being handed it.  Outside one, a fresh unlimited budget
    (nothing is remembered from one call to the next)."""
    budget = getattr(_active, "budget", None)
    return budget if budget is not None else Budget(limit=_UNLIMITED)


def activate(budget: Budget | None) -> Budget | None:
    """Make ``budget`` this thread's active budget; returns the one it replaces."""
    previous = getattr(_active, "budget", None)
    _active.budget = budget
    return previous


@contextmanager
def scope(limit: int) -> Iterator[Budget]:
    """A budget of ``limit`` units, active in this thread for the ``with`` block (the one it replaces comes
    back after).  A guard opens one around its checks so that its own path work is bounded too."""
    budget = Budget(limit)
    previous = activate(budget)
    try:
        yield budget
    finally:
        activate(previous)


_UNLIMITED = 1 << 62
