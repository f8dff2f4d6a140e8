"""The names plugins register, as their distributions declare them: listed without importing any plugin.

``ralph run --help`` ends the ``--runner``, ``--agent`` and ``--policy`` lines with the names
registered in this environment.  Asking the registration hooks means importing every plugin
(about 3x the start-up of ``ralph --help``), so a distribution declares what its plugins register
in entry-point groups, one per kind, named ``<plugin>.<name>`` as plugin commands are
(ralph/plugin/commands.py) and pointing at the class::

    [project.entry-points."ralph.runners"]
    "nice.nice" = "ralph_nice.plugin:NiceRunner"

The registration hooks stay the truth for a run (``ralph run`` imports every plugin anyway: any
of them may be a validator or a guard).  The declarations only answer "which names are there"
cheaply; :func:`undeclared` says which plugins declare nothing, so a listing can still ask those
(importing them) and stay complete, and ``PluginHost.declaration_problems`` reports a declaration
that differs from what the plugin registers (``ralph plugins`` shows it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ralph.plugin.entrypoints import ENTRY_POINT_GROUP, OWN_DISTRIBUTION, EntryPoint, entry_point_groups, normalize, why_not_loaded

KIND_GROUPS = {
    "runners": "ralph.runners",
    "agents": "ralph.agents",
    "policies": "ralph.policies",
    "stores": "ralph.task_stores",
    "gates": "ralph.gates",
    "fleet_engines": "ralph.fleet_engines",
}
"""The plugin host's registry (attribute name) -> the entry-point group declaring its names."""


@dataclass(frozen=True)
class Declared:
    """One name a plugin declares: ``kind`` (a registry), the name, the plugin and where the class is."""

    kind: str
    name: str
    plugin: str
    entry: EntryPoint


@dataclass
class Declarations:
    """Every installed declaration of enabled plugins, and the enabled plugins that declare nothing."""

    names: dict[str, list[Declared]]
    """Registry -> its declared names (enabled plugins only, in ``sys.path`` order)."""
    silent: list[str]
    """Enabled third-party plugins without any declaration: what they register is known only by importing them."""

    def of(self, kind: str) -> list[str]:
        """The names declared for registry ``kind``, sorted, each once."""
        return sorted({item.name for item in self.names.get(kind, [])})


def declarations(environ: Mapping[str, str] | None = None, path: list[str] | None = None) -> Declarations:
    """Read the declarations of every installed distribution (no plugin is imported).

    A declaration whose ``<plugin>`` is not a ``ralph`` entry point of the same distribution, or
    whose plugin is switched off (``RALPH_DISABLE_PLUGINS``, ``RALPH_DISABLE_PLUGIN_AUTOLOAD``), is
    left out.  ralph's own distribution declares everything its plugins register (a test holds it),
    so its plugins are never "silent".
    """
    environ = os.environ if environ is None else environ
    groups = entry_point_groups([ENTRY_POINT_GROUP, *KIND_GROUPS.values()], path)
    plugins: dict[str, EntryPoint] = {}
    for ep in groups[ENTRY_POINT_GROUP]:
        plugins.setdefault(ep.name, ep)  # the first of a name is the one the plugin manager loads
    enabled = {name for name, ep in plugins.items() if why_not_loaded(name, ep.dist, environ) is None}
    names: dict[str, list[Declared]] = {kind: [] for kind in KIND_GROUPS}
    declaring: set[str] = set()
    for kind, group in KIND_GROUPS.items():
        for ep in groups[group]:
            plugin, dot, name = ep.name.partition(".")
            owner = plugins.get(plugin)
            if not (dot and name) or owner is None or owner.dist != ep.dist:
                continue
            declaring.add(plugin)
            if plugin in enabled:
                names[kind].append(Declared(kind, name, plugin, ep))
    own = normalize(OWN_DISTRIBUTION)
    silent = [name for name in plugins if name in enabled and name not in declaring and plugins[name].dist != own]
    return Declarations(names, silent)
