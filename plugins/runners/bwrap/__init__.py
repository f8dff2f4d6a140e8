"""The ``bwrap`` runner: the agent and every gate command in a bubblewrap sandbox, on a checkout of its own.

A plugin like a third party's: it imports ralph only through ``ralph.api`` (see :mod:`.runner`,
docs/sandbox.md).  Nothing heavy is imported here: the module is loaded by every command that
loads plugins.
"""

from __future__ import annotations

from ralph.api import hookimpl

from .runner import BwrapRunner

RALPH_API = "2"


@hookimpl
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the ``bwrap`` runner."""
    register(BwrapRunner)


@hookimpl
def ralph_config_sections() -> dict[str, type]:
    """The ``[tool.ralph.bwrap]`` section."""
    from .config import BwrapConfig

    return {"bwrap": BwrapConfig}


__all__ = ["BwrapRunner"]
