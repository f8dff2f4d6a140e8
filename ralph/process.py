"""Host processes: run one to completion with no survivors (:func:`run_process`, :func:`run_shell`).

Every process ralph starts on this machine for the agent or a gate ends through
this module, the same way (docs/design.md, trust boundary rule 1: contain, don't
clean up):

1. **on Linux the command runs in a pid namespace of its own**
   (:mod:`ralph.containment`, ``ralph/nsinit.py``): its own session inside it,
   and when the command ends, times out or is cancelled, the kernel kills every
   process left in the namespace before the loop goes on.  No process of the
   namespace can leave it or be re-parented outside it, so a fork chain, a
   double-forked daemon, a process ignoring SIGTERM or one that made itself a
   subreaper dies with the command; nothing races a sweep, and the loop
   searches nothing (``spare`` is not needed then).  No sweep is kept as a
   second line: nothing of the namespace can be outside it, and a sweep would
   kill processes the loop's other threads started (it knows processes by
   ancestry only).  Pids the command's processes see are the namespace's;
2. on timeout, on cancel or when ``on_line`` raises, SIGTERM reaches every
   process of the namespace (without one: the process group), then SIGKILL
   after ``kill_grace`` seconds ends all of it;
3. **without a namespace** (not Linux, user namespaces forbidden to this user,
   ``unshare`` blocked by a seccomp filter: ``ralph doctor`` and the direct
   runner's first lines say so, with the fix) the child starts a new session,
   this process is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), and
   when the child has ended the **sweep** SIGKILLs every process that is the
   run's leftover, repeated until none is left, and reaps them.  A sweep is a
   race a fast fork chain can win; it is the fallback, not the boundary.

What the sweep counts as the run's leftover.  A live process whose chain of
parents reaches this process *without passing through* a spared process (one
in ``spare``: alive when the run started) or through the child of another
``run_process`` call still in flight.  The subtree of a spared process is not
descended into, so a process ralph started before the run (a local Ray
cluster's raylet, say) keeps the workers it starts during the run.  This is
safe because of how Linux re-parents orphans: when a process dies its
children go to the nearest *ancestor* marked as child subreaper (else to
init).  Every process of a run descends from its child, a direct child of this
process, which is a subreaper; so the ancestors of a run's process are the
run's own processes and this process, never a spared process, and an orphan of
the run lands at the latest on this process, where the sweep sees it.  A
spared pid is honoured only if that process started no later than the run's
child (start times from ``/proc/<pid>/stat``).  The price, stated: an orphan of
a spared process or of another in-flight run cannot be told apart from the
run's own and is killed by whichever run ends first; the subreaper is a
property of the whole process, kept once set; without ``/proc`` and ``prctl``
(not Linux) only the process group is stopped.

The semantics every runner built on :func:`run_process` gets:

- **Environment**: the child sees ``os.environ`` of the loop with ``spec.env``
  merged over it (``spec.env`` wins), unless ``env`` gives the whole
  environment.
- **Output**: stdout is decoded as UTF-8 (undecodable bytes replaced) and
  split into lines; ``on_line`` is called once per line, *without* the line
  ending (``\\n`` or ``\\r\\n``), in order, from one reader thread that is not
  the caller's thread (keep it quick; it is not called after ``run_process``
  returns).  A last line without a newline is delivered too.  If ``on_line``
  raises, the process is stopped and the exception is raised from
  ``run_process``.  The last 200 lines of stderr are in
  ``ProcessOutcome.stderr`` (with ``merge_stderr`` they are lines of stdout).
- **Stdin**: ``spec.stdin`` is written (from a thread of its own: a child
  that does not read it still times out) and closed; without it stdin is
  ``/dev/null``.
- **Timeout and cancel**: after ``timeout`` seconds (``timed_out``) or when
  ``cancel`` is set (``interrupted``) the process is stopped as in 2. above.
- **No survivors**: 1. (or 3.) above; ``ProcessOutcome.swept`` holds the pids
  of the processes still there when the command ended, all killed (in a
  namespace: as the namespace numbers them, which is what the processes saw).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Callable

from ralph.contracts import ProcessOutcome, ProcessSpec

__all__ = [
    "KILL_GRACE_SECONDS",
    "become_subreaper",
    "descendants",
    "kill_new_descendants",
    "run_process",
    "run_shell",
]

KILL_GRACE_SECONDS = 5.0
"""Seconds between SIGTERM and SIGKILL when a process is stopped."""
STDERR_LINES = 200
PR_SET_CHILD_SUBREAPER = 36
_POLL = 0.05
_subreaper: bool | None = None
_in_flight: dict[int, int] = {}  # pid -> start time of the children of run_process calls not yet swept
_in_flight_lock = threading.Lock()


def run_process(
    spec: ProcessSpec,
    on_line: Callable[[str], None],
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    *,
    kill_grace: float = KILL_GRACE_SECONDS,
    env: Mapping[str, str] | None = None,
    spare: set[int] | None = None,
    merge_stderr: bool = False,
) -> ProcessOutcome:
    """Run ``spec`` to completion with the semantics in this module's docstring.

    ``env``: the child's whole environment (default: ``os.environ`` with
    ``spec.env`` over it).  ``spare``: for the sweep without a namespace,
    descendants of this process it leaves alone (default: those alive now; a
    runner may snapshot once per run with :func:`descendants`).
    ``merge_stderr``: stderr goes to ``on_line`` with stdout.  ``spec.files``
    are written first.  Raises ``FileNotFoundError`` when ``spec.argv[0]``
    cannot be started.
    """
    from ralph.safeio import note_change

    note_change()  # whatever runs may write the project: a git status taken before is not the one after
    try:
        return _run_process(spec, on_line, timeout, cancel, kill_grace, env, spare, merge_stderr)
    finally:
        note_change()


def _run_process(
    spec: ProcessSpec, on_line: Callable[[str], None], timeout: float | None, cancel: threading.Event | None,
    kill_grace: float, env: Mapping[str, str] | None, spare: set[int] | None, merge_stderr: bool,
) -> ProcessOutcome:
    from ralph.containment import Unit, containment

    cancel = cancel or threading.Event()
    spec.write_files()  # the loop-owned files it needs (a settings file), on this machine
    child_env = dict(env) if env is not None else {**os.environ, **spec.env}
    stdin = subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL
    stderr = subprocess.STDOUT if merge_stderr else subprocess.PIPE
    contained = containment()
    unit: Unit | None = None
    started = 0
    if contained.namespace:
        unit = Unit.start(spec.argv, spec.cwd, child_env, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr,
                          private_proc=contained.private_proc)
        process = unit.process
    else:
        spare = descendants() if spare is None else spare
        become_subreaper()
        process = subprocess.Popen(spec.argv, cwd=spec.cwd, env=child_env, stdin=stdin, stdout=subprocess.PIPE,
                                   stderr=stderr, start_new_session=True)
        started = _start_time(process.pid)  # not reaped before our wait: readable, if only as a zombie
        with _in_flight_lock:
            _in_flight[process.pid] = started
    stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
    failure: list[BaseException] = []
    done = threading.Event()
    streams = [(process.stdout, on_line, failure)]
    if process.stderr is not None:
        streams.append((process.stderr, stderr_tail.append, []))
    readers = [threading.Thread(target=_pump, args=(*stream, done), name="ralph-run-output", daemon=True)
               for stream in streams]
    for reader in readers:
        reader.start()
    if spec.stdin is not None and process.stdin is not None:  # a thread: a child that does not read cannot block us
        readers.append(threading.Thread(target=_feed, args=(process.stdin, spec.stdin), name="ralph-run-input", daemon=True))
        readers[-1].start()
    exited = threading.Event()  # set by a blocking wait: the end is seen at once, cancel within _POLL
    threading.Thread(target=_wait, args=(process, exited), name="ralph-run-wait", daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = interrupted = False
    exit_code = -signal.SIGKILL
    swept: list[int] = []
    try:
        while not exited.wait(_POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))):
            if cancel.is_set():
                interrupted = True
                break
            if failure:
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
        if process.poll() is None:
            if unit is not None:
                unit.stop(kill_grace)
            else:
                _stop_group(process, kill_grace)
        exit_code = process.wait()
    finally:
        if unit is not None:  # the namespace's end: nothing of it is left once this returns
            exit_code, swept = unit.finish()
        else:
            with _in_flight_lock:
                _in_flight.pop(process.pid, None)
            swept = kill_new_descendants(spare or set(), since=started or None)
        for reader in readers:  # every pipe's other end is closed now (but a spared process's, without a namespace)
            reader.join(timeout=kill_grace)
        done.set()
    if failure:
        raise failure[0]
    return ProcessOutcome(exit_code, timed_out, interrupted, "\n".join(stderr_tail), swept)


def run_shell(command: str, cwd: Path, timeout: float | None, existing: set[int] | None = None) -> tuple[int, str, bool]:
    """Run ``command`` with ``/bin/sh`` through :func:`run_process`; (exit code, merged output, timed out).

    The output is its lines joined with ``\\n``.  Waits for the shell itself, not
    for the end of its output: a background process that keeps the pipe open dies
    with the shell's namespace (or is swept).  ``existing``: descendants the sweep
    spares when there is no namespace (default: those alive now).
    """
    lines: list[str] = []
    outcome = run_process(ProcessSpec(["/bin/sh", "-c", command], {}, cwd), lines.append, timeout,
                          spare=existing, merge_stderr=True)
    return outcome.exit_code, "".join(line + "\n" for line in lines), outcome.timed_out


def _wait(process: subprocess.Popen[bytes], exited: threading.Event) -> None:
    process.wait()
    exited.set()


def _feed(stdin: IO[bytes], text: str) -> None:
    try:
        stdin.write(text.encode("utf-8"))
    except OSError:  # BrokenPipeError included: the child ended without reading it all
        pass
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _pump(stream: IO[bytes], sink: Callable[[str], None], failure: list[BaseException], done: threading.Event) -> None:
    try:
        for raw in stream:
            if failure or done.is_set():
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


def _stop_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, SIGKILL it if the leader is still there after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


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


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks since boot) of every process (from /proc; empty without it)."""
    table: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        fields = _stat(name)
        if fields is not None:
            table[int(name)] = (int(fields[1]), int(fields[19]))
    return table


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); None if gone."""
    try:  # raw reads: a buffered file object per process costs twice as much
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 1024)
        finally:
            os.close(fd)
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces: parse after the last ')'
    return data[data.rindex(b")") + 2 :].split()


def _start_time(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[19]) if fields is not None else 0


def _tree(table: dict[int, tuple[int, int]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def descendants(pid: int | None = None) -> set[int]:
    """Every live descendant of ``pid`` (default: this process)."""
    return _tree(_processes(), os.getpid() if pid is None else pid)


def kill_new_descendants(existing: set[int], rounds: int = 20, *, since: int | None = None) -> list[int]:
    """SIGKILL the run's leftovers until none is left; reap them.

    A leftover is a descendant of this process whose parent chain reaches it
    without passing through a process in ``existing`` or the child of a
    ``run_process`` call still running in another thread (module docstring:
    why a spared process's subtree cannot hold the run's orphans).  ``since``:
    the run's start time in clock ticks since boot; a pid in ``existing`` whose
    process started later is a reused pid and not spared.  Repeated because a
    process may fork between the listing and the kill.
    """
    me = os.getpid()
    killed: list[int] = []
    for _ in range(rounds):
        table = _processes()
        with _in_flight_lock:
            others = dict(_in_flight)
        shelters = {pid for pid in existing if pid in table and (since is None or table[pid][1] <= since)}
        shelters |= {pid for pid, start in others.items() if pid in table and table[pid][1] == start}
        targets = _leftovers(table, me, shelters)
        alive = [pid for pid in sorted(targets) if not _zombie(pid)]
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


def _leftovers(table: dict[int, tuple[int, int]], root: int, shelters: set[int]) -> set[int]:
    """Descendants of ``root`` whose parent chain reaches it without passing through a shelter."""
    verdict: dict[int, bool] = {root: True}
    for pid in shelters:
        verdict[pid] = False
    for start in table:
        chain: list[int] = []
        pid = start
        while pid not in verdict:
            chain.append(pid)
            parent = table[pid][0]
            if parent != root and (parent not in table or parent in chain):
                pid = -1  # init, a parent gone since the listing, or a cycle of reused pids: not below root
                break
            pid = parent
        ours = verdict.get(pid, False)
        for step in chain:
            verdict[step] = ours
    return {pid for pid, ours in verdict.items() if ours and pid != root and pid not in shelters}


def _zombie(pid: int) -> bool:
    """Dead and waiting to be reaped, or gone."""
    fields = _stat(pid)
    return fields is None or fields[0] == b"Z"


def _reap(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass  # not our child (its own parent reaps it)
