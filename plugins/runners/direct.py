"""The ``direct`` runner: the agent as a subprocess on this machine.

Without a sandbox the agent-side guards are the only protection, so
``ralph run`` says so when it falls back to this runner.
"""

from __future__ import annotations

import threading
from typing import Callable

from ralph.api import Availability, ProcessOutcome, ProcessSpec, Runner, hookimpl, run_process


class DirectRunner(Runner):
    """Runs the agent in its own session; a timeout, Ctrl-C or its end stops all it started."""

    name = "direct"
    description = "agent as a host subprocess (guards by hooks only)"
    isolates = False

    def availability(self) -> Availability:
        """Always usable."""
        return Availability.yes()

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        """``run_process``: own session, streamed lines, timeout, cancel, no survivors."""
        return run_process(spec, on_line, timeout, cancel)


@hookimpl(trylast=True)
def ralph_register_runners(register: Callable[[type[Runner]], None]) -> None:
    """Register the direct runner."""
    register(DirectRunner)
