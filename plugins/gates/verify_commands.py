"""The test gate (hard): the loop runs the task list's ``verifyCommands`` itself.

The agent's claim that tests pass counts for nothing; this output, verbatim,
is what the next iteration sees when it fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from ralph.api import Gate, GateContext, GateResult, hookimpl


class VerifyCommandsGate(Gate):
    """Runs every verifyCommand in the project directory; fails on the first non-zero exit."""

    name = "tests"
    description = "runs verifyCommands (tests, lint, type checks) — hard gate"
    hard = True
    order = 10

    @property
    def timeouts(self) -> tuple[float, float]:
        section = self.settings.section("verify")
        if section is None:
            return 300.0, 600.0
        return section.soft_timeout, section.hard_timeout

    def run(self, context: GateContext) -> GateResult:
        commands = context.tasks.verifyCommands
        if not commands:
            return GateResult(self.name, True, "no verifyCommands in the task list: nothing to run")
        started = time.monotonic()
        outputs = []
        for command in commands:
            remaining = None
            if context.hard_timeout is not None:
                remaining = max(0.1, context.hard_timeout - (time.monotonic() - started))
            code, output, timed_out = _run(command, context, remaining)
            outputs.append(f"$ {command}\n{output.rstrip()}\n[exit {code}{', TIMEOUT' if timed_out else ''}]")
            if code != 0 or timed_out:
                seconds = time.monotonic() - started
                return GateResult(
                    self.name,
                    False,
                    "\n".join(outputs),
                    exit_code=code,
                    timed_out=timed_out,
                    seconds=seconds,
                    soft_timeout_exceeded=_over(seconds, context.soft_timeout),
                )
        seconds = time.monotonic() - started
        return GateResult(
            self.name,
            True,
            "\n".join(outputs),
            exit_code=0,
            seconds=seconds,
            soft_timeout_exceeded=_over(seconds, context.soft_timeout),
        )


def _over(seconds: float, limit: float | None) -> bool:
    return limit is not None and seconds > limit


def _run(command: str, context: GateContext, timeout: float | None) -> tuple[int, str, bool]:
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=context.project_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output, False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return -9, output, True


@hookimpl(trylast=True)
def ralph_register_gates(register):  # type: ignore[no-untyped-def]
    """Register the test gate."""
    register(VerifyCommandsGate)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """``[tool.ralph.verify]``: soft_timeout, hard_timeout."""
    from ralph_plugins.gates.config import VerifyConfig

    return {"verify": VerifyConfig}
