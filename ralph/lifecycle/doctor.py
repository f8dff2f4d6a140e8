"""``ralph doctor``: the checks ``ralph run`` makes before iteration 1, all printed.

The same pre-flight checks as the loop (``Runner.preflight``, ``Agent.preflight``,
the ``ralph_preflight`` hooks), after the runner's and the agent's availability;
first, every plugin that did not load (``ralph run`` refuses to start then).
"""

from __future__ import annotations

from pathlib import Path

from ralph.contracts import Check

__all__ = ["diagnose"]


def diagnose(project_dir: Path, runner_name: str | None = None, agent_name: str | None = None) -> list[Check]:
    """Every check for the runner and agent ``ralph run`` would use (or the ones named)."""
    from ralph.errors import RalphError
    from ralph.session import open_session
    from ralph.plugin.entrypoints import DISABLE_ENV

    checks: list[Check] = []
    try:
        session = open_session(project_dir, warn=False)  # reported once, as the FAIL check below
        settings, host = session.settings, session.host
        checks += [
            Check(False, info.failure(), f"fix it, or disable it with {DISABLE_ENV}={info.name} (`ralph run` does not start without it)")
            for info in host.failures
        ]
        runner_name = runner_name or settings.config.runner
        agent_name = agent_name or settings.config.agent
        runner = host.runners.get(runner_name)(settings).resolve(host.runners)
        agent = host.agents.get(agent_name)(settings)
        review_name = getattr(settings.config, "review_agent", None)
        others = [host.agents.get(review_name)(settings)] if review_name and review_name != agent.name else []
    except RalphError as exc:
        return checks + [Check(False, f"configuration: {exc}", "fix what the message names")]
    if runner.fallback_reason:
        checks.append(Check(None, f"runner {runner_name}: no sandbox, the agent would run directly: {runner.fallback_reason}",
                            f"do what the reason says to use the sandbox, or choose `--runner {runner.name}` to run directly on purpose"))
    available = runner.availability()
    if not available.ok:
        # a runner's reason says how to fix it (Availability.no); the core knows no runner's remedy
        return checks + [Check(False, f"runner {runner.name}: {available.reason}", "see the message")]
    checks.append(Check(True, f"runner {runner.name} can be used"))
    for each in (agent, *others):
        available = each.availability()
        if not available.ok:
            return checks + [Check(False, f"agent {each.name}: {available.reason}", "see the message")]
    from ralph.loop.preflight import preflight_checks

    return checks + preflight_checks(settings, host, runner, agent, *others)
