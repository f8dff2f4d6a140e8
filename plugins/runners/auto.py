"""The ``auto`` runner: the sandbox when it can be used, else ``direct`` with a warning."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from ralph.api import Availability, ProcessOutcome, ProcessSpec, Runner, hookimpl

if TYPE_CHECKING:
    from ralph.api import Registry

PREFERRED = ("docker-sandbox",)


class AutoRunner(Runner):
    """Chooses a runner at start-up; ``resolve()`` returns the choice."""

    name = "auto"
    description = "docker-sandbox when the engine answers and the image exists, else direct"

    def availability(self) -> Availability:
        return Availability.yes()

    def resolve(self, registry: Registry) -> Runner:
        reasons = []
        for name in PREFERRED:
            if name not in registry.entries:
                reasons.append(f"the {name} runner is not installed")
                continue
            runner = registry.get(name)(self.settings)
            available = runner.availability()
            if available.ok:
                return runner
            reasons.append(f"{name}: {available.reason}")
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


@hookimpl(trylast=True)
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the auto runner."""
    register(AutoRunner)
