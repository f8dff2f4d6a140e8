"""The ``auto`` runner: a sandbox when one can be used, else ``direct`` with a warning.

The sandboxes in order of preference: ``docker-sandbox``, then ``bwrap``.  "Can be used": the
runner is available here (the engine answers and the image exists; bubblewrap makes its sandbox),
the agent can log in there (a login only the host's config or keychain holds cannot reach a
container), and every program the gates run is there.  The first that passes runs; the reasons of
the ones before it are its ``fallback_reason``, and when none passes ``direct`` runs with all of them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Sequence

from ralph.api import Availability, ProcessOutcome, ProcessSpec, Runner, hookimpl

if TYPE_CHECKING:
    from ralph.api import Agent, Registry

PREFERRED = ("docker-sandbox", "bwrap")


class AutoRunner(Runner):
    """Chooses a runner at start-up; ``resolve()`` returns the choice."""

    name = "auto"
    description = ("docker-sandbox when the engine answers, the image exists and has the gates' programs, else bwrap "
                   "when bubblewrap works here, else direct")

    def availability(self) -> Availability:
        return Availability.yes()

    def resolve(self, registry: Registry) -> Runner:
        """The first sandbox of :data:`PREFERRED` that is available here, else ``direct``; the chosen
        runner's ``fallback_reason`` says why the ones before it were not."""
        return self._choose(registry, lambda runner: None)

    def resolve_for(self, registry: Registry, agents: Sequence[Agent], gates: Sequence[str] = ()) -> Runner:
        """:meth:`resolve`'s choice among the sandboxes that can also run these ``agents`` (a subscription
        login in the host's Claude Code config or keychain reaches no container) and the gate commands
        ``gates`` (every program they run is there); ``direct`` when none can, saying why and what to do."""
        direct = registry.get("direct")(self.settings)
        return self._choose(registry, lambda runner: login_only_here(runner, direct, agents)
                            or cannot_run_gates(runner, gates))

    def _choose(self, registry: Registry, problem: Callable[[Runner], str | None]) -> Runner:
        reasons = []
        for name in PREFERRED:
            if name not in registry.entries:
                reasons.append(f"the {name} runner is not installed (or its plugin is disabled)")
                continue
            runner = registry.get(name)(self.settings)
            available = runner.availability()
            if not available.ok:
                reasons.append(f"{name}: {available.reason}")
                continue
            why_not = problem(runner)
            if why_not is None:
                runner.fallback_reason = "; ".join(reasons)
                return runner
            reasons.append(why_not)
        direct = registry.get("direct")(self.settings)
        direct.fallback_reason = "; ".join(reasons)
        return direct

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        raise RuntimeError("the auto runner only chooses; call resolve() and run the result")


def login_only_here(sandbox: Runner, direct: Runner, agents: Sequence[Agent]) -> str | None:
    """Why ``sandbox`` cannot run one of ``agents`` that could run directly: its credentials are
    visible on this machine but not where the sandbox runs it.  None when every agent can log in
    there (or cannot anywhere: then the sandbox's pre-flight check says what to do)."""
    inside = sandbox.agent_view()
    here = direct.agent_view()
    for agent in agents:
        there = agent.credential_check(inside)
        if there is None or there.ok is not False:
            continue
        found = agent.credential_check(here)
        if found is None or found.ok is not True:
            continue
        return (f"{sandbox.name} cannot use {agent.name}'s login ({found.what}, on {here.where} only): "
                f"to run in the sandbox, {there.fix}; `--runner direct` runs directly on purpose")
    return None


def cannot_run_gates(sandbox: Runner, gates: Sequence[str]) -> str | None:
    """Why ``sandbox`` cannot run the gate commands (its failed :meth:`Runner.gate_check`, the
    first one with its fix), or None."""
    failed = [check for check in sandbox.gate_check(list(gates)) if check.ok is False]
    if not failed:
        return None
    more = f" (and {len(failed) - 1} more: `ralph doctor --runner {sandbox.name}` lists them)" if len(failed) > 1 else ""
    return f"{sandbox.name}: {failed[0].what}; to run in the sandbox, {failed[0].fix}{more}"


@hookimpl(trylast=True)
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the auto runner."""
    register(AutoRunner)
