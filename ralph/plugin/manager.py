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
breaks").  A hook answered outside a loop builds its host with ``sections=False``:
the config sections are asked for only when wanted.

Every hook is called through pluggy (``ralph/plugin/calls.py``): wrappers
(``@hookimpl(wrapper=True)``) work on the validation, guard, monitor, prompt and
pre-flight hooks.  The registration hooks and ``ralph_config_sections`` are called once
per plugin (what it registers is its own), and reporters one by one in effect (one that
raises is disabled, the others still get the event): a wrapper of one of those hooks
is a load failure that says so.  ``RALPH_TRACE_PLUGINS=1`` prints every hook call.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, TypeVar, cast

import pluggy

from ralph.plugin import hookspecs
from ralph.plugin.calls import flatten, raised_by, trace_calls, traced_hooks
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

if TYPE_CHECKING:
    from ralph.plugin.local import LocalPlugin
    from ralph.settings import Settings

API_VERSION = "2.0"
"""The plugin API version of this ralph (``major.minor``): a plugin declaring
``RALPH_API = "2"`` (or ``"2.0"``) loads; one declaring ``"3"``, ``"2.1"`` or ``"1"`` does not.
The major grows when a public name moves or goes (2: what serves one plugin kind moved from
``ralph.api`` to its submodules, docs/plugins.md), the minor when one is added."""
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


PER_PLUGIN_HOOKS = (
    "ralph_register_runners",
    "ralph_register_agents",
    "ralph_register_policies",
    "ralph_register_task_stores",
    "ralph_register_gates",
    "ralph_register_fleet_engines",
    "ralph_config_sections",
)
"""Hooks called once per plugin: what a plugin registers (and which plugin registered it) is its own."""

NO_WRAPPERS = {
    **{name: "it is called once per plugin (what a plugin registers is its own)" for name in PER_PLUGIN_HOOKS},
    "ralph_loop_event": "reporters are isolated from each other (one that raises is disabled, the others go on)",
}
"""Hooks a wrapper cannot wrap, and why (a plugin implementing one as a wrapper does not load)."""


def wrapper_problem(pm: pluggy.PluginManager, plugin: object) -> str | None:
    """Why ``plugin`` cannot load because it wraps a hook no wrapper can wrap (None: it does not)."""
    problems = []
    for caller in pm.get_hookcallers(plugin) or []:
        why = NO_WRAPPERS.get(caller.name)
        if why is None:
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and (impl.wrapper or impl.hookwrapper):
                problems.append(f"implements {caller.name} as a wrapper, which ralph does not support: {why}; "
                                "implement it as a plain hook")
    return "; ".join(problems) or None


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
        sections: bool = True,
    ) -> None:
        """Load every installed plugin (``only``: just the entry points of these names,
        e.g. the plugin behind one command) and the registries they fill.

        ``sections=False`` (the hook answered outside a loop) leaves the plugins' config sections
        until :meth:`config_sections` asks: their models import pydantic, which a hook call does
        not need (a plugin whose sections fail then stays loaded, so its guards still run)."""
        environ = dict(os.environ) if environ is None else environ
        self._environ = environ
        self.pm = pluggy.PluginManager("ralph")
        self.pm.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self._in_code: set[str] = set()
        self.silenced: dict[str, str] = {}
        """Reporters disabled after they raised (plugin name -> the error)."""
        self.warn: Callable[[str], None] = _warn_on_stderr
        """Where warnings about plugins go (a one-line message; stderr by default)."""
        traced = traced_hooks(environ)
        if traced is not None:
            trace_calls(self.pm, traced)
        self._reporters: tuple[tuple[str, ...], Any] = ((), None)
        """The silenced reporters and the hook caller of the others (None: ``pm.hook.ralph_loop_event``)."""
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
        self._registry_hooks: dict[str, tuple[Registry, type]] = {}
        self.runners = self._registry("runner", "ralph_register_runners", Runner)
        self.agents = self._registry("agent", "ralph_register_agents", Agent)
        self.policies = self._registry("policy", "ralph_register_policies", Policy)
        self.stores = self._registry("task store", "ralph_register_task_stores", TaskStore)
        self.gates = self._registry("gate", "ralph_register_gates", Gate)
        self.fleet_engines = self._registry("fleet engine", "ralph_register_fleet_engines", FleetEngine)
        self._sections: list[tuple[str, dict[str, type]]] | None = self._collect_sections() if sections else None

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
                problem = wrapper_problem(self.pm, plugin)
                if problem is not None:
                    self.pm.unregister(name=ep.name)
                    self.infos.append(PluginInfo(ep.name, dist, version, ep.value, error=problem, incompatible=True))
                    continue
            except Exception as exc:  # a broken third-party plugin must not break ralph
                self.infos.append(
                    PluginInfo(ep.name, dist, version, ep.value, error=f"{type(exc).__name__}: {exc}")
                )
                continue
            self.infos.append(PluginInfo(ep.name, dist, version, ep.value))

    def add_local(self, plugins: Iterable[LocalPlugin]) -> None:
        """Load project-local plugins (ralph/plugin/local.py) after the installed ones: each executed
        from the bytes read at the start, checked as an installed plugin is (``RALPH_API``, hook
        names, wrappers) and for the hooks only installed plugins may implement; the gates it
        registers join the registry.  One that fails is recorded as failed (``ralph run`` refuses)."""
        from ralph.plugin.local import module_of, not_local

        disabled = disabled_plugins(self._environ)
        for plugin in plugins:
            info = PluginInfo(plugin.name, plugin.describe_source(), "", str(plugin.path))
            if plugin.name in disabled:
                self.infos.append(replace(info, disabled=True))
                self._not_loaded[plugin.name] = f"is disabled ({DISABLE_ENV})"
                continue
            try:
                module = module_of(plugin)
                problem = api_incompatibility(getattr(module, API_ATTRIBUTE, None)) or replaced_hooks(module)
                if problem is None:
                    problem = not_local(module)
                    incompatible = False
                else:
                    incompatible = True
                if problem is None:
                    self.pm.register(module, name=plugin.name)
                    try:
                        self.pm.check_pending()  # a misspelled hook name
                    except Exception:
                        self.pm.unregister(module)
                        raise
                    problem = wrapper_problem(self.pm, module)
                    if problem is not None:
                        self.pm.unregister(module)
                        incompatible = True
            except Exception as exc:  # the person's file: its error is shown, ralph run refuses
                problem, incompatible = f"{type(exc).__name__}: {exc}", False
            if problem is not None:
                failed = replace(info, error=problem, incompatible=incompatible)
                self.infos.append(failed)
                self._not_loaded[plugin.name] = f"did not load: {failed.status}"
                continue
            self.infos.append(info)
            for hook_name, (registry, base) in self._registry_hooks.items():
                if plugin.name in self._implementers(hook_name):
                    self._register_from(registry, hook_name, base, plugin.name)

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
        problem = wrapper_problem(self.pm, plugin)
        if problem is not None:
            self.pm.unregister(name=unique)
            raise PluginError(f"plugin {name!r} (registered in code) {problem}")
        self._in_code.add(unique)
        self.infos.append(PluginInfo(unique, "registered in code", "", name))

    def _implementers(self, hook_name: str) -> list[str]:
        """The plugins implementing ``hook_name``, in the order pluggy keeps them."""
        names: list[str] = []
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            if impl.plugin_name not in names:
                names.append(impl.plugin_name)
        return names

    def call_one(self, hook_name: str, plugin_name: str, **kwargs: Any) -> list[Any]:
        """Call ``hook_name`` of plugin ``plugin_name`` alone (through pluggy: traced, its own wrappers apply)."""
        others = [impl.plugin for impl in getattr(self.pm.hook, hook_name).get_hookimpls() if impl.plugin_name != plugin_name]
        return cast("list[Any]", self.pm.subset_hook_caller(hook_name, others)(**kwargs))

    def _registry(self, kind: str, hook_name: str, base: type) -> Registry:
        """Fill one registry; a plugin whose hook raises (or registers a wrong class) is a load failure."""
        registry = Registry(kind, not_loaded=self._not_loaded)
        self._registries.append(registry)
        self._registry_hooks[hook_name] = (registry, base)
        for plugin_name in self._implementers(hook_name):
            self._register_from(registry, hook_name, base, plugin_name)
        return registry

    def _register_from(self, registry: Registry, hook_name: str, base: type, plugin_name: str) -> None:
        """What plugin ``plugin_name`` registers through ``hook_name`` into ``registry``."""
        provider = self.describe(plugin_name)

        def register(cls: type) -> None:
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise PluginError(f"plugin {provider} registered {cls!r}, which is not a {base.__name__}")
            registry.add(cls, provider, plugin_name)

        try:
            self.call_one(hook_name, plugin_name, register=register)
        except NameTaken:
            raise
        except Exception as exc:  # a broken third-party plugin must not break ralph
            self._fail(plugin_name, f"{hook_name} raised {type(exc).__name__}: {exc}", exc)

    def _collect_sections(self) -> list[tuple[str, dict[str, type]]]:
        """Every plugin's ``ralph_config_sections`` answer (plugin name, sections); one that raises,
        or answers something other than a dict of names to models, is a load failure."""
        collected: list[tuple[str, dict[str, type]]] = []
        for plugin_name in self._implementers("ralph_config_sections"):
            provided = self._sections_of(plugin_name)
            if provided is not None:
                collected.append((plugin_name, provided))
        return collected

    def _sections_of(self, plugin_name: str) -> dict[str, type] | None:
        """Plugin ``plugin_name``'s config sections (None: it failed, and is recorded as failed)."""
        try:
            answers = self.call_one("ralph_config_sections", plugin_name)
        except Exception as exc:  # a broken third-party plugin must not break ralph
            self._fail(plugin_name, f"ralph_config_sections raised {type(exc).__name__}: {exc}", exc)
            return None
        provided = answers[0] if answers else {}
        if not (isinstance(provided, dict) and all(isinstance(k, str) and isinstance(v, type) for k, v in provided.items())):
            self._fail(plugin_name, f"ralph_config_sections returned {provided!r}, not a dict of section names to models")
            return None
        return provided

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

    def declaration_problems(self) -> list[str]:
        """Where what an installed plugin registers differs from what its distribution declares
        (ralph/plugin/declared.py): one line each, for ``ralph plugins``.  A plugin declaring nothing
        is not a problem (``ralph run --help`` imports it to list its names)."""
        from ralph.plugin.declared import KIND_GROUPS, declarations

        found = declarations(self._environ)
        loaded = {info.name for info in self.infos if not (info.error or info.disabled) and info.name not in self._in_code}
        declaring = {item.plugin for items in found.names.values() for item in items}
        problems = []
        for kind in KIND_GROUPS:
            registry: Registry = getattr(self, kind)
            declared = {(item.plugin, item.name) for item in found.names[kind] if item.plugin in loaded}
            registered = {(owner, name) for name, owner in registry.owners.items() if owner in loaded and owner in declaring}
            for plugin, name in sorted(declared - registered):
                problems.append(f"plugin {self.describe(plugin)} declares {registry.kind} {name!r} "
                                f"({KIND_GROUPS[kind]} entry points) but does not register it")
            for plugin, name in sorted(registered - declared):
                problems.append(f"plugin {self.describe(plugin)} registers {registry.kind} {name!r} without declaring "
                                f"it: add \"{plugin}.{name}\" to its {KIND_GROUPS[kind]} entry points (`ralph run --help` "
                                "lists the declared names)")
        return problems

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
        if self._sections is None:
            self._sections = self._collect_sections()
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

    def failure(self, kind: str, caller: Any, error: BaseException) -> PluginFailure:
        """The ``PluginFailure`` naming the plugin whose implementation of ``caller``'s hook raised ``error``."""
        impls = caller.get_hookimpls()
        impl = raised_by(error, impls)
        if impl is not None:
            return PluginFailure(kind, self.describe(impl.plugin_name), impl.plugin_name, error)
        names = list(dict.fromkeys(impl.plugin_name for impl in impls))  # pluggy itself refused an answer
        return PluginFailure(kind, " or ".join(self.describe(name) for name in names) or "(none)", ",".join(names), error)

    def validate(self, context: ValidationContext) -> list[Violation]:
        """Every validator's violations.  A validator that raises stops the caller with a
        ``PluginFailure`` naming it (the loop is fail-closed)."""
        from ralph.gitutil import GitMetadataChanged

        caller = self.pm.hook.ralph_validate
        try:
            results = caller(context=context)
        except GitMetadataChanged:  # the loop's own stop (tampered .git), not the plugin's fault
            raise
        except Exception as exc:
            raise self.failure("validator", caller, exc) from exc
        return cast("list[Violation]", flatten(results))

    def prompt_context(self, run_dir: Path, iteration: int, since: float) -> list[str]:
        """Feedback items from every ``ralph_prompt_context`` implementation."""
        results = self.pm.hook.ralph_prompt_context(run_dir=run_dir, iteration=iteration, since=since)
        return [item for item in flatten(results) if item]

    def configure(self, settings: Settings) -> None:
        """Give every ``ralph_configure`` implementation the run's settings.  A ``RalphError`` (a
        ``ConfigError``: a notification URL that does not parse ...) passes as it is; any other
        exception becomes a ``PluginFailure`` naming the plugin."""
        from ralph.errors import RalphError

        caller = self.pm.hook.ralph_configure
        try:
            caller(settings=settings)
        except RalphError:
            raise
        except Exception as exc:
            raise self.failure("configure", caller, exc) from exc

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Every ``ralph_preflight`` hook's checks, flattened."""
        return cast("list[Check]", flatten(self.pm.hook.ralph_preflight(context=context)))

    def emit(self, event: LoopEvent) -> None:
        """Give ``event`` to every reporter.  A reporter that raises is disabled for the rest
        of this host's life with a warning (and a ``reporter_disabled`` event to the others);
        the reporters after it still get the event."""
        failed: list[tuple[str, Exception]] = []
        caller = self._reporter_caller()
        while True:
            try:
                caller(event=event)
                break
            except Exception as exc:  # noqa: BLE001 - reporters are isolated (docs/design.md)
                order = list(reversed(caller.get_hookimpls()))  # pluggy's call order
                impl = raised_by(exc, order)
                if impl is None:  # cannot tell which: nobody is disabled, the event is not given again
                    self.warn(f"a reporter raised {type(exc).__name__}: {exc} on a {event.kind!r} event")
                    break
                self.silenced[impl.plugin_name] = f"{type(exc).__name__}: {exc}"
                failed.append((impl.plugin_name, exc))
                done = order[: order.index(impl) + 1]
                caller = self.pm.subset_hook_caller("ralph_loop_event", [i.plugin for i in done] + self._silenced_plugins())
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

    def _reporter_caller(self) -> Any:
        """The hook caller of every reporter not silenced."""
        silenced = tuple(self.silenced)
        if silenced != self._reporters[0]:
            self._reporters = (silenced, self.pm.subset_hook_caller("ralph_loop_event", self._silenced_plugins()))
        return self._reporters[1] or self.pm.hook.ralph_loop_event

    def _silenced_plugins(self) -> list[object]:
        return [plugin for name in self.silenced if (plugin := self.pm.get_plugin(name)) is not None]

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

