"""ralph's public plugin API: the one module a plugin imports from ralph.

Everything a runner, agent, policy, validator, task store, gate, guard,
monitor or reporter needs is here; anything not in ``__all__`` is internal and
may change without notice.  See docs/plugins.md for how to write each kind.

Declare the API version your plugin was written for in its module (or on the
object you register)::

    RALPH_API = "1"

ralph refuses to load a plugin that needs a newer major version, or a newer
minor version of the same major (``ralph plugins`` lists it as incompatible).

Importing this module is cheap (no pydantic): hook calls import it.  The names
backed by pydantic models (``TaskList``, ``Story``, ``ConfigSection`` ...) are
imported the first time they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ralph import hookimpl
from ralph.claude_cli import CLAUDE_CLI, CODEX_CLI, AgentCli, locate_claude_cli
from ralph.cliagent import CliAgent
from ralph.contracts import (
    AUTO_APPROVED_PREFIX,
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
    Selection,
    SessionStore,
    Severity,
    Snapshot,
    StoryState,
    TaskStore,
    ValidationContext,
    Violation,
)
from ralph.errors import ConfigError, PluginError, RalphError, TaskListError, UnavailableError, UsageError
from ralph.events import EventKind
from ralph.plugin.manager import API_VERSION, Registry
from ralph.ralphfiles import find_project, progress_log, story_id_problem
from ralph.settings import Settings, section_or_default
from ralph.wording import counted

if TYPE_CHECKING:
    from ralph.agenttext import fence_for, fenced, one_line, quote, safe_data, strip_controls
    from ralph.config import ConfigSection, RalphConfig
    from ralph.gitutil import git
    from ralph.loop.start import BUILTIN_PROMPT_NOTE
    from ralph.jsonpatch import JsonScanError, decode_json, indent_unit, json_line_of, patch_json_text, same_json
    from ralph.session import Session, open_session
    from ralph.hooks.wiring import hook_packages
    from ralph.loop.preflight import endpoint_answers
    from ralph.loop.runreport import format_elapsed, render_run_report, render_run_summary
    from ralph.loop.gateoutput import exit_meaning, process_ended
    from ralph.containment import Containment, containment
    from ralph.process import KILL_GRACE_SECONDS, descendants, run_process, run_shell
    from ralph.shell import (
        PRIVILEGE_WRAPPERS,
        SHELLS,
        Analysis,
        Command,
        Opaque,
        ShellAnalysis,
        WriteTarget,
        analyze,
        analyze_for,
        basename,
        resolve_path,
    )
    from ralph.shell.budget import BudgetExceeded
    from ralph.shell.budget import active as active_budget
    from ralph.shell.budget import scope as budget_scope
    from ralph.shell.containers import CONTAINER_CLIS, mount_fields, read_container
    from ralph.shell.findexpr import may_act as find_may_act
    from ralph.shell.findexpr import may_reach_git
    from ralph.shell.paths import MAX_PATH, path_stat, real_path
    from ralph.shell.git import GitView, parse_git, short_flag
    from ralph.shell.git import view as git_view
    from ralph.shell.progutil import fetches, has_long
    from ralph.shell.tools import find_roots
    from ralph.tasks import (
        REVIEW_FIELDS,
        ReviewStatus,
        Story,
        TaskList,
        parse_tasks,
        ready_stories,
        structural_problems,
    )

__all__ = [
    "API_VERSION",
    "AgentCli",
    "CLAUDE_CLI",
    "CODEX_CLI",
    "CliAgent",
    "BUILTIN_PROMPT_NOTE",
    "AUTO_APPROVED_PREFIX",
    "Agent",
    "AgentChannel",
    "AgentEvent",
    "AgentInvocation",
    "AgentView",
    "Availability",
    "Check",
    "CommandResult",
    "ConfigError",
    "ConfigSection",
    "Containment",
    "Denial",
    "EventKind",
    "FleetEngine",
    "Gate",
    "GateContext",
    "GateResult",
    "HookEvent",
    "IterationMode",
    "JsonScanError",
    "KILL_GRACE_SECONDS",
    "LoopEvent",
    "LoopView",
    "PluginError",
    "Policy",
    "PreflightContext",
    "ProcessOutcome",
    "ProcessSpec",
    "REVIEW_FIELDS",
    "RalphConfig",
    "RalphError",
    "Registry",
    "ReviewStatus",
    "Runner",
    "Selection",
    "Session",
    "SessionStore",
    "Settings",
    "Severity",
    "Snapshot",
    "Story",
    "StoryState",
    "TaskList",
    "TaskListError",
    "TaskStore",
    "UnavailableError",
    "UsageError",
    "ValidationContext",
    "Violation",
    "containment",
    "counted",
    "decode_json",
    "descendants",
    "endpoint_answers",
    "format_elapsed",
    "git",
    "hook_packages",
    "hookimpl",
    "indent_unit",
    "json_line_of",
    "locate_claude_cli",
    "parse_tasks",
    "patch_json_text",
    "progress_log",
    "find_project",
    "ready_stories",
    "render_run_report",
    "render_run_summary",
    "exit_meaning",
    "process_ended",
    "run_process",
    "run_shell",
    "section_or_default",
    "open_session",
    "same_json",
    "story_id_problem",
    "structural_problems",
    "PRIVILEGE_WRAPPERS",
    "SHELLS",
    "Analysis",
    "Command",
    "Opaque",
    "ShellAnalysis",
    "WriteTarget",
    "analyze",
    "analyze_for",
    "basename",
    "resolve_path",
    "BudgetExceeded",
    "active_budget",
    "budget_scope",
    "MAX_PATH",
    "path_stat",
    "real_path",
    "GitView",
    "parse_git",
    "short_flag",
    "git_view",
    "fetches",
    "has_long",
    "find_roots",
    "may_reach_git",
    "find_may_act",
    "CONTAINER_CLIS",
    "mount_fields",
    "read_container",
    "strip_controls",
    "one_line",
    "quote",
    "fenced",
    "fence_for",
    "safe_data",
]

# Names whose modules are not needed by every plugin (pydantic models, subprocess, json, the shell analysis):
# loaded on first use (PEP 562), so hook calls stay cheap.
_LAZY = {
    "BUILTIN_PROMPT_NOTE": "ralph.loop.start",
    "git": "ralph.gitutil",
    "descendants": "ralph.process",
    "Containment": "ralph.containment",
    "containment": "ralph.containment",
    "run_shell": "ralph.process",
    "JsonScanError": "ralph.jsonpatch",
    "decode_json": "ralph.jsonpatch",
    "indent_unit": "ralph.jsonpatch",
    "json_line_of": "ralph.jsonpatch",
    "patch_json_text": "ralph.jsonpatch",
    "same_json": "ralph.jsonpatch",
    "format_elapsed": "ralph.loop.runreport",
    "hook_packages": "ralph.hooks.wiring",
    "endpoint_answers": "ralph.loop.preflight",
    "Session": "ralph.session",
    "open_session": "ralph.session",
    "render_run_report": "ralph.loop.runreport",
    "render_run_summary": "ralph.loop.runreport",
    "exit_meaning": "ralph.loop.gateoutput",
    "process_ended": "ralph.loop.gateoutput",
    "KILL_GRACE_SECONDS": "ralph.process",
    "run_process": "ralph.process",
    "ConfigSection": "ralph.config",
    "RalphConfig": "ralph.config",
    "REVIEW_FIELDS": "ralph.tasks",
    "ReviewStatus": "ralph.tasks",
    "Story": "ralph.tasks",
    "TaskList": "ralph.tasks",
    "parse_tasks": "ralph.tasks",
    "ready_stories": "ralph.tasks",
    "structural_problems": "ralph.tasks",
    # The shell analysis behind the guards (tree-sitter is loaded on the first analyze, not here).
    "Analysis": "ralph.shell",
    "Command": "ralph.shell",
    "Opaque": "ralph.shell",
    "PRIVILEGE_WRAPPERS": "ralph.shell",
    "SHELLS": "ralph.shell",
    "ShellAnalysis": "ralph.shell",
    "WriteTarget": "ralph.shell",
    "analyze": "ralph.shell",
    "analyze_for": "ralph.shell",
    "basename": "ralph.shell",
    "resolve_path": "ralph.shell",
    "BudgetExceeded": "ralph.shell.budget",
    "budget_scope": "ralph.shell.budget:scope",
    "active_budget": "ralph.shell.budget:active",
    "MAX_PATH": "ralph.shell.paths",
    "path_stat": "ralph.shell.paths",
    "real_path": "ralph.shell.paths",
    "GitView": "ralph.shell.git",
    "git_view": "ralph.shell.git:view",
    "parse_git": "ralph.shell.git",
    "short_flag": "ralph.shell.git",
    "fetches": "ralph.shell.progutil",
    "has_long": "ralph.shell.progutil",
    "find_roots": "ralph.shell.tools",
    "may_reach_git": "ralph.shell.findexpr",
    "find_may_act": "ralph.shell.findexpr:may_act",
    "CONTAINER_CLIS": "ralph.shell.containers",
    "mount_fields": "ralph.shell.containers",
    "read_container": "ralph.shell.containers",
    # Agent text is data (docs/security.md): what the loop echoes that the agent wrote, made safe to show.
    "strip_controls": "ralph.agenttext",
    "one_line": "ralph.agenttext",
    "quote": "ralph.agenttext",
    "fenced": "ralph.agenttext",
    "fence_for": "ralph.agenttext",
    "safe_data": "ralph.agenttext",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ralph.api' has no attribute {name!r}")
    module, _, attr = module.partition(":")  # "module:attr" when the public name differs
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
