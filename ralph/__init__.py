"""ralph: run AI coding agents in Ralph loops, with a loop the agent cannot fool.

Plugins import everything they use from ``ralph.api`` (``hookimpl`` included).
"""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("ralph")
"""Marks a plugin's function as the implementation of a ralph hook: ``@hookimpl``,
``@hookimpl(trylast=True)`` for a default others may override (see docs/hooks.md)."""

__all__ = ["__version__", "hookimpl"]
