"""Text tables of the commands that show runs (``ralph status``, ``ralph report``): token cells, aligned rows.

Kept apart from :mod:`ralph.lifecycle.report` (the HTML report, the timeline) so that
``ralph status`` imports only this.
"""

from __future__ import annotations

from typing import Any

USAGE_COLUMNS = ("tokens in", "cache read", "cache write", "tokens out")
USAGE_NAMES = ("input", "cache_read", "cache_write", "output")


def usage_of(value: Any) -> dict[str, int]:
    """The token counts of a recorded ``usage`` dict (unknown keys and bad values dropped)."""
    if not isinstance(value, dict):
        return {}
    return {k: int(v) for k, v in value.items() if k in USAGE_NAMES and isinstance(v, (int, float))}


def tokens(n: int | None) -> str:
    """A token count for a table: ``812``, ``30.4k``, ``1.25M``; ``-`` when unknown."""
    if n is None:
        return "-"
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def usage_cells(usage: dict[str, int]) -> tuple[str, ...]:
    """input, cache read, cache write and output tokens (``-`` where the agent reported none)."""
    return tuple(tokens(usage.get(name)) for name in USAGE_NAMES)


def aligned_rows(rows: list[tuple[str, ...]]) -> list[str]:
    """Indented, left-aligned text table lines (header, rule, rows) and a blank line."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    return [out[0], "  " + "  ".join("-" * w for w in widths), *out[1:], ""]
