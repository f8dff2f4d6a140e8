"""The plugin manager: loads the ``ralph`` entry-point group and builds registries.

Environment:
- ``RALPH_DISABLE_PLUGINS=name1,name2`` skips those entry points (by entry-point name).
- ``RALPH_DISABLE_PLUGIN_AUTOLOAD=1`` loads only ralph's own default plugins
  (distribution ``ralph-trustloop``); third-party entry points are ignored.

A plugin that fails to import, needs a newer plugin API than this ralph
provides (``RALPH_API = "2"`` in its module), or whose registration hook
(``ralph_register_*``, ``ralph_config_sections``) raises, is recorded and not loaded:
``ralph plugins`` lists it and ``ralph --help`` still works, but ``ralph run``
refuses to start until it is fixed or disabled (a missing validator, gate or
guard must never be skipped silently; see docs/plugins.md, "When a plugin
breaks").
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, TypeVar, cast

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
from ralph.plugin.entrypoints import (
    DISABLE_ENV,
    ENTRY_POINT_GROUP,
    OWN_DISTRIBUTION,
    disabled_plugins,
    only_own_plugins,
)

API_VERSION = "1.0"
"""The plugin API version of this ralph (``major.minor``): a plugin declaring
``RALPH_API = "1"`` (or ``"1.0"``) loads; one declaring ``"2"`` or ``"1.1"`` does not."""
API_ATTRIBUTE = "RALPH_API"

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
    incompatible: bool = False
    """True when ``error`` says the plugin needs another plugin API version."""

    @property
    def status(self) -> str:
        """``loaded``, ``disabled``, ``INCOMPATIBLE: ...`` or ``FAILED: ...`` (for ``ralph plugins``)."""
        if self.disabled:
            return "disabled"
        if self.error:
            return ("INCOMPATIBLE: " if self.incompatible else "FAILED: ") + self.error
        return "loaded"

    def describe(self) -> str:
        """``'name' (distribution version)``, as errors name a plugin."""
        if self.version:
            return f"{self.name!r} ({self.distribution} {self.version})"
        return f"{self.name!r} ({self.distribution})"

    def failure(self) -> str:
        """``plugin 'name' (distribution version) failed to load: <error>`` (or ``is incompatible: ...``)."""
        return f"plugin {self.describe()} {'is incompatible' if self.incompatible else 'failed to load'}: {self.error}"


class NameTaken(PluginError):
    """Two plugins register the same name: an error of the pair, not a load failure of either."""


@dataclass
class Registry:
    """Named classes of one kind (runners, agents ...) with who provided them."""

    kind: str
    entries: dict[str, type] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    """The name of the plugin that registered each entry (for ``RALPH_DISABLE_PLUGINS`` hints)."""
    not_loaded: dict[str, str] = field(default_factory=dict)
    """Plugins that are disabled or failed to load (name -> why), named when a lookup fails."""

    def add(self, cls: type, provider: str, owner: str = "") -> None:
        """Add ``cls`` under its ``name``; a name taken already is an error naming both providers."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {provider} registered a {self.kind} without a `name`: {cls!r}")
        if name in self.entries:
            raise NameTaken(
                f"two plugins register the {self.kind} {name!r}: {self.providers[name]} and {provider}; "
                f"disable one with {DISABLE_ENV}=<plugin name>"
            )
        self.entries[name] = cls
        self.providers[name] = provider
        self.owners[name] = owner or provider

    def discard(self, owner: str) -> None:
        """Drop every entry the plugin ``owner`` registered (its later registration hook raised)."""
        for name in [name for name, by in self.owners.items() if by == owner]:
            del self.entries[name], self.providers[name], self.owners[name]

    def get(self, name: str) -> type:
        """The class registered as ``name``; an unknown name is an error listing what exists
        and which plugins are disabled or broken (one of them may be the provider)."""
        try:
            return self.entries[name]
        except KeyError:
            pass
        if name in self.not_loaded:
            raise PluginError(f"{self.kind} {name!r} is not available: plugin {name!r} {self.not_loaded[name]}")
        known = ", ".join(sorted(self.entries)) or "none"
        message = f"unknown {self.kind} {name!r}; available: {known}"
        if self.not_loaded:
            message += "; not loaded: " + ", ".join(f"{n!r} ({why})" for n, why in sorted(self.not_loaded.items()))
        raise PluginError(message)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self.entries)


def api_incompatibility(required: object) -> str | None:
    """Why a plugin declaring ``RALPH_API = required`` cannot load here (None: it can)."""
    if required is None:
        return None
    text = str(required).strip()
    try:
        parts = [int(part) for part in text.split(".")]
    except ValueError:
        return f"{API_ATTRIBUTE} = {required!r} is not a version like \"1\" or \"1.0\""
    if not parts or len(parts) > 2:
        return f"{API_ATTRIBUTE} = {required!r} is not a version like \"1\" or \"1.0\""
    major, minor = (int(part) for part in API_VERSION.split("."))
    need_major, need_minor = parts[0], parts[1] if len(parts) > 1 else 0
    if need_major == major and need_minor <= minor:
        return None
    return (
        f"needs ralph plugin API {text}, this ralph provides {API_VERSION}: "
        + ("upgrade ralph" if (need_major, need_minor) > (major, minor) else "use a release of the plugin for this ralph")
    )


REPLACED_HOOKS = {
    "ralph_register_commands": (
        "declare commands in the `ralph.commands` entry-point group instead "
        "(\"<plugin>.<command>\" = \"module:command\"; docs/plugins.md, Commands)"
    ),
}
"""Hooks that existed once, and what replaced them (a plugin still implementing one is told)."""


def replaced_hooks(plugin: object) -> str | None:
    """What a plugin implementing a hook that no longer exists should do instead (None: it implements none)."""
    found = [name for name in REPLACED_HOOKS if getattr(getattr(plugin, name, None), "ralph_impl", None) is not None]
    if not found:
        return None
    return "; ".join(f"implements {name}, which this ralph no longer calls: {REPLACED_HOOKS[name]}" for name in found)


def _warn_on_stderr(line: str) -> None:
    sys.stderr.write(f"ralph: warning: {line}\n")


class PluginHost:
    """A typed wrapper over the pluggy manager and the registries it fills."""

    def __init__(
        self,
        extra_plugins: Iterable[Any] = (),
        environ: dict[str, str] | None = None,
        load_entry_points: bool = True,
        only: Collection[str] | None = None,
    ) -> None:
        """Load every installed plugin (``only``: just the entry points of these names,
        e.g. the plugin behind one command) and the registries they fill."""
        environ = dict(os.environ) if environ is None else environ
        self.pm = pluggy.PluginManager("ralph")
        self.pm.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self._in_code: set[str] = set()
        self.silenced: dict[str, str] = {}
        """Reporters disabled after they raised (plugin name -> the error)."""
        self.warn: Callable[[str], None] = _warn_on_stderr
        """Where warnings about plugins go (a one-line message; stderr by default)."""
        disabled = disabled_plugins(environ)
        only_own = only_own_plugins(environ)
        if load_entry_points:
            self._load_entry_points(disabled, only_own, only)
        for plugin in extra_plugins:
            self._register_in_code(plugin, disabled)
        self.pm.check_pending()
        self._not_loaded = {
            info.name: (f"is disabled ({DISABLE_ENV})" if info.disabled else f"did not load: {info.status}")
            for info in self.infos
            if info.disabled or info.error
        }
        self._registries: list[Registry] = []
        self.runners = self._registry("runner", "ralph_register_runners", Runner)
        self.agents = self._registry("agent", "ralph_register_agents", Agent)
        self.policies = self._registry("policy", "ralph_register_policies", Policy)
        self.stores = self._registry("task store", "ralph_register_task_stores", TaskStore)
        self.gates = self._registry("gate", "ralph_register_gates", Gate)
        self.fleet_engines = self._registry("fleet engine", "ralph_register_fleet_engines", FleetEngine)
        self._sections = self._collect_sections()

    # -- loading ----------------------------------------------------------------

    def _load_entry_points(self, disabled: set[str], only_own: bool, only: Collection[str] | None) -> None:
        seen: set[str] = set()
        from ralph.plugin.entrypoints import entry_points, normalize

        for ep in entry_points(ENTRY_POINT_GROUP):
            dist, version = ep.dist, ep.version
            if ep.name in seen:
                continue  # the same distribution visible twice on sys.path
            seen.add(ep.name)
            if only is not None and ep.name not in only:
                continue
            if ep.name in disabled or (only_own and dist != normalize(OWN_DISTRIBUTION)):
                self.infos.append(PluginInfo(ep.name, dist, version, ep.value, disabled=True))
                continue
            try:
                plugin = ep.load()
                problem = api_incompatibility(getattr(plugin, API_ATTRIBUTE, None)) or replaced_hooks(plugin)
                if problem is not None:
                    self.infos.append(PluginInfo(ep.name, dist, version, ep.value, error=problem, incompatible=True))
                    continue
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

    def _register_in_code(self, plugin: Any, disabled: set[str]) -> None:
        """Register a plugin object or module passed in code (tests, embedding).

        A module that is also installed under an entry point is registered once:
        the installed registration stands (so ``extra_plugins=[my_plugin]`` in a
        plugin's own tests works whether or not the package is installed).
        """
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        if name in disabled or self.pm.is_registered(plugin):
            return
        problem = api_incompatibility(getattr(plugin, API_ATTRIBUTE, None))
        if problem is not None:
            raise PluginError(f"plugin {name!r} (registered in code) {problem}")
        unique, number = name, 1
        while self.pm.has_plugin(unique):
            number += 1
            unique = f"{name}-{number}"
        self.pm.register(plugin, name=unique)
        self._in_code.add(unique)
        self.infos.append(PluginInfo(unique, "registered in code", "", name))

    def _registry(self, kind: str, hook_name: str, base: type) -> Registry:
        """Fill one registry; a plugin whose hook raises (or registers a wrong class) is a load failure."""
        registry = Registry(kind, not_loaded=self._not_loaded)
        self._registries.append(registry)
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            provider = self.describe(impl.plugin_name)

            def register(cls: type, _provider: str = provider, _owner: str = impl.plugin_name) -> None:
                if not (isinstance(cls, type) and issubclass(cls, base)):
                    raise PluginError(f"plugin {_provider} registered {cls!r}, which is not a {base.__name__}")
                registry.add(cls, _provider, _owner)

            try:
                impl.function(register=register)
            except NameTaken:
                raise
            except Exception as exc:  # a broken third-party plugin must not break ralph
                self._fail(impl.plugin_name, f"{hook_name} raised {type(exc).__name__}: {exc}", exc)
        return registry

    def _collect_sections(self) -> list[tuple[str, dict[str, type]]]:
        """Every plugin's ``ralph_config_sections`` answer (plugin name, sections); one that raises,
        or answers something other than a dict of names to models, is a load failure."""
        collected: list[tuple[str, dict[str, type]]] = []
        for impl in self.pm.hook.ralph_config_sections.get_hookimpls():
            try:
                provided = impl.function() or {}
            except Exception as exc:  # a broken third-party plugin must not break ralph
                self._fail(impl.plugin_name, f"ralph_config_sections raised {type(exc).__name__}: {exc}", exc)
                continue
            if not (isinstance(provided, dict) and all(isinstance(k, str) and isinstance(v, type) for k, v in provided.items())):
                self._fail(impl.plugin_name, f"ralph_config_sections returned {provided!r}, not a dict of section names to models")
                continue
            collected.append((impl.plugin_name, provided))
        return collected

    def _fail(self, plugin_name: str, error: str, cause: BaseException | None = None) -> None:
        """Record ``plugin_name`` as failed to load with ``error``: unregistered, and what it registered dropped.

        A plugin registered in code (a test, an embedding program) raises instead, as its other
        mistakes do: the caller's own code is wrong, and nobody would read ``ralph plugins``.
        """
        if plugin_name in self._in_code:
            raise PluginError(f"plugin {self.describe(plugin_name)}: {error}") from cause
        for index, info in enumerate(self.infos):
            if info.name == plugin_name:
                self.infos[index] = replace(info, error=error)
                self._not_loaded[plugin_name] = f"did not load: {self.infos[index].status}"
        for registry in self._registries:
            registry.discard(plugin_name)
        self.remove(plugin_name)

    def describe(self, plugin_name: str) -> str:
        """``'name' (distribution version)`` for error messages."""
        for info in self.infos:
            if info.name == plugin_name:
                return info.describe()
        return repr(plugin_name)

    def _entry_of(self, obj: object) -> tuple[Registry, str] | None:
        for registry in (self.gates, self.runners, self.agents, self.policies, self.stores):
            for name, cls in registry.entries.items():
                if type(obj) is cls or obj is cls:
                    return registry, name
        return None

    def provider_of(self, obj: object) -> str:
        """The plugin that registered ``obj``'s class (a gate, runner ...), described for errors."""
        found = self._entry_of(obj)
        return found[0].providers[found[1]] if found else repr(type(obj).__name__)

    def owner_of(self, obj: object) -> str:
        """The name of the plugin that registered ``obj``'s class (what ``RALPH_DISABLE_PLUGINS`` takes)."""
        found = self._entry_of(obj)
        return found[0].owners[found[1]] if found else type(obj).__name__

    # -- typed hook calls -----------------------------------------------------------

    @property
    def failures(self) -> list[PluginInfo]:
        """Plugins that failed to load or are incompatible with this ralph."""
        return [info for info in self.infos if info.error]

    def failure_warnings(self) -> list[str]:
        """One ``ralph: warning: plugin ... is not loaded: ...`` line per plugin that did not load,
        for the commands that go on without it (``ralph status --follow`` leaves out a broken reporter)."""
        return [f"ralph: warning: plugin {info.describe()} is not loaded: {info.status}" for info in self.failures]

    def require_all_loaded(self) -> None:
        """Raise unless every enabled plugin loaded: ``ralph run`` never runs without one
        (it may be a validator, gate or guard).  Disabling it explicitly is the way on."""
        if not self.failures:
            return
        names = ",".join(info.name for info in self.failures)
        raise PluginError(
            "; ".join(info.failure() for info in self.failures) + f" — ralph does not run without it: fix it, or disable it with {DISABLE_ENV}={names}"
        )

    def config_sections(self) -> dict[str, type]:
        """Every plugin's config section model by section name (a duplicate is an error naming both plugins)."""
        sections: dict[str, type] = {}
        definer: dict[str, str] = {}
        for plugin_name, provided in self._sections:
            for name, model in provided.items():
                if name in sections:
                    raise PluginError(
                        f"two plugins define the config section {name!r}: {self.describe(definer[name])} and "
                        f"{self.describe(plugin_name)}; disable one with {DISABLE_ENV}=<plugin name>"
                    )
                sections[name] = model
                definer[name] = plugin_name
        return sections

    def validate(self, context: ValidationContext) -> list[Violation]:
        """Every validator's violations.  A validator that raises stops the caller with a
        ``PluginFailure`` naming it (the loop is fail-closed)."""
        from ralph.gitutil import GitMetadataChanged

        violations: list[Violation] = []
        for impl in reversed(self.pm.hook.ralph_validate.get_hookimpls()):
            try:
                result = cast("list[Violation] | None", impl.function(context=context))
            except GitMetadataChanged:  # the loop's own stop (tampered .git), not the plugin's fault
                raise
            except Exception as exc:
                raise PluginFailure("validator", self.describe(impl.plugin_name), impl.plugin_name, exc) from exc
            violations.extend(result or [])
        return violations

    def prompt_context(self, run_dir: Path, iteration: int, since: float) -> list[str]:
        """Feedback items from every ``ralph_prompt_context`` implementation."""
        results = self.pm.hook.ralph_prompt_context(run_dir=run_dir, iteration=iteration, since=since)
        return [item for result in results for item in (result or []) if item]

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Every ``ralph_preflight`` hook's checks, flattened."""
        results = self.pm.hook.ralph_preflight(context=context)
        return [check for result in results for check in (result or [])]

    def emit(self, event: LoopEvent) -> None:
        """Give ``event`` to every reporter.  A reporter that raises is disabled for the rest
        of this host's life with a warning (and a ``reporter_disabled`` event to the others)."""
        failed: list[tuple[str, Exception]] = []
        for impl in reversed(self.pm.hook.ralph_loop_event.get_hookimpls()):
            if impl.plugin_name in self.silenced:
                continue
            try:
                impl.function(event=event)
            except Exception as exc:  # noqa: BLE001 - reporters are isolated (DESIGN.md)
                self.silenced[impl.plugin_name] = f"{type(exc).__name__}: {exc}"
                failed.append((impl.plugin_name, exc))
        for name, error in failed:
            plugin = self.describe(name)
            self.warn(
                f"reporter {plugin} raised {type(error).__name__}: {error} on a {event.kind!r} event; "
                "it is disabled for the rest of this run"
            )
            info = next((i for i in self.infos if i.name == name), None)
            self.emit(
                LoopEvent(
                    "reporter_disabled",
                    {"plugin": name, "distribution": info.distribution if info else "", "error": f"{type(error).__name__}: {error}"},
                    event.run_dir,
                )
            )

    def remove(self, name: str) -> None:
        """Unregister plugin ``name`` (if registered)."""
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)


class PluginFailure(PluginError):
    """A validator, gate or guard raised: the run stops (exit 2) naming the plugin."""

    def __init__(self, kind: str, plugin: str, name: str, error: BaseException) -> None:
        self.kind = kind
        self.plugin = plugin
        self.name = name
        self.error = f"{type(error).__name__}: {error}"
        super().__init__(
            f"{kind} plugin {plugin} raised {self.error}; the run stopped (a check that cannot run is not "
            f"skipped): fix it, or disable it with {DISABLE_ENV}={name}"
        )


def hook_names() -> list[str]:
    """Every hookspec name, for documentation and meta-tests."""
    return sorted(name for name in dir(hookspecs) if name.startswith("ralph_"))

