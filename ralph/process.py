"""Run one process for a runner: own session, streamed lines, timeout, cancel, no survivors.

The semantics every runner built on :func:`run_process` gets:

- **Environment**: the child sees ``os.environ`` of the loop with ``spec.env``
  merged over it (``spec.env`` wins), plus ``RALPH_PROCESS_TOKEN``, a random
  value used to find the process's descendants when it ends.
- **Process group**: the child starts a new session (``setsid``), so it has no
  controlling terminal and leads its own process group.
- **Output**: stdout is decoded as UTF-8 (undecodable bytes replaced) and
  split into lines; ``on_line`` is called once per line, *without* the line
  ending (``\\n`` or ``\\r\\n``), in order, from one reader thread that is not
  the caller's thread (keep it quick; it may not be called after
  ``run_process`` returns).  A last line without a newline is delivered too.
  If ``on_line`` raises, the process is stopped and the exception is raised
  from ``run_process``.  The last 200 lines of stderr are in
  ``ProcessOutcome.stderr``.
- **Stdin**: ``spec.stdin`` is written and closed; without it stdin is
  ``/dev/null``.
- **Timeout and cancel**: after ``timeout`` seconds (``timed_out``) or when
  ``cancel`` is set (``interrupted``) the process group gets SIGTERM, then
  SIGKILL after ``kill_grace`` seconds.
- **No survivors**: when the process ends, however it ends, every descendant
  still running is stopped the same way — its process group, and on Linux
  every process carrying the token in its environment (which catches
  ``setsid``/``nohup``/double-fork daemons that left the group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Callable

from ralph.contracts import ProcessOutcome, ProcessSpec

__all__ = ["KILL_GRACE_SECONDS", "TOKEN_ENV", "run_process"]

KILL_GRACE_SECONDS = 5.0
"""Seconds between SIGTERM and SIGKILL when a process is stopped."""
TOKEN_ENV = "RALPH_PROCESS_TOKEN"
"""The environment variable marking a run's descendants."""
STDERR_LINES = 200
_POLL = 0.05


def run_process(
    spec: ProcessSpec,
    on_line: Callable[[str], None],
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    *,
    kill_grace: float = KILL_GRACE_SECONDS,
) -> ProcessOutcome:
    """Run ``spec`` to completion with the semantics in this module's docstring.

    Raises ``FileNotFoundError`` when ``spec.argv[0]`` cannot be started.
    """
    cancel = cancel or threading.Event()
    token = os.urandom(16).hex()
    env = {**os.environ, **spec.env, TOKEN_ENV: token}
    process = subprocess.Popen(
        spec.argv,
        cwd=spec.cwd,
        env=env,
        stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
    failure: list[BaseException] = []
    stdout_reader = threading.Thread(
        target=_pump, args=(process.stdout, on_line, failure), name="ralph-run-stdout", daemon=True
    )
    stderr_reader = threading.Thread(
        target=_pump, args=(process.stderr, stderr_tail.append, []), name="ralph-run-stderr", daemon=True
    )
    stdout_reader.start()
    stderr_reader.start()
    if spec.stdin is not None and process.stdin is not None:
        _feed(process.stdin, spec.stdin)
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = interrupted = False
    while process.poll() is None:
        if cancel.wait(_POLL):
            interrupted = True
            break
        if failure:
            break
        if deadline is not None and time.monotonic() >= deadline:
            timed_out = True
            break
    if process.poll() is None:
        _stop_group(process, kill_grace)
    exit_code = process.wait()
    _stop_descendants(process.pid, token, kill_grace)
    stdout_reader.join(timeout=kill_grace)
    stderr_reader.join(timeout=kill_grace)
    if failure:
        raise failure[0]
    return ProcessOutcome(exit_code, timed_out, interrupted, "\n".join(stderr_tail))


def _feed(stdin: IO[bytes], text: str) -> None:
    try:
        stdin.write(text.encode("utf-8"))
        stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _pump(stream: IO[bytes], sink: Callable[[str], None], failure: list[BaseException]) -> None:
    try:
        for raw in stream:
            if failure:
                continue  # drain, so the child never blocks on a full pipe
            line = raw.decode("utf-8", errors="replace")
            if line.endswith("\n"):
                line = line[:-2] if line.endswith("\r\n") else line[:-1]
            try:
                sink(line)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                failure.append(exc)
    finally:
        stream.close()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _stop_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, SIGKILL it if the leader is still there after ``grace``."""
    if not _signal_group(process.pid, signal.SIGTERM):
        return
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)


def _stop_descendants(pgid: int, token: str, grace: float) -> None:
    """Stop what is left of the group and every process carrying ``token`` (Linux)."""
    survivors = _marked(token)
    group_alive = _signal_group(pgid, 0)
    if not survivors and not group_alive:
        return
    _signal_group(pgid, signal.SIGTERM)
    for pid in survivors:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        survivors = _marked(token)
        group_alive = _signal_group(pgid, 0)
        if not survivors and not group_alive:
            return
        time.sleep(_POLL)
    _signal_group(pgid, signal.SIGKILL)
    for pid in _marked(token):
        _kill(pid, signal.SIGKILL)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _marked(token: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``TOKEN_ENV=token``."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    own = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].startswith("Z"):
            continue
        found.append(int(entry.name))
    return found
