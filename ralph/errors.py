"""Errors the CLI turns into a one-line message and an exit code."""

from __future__ import annotations


class RalphError(Exception):
    """Base class: ``str(error)`` is shown to the user as is."""

    exit_code = 2


class ConfigError(RalphError):
    """Bad configuration: names the file, the TOML path and the fix."""


class TaskListError(RalphError):
    """A task list that is missing or does not validate (the file is left untouched)."""


class TaskSchemaError(TaskListError):
    """A task list that decodes but breaks the schema (one line per problem, each naming file and field)."""


class PluginError(RalphError):
    """A plugin problem: duplicate names, unknown runner/agent, failed import."""


class UsageError(RalphError):
    """A command used wrongly: not a git repository, too many iterations ..."""


class UnavailableError(RalphError):
    """A runner or agent that cannot be used here (binary missing, engine down)."""


class LockedError(RalphError):
    """Another ``ralph run`` holds this project's lock."""
