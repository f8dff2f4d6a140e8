"""The plugin manager (ralph/plugin/manager.py) and the ``ralph plugins`` / ``ralph --help`` commands.

Third-party plugins are fake distributions (tests/fakedists.py).  Plugin commands are in
tests/test_plugin_commands.py.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

import pluggy
import pytest
from click.testing import CliRunner

from ralph import hookimpl
from ralph.plugin import hookspecs
from ralph.cli.main import ROLE_OF_HOOK, cli
from ralph.errors import PluginError
from ralph.plugin.entrypoints import DISABLE_ENV, NO_AUTOLOAD_ENV, OWN_DISTRIBUTION
from ralph.plugin.manager import PluginHost, hook_names

from fakedists import FakeDists, runner_module

# -- fake plugin modules ----------------------------------------------------------------

# ``ralph_register_runner`` (no s) is no hookspec; the module also registers a runner that
# must not appear, since the whole plugin is skipped.
MISSPELLED_MODULE = runner_module("misspelled") + """

@hookimpl
def ralph_register_runner(register):
    register(FakeRunner)
"""


@pytest.fixture(scope="module")
def installed_runners() -> list[str]:
    """Every installed distribution's runners before a test adds fakes (the example package's too)."""
    host = PluginHost(environ={})
    assert not host.failures, host.failures
    return host.runners.names()


@pytest.fixture(scope="module")
def own_runners() -> list[str]:
    """ralph's own runners, whatever they are today (computed, never hard-coded)."""
    host = PluginHost(environ={NO_AUTOLOAD_ENV: "1"})
    assert not host.failures, host.failures
    return host.runners.names()


def info_of(host: PluginHost, name: str) -> Any:
    matches = [info for info in host.infos if info.name == name]
    assert len(matches) == 1, host.infos
    return matches[0]


# -- loading ----------------------------------------------------------------------------------


def test_own_plugins_load_without_failures(own_runners: list[str]) -> None:
    host = PluginHost(environ={NO_AUTOLOAD_ENV: "1"})
    assert host.failures == []
    assert "direct" in own_runners
    own = [info for info in host.infos if info.distribution == OWN_DISTRIBUTION]
    assert own and all(not info.disabled and info.error is None for info in own)
    assert all(info.version for info in own)


def test_third_party_runner_is_listed_with_distribution_and_version(
    fake_dists: FakeDists, installed_runners: list[str]
) -> None:
    fake_dists.add({"fake-runner": "ralph_fake_runner"}, {"ralph_fake_runner": runner_module("fake")})
    host = PluginHost(environ={})
    assert host.failures == []
    assert host.runners.names() == sorted([*installed_runners, "fake"])
    assert host.runners.get("fake").__module__ == "ralph_fake_runner"
    assert host.runners.providers["fake"] == "'fake-runner' (fake-dist 1.0)"
    info = info_of(host, "fake-runner")
    assert (info.distribution, info.version, info.module) == ("fake-dist", "1.0", "ralph_fake_runner")
    assert info.error is None and not info.disabled


def test_duplicate_runner_name_names_both_providers(fake_dists: FakeDists) -> None:
    fake_dists.add({"fake-direct": "ralph_fake_direct"}, {"ralph_fake_direct": runner_module("direct")})
    with pytest.raises(PluginError) as error:
        PluginHost(environ={})
    message = str(error.value)
    assert "two plugins register the runner 'direct'" in message
    assert "'fake-direct' (fake-dist 1.0)" in message
    assert f"'direct' ({OWN_DISTRIBUTION} " in message
    assert DISABLE_ENV in message  # says how to resolve it


def test_duplicate_is_resolved_by_disabling_one(fake_dists: FakeDists, installed_runners: list[str]) -> None:
    fake_dists.add({"fake-direct": "ralph_fake_direct"}, {"ralph_fake_direct": runner_module("direct")})
    host = PluginHost(environ={DISABLE_ENV: "fake-direct"})
    assert host.runners.names() == installed_runners
    assert host.runners.providers["direct"].startswith("'direct' (")


def test_plugin_failing_at_import_is_recorded_and_others_still_load(
    fake_dists: FakeDists, installed_runners: list[str]
) -> None:
    fake_dists.standard()
    host = PluginHost(environ={})
    assert [info.name for info in host.failures] == ["fake-broken"]
    broken = host.failures[0]
    assert broken.error == "RuntimeError: boom at import"
    assert (broken.distribution, broken.version, broken.module) == ("fake-dist", "1.0", "ralph_fake_broken")
    assert host.pm.get_plugin("fake-broken") is None
    # the other third-party plugin and all of ralph's own still load
    assert host.runners.names() == sorted([*installed_runners, "fake"])
    assert all(info.error is None for info in host.infos if info.name != "fake-broken")


@pytest.mark.parametrize("setting", ["fake-broken,fake-runner", " fake-broken , fake-runner ", "fake-runner,,fake-broken,"])
def test_disable_plugins_by_name(fake_dists: FakeDists, installed_runners: list[str], setting: str) -> None:
    fake_dists.standard()
    host = PluginHost(environ={DISABLE_ENV: setting})
    assert host.failures == []
    for name in ("fake-runner", "fake-broken"):
        info = info_of(host, name)
        assert info.disabled and info.error is None
        assert (info.distribution, info.version) == ("fake-dist", "1.0")
        assert host.pm.get_plugin(name) is None
    assert fake_dists.imported() == []  # disabled plugins are never imported
    assert host.runners.names() == installed_runners


def test_disable_one_of_ralphs_own_plugins(fake_dists: FakeDists, installed_runners: list[str]) -> None:
    host = PluginHost(environ={DISABLE_ENV: " direct "})
    assert info_of(host, "direct").disabled
    assert host.runners.names() == [name for name in installed_runners if name != "direct"]


def test_disable_autoload_loads_only_own_plugins(fake_dists: FakeDists, own_runners: list[str]) -> None:
    fake_dists.standard()
    host = PluginHost(environ={NO_AUTOLOAD_ENV: "1"})
    assert host.failures == []
    assert host.runners.names() == own_runners
    for name in ("fake-runner", "fake-broken"):
        assert info_of(host, name).disabled
    assert fake_dists.imported() == []
    loaded = [info for info in host.infos if not info.disabled]
    assert loaded and {info.distribution for info in loaded} == {OWN_DISTRIBUTION}


@pytest.mark.parametrize("value", ["0", "", "no"])
def test_autoload_setting_that_is_not_true_keeps_autoload(fake_dists: FakeDists, value: str) -> None:
    fake_dists.add({"fake-runner": "ralph_fake_runner"}, {"ralph_fake_runner": runner_module("fake")})
    host = PluginHost(environ={NO_AUTOLOAD_ENV: value})
    assert "fake" in host.runners.names()


def test_misspelled_hookimpl_in_third_party_plugin_is_a_failure(
    fake_dists: FakeDists, installed_runners: list[str]
) -> None:
    fake_dists.add(
        {"fake-misspelled": "ralph_fake_misspelled", "fake-runner": "ralph_fake_runner"},
        {"ralph_fake_misspelled": MISSPELLED_MODULE, "ralph_fake_runner": runner_module("fake")},
    )
    host = PluginHost(environ={})
    assert [info.name for info in host.failures] == ["fake-misspelled"]
    error = host.failures[0].error or ""
    assert error.startswith("PluginValidationError: ")
    assert "ralph_register_runner" in error
    # the whole plugin is skipped (its correctly spelled hook too); the others load
    assert host.pm.get_plugin("fake-misspelled") is None
    assert "misspelled" not in host.runners.names()
    assert host.runners.names() == sorted([*installed_runners, "fake"])


def test_misspelled_hookimpl_in_plugin_registered_in_code_raises() -> None:
    class Misspelled:
        @hookimpl
        def ralph_register_runner(self, register: Callable[[type], None]) -> None:
            raise AssertionError("never called")

    with pytest.raises(pluggy.PluginValidationError, match="ralph_register_runner"):
        PluginHost(extra_plugins=[Misspelled()], environ={NO_AUTOLOAD_ENV: "1"})


def test_duplicate_from_plugin_registered_in_code(own_runners: list[str]) -> None:
    from ralph.contracts import Availability, ProcessOutcome, Runner

    class Shadow(Runner):
        name = own_runners[0]

        def availability(self) -> Availability:
            return Availability.yes()

        def run(self, spec: Any, on_line: Any, timeout: Any, cancel: Any) -> ProcessOutcome:
            return ProcessOutcome(0)

    class InCode:
        @hookimpl
        def ralph_register_runners(self, register: Callable[[type], None]) -> None:
            register(Shadow)

    with pytest.raises(PluginError) as error:
        PluginHost(extra_plugins=[InCode()], environ={NO_AUTOLOAD_ENV: "1"})
    assert f"'{own_runners[0]}' ({OWN_DISTRIBUTION} " in str(error.value)
    assert "'InCode' (registered in code)" in str(error.value)


def test_registering_something_that_is_not_a_runner_is_an_error() -> None:
    class Wrong:
        @hookimpl
        def ralph_register_runners(self, register: Callable[[type], None]) -> None:
            register(dict)

    with pytest.raises(PluginError, match="not a Runner"):
        PluginHost(extra_plugins=[Wrong()], load_entry_points=False)


# -- every hookspec, called through pluggy -------------------------------------------------


class EveryHook:
    """Implements every hookspec; each implementation records its call and returns a marker."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _record(self, name: str, **kwargs: Any) -> str:
        self.calls.append((name, kwargs))
        return f"from {name}"

    @hookimpl
    def ralph_register_runners(self, register: Any) -> None:
        self._record("ralph_register_runners", register=register)

    @hookimpl
    def ralph_register_agents(self, register: Any) -> None:
        self._record("ralph_register_agents", register=register)

    @hookimpl
    def ralph_register_policies(self, register: Any) -> None:
        self._record("ralph_register_policies", register=register)

    @hookimpl
    def ralph_register_task_stores(self, register: Any) -> None:
        self._record("ralph_register_task_stores", register=register)

    @hookimpl
    def ralph_register_gates(self, register: Any) -> None:
        self._record("ralph_register_gates", register=register)

    @hookimpl
    def ralph_register_fleet_engines(self, register: Any) -> None:
        self._record("ralph_register_fleet_engines", register=register)

    @hookimpl
    def ralph_config_sections(self) -> dict[str, type]:
        self._record("ralph_config_sections")
        return {}

    @hookimpl
    def ralph_configure(self, settings: Any) -> None:
        self._record("ralph_configure", settings=settings)

    @hookimpl
    def ralph_validate(self, context: Any) -> list[str]:
        return [self._record("ralph_validate", context=context)]

    @hookimpl
    def ralph_loop_event(self, event: Any) -> None:
        self._record("ralph_loop_event", event=event)

    @hookimpl
    def ralph_pre_tool_use(self, event: Any) -> list[str]:
        return [self._record("ralph_pre_tool_use", event=event)]

    @hookimpl
    def ralph_post_tool_use(self, event: Any) -> list[str]:
        return [self._record("ralph_post_tool_use", event=event)]

    @hookimpl
    def ralph_session_start(self, event: Any) -> list[str]:
        return [self._record("ralph_session_start", event=event)]

    @hookimpl
    def ralph_user_prompt_submit(self, event: Any) -> list[str]:
        return [self._record("ralph_user_prompt_submit", event=event)]

    @hookimpl
    def ralph_prompt_context(self, run_dir: Any, iteration: Any, since: Any) -> list[str]:
        return [self._record("ralph_prompt_context", run_dir=run_dir, iteration=iteration, since=since)]

    @hookimpl
    def ralph_preflight(self, context: Any) -> list[str]:
        return [self._record("ralph_preflight", context=context)]


def test_hook_names_are_the_hookspecs() -> None:
    names = hook_names()
    assert names == sorted(names) and len(names) == len(set(names))
    for name in names:
        assert callable(getattr(hookspecs, name))
    assert set(ROLE_OF_HOOK) <= set(names)


def test_plugin_implementing_every_hookspec_gets_every_call() -> None:
    plugin = EveryHook()
    implemented = sorted(name for name in dir(plugin) if name.startswith("ralph_"))
    assert implemented == hook_names(), "EveryHook must implement every hookspec (and nothing else)"

    host = PluginHost(extra_plugins=[plugin], load_entry_points=False)
    # building the registries already called every registration hook once (config sections included)
    registered = sorted(name for name, _ in plugin.calls)
    assert registered == sorted(
        name for name in hook_names() if name.startswith("ralph_register_") or name == "ralph_config_sections"
    )

    for name in hook_names():
        plugin.calls.clear()
        spec = inspect.signature(getattr(hookspecs, name))
        impl = inspect.signature(getattr(plugin, name))
        assert list(impl.parameters) == list(spec.parameters), name
        kwargs = {param: object() for param in spec.parameters}
        results = getattr(host.pm.hook, name)(**kwargs)
        assert len(plugin.calls) == 1, name
        called, received = plugin.calls[0]
        assert called == name
        assert received.keys() == kwargs.keys()
        assert all(received[key] is kwargs[key] for key in kwargs), name
        assert isinstance(results, list)  # not firstresult: every implementation is collected


def test_typed_wrappers_collect_results() -> None:
    from ralph.contracts import LoopEvent

    plugin = EveryHook()
    host = PluginHost(extra_plugins=[plugin], load_entry_points=False)
    plugin.calls.clear()
    context: Any = object()
    assert host.validate(context) == ["from ralph_validate"]
    assert host.prompt_context(Path("/tmp/run"), 2, 1.5) == ["from ralph_prompt_context"]
    event = LoopEvent("run_started", {"x": 1})
    host.emit(event)
    assert host.config_sections() == {}
    assert host.preflight(context) == ["from ralph_preflight"]
    settings: Any = object()
    assert host.configure(settings) is None
    assert [name for name, _ in plugin.calls] == [
        "ralph_validate",
        "ralph_prompt_context",
        "ralph_loop_event",
        "ralph_preflight",
        "ralph_configure",
    ]  # config sections were collected when the host was built
    assert plugin.calls[2][1]["event"] is event
    assert plugin.calls[4][1]["settings"] is settings


def test_configure_passes_a_config_error_and_names_a_plugin_that_raises_anything_else() -> None:
    from ralph.errors import ConfigError
    from ralph.plugin.manager import PluginFailure

    class Bad:
        def __init__(self, error: Exception) -> None:
            self.error = error

        @hookimpl
        def ralph_configure(self, settings: Any) -> None:
            raise self.error

    host = PluginHost(extra_plugins=[Bad(ConfigError("`notify.urls.0` is wrong"))], load_entry_points=False)
    with pytest.raises(ConfigError, match="notify.urls.0"):
        host.configure(object())  # type: ignore[arg-type]
    host = PluginHost(extra_plugins=[Bad(RuntimeError("boom"))], load_entry_points=False)
    with pytest.raises(PluginFailure, match="configure plugin .* raised RuntimeError: boom"):
        host.configure(object())  # type: ignore[arg-type]


# -- the CLI ------------------------------------------------------------------------------------


def invoke(args: list[str], **env: str) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def row(output: str, plugin_name: str) -> str:
    rows = [line for line in output.splitlines() if line.split()[:1] == [plugin_name]]
    assert len(rows) == 1, output
    return rows[0]


def test_ralph_plugins_lists_failures_and_exits_1(fake_dists: FakeDists) -> None:
    fake_dists.standard()
    result = invoke(["plugins"])
    assert result.exit_code == 1, result.output
    assert row(result.output, "fake-broken").rstrip().endswith("FAILED: RuntimeError: boom at import")
    runner_row = row(result.output, "fake-runner")
    assert "runner fake" in runner_row
    assert runner_row.split()[-3:] == ["fake-dist", "1.0", "loaded"]
    assert row(result.output, "direct").split()[-1] == "loaded"
    assert row(result.output, "plugin").split() == ["plugin", "provides", "distribution", "version", "status"]


def test_ralph_plugins_honours_disable_plugins(fake_dists: FakeDists) -> None:
    fake_dists.standard()
    result = invoke(["plugins"], **{DISABLE_ENV: "fake-broken"})
    assert result.exit_code == 0, result.output
    assert "FAILED" not in result.output
    assert row(result.output, "fake-broken").split()[-1] == "disabled"
    assert row(result.output, "fake-runner").split()[-1] == "loaded"
    assert "ralph_fake_broken" not in sys.modules


def test_ralph_plugins_with_autoload_disabled(fake_dists: FakeDists) -> None:
    fake_dists.standard()
    result = invoke(["plugins"], **{NO_AUTOLOAD_ENV: "1"})
    assert result.exit_code == 0, result.output
    assert row(result.output, "fake-runner").split()[-1] == "disabled"
    assert row(result.output, "fake-broken").split()[-1] == "disabled"
    assert fake_dists.imported() == []


def test_ralph_plugins_shows_roles(fake_dists: FakeDists) -> None:
    result = invoke(["plugins"])
    assert result.exit_code == 0, result.output
    assert "reporter" in row(result.output, "console")
    assert "validator" in row(result.output, "schema")


def test_ralph_help_works_with_a_broken_plugin(fake_dists: FakeDists) -> None:
    fake_dists.standard()
    result = invoke(["--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and "plugins" in result.output
    assert "sandbox" in result.output  # the docker plugin's command, read from its metadata
    assert invoke(["--version"]).exit_code == 0


# -- registering in code, disabled names, API versions ---------------------------


def test_extra_plugin_that_is_also_installed_is_registered_once(fake_dists: FakeDists, installed_runners: list[str]) -> None:
    fake_dists.add({"fake-runner": "ralph_fake_runner"}, {"ralph_fake_runner": runner_module("fake")})
    module = importlib.import_module("ralph_fake_runner")
    host = PluginHost(extra_plugins=[module], environ={})
    assert host.runners.names() == sorted([*installed_runners, "fake"])
    assert host.runners.providers["fake"] == "'fake-runner' (fake-dist 1.0)"
    # and without the installed entry point it is registered from code
    alone = PluginHost(extra_plugins=[module], environ={DISABLE_ENV: "fake-runner"})
    assert alone.runners.providers["fake"] == "'ralph_fake_runner' (registered in code)"


def test_an_unknown_name_says_which_plugins_are_disabled(fake_dists: FakeDists) -> None:
    fake_dists.add({"fake": "ralph_fake_runner"}, {"ralph_fake_runner": runner_module("fake")})
    host = PluginHost(environ={DISABLE_ENV: "fake"})
    with pytest.raises(PluginError, match=r"runner 'fake' is not available: plugin 'fake' is disabled \(RALPH_DISABLE_PLUGINS\)"):
        host.runners.get("fake")
    with pytest.raises(PluginError, match=r"unknown runner 'nope'; available: .*; not loaded: 'fake' \(is disabled"):
        host.runners.get("nope")


@pytest.mark.parametrize(("declared", "loads"), [("2", True), ("2.0", True), (2, True), ("3", False), ("2.1", False), ("1", False), ("1.0", False), ("one", False)])
def test_plugin_api_version_is_checked(fake_dists: FakeDists, declared: object, loads: bool) -> None:
    source = runner_module("versioned") + f"\nRALPH_API = {declared!r}\n"
    fake_dists.add({"versioned": "ralph_fake_versioned"}, {"ralph_fake_versioned": source})
    host = PluginHost(environ={})
    info = info_of(host, "versioned")
    assert ("versioned" in host.runners.names()) is loads
    assert (info.error is None) is loads
    if not loads:
        assert host.pm.get_plugin("versioned") is None
        assert info.status.startswith("INCOMPATIBLE:" if declared != "one" else "INCOMPATIBLE: RALPH_API = 'one' is not a version")


# -- registration hooks that fail ---------------------------------------------------------------

BAD_SECTIONS_MODULE = runner_module("early") + """

@hookimpl
def ralph_config_sections():
    return ["not", "a", "dict"]
"""


def test_a_bad_config_sections_answer_is_a_load_failure_and_drops_what_the_plugin_registered(
    fake_dists: FakeDists, installed_runners: list[str]
) -> None:
    fake_dists.add({"fake-sections": "ralph_fake_sections"}, {"ralph_fake_sections": BAD_SECTIONS_MODULE})
    host = PluginHost(environ={})
    assert [info.name for info in host.failures] == ["fake-sections"]
    assert host.failures[0].error == (
        "ralph_config_sections returned ['not', 'a', 'dict'], not a dict of section names to models"
    )
    assert host.runners.names() == installed_runners  # its runner, registered before, is gone
    assert not host.pm.has_plugin("fake-sections")
    with pytest.raises(PluginError, match="runner 'early'") as error:
        host.runners.get("early")
    assert "'fake-sections' (did not load: FAILED: ralph_config_sections returned" in str(error.value)
    with pytest.raises(PluginError, match="fake-sections"):
        host.require_all_loaded()


def test_a_registration_hook_raising_in_a_plugin_registered_in_code_raises() -> None:
    class Raising:
        @hookimpl
        def ralph_register_gates(self, register: Callable[[type], None]) -> None:
            raise RuntimeError("exploded")

    with pytest.raises(PluginError, match="plugin 'Raising' \\(registered in code\\): ralph_register_gates raised RuntimeError: exploded"):
        PluginHost(extra_plugins=[Raising()], load_entry_points=False)


def test_two_plugins_defining_one_config_section_are_both_named() -> None:
    from ralph.api import ConfigSection

    class Echo(ConfigSection):
        level: int = 1

    class First:
        @hookimpl
        def ralph_config_sections(self) -> dict[str, type]:
            return {"echo": Echo}

    class Second:
        @hookimpl
        def ralph_config_sections(self) -> dict[str, type]:
            return {"echo": Echo}

    host = PluginHost(extra_plugins=[First(), Second()], load_entry_points=False)
    with pytest.raises(PluginError) as error:
        host.config_sections()
    message = str(error.value)
    assert "two plugins define the config section 'echo'" in message
    assert "'First' (registered in code)" in message and "'Second' (registered in code)" in message
    assert DISABLE_ENV in message
