"""Every hook ralph calls, grouped by lifecycle.

Plugins implement these with ``@ralph.hookimpl``.  A plugin is any module or
object registered under the ``ralph`` entry-point group (the default plugins in
``ralph_plugins`` are registered exactly that way).  Commands are not a hook:
a plugin declares them in the ``ralph.commands`` entry-point group, so
``ralph --help`` lists them without importing any plugin (ralph/plugin/commands.py).

Every hook is called through pluggy and collects: each implementation answers, in pluggy's order
(``@hookimpl(tryfirst=True)`` first, ``trylast`` last, otherwise the plugin registered last first).
A new-style wrapper (``@hookimpl(wrapper=True)``, a generator that yields once) surrounds the other
implementations of the validation, agent-side, prompt and pre-flight hooks: ``answers = yield``
gives it their answers (one list per implementation) and what it returns is used instead (the
lists, or their items).  The registration hooks and ``ralph_config_sections`` are called once per
plugin and reporters are isolated from each other, so none of them may be a wrapper (the plugin
does not load).  ``RALPH_TRACE_PLUGINS=1`` prints every call on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from ralph.contracts import (
        FleetEngine,
        Agent,
        Check,
        Denial,
        Gate,
        HookEvent,
        LoopEvent,
        Policy,
        PreflightContext,
        Runner,
        TaskStore,
        ValidationContext,
        Violation,
    )
    from ralph.settings import Settings

hookspec = pluggy.HookspecMarker("ralph")


# -- registries of named things ----------------------------------------------


@hookspec
def ralph_register_runners(register: Callable[[type[Runner]], None]) -> None:
    """Register runner classes: where and how the agent process runs.

    Called once when the plugin manager builds its registries.  Call
    ``register(RunnerClass)`` for each runner; the class's ``name`` attribute
    becomes a ``--runner`` choice and the key of its config section.  Two
    plugins registering the same name is an error naming both.
    """


@hookspec
def ralph_register_agents(register: Callable[[type[Agent]], None]) -> None:
    """Register agent classes: which CLI runs, how, and how its output is read.

    Call ``register(AgentClass)``; ``AgentClass.name`` becomes an ``--agent``
    choice.  Duplicate names are an error naming both providers.
    """


@hookspec
def ralph_register_policies(register: Callable[[type[Policy]], None]) -> None:
    """Register mode policies (which iteration mode and story come next).

    Call ``register(PolicyClass)``; ``PolicyClass.name`` is what
    ``[tool.ralph] policy = "..."`` selects.  Duplicates are an error.
    """


@hookspec
def ralph_register_task_stores(register: Callable[[type[TaskStore]], None]) -> None:
    """Register task-list formats (tasks.json, prd.json, plan.md ...).

    Call ``register(StoreClass)``; the first store whose ``detect`` accepts the
    ralph directory is used unless config names one.
    """


@hookspec
def ralph_register_fleet_engines(register: Callable[[type[FleetEngine]], None]) -> None:
    """Register fleet engines: where ``ralph run --parallel --engine NAME`` runs whole loops.

    Call ``register(EngineClass)``; ``EngineClass.name`` becomes an ``--engine``
    choice (``worktrees``, the local default, is built in).  Duplicates are an error.
    """


@hookspec
def ralph_register_gates(register: Callable[[type[Gate]], None]) -> None:
    """Register gates: checks the loop runs itself after implement and review-fix iterations.

    Call ``register(GateClass)``.  Hard gates (``hard = True``) send a failing
    story back with the gate's verbatim output; soft gates only log warnings.
    Gates run in ``order``; a duplicate name is an error naming both providers.
    """


@hookspec
def ralph_config_sections() -> dict[str, type] | None:
    """Return ``{section_name: PydanticModel}`` for this plugin's own config.

    The section is read from ``[tool.ralph.<section_name>]`` (or
    ``[<section_name>]`` in ralph.toml), validated with the model (unknown keys
    rejected) and passed to the plugin through ``Settings.plugin_config``.
    """


# -- validation ---------------------------------------------------------------


@hookspec
def ralph_validate(context: ValidationContext) -> list[Violation] | None:
    """Return the violations found in the task state after (or during) an iteration.

    A collecting hook: every validator is called and all violations are
    reported.  ``context`` carries the raw and parsed task list, the trusted
    pre-iteration snapshot, the iteration mode and the active policy.  Return an
    empty list (or None) when everything holds.  A validator that raises stops
    the loop with a clear error naming it: the loop is fail-closed.  A wrapper
    (``@hookimpl(wrapper=True)``) gets every other validator's list
    (``answers = yield``) and returns the violations to report.
    """


# -- the run's settings ---------------------------------------------------------


@hookspec
def ralph_configure(settings: Settings) -> None:
    """A run's settings are resolved: called once by ``ralph run``, before its lock is taken and before
    ``run_started``.

    For a plugin whose hooks get no settings (a reporter, a monitor) that needs its own config section
    (``settings.section(name)``, validated already) or the run's config: keep what it needs.  Must be
    quick and must not start anything that outlives the run.  A ``ConfigError`` raised here stops the
    run with its one line (exit 2); any other exception stops it naming the plugin.
    """


# -- loop events (reporters) ------------------------------------------------


@hookspec
def ralph_loop_event(event: LoopEvent) -> None:
    """Observe one loop event (run started, iteration started, agent output,
    violation, iteration finished, run finished ...).

    Reporters (the console view, the JSONL event log, notifiers) implement
    this.  It must not raise and must be quick: it runs on the loop's thread.
    ``event.kind`` names the event; ``event.data`` is JSON-serialisable.  A
    reporter that raises is disabled for the rest of the run (the reporters
    after it still get the event); it cannot be a wrapper.
    """



# -- agent-side hooks (Claude Code events) ------------------------------------------


@hookspec
def ralph_pre_tool_use(event: HookEvent) -> list[Denial] | None:
    """Guard one tool call before it runs (Claude Code ``PreToolUse``).

    A collecting hook: every guard sees every call; any ``Denial`` blocks it and
    all reasons are shown to the agent.  The reason must say what to do
    instead.  Guards may record things in ``event.session`` (files read).
    Return None or an empty list to allow.  A wrapper gets the other guards'
    denials (one list per guard) and returns those that stand.
    """


@hookspec
def ralph_post_tool_use(event: HookEvent) -> list[str] | None:
    """React after a tool ran (Claude Code ``PostToolUse``).

    Return messages for the agent (added to its context as
    ``additionalContext``): context-usage alerts, detected test failures.
    """


@hookspec
def ralph_session_start(event: HookEvent) -> list[str] | None:
    """A new agent session begins (Claude Code ``SessionStart``): reset per-session
    state; return context messages for the agent, if any."""


@hookspec
def ralph_user_prompt_submit(event: HookEvent) -> list[str] | None:
    """A prompt was submitted (Claude Code ``UserPromptSubmit``): reset the read log,
    log activity (never the prompt text); return context messages, if any."""


# -- prompts ------------------------------------------------------------------------


@hookspec
def ralph_prompt_context(run_dir: Path, iteration: int, since: float) -> list[str] | None:
    """Contribute feedback to the prompt of iteration ``iteration``.

    Called by the loop before rendering each prompt after the first.
    ``since`` is the wall-clock time (``time.time()``) the previous iteration
    started: report only what happened from then on (e.g. the test failures
    the PostToolUse monitor recorded in ``run_dir``).  Return short markdown
    items; the loop lists them under "Feedback from the loop".
    """


# -- pre-flight ------------------------------------------------------------------


@hookspec
def ralph_preflight(context: PreflightContext) -> list[Check] | None:
    """Check, once before iteration 1, what would make the run fail (and for ``ralph doctor``).

    A collecting hook, called after the chosen runner's and agent's own
    ``preflight`` methods.  ``context`` names the runner, the agent and the
    agent's view of the machine (``context.view``: environment, home, visible
    paths, network).  Return ``Check`` objects: a failed one (``ok=False``, with a
    ``fix``) stops ``ralph run`` with exit 2 before any agent starts; warnings
    (``ok=None``) are printed.  Must be quick and must not change anything.
    """
