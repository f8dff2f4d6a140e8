"""The plugin manager: loads the ``ralph`` entry-point group and builds registries.

Environment:
- ``RALPH_DISABLE_PLUGINS=name1,name2`` skips those entry points (by entry-point name).
- ``RALPH_DISABLE_PLUGIN_AUTOLOAD=1`` loads only ralph's own default plugins
  (distribution ``ralph-trustloop``); third-party entry points are ignored.

A plugin that fails to import is recorded and reported (``ralph plugins``
lists it, other commands warn); it never stops ralph from starting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TypeVar

import pluggy

from ralph.plugin import hookspecs
from ralph.contracts import (
    Agent,
    Check,
    FleetEngine,
    Gate,
    LoopEvent,
    Policy,
    PreflightContext,
    Runner,
    TaskStore,
    ValidationContext,
    Violation,
)
from ralph.errors import PluginError

ENTRY_POINT_GROUP = "ralph"
OWN_DISTRIBUTION = "ralph-trustloop"
DISABLE_ENV = "RALPH_DISABLE_PLUGINS"
NO_AUTOLOAD_ENV = "RALPH_DISABLE_PLUGIN_AUTOLOAD"

T = TypeVar("T")


@dataclass(frozen=True)
class PluginInfo:
    """One loaded (or failed) plugin, for ``ralph plugins``."""

    name: str
    distribution: str
    version: str
    module: str
    error: str | None = None
    disabled: bool = False


@dataclass
class Registry:
    """Named classes of one kind (runners, agents ...) with who provided them."""

    kind: str
    entries: dict[str, type] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)

    def add(self, cls: type, provider: str) -> None:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {provider!r} registered a {self.kind} without a `name`: {cls!r}")
        if name in self.entries:
            raise PluginError(
                f"two plugins register the {self.kind} {name!r}: {self.providers[name]} and {provider}; "
                f"disable one with {DISABLE_ENV}=<plugin name>"
            )
        self.entries[name] = cls
        self.providers[name] = provider

    def get(self, name: str) -> type:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries)) or "none"
            raise PluginError(f"unknown {self.kind} {name!r}; available: {known}") from None

    def names(self) -> list[str]:
        return sorted(self.entries)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


class PluginHost:
    """A typed wrapper over the pluggy manager and the registries it fills."""

    def __init__(
        self,
        extra_plugins: Iterable[Any] = (),
        environ: dict[str, str] | None = None,
        load_entry_points: bool = True,
    ) -> None:
        environ = dict(os.environ) if environ is None else environ
        self.pm = pluggy.PluginManager("ralph")
        self.pm.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        disabled = {n.strip() for n in environ.get(DISABLE_ENV, "").split(",") if n.strip()}
        only_own = _truthy(environ.get(NO_AUTOLOAD_ENV))
        if load_entry_points:
            self._load_entry_points(disabled, only_own)
        for plugin in extra_plugins:
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            if name in disabled:
                continue
            self.pm.register(plugin, name=name)
            self.infos.append(PluginInfo(name, "registered in code", "", name))
        self.pm.check_pending()
        self.runners = self._registry("runner", "ralph_register_runners", Runner)
        self.agents = self._registry("agent", "ralph_register_agents", Agent)
        self.policies = self._registry("policy", "ralph_register_policies", Policy)
        self.stores = self._registry("task store", "ralph_register_task_stores", TaskStore)
        self.gates = self._registry("gate", "ralph_register_gates", Gate)
        self.fleet_engines = self._registry("fleet engine", "ralph_register_fleet_engines", FleetEngine)

    # -- loading ----------------------------------------------------------------

    def _load_entry_points(self, disabled: set[str], only_own: bool) -> None:
        seen: set[str] = set()
        from ralph.plugin.entrypoints import entry_points, normalize

        for ep in entry_points(ENTRY_POINT_GROUP):
            dist, version = ep.dist, ep.version
            if ep.name in seen:
                continue  # the same distribution visible twice on sys.path
            seen.add(ep.name)
            if ep.name in disabled or (only_own and dist != normalize(OWN_DISTRIBUTION)):
                self.infos.append(PluginInfo(ep.name, dist, version, ep.value, disabled=True))
                continue
            try:
                plugin = ep.load()
                self.pm.register(plugin, name=ep.name)
                try:
                    self.pm.check_pending()  # a misspelled hook name in *this* plugin
                except Exception:
                    self.pm.unregister(name=ep.name)
                    raise
            except Exception as exc:  # a broken third-party plugin must not break ralph
                self.infos.append(
                    PluginInfo(ep.name, dist, version, ep.value, error=f"{type(exc).__name__}: {exc}")
                )
                continue
            self.infos.append(PluginInfo(ep.name, dist, version, ep.value))

    def _registry(self, kind: str, hook_name: str, base: type[T]) -> Registry:
        registry = Registry(kind)
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            provider = self._describe(impl.plugin_name)

            def register(cls: type, _provider: str = provider) -> None:
                if not (isinstance(cls, type) and issubclass(cls, base)):
                    raise PluginError(f"plugin {_provider} registered {cls!r}, which is not a {base.__name__}")
                registry.add(cls, _provider)

            impl.function(register=register)
        return registry

    def _describe(self, plugin_name: str) -> str:
        for info in self.infos:
            if info.name == plugin_name:
                if info.version:
                    return f"{plugin_name!r} ({info.distribution} {info.version})"
                return f"{plugin_name!r} ({info.distribution})"
        return repr(plugin_name)

    # -- typed hook calls -----------------------------------------------------------

    @property
    def failures(self) -> list[PluginInfo]:
        return [info for info in self.infos if info.error]

    def config_sections(self) -> dict[str, type]:
        sections: dict[str, type] = {}
        for impl in self.pm.hook.ralph_config_sections.get_hookimpls():
            for name, model in (impl.function() or {}).items():
                if name in sections:
                    raise PluginError(
                        f"two plugins define the config section {name!r}; one is {self._describe(impl.plugin_name)}"
                    )
                sections[name] = model
        return sections

    def validate(self, context: ValidationContext) -> list[Violation]:
        results = self.pm.hook.ralph_validate(context=context)
        return [violation for result in results for violation in (result or [])]

    def prompt_context(self, run_dir: Path, iteration: int, since: float) -> list[str]:
        results = self.pm.hook.ralph_prompt_context(run_dir=run_dir, iteration=iteration, since=since)
        return [item for result in results for item in (result or []) if item]

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Every ``ralph_preflight`` hook's checks, flattened."""
        results = self.pm.hook.ralph_preflight(context=context)
        return [check for result in results for check in (result or [])]

    def emit(self, event: LoopEvent) -> None:
        self.pm.hook.ralph_loop_event(event=event)

    def add_listener(self, plugin: Any, name: str) -> None:
        """Register a plugin object for the rest of this process (reporters of one run)."""
        self.pm.register(plugin, name=name)

    def remove(self, name: str) -> None:
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)


def hook_names() -> list[str]:
    """Every hookspec name, for documentation and meta-tests."""
    return sorted(name for name in dir(hookspecs) if name.startswith("ralph_"))

