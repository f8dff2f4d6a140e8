"""Plugin commands: declared in the ``ralph.commands`` entry-point group (ralph/plugin/commands.py).

``ralph --help`` lists them from metadata without importing any plugin (a subprocess shows which
modules it imported); running one loads its plugin first.  Third-party plugins are fake
distributions (tests/fakedists.py); ``ralph sandbox`` is the docker plugin's real declaration in
ralph-trustloop's installed metadata.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ralph.cli.main import cli
from ralph.plugin.commands import COMMANDS_GROUP
from ralph.plugin.entrypoints import DISABLE_ENV, ENTRY_POINT_GROUP, NO_AUTOLOAD_ENV, entry_point_groups, normalize
from ralph.testing.requirements import require

from fakedists import FakeDists, runner_module

GREETER_CLI = """
import click


@click.command()
@click.option("--name", default="world")
def hello(name):
    '''Say hello from a plugin.'''
    click.echo(f"hello {name}, from a plugin")


@click.command("run")
def not_ralphs_run():
    '''Tries to replace ralph run.'''


NOT_A_COMMAND = 42
"""

GREETER_COMMANDS = {
    "greeter.hello": "ralph_fake_greeter_cli:hello",
    "greeter.run": "ralph_fake_greeter_cli:not_ralphs_run",
}


def add_greeter(fake_dists: FakeDists, api: str = "2", cli_source: str = GREETER_CLI, **commands: str) -> None:
    """A plugin ``greeter`` (a runner, ``RALPH_API = api``) declaring ``ralph hello`` (and ``run``, a clash)."""
    fake_dists.add(
        {"greeter": "ralph_fake_greeter"},
        {"ralph_fake_greeter": runner_module("greet") + f"\nRALPH_API = {api!r}\n", "ralph_fake_greeter_cli": cli_source},
        commands=commands or GREETER_COMMANDS,
    )


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("project", [ROOT, ROOT / "examples" / "ralph-nice", ROOT / "examples" / "ralph-remote"],
                         ids=["ralph-trustloop", "ralph-nice", "ralph-remote"])
def test_the_installed_entry_points_are_the_ones_in_pyproject(project: Path) -> None:
    """An editable install copies entry points at install time: a venv installed before one was
    added (``ralph sandbox``, ``ralph nice``) lacks it until ``pip install -e`` runs again."""
    metadata = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    from ralph.plugin.declared import KIND_GROUPS

    groups = [ENTRY_POINT_GROUP, COMMANDS_GROUP, *KIND_GROUPS.values()]
    declared = {group: metadata["entry-points"].get(group, {}) for group in groups}
    found = entry_point_groups(groups)
    installed = {group: {ep.name: ep.value for ep in found[group] if ep.dist == normalize(metadata["name"])} for group in groups}
    require(any(installed.values()), f"{metadata['name']} is not installed (pip install -e {project.relative_to(ROOT)})")
    assert installed == declared, (
        f"the installed metadata of {metadata['name']} is stale: reinstall it "
        "(.venv/bin/pip install -e '.[test,ray]' -e examples/ralph-nice -e examples/ralph-remote)"
    )


def invoke(args: list[str], **env: str) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def listed(help_text: str) -> dict[str, str]:
    """Command name -> short help, from the Commands section of a help page."""
    section = help_text.split("Commands:", 1)[1].split("\n\n", 1)[0]
    return {line.split()[0]: " ".join(line.split()[1:]) for line in section.splitlines() if line.strip()}


def test_help_lists_plugin_commands_without_loading_plugins_and_they_run(fake_dists: FakeDists) -> None:
    add_greeter(fake_dists)
    result = invoke(["--help"])
    assert result.exit_code == 0, result.output
    commands = listed(result.stdout)
    assert commands["hello"] == "Say hello from a plugin."
    assert commands["sandbox"].startswith("Build the docker-sandbox runner's image")  # ralph-trustloop's metadata
    assert commands["run"].startswith("Run the loop until every story")  # ralph's own, not the plugin's
    assert "plugin 'greeter' (fake-dist 1.0) adds command(s) that exist already, left out: run" in result.stderr
    assert fake_dists.imported() == ["ralph_fake_greeter_cli"]  # the command's module, not the plugin

    cli.forget_plugin_commands()
    ran = invoke(["hello", "--name", "ralph"])
    assert (ran.exit_code, ran.stdout) == (0, "hello ralph, from a plugin\n")
    assert fake_dists.imported() == ["ralph_fake_greeter", "ralph_fake_greeter_cli"]  # running loaded the plugin
    assert "Run the loop until every story" in invoke(["run", "--help"]).stdout


def test_ralphs_own_commands_do_not_read_plugin_commands(fake_dists: FakeDists) -> None:
    add_greeter(fake_dists)
    assert invoke(["status", "--help"]).exit_code == 0
    assert fake_dists.imported() == []
    assert cli.table is None  # the ralph.commands metadata was not even read


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({DISABLE_ENV: "greeter"}, "is disabled (RALPH_DISABLE_PLUGINS)"),
        ({DISABLE_ENV: "other, greeter"}, "is disabled (RALPH_DISABLE_PLUGINS)"),
        ({NO_AUTOLOAD_ENV: "1"}, "is not loaded (RALPH_DISABLE_PLUGIN_AUTOLOAD: only ralph's own plugins)"),
    ],
)
def test_a_switched_off_plugins_command_is_absent_and_named_when_run(
    fake_dists: FakeDists, env: dict[str, str], reason: str
) -> None:
    add_greeter(fake_dists)
    helped = invoke(["--help"], **env)
    assert helped.exit_code == 0 and "hello" not in listed(helped.stdout)
    assert "sandbox" in listed(helped.stdout)  # ralph's own plugins stay
    cli.forget_plugin_commands()
    ran = invoke(["hello"], **env)
    assert ran.exit_code == 2, ran.output
    assert ran.stderr == f"ralph: error: `ralph hello` comes from plugin 'greeter' (fake-dist 1.0), which {reason}\n"
    assert fake_dists.imported() == []


def test_the_sandbox_command_goes_with_the_docker_plugin(fake_dists: FakeDists) -> None:
    assert {"build", "clean"} <= set(listed(invoke(["sandbox", "--help"]).stdout))
    cli.forget_plugin_commands()
    helped = invoke(["--help"], **{DISABLE_ENV: "docker-sandbox"})
    assert "sandbox" not in listed(helped.stdout)
    cli.forget_plugin_commands()
    ran = invoke(["sandbox", "build", "--offline-base"], **{DISABLE_ENV: "docker-sandbox"})
    assert ran.exit_code == 2
    assert "`ralph sandbox` comes from plugin 'docker-sandbox' (ralph-trustloop " in ran.stderr
    assert "which is disabled (RALPH_DISABLE_PLUGINS)" in ran.stderr


@pytest.mark.parametrize("api", ["3", "2.1"])
def test_a_command_of_an_incompatible_plugin_is_listed_but_does_not_run(fake_dists: FakeDists, api: str) -> None:
    add_greeter(fake_dists, api=api)
    assert "hello" in listed(invoke(["--help"]).stdout)  # the plugin is not imported to list it
    cli.forget_plugin_commands()
    ran = invoke(["hello"])
    assert ran.exit_code == 2 and "from a plugin" not in ran.stdout
    assert (
        "ralph: error: `ralph hello` comes from plugin 'greeter' (fake-dist 1.0), which did not load: "
        f"INCOMPATIBLE: needs ralph plugin API {api}, this ralph provides 2.0"
    ) in ran.stderr


def test_a_plugin_that_fails_to_import_keeps_its_command_from_running(fake_dists: FakeDists) -> None:
    fake_dists.add(
        {"greeter": "ralph_fake_greeter"},
        {"ralph_fake_greeter": "raise RuntimeError('plugin exploded')\n", "ralph_fake_greeter_cli": GREETER_CLI},
        commands={"greeter.hello": "ralph_fake_greeter_cli:hello"},
    )
    ran = invoke(["hello"])
    assert ran.exit_code == 2 and "from a plugin" not in ran.stdout
    assert "which did not load: FAILED: RuntimeError: plugin exploded" in ran.stderr


@pytest.mark.parametrize(
    ("source", "target", "error"),
    [
        ("raise RuntimeError('commands exploded')\n", "ralph_fake_greeter_cli:hello", "RuntimeError: commands exploded"),
        (GREETER_CLI, "ralph_fake_greeter_cli:NOT_A_COMMAND", "TypeError: ralph_fake_greeter_cli:NOT_A_COMMAND is int, not a click command"),
        (GREETER_CLI, "ralph_fake_greeter_cli:nowhere", "AttributeError:"),
    ],
)
def test_a_command_that_does_not_load_is_left_out_of_help_with_a_warning(
    fake_dists: FakeDists, source: str, target: str, error: str
) -> None:
    add_greeter(fake_dists, cli_source=source, **{"greeter.hello": target})
    helped = invoke(["--help"])
    assert helped.exit_code == 0 and "hello" not in listed(helped.stdout) and "sandbox" in listed(helped.stdout)
    assert f"ralph: warning: plugin 'greeter' (fake-dist 1.0) could not add its command 'hello': {error}" in helped.stderr
    cli.forget_plugin_commands()
    ran = invoke(["hello"])
    assert ran.exit_code == 2 and "could not add its command 'hello'" in ran.stderr


def test_declarations_that_name_no_plugin_of_their_distribution_are_left_out(fake_dists: FakeDists) -> None:
    add_greeter(fake_dists, **{"hello": "ralph_fake_greeter_cli:hello", "stranger.hi": "ralph_fake_greeter_cli:hello",
                               "docker-sandbox.hijack": "ralph_fake_greeter_cli:hello"})
    helped = invoke(["--help"])
    assert helped.exit_code == 0
    assert not {"hello", "hi", "hijack"} & set(listed(helped.stdout))
    assert "declares command 'hello', which is not named <plugin>.<command>" in helped.stderr
    assert "declares command 'hi' for plugin 'stranger', which it does not provide" in helped.stderr
    # another distribution's plugin name does not make it that plugin's command
    assert "declares command 'hijack' for plugin 'docker-sandbox', which it does not provide" in helped.stderr


def test_two_plugins_declaring_one_command_name_keep_the_first(fake_dists: FakeDists) -> None:
    add_greeter(fake_dists, **{"greeter.hello": "ralph_fake_greeter_cli:hello"})
    fake_dists.add(
        {"copycat": "ralph_fake_copycat"},
        {"ralph_fake_copycat": runner_module("copy"), "ralph_fake_copycat_cli": GREETER_CLI.replace("hello {name}", "copied {name}")},
        name="zz_other_dist",
        commands={"copycat.hello": "ralph_fake_copycat_cli:hello"},
    )
    result = invoke(["hello"])
    assert result.stdout == "hello world, from a plugin\n"
    assert "plugin 'copycat' (zz-other-dist 1.0) adds command(s) that exist already, left out: hello" in result.stderr


def test_a_plugin_still_implementing_the_old_commands_hook_is_told_what_replaced_it(fake_dists: FakeDists) -> None:
    fake_dists.add(
        {"oldstyle": "ralph_fake_oldstyle"},
        {"ralph_fake_oldstyle": "from ralph.api import hookimpl\n\n@hookimpl\ndef ralph_register_commands(cli):\n    pass\n"},
    )
    result = invoke(["plugins"])
    assert result.exit_code == 1
    row = next(line for line in result.output.splitlines() if line.startswith("oldstyle "))
    assert row.split("  ")[-1].strip().startswith(
        "INCOMPATIBLE: implements ralph_register_commands, which this ralph no longer calls: declare commands in "
        "the `ralph.commands` entry-point group"
    )


def test_ralph_plugins_names_each_plugins_commands(fake_dists: FakeDists) -> None:
    add_greeter(fake_dists)
    output = invoke(["plugins"]).output
    rows = {line.split()[0]: line for line in output.splitlines() if line.strip()}
    assert "runner greet, command hello" in rows["greeter"]
    assert "runner docker-sandbox, command sandbox" in rows["docker-sandbox"]


# -- what `ralph --help` imports, in a fresh interpreter ------------------------------------

PROBE = """
import json, sys
from click.testing import CliRunner
from ralph.cli.main import cli
result = CliRunner().invoke(cli, sys.argv[1:], catch_exceptions=False)
print(json.dumps({"exit": result.exit_code, "output": result.output, "modules": sorted(sys.modules)}))
"""

HEAVY = ["pydantic", "pluggy", "ralph.plugin.manager", "ralph.contracts", "ralph.api", "ralph.config", "ralph.settings",
         "ralph.dashboard", "starlette", "uvicorn", "jinja2", "sse_starlette", "httpx"]


def probe(fake_dists: FakeDists, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake_dists.root), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-P", "-c", PROBE, *args], capture_output=True, text=True, env=env, check=True)
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def test_help_imports_no_plugin_and_nothing_heavy(fake_dists: FakeDists) -> None:
    add_greeter(fake_dists)
    answer = probe(fake_dists, "--help")
    assert answer["exit"] == 0 and {"hello", "sandbox"} <= set(listed(answer["output"]))
    modules = set(answer["modules"])
    assert [name for name in HEAVY if name in modules] == []
    found = entry_point_groups([ENTRY_POINT_GROUP, COMMANDS_GROUP], [str(fake_dists.root), *sys.path])
    plugins = {ep.value for ep in found[ENTRY_POINT_GROUP]}
    command_modules = {ep.value.partition(":")[0] for ep in found[COMMANDS_GROUP]}
    assert {"ralph_fake_greeter", "ralph_plugins.runners.docker_sandbox"} <= plugins
    assert {"ralph_fake_greeter_cli", "ralph_plugins.runners.docker.commands"} <= command_modules
    assert sorted(plugins & modules) == []
    # of the plugins' distributions, only the commands' modules (for their help lines) and their packages
    packages = {module.rsplit(".", i)[0] for module in command_modules for i in range(module.count(".") + 1)}
    top_levels = {module.split(".")[0] for module in plugins | command_modules}
    assert {m for m in modules if m.split(".")[0] in top_levels} == packages


@pytest.mark.parametrize("args", [["--version"], ["status", "--help"]])
def test_ralphs_own_commands_import_no_plugin_machinery(fake_dists: FakeDists, args: list[str]) -> None:
    add_greeter(fake_dists)
    answer = probe(fake_dists, *args)
    assert answer["exit"] == 0
    modules = set(answer["modules"])
    assert [name for name in [*HEAVY, "ralph.plugin.commands"] if name in modules] == []
    assert not {m for m in modules if m.startswith(("ralph_plugins", "ralph_fake", "ralph_nice", "ralph_remote"))}  # no command's either
