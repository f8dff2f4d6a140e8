"""The test gate (hard): the loop runs the task list's ``verifyCommands`` itself.

The agent's claim that tests pass counts for nothing; this output, verbatim,
is what the next iteration sees when it fails.  The commands run where the
agent runs (``context.run_command``): inside the sandbox with docker-sandbox,
on the host in direct mode; the result says which.
"""

from __future__ import annotations

import time

from ralph.api import CommandResult, Gate, GateContext, GateResult, hookimpl


class VerifyCommandsGate(Gate):
    """Runs every verifyCommand in the project directory; fails on the first non-zero exit."""

    name = "tests"
    description = "runs verifyCommands (tests, lint, type checks) — hard gate"
    hard = True
    order = 10
    on_final_tree = True  # verifyCommands check the whole tree: they run once more before "complete"

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
        where = "host"
        for command in commands:
            remaining = None
            if context.hard_timeout is not None:
                remaining = max(0.1, context.hard_timeout - (time.monotonic() - started))
            result = _run(command, context, remaining)
            code, timed_out, where = result.exit_code, result.timed_out, result.where
            outputs.append(f"$ {command}\n{result.output.rstrip()}\n[exit {code}{', TIMEOUT' if timed_out else ''}]")
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
                    where=where,
                )
        seconds = time.monotonic() - started
        return GateResult(
            self.name,
            True,
            "\n".join(outputs),
            exit_code=0,
            seconds=seconds,
            soft_timeout_exceeded=_over(seconds, context.soft_timeout),
            where=where,
        )


def _over(seconds: float, limit: float | None) -> bool:
    return limit is not None and seconds > limit


def _run(command: str, context: GateContext, timeout: float | None) -> CommandResult:
    if context.run_command is not None:
        return context.run_command(command, timeout)
    from ralph.api.process import run_shell  # a context built without a runner: the host

    code, output, timed_out = run_shell(command, context.project_dir, timeout)
    return CommandResult(code, output, timed_out, "host")


@hookimpl(trylast=True)
def ralph_register_gates(register):  # type: ignore[no-untyped-def]
    """Register the test gate."""
    register(VerifyCommandsGate)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """``[tool.ralph.verify]``: soft_timeout, hard_timeout."""
    from ralph_plugins.gates.config import VerifyConfig

    return {"verify": VerifyConfig}
