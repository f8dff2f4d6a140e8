"""How much of a subscription's usage windows (5-hour, 7-day ...) this run used: ``--max-quota``.

The API tells a subscription (OAuth) client where it stands with every response: the
``anthropic-ratelimit-unified-<window>-utilization`` headers (a fraction of the window's limit) and
when each window resets (read by the meter, :func:`ralph.metering.traffic.quota_of`).  The run's
use of a window is what its utilization rose by while the run saw it: the rises between two
readings of the same window, and, once a window has reset, all of the new window's utilization
(the loop cannot tell its own use from other use of the same subscription, such as an interactive
session: it counts all of it, so a budget stops early rather than late).  The first reading is the
baseline: what was used before the run does not count.

Standard library only: ``ralph status`` folds the ``model_request`` events of a run with it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ALL_WINDOWS", "QuotaUse", "parse_max_quota", "window_label"]

ALL_WINDOWS = "*"
"""The key of a ``--max-quota`` that applies to every window the API reports."""

_WINDOW = re.compile(r"[0-9a-z_]{1,40}")
_LABELS = {"5h": "5-hour", "7d": "7-day"}


def window_label(name: str) -> str:
    """``5-hour`` for ``5h``, ``7-day`` for ``7d``, else the API's name (``7d_opus``)."""
    return _LABELS.get(name, name)


def parse_max_quota(value: Any) -> dict[str, float] | None:
    """``--max-quota``'s forms as ``{window: percent}``: ``20`` (every window), ``"5h=50,7d=10"``, a table.

    Raises ``ValueError`` saying what is wrong; percentages are in (0, 100].
    """
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, bool):
        raise ValueError("must be a percentage (20), or windows with percentages (5h=50,7d=10)")
    if isinstance(value, (int, float)):
        return {ALL_WINDOWS: _percent(value, "")}
    if isinstance(value, str):
        text = value.strip()
        if "=" not in text:
            try:
                whole = float(text.rstrip("%"))
            except ValueError:
                raise ValueError("must be a percentage (20), or windows with percentages (5h=50,7d=10)") from None
            return {ALL_WINDOWS: _percent(whole, "")}
        found: dict[str, Any] = {}
        for part in text.split(","):
            key, sep, figure = part.partition("=")
            if not sep:
                raise ValueError(f"{part.strip()!r} is not WINDOW=PERCENT (5h=50,7d=10)")
            try:
                found[key.strip()] = float(figure.strip().rstrip("%"))
            except ValueError:
                raise ValueError(f"{part.strip()!r}: {figure.strip()!r} is not a percentage") from None
        value = found
    if isinstance(value, dict):
        limits = {}
        for name, number in value.items():
            name = str(name).strip().lower()
            if not _WINDOW.fullmatch(name):
                raise ValueError(f"{name!r} is not a window name (5h, 7d, or another the API reports)")
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise ValueError(f"must give window {name} a number of percent (got {number!r})")
            limits[name] = _percent(number, f" for window {name}")
        return limits or None
    raise ValueError("must be a percentage (20), or windows with percentages (5h=50,7d=10)")


def _percent(number: float, where: str) -> float:
    if not math.isfinite(number) or not 0 < number <= 100:
        raise ValueError(f"must be above 0 and at most 100 percent{where} (got {number:g})")
    return float(number)


@dataclass
class WindowUse:
    """One window as the run saw it: the first and the last utilization (fractions), the reset, the run's use."""

    first: float
    last: float
    reset: float | None
    used: float = 0.0
    """What the run used of the window, as a fraction of its limit (0.12: 12 percentage points)."""


class QuotaUse:
    """The run's use of each window, folded from the readings of the API's responses, in order."""

    def __init__(self) -> None:
        self.windows: dict[str, WindowUse] = {}
        self.readings = 0

    def add(self, quota: Any, now: float) -> None:
        """Fold one response's ``quota`` (``{"windows": {"5h": {"utilization": .., "reset": ..}}}``), read at ``now``."""
        windows = quota.get("windows") if isinstance(quota, dict) else None
        if not isinstance(windows, dict):
            return
        for name, window in windows.items():
            if not isinstance(window, dict):
                continue
            utilization = _fraction(window.get("utilization"))
            if utilization is None:
                continue
            reset = window.get("reset")
            reset = float(reset) if isinstance(reset, (int, float)) and not isinstance(reset, bool) else None
            self.readings += 1
            seen = self.windows.get(str(name))
            if seen is None:
                self.windows[str(name)] = WindowUse(utilization, utilization, reset)
                continue
            if seen.reset is not None and now >= seen.reset:  # the window reset since the last reading
                seen.used += utilization
            else:
                seen.used += max(0.0, utilization - seen.last)
            seen.last, seen.reset = utilization, reset if reset is not None else seen.reset

    def over(self, limits: dict[str, float] | None) -> str | None:
        """Why the run must stop: a window's use reached its ``--max-quota`` percentage (None: none did)."""
        if not limits:
            return None
        for name, use in self.windows.items():
            limit = limits.get(name, limits.get(ALL_WINDOWS))
            if limit is not None and use.used * 100 >= limit:
                return (f"quota budget reached: this run used {use.used * 100:.1f}% of the {window_label(name)} "
                        f"window (--max-quota {limit:g}%; the window is at {use.last * 100:.0f}% now)")
        return None

    def summary(self) -> dict[str, dict[str, Any]]:
        """``{window: {used_by_run, now, reset}}``, percentages rounded to 0.1 (for ``summary.json``)."""
        return {name: {"used_by_run": round(use.used * 100, 1), "now": round(use.last * 100, 1), "reset": use.reset}
                for name, use in self.windows.items()}

    def lines(self) -> list[str]:
        """One line per window: ``5-hour window: 12.0% used by this run (now 43%)``."""
        return [f"{window_label(name)} window: {use.used * 100:.1f}% used by this run (now {use.last * 100:.0f}%)"
                for name, use in self.windows.items()]


def _fraction(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)
