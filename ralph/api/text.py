"""Showing what an agent wrote: agent text is data (docs/security.md), made safe before it is echoed.

``strip_controls`` (no terminal escapes or control characters), ``one_line`` (and short),
``quote`` (a value that can neither start a line nor end early), ``fenced`` and ``fence_for`` (a
code fence the text cannot close), ``safe_data`` (all of it, for an event's payload); ``counted``
words a number with its noun (``3 stories``, ``1 story``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes
from ralph.wording import counted

if TYPE_CHECKING:
    from ralph.agenttext import fence_for, fenced, one_line, quote, safe_data, strip_controls

__all__ = ["counted", "fence_for", "fenced", "one_line", "quote", "safe_data", "strip_controls"]

__getattr__ = lazy_attributes(__name__, dict.fromkeys(
    ["strip_controls", "one_line", "quote", "fenced", "fence_for", "safe_data"], "ralph.agenttext"))
