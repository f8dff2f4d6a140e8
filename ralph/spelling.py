"""The known name a misspelt key most likely stands for ("did you mean ...?").

Used where a person's typo would otherwise pass silently or drown in a list of every key: unknown
config keys (``ralph/config.py``) and task-list keys ralph does not know (``ralph/tasks.py``).
Stdlib only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]

CUTOFF = 0.75
"""How alike (difflib's ratio of the normalised names) a known name must be to be suggested."""


def _normal(name: str) -> str:
    """``depends_on``, ``depends-on`` and ``DependsOn`` all become ``dependson``."""
    return re.sub(r"[\s_\-.]+", "", name).lower()


def closest(name: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` that ``name`` most likely misspells, or None when none is close.

    Spelling variants of the same words match first (``depends_on`` -> ``dependsOn``), then the
    most alike name above :data:`CUTOFF` (``prority`` -> ``priority``, ``verifyCommand`` ->
    ``verifyCommands``).  ``name`` itself, when known, is not a misspelling (None).
    """
    names = [k for k in known if k != name]
    by_normal: dict[str, str] = {}
    for candidate in names:
        by_normal.setdefault(_normal(candidate), candidate)
    key = _normal(name)
    if key in by_normal:
        return by_normal[key]
    found = difflib.get_close_matches(key, list(by_normal), n=1, cutoff=CUTOFF)
    return by_normal[found[0]] if found else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` did you mean `KEY`?`` for the closest known name, or ``""``."""
    found = closest(name, known)
    return f" did you mean `{found}`?" if found else ""
