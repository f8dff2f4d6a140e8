"""Module attributes loaded on first use (PEP 562), for the ``ralph.api`` modules that hook calls import."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_attributes(module: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module``: ``table`` maps a public name to the module that holds it
    (``"ralph.shell.budget:scope"`` when the name there differs); the value is cached in ``module``."""

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        source, _, attr = target.partition(":")
        value = getattr(importlib.import_module(source), attr or name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
