"""``ralph doctor``: the checks ``ralph run`` makes before iteration 1, all printed.

One code path with ``ralph run``: the project is opened as ``ralph run`` opens it (the same
config, ``--runner``/``--agent`` as overrides), the loop is built by the same
:func:`ralph.loop.engine.build_loop` (unknown runner, agent or policy names, an unusable runner,
``auto``'s fallback), and :meth:`ralph.loop.engine.Loop.readiness` makes the loop's own checks
(the ralph directory, the prompt, the task list, ``--story``, the agent's availability, warnings
about the person's files, then the runner's, agents' and plugins' pre-flight checks).  First,
every plugin that did not load (``ralph run`` refuses to start then).
"""

from __future__ import annotations

from pathlib import Path

from ralph.contracts import Check

__all__ = ["diagnose"]


def diagnose(project_dir: Path, runner_name: str | None = None, agent_name: str | None = None) -> list[Check]:
    """Every check for the runner and agent ``ralph run`` would use (or the ones named)."""
    from ralph.errors import PluginError, RalphError
    from ralph.loop.engine import build_loop
    from ralph.plugin.entrypoints import DISABLE_ENV
    from ralph.session import open_session, where_named

    try:
        session = open_session(project_dir, {"runner": runner_name, "agent": agent_name}, warn=False)
    except RalphError as exc:
        return [Check(False, f"configuration: {exc}", "as the message says; `ralph run` stops on it too, before anything runs")]
    settings, host = session.settings, session.host
    checks = [
        Check(False, info.failure(), f"fix it, or disable it with {DISABLE_ENV}={info.name} (`ralph run` does not start without it)")
        for info in host.failures
    ]
    checks += local_plugin_checks(project_dir)
    config = settings.config
    try:
        loop = build_loop(settings, host, config.runner, config.agent, config.policy)
    except RalphError as exc:
        if isinstance(exc, PluginError):
            exc = where_named(exc, settings, {"runner": runner_name, "agent": agent_name})
        return checks + [Check(False, str(exc), "see the message (`ralph run` stops here)")]
    runner = loop.runner
    if runner.fallback_reason and runner.isolates:
        checks.append(Check(True, f"runner {config.runner}: the {runner.name} sandbox, because {runner.fallback_reason}"))
    elif runner.fallback_reason:
        checks.append(Check(None, f"runner {config.runner}: no sandbox, the agent would run directly: {runner.fallback_reason}",
                            f"do what the reason says to use the sandbox, or choose `--runner {runner.name}` to run directly on purpose"))
    checks.append(Check(True, f"runner {runner.name} can be used"))
    agents: list[object] = list({id(a): a for a in (loop.agent, loop.review_agent)}.values())
    return checks + loop.readiness() + metering_checks(settings, runner, agents)


def local_plugin_checks(project_dir: Path) -> list[Check]:
    """Each project-local plugin (``[tool.ralph] plugins``): found and compiling.  Never executed here:
    only ``ralph run`` executes one, from the bytes it reads at its start (ralph/plugin/local.py)."""
    from ralph.errors import RalphError
    from ralph.plugin.local import compile_check

    try:
        found = compile_check(project_dir)
    except RalphError as exc:
        return [Check(False, f"local plugins: {exc}", "as the message says; `ralph run` stops on it too, before anything runs")]
    checks = []
    for name, problem, digest in found:
        if problem is None:
            checks.append(Check(True, f"local plugin {name} (sha256 {digest}...) compiles; `ralph run` executes it at "
                                      "its start (ralph doctor does not run it)"))
        else:
            checks.append(Check(False, f"local plugin {name}: {problem}", f"fix {name} (`ralph run` does not start)"))
    return checks


def metering_checks(settings: object, runner: object, agents: list[object]) -> list[Check]:
    """Per agent: whether the loop meters its model traffic, or its cost comes from its own report."""
    from ralph.loop.metering import LoopMeter, model_upstream

    meter = LoopMeter(settings.config, runner, lambda *a, **k: None)  # type: ignore[attr-defined,arg-type]
    checks = []
    for agent in agents:
        why_not = meter.enabled_for(agent)  # type: ignore[arg-type]
        name = getattr(agent, "name", "?")
        if why_not is None:
            checks.append(Check(True, f"agent {name}: cost, tokens and limits from the loop's meter of its model traffic "
                                      f"(forwarded to {model_upstream(agent)})"))  # type: ignore[arg-type]
        else:
            checks.append(Check(None, f"agent {name}: cost and limits come from the agent's own report ({why_not}); "
                                      "a report can never lower the cost, iterations always count, gates always run",
                                "docs/metering.md says which agents and runners are metered"))
    return checks
