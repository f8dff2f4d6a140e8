"""The ``direct`` runner: the agent as a subprocess on this machine.

Without a sandbox the agent-side guards are the only protection, so
``ralph run`` says so when it falls back to this runner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from typing import Callable

from ralph import hookimpl
from ralph.contracts import Availability, ProcessOutcome, ProcessSpec, Runner

KILL_GRACE_SECONDS = 5.0


class DirectRunner(Runner):
    """Runs the agent in its own process group so a timeout or Ctrl-C stops all of it."""

    name = "direct"
    description = "agent as a host subprocess (guards by hooks only)"

    def availability(self) -> Availability:
        return Availability.yes()

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        env = {**os.environ, **spec.env}
        process = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        stderr_tail: deque[str] = deque(maxlen=200)
        readers = [
            threading.Thread(target=_pump, args=(process.stdout, on_line), daemon=True),
            threading.Thread(target=_pump, args=(process.stderr, stderr_tail.append), daemon=True),
        ]
        for reader in readers:
            reader.start()
        if spec.stdin is not None and process.stdin is not None:
            try:
                process.stdin.write(spec.stdin)
                process.stdin.close()
            except BrokenPipeError:
                pass
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = interrupted = False
        while process.poll() is None:
            if cancel.wait(0.05):
                interrupted = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
        if timed_out or interrupted:
            _stop_group(process)
        exit_code = process.wait()
        for reader in readers:
            reader.join(timeout=2)
        return ProcessOutcome(exit_code, timed_out, interrupted, "\n".join(stderr_tail))


def _pump(stream, sink: Callable[[str], None]) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        sink(line.rstrip("\n"))
    stream.close()


def _stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@hookimpl(trylast=True)
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the direct runner."""
    register(DirectRunner)
