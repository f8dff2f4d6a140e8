"""ralph's public plugin API: the one package a plugin imports from ralph.

``ralph.api`` itself holds what every plugin kind needs: ``hookimpl``, ``API_VERSION``, the
contracts a plugin subclasses (``Runner``, ``Agent``, ``Policy``, ``TaskStore``, ``Gate``,
``FleetEngine``, ``SessionStore``) and the data classes that cross plugin kinds, the task model
(``TaskList``, ``Story``), ralph's errors and the config helpers.  What serves one kind is in a
submodule of its own:

- ``ralph.api.agents``: command-line agents (``CliAgent``, ``AgentCli``, the CLIs' locations);
- ``ralph.api.process``: running programs as ralph does (``run_process``, ``run_shell``, ``containment``, ``git``);
- ``ralph.api.shell``: the shell analysis behind the guards and the sandboxes' gate commands;
- ``ralph.api.text``: showing what an agent wrote (``strip_controls``, ``quote``, ``fenced`` ...);
- ``ralph.api.stores``: task-list formats (format-preserving JSON edits, ``parse_tasks``);
- ``ralph.api.policies``: a policy's transition table, ``Selection``, ``ready_stories``;
- ``ralph.api.reporters``: the loop's own wording of a run (run report, gate output);
- ``ralph.api.project``: a project's session and ralph files, for commands;
- ``ralph.api.hooks``, ``ralph.api.workspace``, ``ralph.api.fleet``, ``ralph.api.testintegrity``.

Anything not in an ``__all__`` of these is internal and may change without notice.  See
docs/plugins.md for how to write each kind.

Declare the API version your plugin was written for in its module (or on the
object you register)::

    RALPH_API = "2"

ralph refuses to load a plugin that needs a newer major version, or a newer
minor version of the same major (``ralph plugins`` lists it as incompatible).

Importing this module is cheap (no pydantic): hook calls import it.  The names
backed by pydantic models (``TaskList``, ``Story``, ``ConfigSection``) are
imported the first time they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ralph import hookimpl
from ralph.contracts import (
    Agent,
    AgentChannel,
    AgentEvent,
    AgentInvocation,
    AgentView,
    Availability,
    Check,
    CommandResult,
    Denial,
    FleetEngine,
    Gate,
    GateContext,
    GateResult,
    HookEvent,
    IterationMode,
    LoopEvent,
    LoopView,
    Policy,
    PreflightContext,
    ProcessOutcome,
    ProcessSpec,
    Runner,
    SessionStore,
    Snapshot,
    StoryState,
    TaskStore,
    ValidationContext,
    Violation,
)
from ralph.errors import ConfigError, PluginError, RalphError, TaskListError, UnavailableError, UsageError
from ralph.events import EventKind
from ralph.plugin.manager import API_VERSION, Registry
from ralph.settings import Settings, section_or_default

if TYPE_CHECKING:
    from ralph.config import ConfigSection
    from ralph.tasks import Story, TaskList

__all__ = [
    # the version and the hook marker
    "API_VERSION",
    "hookimpl",
    # the contracts a plugin subclasses
    "Agent",
    "FleetEngine",
    "Gate",
    "Policy",
    "Runner",
    "SessionStore",
    "TaskStore",
    # what crosses plugin kinds
    "AgentChannel",
    "AgentEvent",
    "AgentInvocation",
    "AgentView",
    "Availability",
    "Check",
    "CommandResult",
    "Denial",
    "EventKind",
    "GateContext",
    "GateResult",
    "HookEvent",
    "IterationMode",
    "LoopEvent",
    "LoopView",
    "PreflightContext",
    "ProcessOutcome",
    "ProcessSpec",
    "Registry",
    "Snapshot",
    "StoryState",
    "ValidationContext",
    "Violation",
    # the task model
    "Story",
    "TaskList",
    # errors
    "ConfigError",
    "PluginError",
    "RalphError",
    "TaskListError",
    "UnavailableError",
    "UsageError",
    # configuration
    "ConfigSection",
    "Settings",
    "section_or_default",
]

# Names backed by pydantic models: loaded on first use (PEP 562), so hook calls stay cheap.
_LAZY = {
    "ConfigSection": "ralph.config",
    "Story": "ralph.tasks",
    "TaskList": "ralph.tasks",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ralph.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
