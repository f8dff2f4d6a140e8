"""Host processes the loop starts: a shell command in its own session, and the sweep of leftovers.

No agent process may outlive its iteration (DESIGN.md, trust boundary rule 4):
the loop makes itself a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``),
so whatever the agent starts (``setsid``, ``nohup``, double forks) stays below it,
and :func:`kill_new_descendants` kills every descendant that did not exist before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
_subreaper: bool | None = None


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False where unsupported."""
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                _subreaper = False
    return _subreaper


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:  # raw reads: a buffered file object per process costs twice as much
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces: parse after the last ')'
        fields = data[data.rindex(b")") + 2 :].split()
        parents[int(name)] = int(fields[1])
    return parents


def descendants(pid: int | None = None) -> set[int]:
    """Every live descendant of ``pid`` (default: this process)."""
    root = os.getpid() if pid is None else pid
    if not os.path.isdir("/proc"):
        return set()
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def kill_new_descendants(existing: set[int], rounds: int = 20) -> list[int]:
    """SIGKILL every descendant of this process not in ``existing`` until none is left; reap them.

    Repeated because a process may fork between the listing and the kill.
    """
    killed: list[int] = []
    for _ in range(rounds):
        targets = sorted(descendants() - existing)
        alive = [pid for pid in targets if not _zombie(pid)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        _reap(targets)
        if not alive:
            break
        time.sleep(0.01)
    return sorted(set(killed))


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        return data[data.rindex(b")") + 2 :].split()[0] == b"Z"
    except OSError:
        return True


def _reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass  # not our child (its own parent reaps it)


def run_shell(command: str, cwd: Path, timeout: float | None, existing: set[int] | None = None) -> tuple[int, str, bool]:
    """Run ``command`` with the shell in its own session; (exit code, merged output, timed out).

    Waits for the shell itself, not for the end of its output: a background process that
    keeps the pipe open is killed by the sweep that follows (or, on timeout, with the session).
    ``existing``: descendants to spare (default: a snapshot taken now).
    """
    import threading

    existing = descendants() if existing is None else existing
    become_subreaper()
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    chunks: list[bytes] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: process.stdout.read1(65536), b"")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    kill_new_descendants(existing)
    reader.join(timeout=5)
    output = b"".join(chunks).decode("utf-8", "replace")
    return (-9 if timed_out else process.returncode), output, timed_out
