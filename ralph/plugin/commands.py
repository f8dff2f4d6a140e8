"""Plugin commands, declared in entry-point metadata and loaded only when used.

A plugin adds ``ralph <command>`` with an entry point in the ``ralph.commands``
group of its distribution, named ``<plugin>.<command>`` (``<plugin>`` is the
name of one of the distribution's ``ralph`` entry points) and pointing at a
click command::

    [project.entry-points."ralph.commands"]
    "docker-sandbox.sandbox" = "ralph_plugins.runners.docker.commands:sandbox"

Why metadata and not a hook (``ralph_register_commands``, as llm has, was the
first design): a hook can only be asked after every plugin is imported, and
importing ralph's ~30 default plugins (the contracts, the shell analysis, the
Ray runner's module ...) made ``ralph --help`` take ~270 ms instead of ~55 ms.
The two other ways out were weighed and rejected: making every plugin module
cheap to import is a rule every third-party plugin would have to keep forever
(one slow plugin slows every command), and a cache of the commands keyed on
the installed distributions goes stale with editable installs and writes
files on ``--help``.  With metadata:

- ``ralph --help`` reads ``entry_points.txt`` files (no plugin imported) for
  the names, and imports each command's own module for its help line (so that
  module should import only click, and the rest inside the command);
- ``RALPH_DISABLE_PLUGINS`` / ``RALPH_DISABLE_PLUGIN_AUTOLOAD`` are applied to
  the ``<plugin>`` part of the name, without importing it: a disabled plugin's
  command is absent, and running it says the plugin is disabled;
- running the command first loads its plugin as ``ralph plugins`` would
  (import, ``RALPH_API`` check, hook names) and refuses, naming the plugin, when
  that fails: the API version check is the same as for every plugin.

ralph's own commands never read any of this (``ralph run`` imports no plugin
before it needs them).  This module imports no plugin and not click.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Collection, Mapping

from ralph.plugin.entrypoints import ENTRY_POINT_GROUP, EntryPoint, entry_point_groups, why_not_loaded

if TYPE_CHECKING:
    import click

COMMANDS_GROUP = "ralph.commands"
"""The entry-point group of plugin commands: ``"<plugin>.<command>" = "module:attr"``."""


@dataclass(frozen=True)
class PluginCommand:
    """One command a plugin declares: its name, the plugin and where the click command is."""

    name: str
    plugin: str
    entry: EntryPoint

    def describe_plugin(self) -> str:
        """``'docker-sandbox' (ralph-trustloop 0.1.0)``: the plugin, as ``ralph plugins`` names it."""
        return f"{self.plugin!r} ({self.entry.dist} {self.entry.version})"

    def load(self) -> click.Command:
        """Import the command's module and return the click command (TypeError if it is not one)."""
        import click

        command = self.entry.load()
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.entry.value} is {type(command).__name__}, not a click command")
        return command


@dataclass
class CommandTable:
    """The plugin commands of this environment: usable ones, switched-off ones and what was wrong."""

    commands: dict[str, PluginCommand] = field(default_factory=dict)
    """Command name -> the command, for every enabled plugin."""
    switched_off: dict[str, tuple[PluginCommand, str]] = field(default_factory=dict)
    """Command name -> the command and why its plugin is not loaded ("is disabled (RALPH_DISABLE_PLUGINS)")."""
    warnings: list[str] = field(default_factory=list)
    """One line per declaration left out (a bad name, a clash with another command)."""

    def of_plugin(self, plugin: str) -> list[str]:
        """The command names ``plugin`` adds (enabled or not), sorted."""
        names = [c.name for c in self.commands.values() if c.plugin == plugin]
        names += [c.name for c, _ in self.switched_off.values() if c.plugin == plugin]
        return sorted(names)


def plugin_commands(
    reserved: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
    path: list[str] | None = None,
) -> CommandTable:
    """Read every installed ``ralph.commands`` declaration (no plugin is imported).

    ``reserved``: ralph's own command names; a plugin command named like one, or
    like a command another plugin declared first (``sys.path`` order), is left
    out with a warning naming the plugin.  A declaration whose ``<plugin>`` is
    not a ``ralph`` entry point of the same distribution is left out too.
    """
    environ = os.environ if environ is None else environ
    groups = entry_point_groups([ENTRY_POINT_GROUP, COMMANDS_GROUP], path)
    plugins: dict[str, EntryPoint] = {}
    for ep in groups[ENTRY_POINT_GROUP]:
        plugins.setdefault(ep.name, ep)  # the first of a name is the one the plugin manager loads
    table = CommandTable()
    clashes: dict[str, list[str]] = {}
    for ep in groups[COMMANDS_GROUP]:
        plugin, dot, name = ep.name.partition(".")
        if not (plugin and dot and name):
            table.warnings.append(
                f"distribution {ep.dist} {ep.version} declares command {ep.name!r}, which is not named "
                f"<plugin>.<command> (a {ENTRY_POINT_GROUP} entry point of it, a dot, the command): left out"
            )
            continue
        owner = plugins.get(plugin)
        if owner is None or owner.dist != ep.dist:
            table.warnings.append(
                f"distribution {ep.dist} {ep.version} declares command {name!r} for plugin {plugin!r}, which it "
                f"does not provide (no `{plugin} = ...` in its [{ENTRY_POINT_GROUP}] entry points): left out"
            )
            continue
        command = PluginCommand(name, plugin, ep)
        reason = why_not_loaded(plugin, ep.dist, environ)
        taken = name in reserved or name in table.commands
        if reason is None and taken:
            clashes.setdefault(command.describe_plugin(), []).append(name)
        elif reason is None:
            table.commands[name] = command
            table.switched_off.pop(name, None)  # a switched-off plugin's command gives way to a loaded one's
        elif not taken and name not in table.switched_off:
            table.switched_off[name] = (command, reason)  # (a switched-off plugin's clash is worth no warning)
    for plugin_text, names in clashes.items():
        table.warnings.append(
            f"plugin {plugin_text} adds command(s) that exist already, left out: {', '.join(sorted(names))}"
        )
    return table
