"""The ``nice`` plugin: a runner (the agent under ``nice -n``) and its config section."""

import dataclasses
import shutil
import threading
from typing import Any, Callable

from ralph.api import Availability, ProcessOutcome, ProcessSpec, Runner, hookimpl
from ralph.api.process import run_process

RALPH_API = "2"


class NiceRunner(Runner):
    """The agent as a host subprocess under ``nice -n <niceness>`` (no isolation: guards apply)."""

    name = "nice"
    description = "agent as a host subprocess at a lower CPU priority (nice -n)"

    def availability(self) -> Availability:
        """Usable where ``nice`` is on PATH."""
        return Availability.yes() if shutil.which("nice") else Availability.no("`nice` is not on PATH")

    def run(self, spec: ProcessSpec, on_line: Callable[[str], None], timeout: float | None, cancel: threading.Event) -> ProcessOutcome:
        """``run_process`` does the process group, streaming, timeout, cancel and cleanup."""
        argv = ["nice", "-n", str(self.settings.section("nice").niceness), *spec.argv]
        return run_process(dataclasses.replace(spec, argv=argv), on_line, timeout, cancel)


@hookimpl
def ralph_register_runners(register: Callable[[type[Runner]], None]) -> None:
    """Offer ``--runner nice``."""
    register(NiceRunner)


@hookimpl
def ralph_config_sections() -> dict[str, Any]:
    """``[tool.ralph.nice]`` (its pydantic model is imported only when config is read)."""
    from ralph_nice.config import NiceConfig
    return {"nice": NiceConfig}
