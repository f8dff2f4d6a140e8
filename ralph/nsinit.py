"""Start one command in a pid namespace of its own; when it ends, the kernel ends everything else in it.

Run by :mod:`ralph.containment` as ``python -I -S -c BOOTSTRAP ralph-nsinit ...``:
the bootstrap reads the text of this file from the channel, as the loop read
it before its first command (a file the agent could rewrite during a run is
never executed), and runs it; never imported by the loop.  Standard library built-ins only (``posix``, ``_signal``,
``_socket``, ``_ctypes``), so it starts in about as long as Python itself
(``benchmarks/containment_overhead.py``).

Two processes of ours, then the command:

- the **starter** (this program) puts itself under ``PR_SET_PDEATHSIG`` (it dies
  with the loop's thread that started it), creates the namespaces (pid and
  mount; a user namespace mapping the caller's uid and gid to themselves when
  not root, never to root) and forks
- the **init**, pid 1 of the new pid namespace.  The starter sends the loop a
  pidfd of the init over the channel (``SCM_RIGHTS``), then lets it go on.  The
  init dies with the starter (``PR_SET_PDEATHSIG``), cannot be ptraced or read
  through ``/proc`` by the command's processes (``PR_SET_DUMPABLE`` 0; in a user
  namespace they have no capability over it), makes the mounts below private to
  the namespace (slave), mounts a ``/proc`` of the namespace (the command sees
  its own processes, not the host's), starts pid numbers far from the host's
  recent ones (a pid the command writes down does not name a live host
  process), forks the **command** (its own session, signals as a fresh process
  would have them), reaps every orphan, passes SIGTERM/SIGINT/SIGHUP on to
  every process of the namespace, and when the command has ended (left as a
  zombie, so no process of the namespace sees its pid gone) reports its status
  and the processes still there, then exits: the kernel kills every
  other process of the namespace (``zap_pid_ns_processes``) before the init's
  exit is complete, so once the loop sees the init gone (its pidfd readable)
  nothing of the command is left.  No process of the namespace can leave it or
  be re-parented outside it.

The channel (a Unix stream socket whose fd is argument 1) carries lines to the
loop: ``unit <pid>`` with the pidfd, then ``running`` (the command was
executed) or ``error <errno> <what>``, then ``exit <returncode> <pids>``
(returncode as :class:`subprocess.Popen` has it: minus the signal number when
a signal ended the command; pids as the namespace numbers them).  ``probe``
mode stops after the init's set-up with ``probe ok`` and makes no command.
"""

import posix
import sys

import _ctypes
import _signal
import _socket

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_SLAVE = 2, 4, 8, 0x4000, 0x80000
RESET_SIGNALS = ("SIGPIPE", "SIGXFSZ", "SIGXFZ", "SIGTERM", "SIGINT", "SIGHUP", "SIGCHLD")


class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    _handle = _ctypes.dlopen(None, 0x102)  # type: ignore[arg-type]  # None: this program and its C library


def _call(name: str, *args: int | bytes | None) -> None:
    """Call the C library's ``name``; raise OSError with errno when it returns -1."""
    if _Function((name, _Libc()))(*args) == -1:  # type: ignore[arg-type]  # any object with _handle will do
        errno = _ctypes.get_errno()
        raise OSError(errno, posix.strerror(errno), name)


def _send(channel: _socket.socket, text: str, fds: tuple[int, ...] | list[int] = ()) -> None:
    """One line to the loop (with ``fds`` as SCM_RIGHTS); the loop gone is not our problem to report."""
    data = (text + "\n").encode("utf-8", "replace")
    ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))]
    try:
        channel.sendmsg([data], ancillary if fds else [])
    except OSError:
        pass


def main(argv: list[str]) -> int:
    """``ralph-nsinit CHANNEL_FD LOOP_PID MODE PROC -- COMMAND...`` (module docstring)."""
    channel = _socket.socket(fileno=int(argv[1]))
    loop_pid, mode, private_proc = int(argv[2]), argv[3], argv[4] == "proc"
    command = argv[6:]
    try:
        _call("prctl", PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
        if posix.getppid() != loop_pid:  # the loop's thread ended before the line above
            posix._exit(1)
        uid, gid = posix.getuid(), posix.getgid()
        host_last_pid = _read_int("/proc/sys/kernel/ns_last_pid")
        pid_max = _read_int("/proc/sys/kernel/pid_max")
        _call("unshare", CLONE_NEWPID | CLONE_NEWNS | (CLONE_NEWUSER if uid != 0 else 0))
        if uid != 0:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        go_read, go_write = posix.pipe()
        init = posix.fork()
    except OSError as exc:
        _report(channel, exc)
        return 125
    if init == 0:
        posix.close(go_write)
        _init(channel, go_read, mode, private_proc, command, _first_pid(host_last_pid, pid_max))
        posix._exit(0)  # not reached
    posix.close(go_read)
    try:
        pidfd = posix.pidfd_open(init)
    except OSError as exc:
        _send(channel, f"error {exc.errno or 0} pidfd_open: {exc.strerror}")
        posix.kill(init, _signal.SIGKILL)
        posix.waitpid(init, 0)
        return 125
    _send(channel, f"unit {init}", [pidfd])
    posix.close(pidfd)
    channel.close()
    posix.write(go_write, b"g")
    posix.waitpid(init, 0)
    return 0


def _init(channel: _socket.socket, go: int, mode: str, private_proc: bool, command: list[str], first_pid: int) -> None:
    """Pid 1 of the namespace (module docstring); never returns."""
    proc = -1
    try:
        _call("prctl", PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
        if posix.read(go, 1) != b"g":  # the starter died before the pidfd reached the loop
            posix._exit(1)
        posix.close(go)
        _call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
        posix.setsid()
        if private_proc:
            _call("mount", None, b"/", None, MS_REC | MS_SLAVE, None)
            _call("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
            proc = posix.open("/proc", posix.O_RDONLY | posix.O_DIRECTORY)  # still this namespace's if /proc is unmounted
        if first_pid:
            try:
                _write("/proc/sys/kernel/ns_last_pid", str(first_pid))
            except OSError:
                pass  # numbering from 1: a comfort, not a boundary
    except OSError as exc:
        _report(channel, exc)
        posix._exit(125)
    if mode == "probe":
        _send(channel, "probe ok")
        posix._exit(0)
    posix.set_inheritable(channel.fileno(), False)
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        _signal.signal(getattr(_signal, name), _pass_on)
    failed_read, failed_write = posix.pipe()
    command_pid = posix.fork()
    if command_pid == 0:
        _command(command, failed_write)
    posix.close(failed_write)
    failure = posix.read(failed_read, 64)
    posix.close(failed_read)
    if failure:
        errno = int(failure)
        _send(channel, f"error {errno} exec: {posix.strerror(errno)}")
    else:
        _send(channel, "running")
    while True:  # reap orphans; the command is seen ended but left a zombie, so no process sees it gone
        try:
            ended = posix.waitid(posix.P_ALL, 0, posix.WEXITED | posix.WNOWAIT)
        except ChildProcessError:
            posix._exit(0)
        if ended is None or ended.si_pid == command_pid:
            break
        try:
            posix.waitpid(ended.si_pid, 0)
        except ChildProcessError:
            pass
    if failure or ended is None:
        posix._exit(127)
    ours = ("1", str(command_pid))
    left = sorted(int(name) for name in posix.listdir(proc) if name.isdigit() and name not in ours) if private_proc else []
    code = ended.si_status if ended.si_code == posix.CLD_EXITED else -ended.si_status
    _send(channel, f"exit {code} " + " ".join(map(str, left)))
    posix._exit(0)  # the kernel kills every other process of the namespace before this exit completes


def _report(channel: _socket.socket, exc: OSError) -> None:
    """``error <errno> <step>: <why>``: what the loop shows as the reason there is no namespace."""
    _send(channel, f"error {exc.errno or 0} {exc.filename or 'namespace'}: {exc.strerror or exc}")


def _command(command: list[str], failed: int) -> None:
    """The command's process: a fresh session and signals, then ``execvpe``; errno to ``failed`` if it cannot."""
    try:
        posix.setsid()
        for name in RESET_SIGNALS:
            if hasattr(_signal, name):
                _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
        _exec(command)
    except OSError as exc:
        posix.write(failed, str(exc.errno or 0).encode())
    posix._exit(127)


def _exec(command: list[str]) -> None:
    """``os.execvpe`` with the environment's PATH, as :class:`subprocess.Popen` looks a program up."""
    env = posix.environ
    program = command[0].encode()
    if b"/" in program:
        posix.execve(program, command, env)
    first_other = last = None
    for folder in env.get(b"PATH", b"/bin:/usr/bin").split(b":"):
        try:
            posix.execve((folder or b".") + b"/" + program, command, env)
        except OSError as exc:
            last = exc
            if exc.errno not in (2, 20) and first_other is None:  # not ENOENT or ENOTDIR
                first_other = exc
    raise first_other or last or OSError(2, posix.strerror(2))


def _pass_on(signum: int, frame: object) -> None:
    """The init's handler: the signal goes to every other process of the namespace."""
    try:
        posix.kill(-1, signum)
    except OSError:
        pass


def _first_pid(host_last_pid: int, pid_max: int) -> int:
    """Where the namespace's pid numbers start: half the pid space away from the host's last pid."""
    if not host_last_pid or not pid_max or pid_max < 4096:
        return 0
    start = (host_last_pid + pid_max // 2) % pid_max
    return start if start > 1000 else start + 1000


def _read_int(path: str) -> int:
    try:
        fd = posix.open(path, posix.O_RDONLY)
        try:
            return int(posix.read(fd, 64))
        finally:
            posix.close(fd)
    except (OSError, ValueError):
        return 0


def _write(path: str, text: str) -> None:
    fd = posix.open(path, posix.O_WRONLY)
    try:
        posix.write(fd, text.encode())
    finally:
        posix.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if sys.argv[:1] == ["-c"] else sys.argv))
