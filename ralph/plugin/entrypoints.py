"""A fast reader of one entry-point group from the installed distributions.

``importlib.metadata`` pulls in the email package and parses every
distribution's metadata (~15-20 ms), which matters for hook calls that start
a fresh process for every tool use.  This reads only ``entry_points.txt`` of
the ``*.dist-info`` / ``*.egg-info`` directories on ``sys.path``, in path order
(the first distribution of a name wins, as with importlib.metadata).

It also holds what decides, without importing any plugin, which plugins are
switched off (``RALPH_DISABLE_PLUGINS``, ``RALPH_DISABLE_PLUGIN_AUTOLOAD``): the
plugin manager and the listing of plugin commands (``ralph --help``) share it.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Collection, Mapping

ENTRY_POINT_GROUP = "ralph"
"""The entry-point group of plugins: ``name = module`` (the name is the plugin's name)."""
OWN_DISTRIBUTION = "ralph-trustloop"
DISABLE_ENV = "RALPH_DISABLE_PLUGINS"
NO_AUTOLOAD_ENV = "RALPH_DISABLE_PLUGIN_AUTOLOAD"

_INFO_DIR = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+?)(?:-py[^-]*)?\.(?:dist|egg)-info$")


def normalize(name: str) -> str:
    """PEP 503 normalisation: ``Ralph_TrustLoop`` -> ``ralph-trustloop``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: ``name = module:attr`` of distribution ``dist``."""

    name: str
    value: str
    dist: str
    version: str

    def load(self) -> Any:
        module_name, _, attr = self.value.partition(":")
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def disabled_plugins(environ: Mapping[str, str]) -> set[str]:
    """The plugin names ``RALPH_DISABLE_PLUGINS`` lists (comma-separated, spaces ignored)."""
    return {name.strip() for name in environ.get(DISABLE_ENV, "").split(",") if name.strip()}


def only_own_plugins(environ: Mapping[str, str]) -> bool:
    """Whether ``RALPH_DISABLE_PLUGIN_AUTOLOAD`` is set: third-party plugins are not loaded."""
    return environ.get(NO_AUTOLOAD_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def why_not_loaded(name: str, dist: str, environ: Mapping[str, str]) -> str | None:
    """Why the plugin ``name`` of distribution ``dist`` is switched off by the environment (None: it is not)."""
    if name in disabled_plugins(environ):
        return f"is disabled ({DISABLE_ENV})"
    if only_own_plugins(environ) and dist != normalize(OWN_DISTRIBUTION):
        return f"is not loaded ({NO_AUTOLOAD_ENV}: only ralph's own plugins)"
    return None


def _parse(text: str, groups: Collection[str]) -> list[tuple[str, str, str]]:
    """``(group, name, value)`` of every entry of ``groups`` in an ``entry_points.txt``."""
    entries = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current is not None and current in groups and "=" in line:
            name, _, value = line.partition("=")
            entries.append((current, name.strip(), value.strip()))
    return entries


def entry_points(group: str, path: list[str] | None = None) -> list[EntryPoint]:
    """Entry points of ``group`` from every distribution visible on ``path`` (sys.path)."""
    return entry_point_groups([group], path)[group]


def entry_point_groups(groups: Collection[str], path: list[str] | None = None) -> dict[str, list[EntryPoint]]:
    """Entry points of each of ``groups``, read in one pass over ``path`` (sys.path)."""
    seen: set[str] = set()
    found: dict[str, list[EntryPoint]] = {group: [] for group in groups}
    for entry in path if path is not None else sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for dirname in names:
            match = _INFO_DIR.match(dirname)
            if match is None:
                continue
            dist = normalize(match["name"])
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(entry or ".", dirname, "entry_points.txt"), encoding="utf-8") as handle:
                    text = handle.read()
            except OSError:
                continue
            for group, name, value in _parse(text, found):
                found[group].append(EntryPoint(name, value, dist, match["version"]))
    return found
