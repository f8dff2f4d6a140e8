"""ralph: run AI coding agents in Ralph loops, with a loop the agent cannot fool.

Plugins import everything they use from ``ralph.api`` (``hookimpl`` included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pluggy

__version__ = "0.1.0"

hookimpl: pluggy.HookimplMarker  # bound on first use, by __getattr__ below
"""Marks a plugin's function as the implementation of a ralph hook: ``@hookimpl``,
``@hookimpl(trylast=True)`` for a default others may override (see docs/hooks.md)."""


def __getattr__(name: str) -> Any:
    """Make ``hookimpl`` on first use: every command imports this package, and pluggy
    (~15 ms) is needed where plugins are loaded, not for ``ralph --help``."""
    if name == "hookimpl":
        import pluggy

        marker = globals()["hookimpl"] = pluggy.HookimplMarker("ralph")
        return marker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__", "hookimpl"]
