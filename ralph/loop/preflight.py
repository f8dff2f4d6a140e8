"""Pre-flight: what would make iteration 1 fail, checked before any agent starts.

The chosen runner and agent check themselves (``Runner.preflight``,
``Agent.preflight``), then every ``ralph_preflight`` hook.  ``ralph run`` stops
with exit 2 on a failed check; ``ralph doctor`` prints them all.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Sequence
from urllib.parse import urlsplit

from ralph.contracts import Check, PreflightContext
from ralph.errors import UnavailableError

if TYPE_CHECKING:
    from ralph.contracts import Agent, Runner
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings

__all__ = ["PreflightError", "endpoint_answers", "preflight_checks", "raise_on_failures"]


class PreflightError(UnavailableError):
    """A pre-flight check failed: nothing was started (exit 2)."""


def preflight_checks(
    settings: Settings, host: PluginHost, runner: Runner, agent: Agent, *others: Agent, gates: Sequence[str] = ()
) -> list[Check]:
    """Every check of the runner (its own, then whether it can run the gate commands ``gates``),
    the agent (and ``others``, e.g. a review agent of another kind) and the ``ralph_preflight``
    hooks, in that order."""
    view = runner.agent_view()
    context = PreflightContext(settings=settings, project_dir=settings.project_dir, runner=runner, agent=agent, view=view)
    checks = list(runner.preflight(context) or [])
    checks += list(runner.gate_check(list(gates)) or [])
    for each in {id(a): a for a in (agent, *others)}.values():
        each_context = context if each is agent else PreflightContext(settings, settings.project_dir, runner, each, view)
        checks += list(each.preflight(each_context) or [])
    checks += host.preflight(context)
    installed = installed_inside(settings.project_dir)
    if installed is not None:
        checks.append(installed)
    return checks


def installed_inside(project_dir: Path) -> Check | None:
    """A warning when ralph (its code or its Python) lives inside the project: the agent can write there,
    so a later ``ralph`` command (or a hook) would run what it wrote; ralph refuses every other program
    found inside the project, but cannot refuse itself."""
    import sys

    from ralph.claude_cli import inside_tree

    where = [path for path in (Path(__file__).parents[1], Path(sys.prefix)) if inside_tree(path, project_dir)]
    if not where:
        return None
    return Check(
        None,
        f"ralph runs from inside the project ({where[0]}): the agent can change the programs your next ralph "
        "command runs",
        "install ralph outside the project (a virtualenv such as ~/.venvs/ralph, as the README shows)",
    )


def raise_on_failures(checks: list[Check]) -> None:
    """Raise :class:`PreflightError` listing every failed check with its fix."""
    failed = [c for c in checks if c.ok is False]
    if not failed:
        return
    lines = [f"pre-flight check failed (no iteration was started): {failed[0].what}"]
    if failed[0].fix:
        lines[0] += f"; fix: {failed[0].fix}"
    for check in failed[1:]:
        lines.append(f"  also: {check.what}" + (f"; fix: {check.fix}" if check.fix else ""))
    lines.append("  (see all checks with `ralph doctor`; skip them with RALPH_PREFLIGHT=0)")
    raise PreflightError("\n".join(lines))


def endpoint_answers(url: str, timeout: float = 3.0) -> str | None:
    """None when a TCP connection to ``url``'s host and port opens, else why not."""
    parts = urlsplit(url)
    if not parts.hostname:
        return f"{url!r} is not a URL with a host"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"nothing answers at {parts.hostname}:{port} ({exc.strerror or exc})"
