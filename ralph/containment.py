"""Kernel containment of a host process and everything it starts (the loop's side of ``ralph/nsinit.py``).

On Linux :func:`run_process <ralph.process.run_process>` starts every command in
a pid namespace of its own (:class:`Unit`): when the command ends, or the loop
stops it, the kernel kills every process left in the namespace, and no process
of the namespace can leave it or be re-parented outside it.  So a fork chain, a
double-forked daemon, a process that ignores SIGTERM or made itself a subreaper
dies with the command, by construction; nothing races a sweep.  How the
namespace is made, and why each step: ``ralph/nsinit.py``.

:func:`containment` probes once per process what this machine allows (a pid
namespace with its own ``/proc``; without the ``/proc``; or nothing: not Linux,
user namespaces forbidden to this user, ``unshare`` blocked by a seccomp
filter) and is what ``ralph doctor`` and the direct runner's pre-flight line
show (:meth:`Containment.check`).  Where no namespace can be made,
``run_process`` falls back to the subreaper sweep of :mod:`ralph.process`, and
the check says so with the fix.

What a namespace does not contain: a process the command asks a daemon outside
it to start (``docker run``, ``systemd-run``, ``at``, an ``ssh`` to this machine)
runs outside, as it would for you; in direct mode that is out of the loop's
reach (docs/security.md).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ralph.contracts import Check

__all__ = ["Containment", "ContainmentError", "Unit", "containment"]

NSINIT = Path(__file__).with_name("nsinit.py")
LABEL = "ralph-nsinit"
"""The first argument of every starter and init: what ``ps`` shows them by."""
BOOTSTRAP = (
    "import sys,_socket as s\n"
    "c=s.socket(fileno=int(sys.argv[2]));d=b''\n"
    "while not d.endswith(b'\\0'):\n"
    " r=c.recv(65536)\n"
    " if not r:raise SystemExit(125)\n"
    " d+=r\n"
    "c.detach();exec(compile(d[:-1],'ralph-nsinit','exec'))"
)
"""The starter's ``-c`` program: it reads ``nsinit.py``'s text from the channel, NUL-terminated, and runs it
(the text stays out of the command line ``ps`` shows)."""
_source: str | None = None
_probed: Containment | None = None
_probe_lock = threading.Lock()


class ContainmentError(OSError):
    """The namespace of a command could not be made (``reason``: the step that failed, and why)."""

    def __init__(self, errno: int, reason: str, program: str = "") -> None:
        super().__init__(errno, f"could not start {program or 'a command'} in a pid namespace of its own: {reason} "
                                "(`ralph doctor` shows what contains processes here)")
        self.reason = reason


@dataclass(frozen=True)
class Containment:
    """What contains the processes ``run_process`` starts on this machine."""

    namespace: bool
    """True: each command runs in its own pid namespace."""
    private_proc: bool = False
    """The namespace has its own ``/proc`` (its processes do not see the host's)."""
    reason: str = ""
    """Why there is no namespace (``namespace`` False), or why ``/proc`` is the host's."""

    @property
    def mechanism(self) -> str:
        """One phrase: what contains a command's processes."""
        if not self.namespace:
            return "the subreaper sweep (no pid namespace)"
        user = "" if os.geteuid() == 0 else ", in a user namespace mapping your uid to itself"
        proc = "its own /proc" if self.private_proc else "the host's /proc"
        return f"a pid namespace per command ({proc}{user})"

    def check(self) -> Check:
        """The line ``ralph doctor`` and the run's first lines show."""
        if self.namespace:
            what = (f"processes: every agent run and gate command runs in {self.mechanism}; "
                    "when it ends the kernel kills everything it started")
            if not self.private_proc:
                return Check(None, f"{what}, but {self.reason}",
                             "nothing to do for containment; pids the agent sees are the namespace's")
            return Check(True, what)
        return Check(
            None,
            f"processes: no pid namespace can be made here ({self.reason}); what an agent run or a gate command "
            "leaves behind is only swept after it ends, which a fast fork chain can outrun",
            _fix_for(self.reason),
        )


def containment() -> Containment:
    """What this machine allows (probed once per process: about one Python start)."""
    global _probed
    with _probe_lock:
        if _probed is None:
            _probed = _probe()
        return _probed


def _probe() -> Containment:
    if not sys.platform.startswith("linux"):
        return Containment(False, reason="not Linux")
    if not hasattr(os, "pidfd_open"):
        return Containment(False, reason="this Python has no os.pidfd_open")
    try:
        _probe_once(private_proc=True)
        return Containment(True, private_proc=True)
    except ContainmentError as first:
        try:
            _probe_once(private_proc=False)
        except ContainmentError:
            return Containment(False, reason=first.reason)
        return Containment(True, private_proc=False, reason=f"its own /proc cannot be mounted ({first.reason})")
    except OSError as exc:
        return Containment(False, reason=f"{type(exc).__name__}: {exc}")


def _nsinit_source() -> str:
    """``nsinit.py`` as it was at this process's first command: a file the agent may rewrite during a
    run (ralph in a virtualenv inside the project) is never executed, its text is."""
    global _source
    if _source is None:
        _source = NSINIT.read_text(encoding="utf-8")
    return _source


def _probe_once(private_proc: bool) -> None:
    quiet = subprocess.DEVNULL
    Unit.start(["probe"], Path("/"), {"PATH": os.defpath}, stdin=quiet, stdout=quiet, stderr=quiet,
               probe=True, private_proc=private_proc).finish()


def _fix_for(reason: str) -> str:
    if "not Linux" in reason:
        return "use the docker-sandbox runner for containment by the kernel"
    if os.geteuid() != 0:
        return ("allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; "
                "kernel.unprivileged_userns_clone=1 on Debian kernels; on Ubuntu 24.04+ "
                "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for python), "
                "or use the docker-sandbox runner")
    return "run ralph where unshare(2) is allowed (a container's seccomp profile forbids it), or use the docker-sandbox runner"


class Unit:
    """One command in its own pid namespace: started, signalled, and ended with everything in it."""

    def __init__(self, process: subprocess.Popen[bytes], channel: socket.socket, program: str) -> None:
        self.process = process
        self._channel = channel
        self._program = program
        self._pidfd = -1
        self._buffer = b""

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        cwd: Path | str,
        env: Mapping[str, str],
        *,
        stdin: int | IO[bytes] | None = None,
        stdout: int | IO[bytes] | None = None,
        stderr: int | IO[bytes] | None = None,
        private_proc: bool = True,
        probe: bool = False,
    ) -> Unit:
        """Start ``argv`` in a new pid namespace; return once it runs.

        ``stdin``/``stdout``/``stderr`` as for :class:`subprocess.Popen`.  Raises
        ``FileNotFoundError`` (or another ``OSError``) when ``argv[0]`` cannot be
        executed, :class:`ContainmentError` when the namespace cannot be made.
        """
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", BOOTSTRAP, LABEL, str(theirs.fileno()), str(os.getpid()),
                 "probe" if probe else "run", "proc" if private_proc else "noproc", "--", *argv],
                cwd=cwd, env=dict(env), stdin=stdin, stdout=stdout, stderr=stderr,
                pass_fds=(theirs.fileno(),), start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        unit = cls(process, ours, argv[0])
        try:
            try:
                ours.sendall(_nsinit_source().encode("utf-8") + b"\0")
            except OSError:
                pass  # the starter is gone: the first line says so
            first, fds = unit._next_line()
            if first.startswith("unit ") and fds:
                unit._pidfd = fds.pop(0)
            for extra in fds:
                os.close(extra)
            if unit._pidfd < 0:
                raise unit._failure(first)
            second, fds = unit._next_line()
            for extra in fds:
                os.close(extra)
            if second not in ("running", "probe ok"):
                raise unit._failure(second)
        except BaseException:
            unit.finish()
            raise
        return unit

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the namespace's init: SIGTERM/SIGINT/SIGHUP reach every process in it, SIGKILL ends it."""
        if self._pidfd < 0:
            return
        try:
            signal.pidfd_send_signal(self._pidfd, signum)
        except ProcessLookupError:
            pass

    def stop(self, grace: float) -> None:
        """SIGTERM to every process of the namespace; all of it killed if the command is still there after ``grace``."""
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait()

    def finish(self) -> tuple[int, list[int]]:
        """End the unit: wait until nothing of the namespace is left; (the command's exit code, pids it left behind).

        The namespace is gone when its init has exited (its pidfd is readable): the
        kernel kills every other process of it before that exit completes.  If the
        starter ended and the init did not (the starter was killed), the init is
        killed.  The exit code is minus the signal number when a signal ended the
        command, ``-SIGKILL`` when the namespace was killed before it reported;
        the pids are the namespace's numbers.  Called while the command still
        runs (the caller failed), it kills the namespace first.
        """
        if self.process.poll() is None:  # ended early (the caller failed): all of it is killed
            if self._pidfd < 0:
                self.process.kill()
            self.signal(signal.SIGKILL)
        self.process.wait()
        if self._pidfd >= 0:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            while not poller.poll(100):
                self.signal(signal.SIGKILL)
            try:  # reap it if it became our child (the starter killed, this process a subreaper)
                os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG)
            except ChildProcessError:
                pass
            os.close(self._pidfd)
            self._pidfd = -1
        code, left = -signal.SIGKILL, []
        for line in self._drain():
            fields = line.split()
            if fields[:1] == ["exit"]:
                try:
                    code, left = int(fields[1]), [int(pid) for pid in fields[2:]]
                except (IndexError, ValueError):
                    pass
                break
        self._channel.close()
        return code, left

    def _next_line(self) -> tuple[str, list[int]]:
        """The next line from the nsinit side, and the fds that came with it ("" at the end)."""
        fds: list[int] = []
        while b"\n" not in self._buffer:
            data, more, _flags, _address = socket.recv_fds(self._channel, 4096, 4)
            fds += more
            if not data:
                break
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace"), fds

    def _drain(self) -> list[str]:
        """The lines the channel holds, read without waiting (a stray holder may keep it open)."""
        self._channel.setblocking(False)
        while True:
            try:
                data, fds, _flags, _address = socket.recv_fds(self._channel, 4096, 4)
            except OSError:  # BlockingIOError included
                break
            for fd in fds:
                os.close(fd)
            if not data:
                break
            self._buffer += data
        lines = [line.decode("utf-8", "replace") for line in self._buffer.split(b"\n") if line]
        self._buffer = b""
        return lines

    def _failure(self, line: str) -> OSError:
        """The error an ``error <errno> <what>`` line (or its absence) stands for."""
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "error" and parts[1].isdigit():
            errno, what = int(parts[1]), parts[2]
            if what.startswith("exec: "):
                return OSError(errno, os.strerror(errno), self._program)
            return ContainmentError(errno, what, self._program)
        return ContainmentError(0, f"the starter ended ({line or 'without a word'})", self._program)
