"""The names plugins register, declared in metadata (ralph/plugin/declared.py), and what the
commands that list them or look at runs import.

``ralph run --help`` lists the registered runner, agent and policy names from the declarations
(no plugin imported); ``ralph status`` imports neither pydantic nor pluggy nor a plugin.  Both are
checked by what a fresh interpreter imported, not by time (benchmarks/startup.py has the figures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ralph.cli.main import cli
from ralph.plugin.declared import KIND_GROUPS, declarations
from ralph.plugin.entrypoints import NO_AUTOLOAD_ENV
from ralph.plugin.manager import PluginHost
from ralph.testing import RalphProject, ReplayScript, say, story
from tests.fakedists import FakeDists, runner_module

PROBE = """
import json, sys
from click.testing import CliRunner
from ralph.cli.main import cli
result = CliRunner().invoke(cli, sys.argv[1:], catch_exceptions=False)
print(json.dumps({"exit": result.exit_code, "output": result.output, "modules": sorted(sys.modules)}))
"""

HEAVY = ("pydantic", "pluggy", "ralph.plugin.manager", "ralph.config", "ralph.settings", "ralph.contracts")


def probe(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``ralph ARGS`` in a fresh interpreter: its exit code, output and every module it imported."""
    result = subprocess.run([sys.executable, "-P", "-c", PROBE, *args], capture_output=True, text=True, check=True,
                            cwd=cwd, env={**os.environ, **(env or {})})
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def plugin_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(("ralph_plugins", "ralph_fake", "ralph_nice", "ralph_remote"))]


def test_ralphs_own_declarations_are_what_its_plugins_register() -> None:
    host = PluginHost(environ={NO_AUTOLOAD_ENV: "1"})
    found = declarations({NO_AUTOLOAD_ENV: "1"})
    assert found.silent == []
    for kind in KIND_GROUPS:
        registry = getattr(host, kind)
        declared = {(item.plugin, item.name): item.entry.load() for item in found.names[kind]}
        registered = {(owner, name): registry.entries[name] for name, owner in registry.owners.items()}
        assert declared == registered, kind
    assert host.declaration_problems() == []


def test_every_installed_plugin_declares_what_it_registers() -> None:
    assert PluginHost().declaration_problems() == []  # ralph-nice too


def test_run_help_lists_declared_names_without_importing_a_plugin(fake_dists: FakeDists) -> None:
    fake_dists.add(
        {"declaring": "ralph_fake_declaring"},
        {"ralph_fake_declaring": runner_module("declared-runner")},
        name="fake_declaring",
        declared={"ralph.runners": {"declaring.declared-runner": "ralph_fake_declaring:FakeRunner"}},
    )
    answer = probe("run", "--help", env={"PYTHONPATH": str(fake_dists.root)})
    assert answer["exit"] == 0
    text = " ".join(answer["output"].split()).replace("- ", "-")  # click wraps at hyphens
    examples = [name for name, dist in (("nice", "ralph-nice"), ("remote", "ralph-remote")) if _installed(dist)]
    runners = ", ".join(sorted(["auto", "bwrap", "declared-runner", "direct", "docker-sandbox", "ray", *examples]))
    assert f"Registered: {runners}." in text
    assert "Registered: claude, codex, replay." in text and "Registered: review, skip-review." in text
    assert plugin_modules(answer["modules"]) == []
    assert [name for name in HEAVY if name in answer["modules"]] == []


def _installed(distribution: str) -> bool:
    """Whether an example package is installed here (tox installs both; a developer's venv may lack one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


def test_a_plugin_declaring_nothing_is_asked_so_the_list_stays_complete(fake_dists: FakeDists) -> None:
    fake_dists.add({"silent": "ralph_fake_silent"}, {"ralph_fake_silent": runner_module("silent-runner")}, name="fake_silent")
    assert declarations().silent == ["silent"]
    answer = probe("run", "--help", env={"PYTHONPATH": str(fake_dists.root)})
    assert "silent-runner" in " ".join(answer["output"].split())
    assert plugin_modules(answer["modules"]) == ["ralph_fake_silent"]  # that plugin alone


def test_a_disabled_plugins_names_are_not_listed(fake_dists: FakeDists) -> None:
    fake_dists.add(
        {"declaring": "ralph_fake_declaring"},
        {"ralph_fake_declaring": runner_module("declared-runner")},
        declared={"ralph.runners": {"declaring.declared-runner": "ralph_fake_declaring:FakeRunner"}},
    )
    assert "declared-runner" in declarations({}).of("runners")
    assert "declared-runner" not in declarations({"RALPH_DISABLE_PLUGINS": "declaring"}).of("runners")
    assert "declared-runner" not in declarations({NO_AUTOLOAD_ENV: "1"}).of("runners")


def test_a_declaration_for_a_plugin_the_distribution_does_not_have_is_ignored(fake_dists: FakeDists) -> None:
    fake_dists.add(
        {"real": "ralph_fake_real"},
        {"ralph_fake_real": runner_module("real-runner")},
        declared={"ralph.runners": {"real.real-runner": "ralph_fake_real:FakeRunner", "direct.impostor": "x:Y",
                                    "no-dot": "x:Y"}},
    )
    assert "impostor" not in declarations({}).of("runners")  # `direct` is ralph's plugin, not this distribution's


def test_a_declaration_that_differs_from_the_registration_is_reported(fake_dists: FakeDists) -> None:
    fake_dists.add(
        {"wrong": "ralph_fake_wrong"},
        {"ralph_fake_wrong": runner_module("registered-name")},
        name="fake_wrong",
        declared={"ralph.runners": {"wrong.declared-name": "ralph_fake_wrong:FakeRunner"}},
    )
    problems = PluginHost(environ={}).declaration_problems()
    assert problems == [
        "plugin 'wrong' (fake-wrong 1.0) declares runner 'declared-name' (ralph.runners entry points) but does not "
        "register it",
        "plugin 'wrong' (fake-wrong 1.0) registers runner 'registered-name' without declaring it: add "
        "\"wrong.registered-name\" to its ralph.runners entry points (`ralph run --help` lists the declared names)",
    ]
    result = CliRunner().invoke(cli, ["plugins"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "ralph: warning: plugin 'wrong' (fake-wrong 1.0) declares runner 'declared-name'" in result.output


@pytest.fixture
def finished(ralph_project: RalphProject, tmp_path: Path) -> RalphProject:
    ralph_project.write_stories([story("US-001")])
    script = ReplayScript().iteration(1, say("nothing to do")).write(tmp_path / "script.json")
    ran = ralph_project.run("run", "--agent", "replay", "--runner", "direct", "--skip-review", "-n", "1",
                            env={"RALPH_REPLAY_SCRIPT": str(script)})
    assert ran.returncode == 1, ran.stderr
    return ralph_project


def test_status_imports_no_plugin_no_pydantic_no_pluggy(finished: RalphProject) -> None:
    answer = probe("status", cwd=finished.path, env=finished.process_env())
    assert answer["exit"] == 0 and "state: finished" in answer["output"], answer["output"]
    assert [name for name in HEAVY if name in answer["modules"]] == []
    assert plugin_modules(answer["modules"]) == []
