"""The ``ray`` runner and the ``ray`` fleet engine: ralph beyond one machine, on an existing Ray cluster.

Ray is an optional extra (``pip install 'ralph-trustloop[ray]'``) imported only
when this runner or ``ralph run --parallel --engine ray`` is used.  See docs/ray.md.
"""

from __future__ import annotations

from ralph.api import hookimpl

from .runner import RayRunner


@hookimpl
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the ``ray`` runner (never chosen by ``--runner auto``)."""
    register(RayRunner)


@hookimpl
def ralph_register_fleet_engines(register):  # type: ignore[no-untyped-def]
    """Register the ``ray`` fleet engine (``ralph run --parallel --engine ray``)."""
    from .fleet import RayFleet

    register(RayFleet)


@hookimpl
def ralph_config_sections() -> dict[str, type]:
    """The ``[tool.ralph.ray]`` section."""
    from .config import RayConfig

    return {"ray": RayConfig}


__all__ = ["RayRunner"]
