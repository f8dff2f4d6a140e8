"""ralph: run AI coding agents in Ralph loops, with a loop the agent cannot fool.

Plugins import ``hookimpl`` from here and the contracts from ``ralph.contracts``.
"""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("ralph")

__all__ = ["__version__", "hookimpl"]
