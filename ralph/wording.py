"""Small things in how ralph says things: a count with its noun in the right number."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MIN_TITLE", "counted", "cut", "fit_column", "terminal_width"]

_IRREGULAR = {"story": "stories", "this": "these", "was": "were", "is": "are"}


def counted(number: int | float | None, noun: str, plural: str | None = None) -> str:
    """``1 story``, ``2 stories``, ``0 iterations``: the number and ``noun``, plural unless the number is 1
    (``plural``, else ``-y`` to ``-ies`` for ``story``-like nouns, else ``noun + "s"``)."""
    shown = "?" if number is None else f"{number:g}" if isinstance(number, float) else str(number)
    if number == 1:
        return f"{shown} {noun}"
    if plural is None:
        plural = _IRREGULAR.get(noun) or (noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s")
    return f"{shown} {plural}"


MIN_TITLE = 24
"""A title column is never cut below this many characters, however narrow the terminal."""


def terminal_width() -> int | None:
    """The terminal's width in columns (``COLUMNS`` when set); None when the output is not a terminal (a file,
    a pipe: nothing to fit)."""
    import os
    import sys

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError, AttributeError):
        return None


def fit_column(rows: Sequence[tuple[str, ...]], column: int, width: int | None = None, separator: int = 2) -> list[tuple[str, ...]]:
    """``rows`` of a table with cells of ``column`` cut (ending in ``…``) so that the table fits ``width``
    columns (the terminal's by default; no terminal, no cut); never below :data:`MIN_TITLE` characters, never
    cut when it fits.  Every cell is made one line (:func:`ralph.agenttext.one_line`): a title the agent wrote
    in a split cannot start a line of the table with its own words."""
    from ralph.agenttext import one_line

    rows = [tuple(one_line(cell) for cell in row) for row in rows]
    if not rows:
        return []
    total = terminal_width() if width is None else width
    if total is None:
        return list(rows)
    others = sum(max(len(row[i]) for row in rows) for i in range(len(rows[0])) if i != column)
    room = max(MIN_TITLE, total - others - separator * (len(rows[0]) - 1))
    return [row[:column] + (cut(row[column], room),) + row[column + 1:] for row in rows]


def cut(text: str, width: int) -> str:
    """``text`` as it is when it has at most ``width`` characters, else its first ones and ``…``."""
    return text if len(text) <= width else text[: max(1, width - 1)].rstrip() + "…"
