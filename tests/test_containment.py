"""Every agent run and gate command is contained by the kernel (issue 19, item 3): real processes.

The attack of the class is a **fork chain racing the end**: a daemon, detached
the way ``setsid nohup cmd &`` leaves one, waits for the command to end and
then forks a new process every few milliseconds, each parent exiting at once,
so that a sweep which lists processes and then kills them always kills the one
before.  The red team's version survived the subreaper sweep in 4 of 4 trials
and rewrote the next review's verdict.  Each ``test_a_*`` below fails on the
sweep alone and passes when the command runs in a pid namespace; they use only
the public ``run_process``/``run_shell``/``DirectRunner``.  The through-the-CLI
versions are in ``tests/test_containment_claude.py``.

The chain writes into a canary file in ``tmp_path`` once the command has
ended; the tests check that nothing writes there after ``run_process``
returned.  Every chain stops at a stop file (written by the test's cleanup)
and after 30 seconds in any case.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest

from ralph.api import ProcessSpec
from ralph.api.process import run_process, run_shell

CHAIN = textwrap.dedent("""
    import os, signal, sys, time
    canary, stop, watch, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    if 'ignore-term' in how:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork():
        os._exit(0)  # the caller goes on at once
    os.setsid()
    deadline, ended = time.monotonic() + 30, None

    def running(pid):
        try:
            with open(f'/proc/{pid}/stat') as f:
                return f.read().rpartition(')')[2].split()[0] != 'Z'
        except OSError:
            return False

    while not os.path.exists(stop) and time.monotonic() < deadline:
        if ended is None and not running(watch):
            ended = time.monotonic()
        if ended is None or time.monotonic() < ended + 3:
            if os.fork():
                os._exit(0)  # a new pid every few ms: a sweep that lists, then kills, kills the one before
        else:
            time.sleep(0.02)
        if ended is not None:
            with open(canary, 'a') as f:
                f.write('x')
""")


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(the chain script, its canary, its stop file); the stop file is written at the end, whatever happened."""
    script, canary, stop = tmp_path / "chain.py", tmp_path / "canary", tmp_path / "stop"
    script.write_text(CHAIN)
    yield script, canary, stop
    stop.write_text("stop")
    time.sleep(0.1)  # a surviving chain (the sweep alone) sees it and ends


def still_writing(canary: Path, seconds: float = 1.0) -> bool:
    """Whether something still appends to ``canary`` (the chain writes every few ms once it runs)."""
    before = canary.stat().st_size if canary.exists() else 0
    time.sleep(seconds)
    return (canary.stat().st_size if canary.exists() else 0) != before


def python(code: str, cwd: Path) -> ProcessSpec:
    return ProcessSpec(argv=[sys.executable, "-c", textwrap.dedent(code)], env={}, cwd=cwd)


def launch(script: Path, canary: Path, stop: Path, *how: str) -> str:
    """Python code that starts the chain watching the process running it."""
    args = [sys.executable, str(script), str(canary), str(stop)]
    return f"import os, subprocess; subprocess.run({args!r} + [str(os.getpid())] + {list(how)!r})\n"


# -- the attack, through the public helpers (fail on the sweep alone) -----------------------------------


def test_a_fork_chain_racing_the_end_dies_with_the_command(chain: tuple[Path, Path, Path], tmp_path: Path) -> None:
    script, canary, stop = chain
    lines: list[str] = []
    outcome = run_process(python(launch(script, canary, stop) + "print('started', flush=True)", tmp_path), lines.append,
                          timeout=60)
    assert outcome.exit_code == 0 and lines == ["started"]
    assert not still_writing(canary), "a process of the command kept running after run_process returned"


def test_a_sigterm_ignoring_grandchild_dies_at_the_timeout(chain: tuple[Path, Path, Path], tmp_path: Path) -> None:
    script, canary, stop = chain
    code = launch(script, canary, stop, "ignore-term") + "import time; print('waiting', flush=True); time.sleep(60)"
    lines: list[str] = []
    outcome = run_process(python(code, tmp_path), lines.append, timeout=2, kill_grace=1)
    assert outcome.timed_out and outcome.exit_code != 0 and lines == ["waiting"]
    assert not still_writing(canary)


def test_a_gate_command_leaving_a_fork_chain_daemon(chain: tuple[Path, Path, Path], tmp_path: Path) -> None:
    script, canary, stop = chain
    # the gate's shell is what the chain watches: what a conftest.py or Makefile the agent wrote would start
    command = f"{sys.executable} {script} {canary} {stop} $$; echo gate done"
    code, output, timed_out = run_shell(command, tmp_path, 60)
    assert (code, output, timed_out) == (0, "gate done\n", False)
    assert not still_writing(canary)


def test_the_direct_runner_contains_the_agents_fork_chain(chain: tuple[Path, Path, Path], tmp_path: Path) -> None:
    from ralph_plugins.runners.direct import DirectRunner

    script, canary, stop = chain
    runner = DirectRunner(None)  # type: ignore[arg-type]
    runner.prepare(tmp_path)
    outcome = runner.run(python(launch(script, canary, stop), tmp_path), lambda line: None, 60, threading.Event())
    assert outcome.exit_code == 0
    assert not still_writing(canary)


def test_a_daemon_holding_the_output_pipe_does_not_hold_the_loop(chain: tuple[Path, Path, Path], tmp_path: Path) -> None:
    script, canary, stop = chain
    # the chain inherits stdout and stderr; the command's end must still end run_process (and its readers)
    code = launch(script, canary, stop) + "print('bye', flush=True)"
    lines: list[str] = []
    outcome = run_process(python(code, tmp_path), lines.append, timeout=60, kill_grace=2)
    assert outcome.exit_code == 0 and lines == ["bye"]
    assert not still_writing(canary)


# -- the namespace itself -------------------------------------------------------------------------------


@pytest.fixture
def namespace() -> None:
    """Skip (fail under CI=true) where this machine cannot make a pid namespace."""
    from ralph.api.process import containment

    found = containment()
    if not found.namespace:
        if os.environ.get("CI") == "true" or os.environ.get("RALPH_REQUIRE_REAL") == "1":
            pytest.fail(f"no pid namespace on this machine: {found.reason}")
        pytest.skip(f"no pid namespace on this machine: {found.reason}")


def test_the_command_runs_as_you_where_you_are_and_reaches_the_loops_socket(namespace: None, tmp_path: Path) -> None:
    import socket

    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "hook.sock"))
    server.listen(1)
    code = f"""
        import os, socket
        s = socket.socket(socket.AF_UNIX); s.connect({str(tmp_path / 'hook.sock')!r}); s.sendall(b'hello'); s.close()
        print(os.getuid(), os.getgid(), os.getcwd(), os.environ['RALPH_TEST_ENV'])
        print(b'ralph-nsinit' in open('/proc/1/cmdline', 'rb').read().split(b'\\0'))
        print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit())[0])
    """
    lines: list[str] = []
    spec = ProcessSpec([sys.executable, "-c", textwrap.dedent(code)], {"RALPH_TEST_ENV": "passed"}, tmp_path)
    outcome = run_process(spec, lines.append, timeout=60)
    connection, _ = server.accept()
    assert connection.recv(5) == b"hello"
    server.close()
    assert outcome.exit_code == 0, outcome.stderr
    assert lines[0] == f"{os.getuid()} {os.getgid()} {tmp_path} passed"
    assert lines[1:] == ["True", "1"]  # pid 1 is ralph's init; the host's processes are not in its /proc


def test_sigkill_and_sigterm_to_pid_1_from_inside_change_nothing_but_the_signal(namespace: None, tmp_path: Path) -> None:
    code = """
        import os, signal, time
        os.kill(1, signal.SIGKILL)  # the namespace's init cannot be killed from inside
        time.sleep(0.2)
        print('still here', flush=True)
        signal.signal(signal.SIGTERM, lambda *a: print('term passed on', flush=True))
        os.kill(1, signal.SIGTERM)  # passed on to every process of the namespace
        time.sleep(0.5)
    """
    lines: list[str] = []
    outcome = run_process(python(code, tmp_path), lines.append, timeout=60)
    assert outcome.exit_code == 0 and lines == ["still here", "term passed on"], outcome.stderr


def test_the_exit_status_and_a_missing_program_are_as_without_a_namespace(namespace: None, tmp_path: Path) -> None:
    outcome = run_process(python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", tmp_path), lambda line: None)
    assert outcome.exit_code == -signal.SIGTERM
    with pytest.raises(FileNotFoundError):
        run_process(ProcessSpec(["ralph-no-such-program"], {}, tmp_path), lambda line: None)
    with pytest.raises(PermissionError):
        run_process(ProcessSpec([str(tmp_path)], {}, tmp_path), lambda line: None)


@pytest.mark.skipif(os.geteuid() != 0, reason="the agent as root: it can unmount the namespace's /proc")
def test_a_root_agent_that_finds_the_starter_and_the_loop_cannot_signal_them(namespace: None, chain: tuple[Path, Path, Path],
                                                                            tmp_path: Path) -> None:
    script, canary, stop = chain
    # as root the agent can unmount the namespace's /proc (the mount is the namespace's own) and so see the
    # host's processes; it still cannot name them: kill(2) takes pids of its own namespace
    host_mounts, loop = os.readlink("/proc/self/ns/mnt"), os.getpid()
    attack = f"""
        import os, signal, subprocess, time
        assert os.readlink('/proc/self/ns/mnt') != {host_mounts!r}, 'not in a mount namespace of its own: stop'
        subprocess.run(['umount', '--lazy', '/proc'], check=True)
        targets = [{loop}]
        for pid in os.listdir('/proc'):
            try:
                argv = open(f'/proc/{{pid}}/cmdline', 'rb').read().split(b'\\0')
            except OSError:
                continue
            if len(argv) > 8 and argv[5] == b'ralph-nsinit' and argv[7] == b'{loop}' and argv[8] == b'run':
                targets.append(int(pid))
        print('found', len(targets), flush=True)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
                print('killed', pid, flush=True)
            except ProcessLookupError:
                print('out of reach', flush=True)
    """
    lines: list[str] = []
    code = launch(script, canary, stop) + textwrap.dedent(attack)
    outcome = run_process(python(code, tmp_path), lines.append, timeout=60)
    # the loop, the starter and the init (by its host pid): none can be named
    assert outcome.exit_code == 0 and lines == ["found 3"] + ["out of reach"] * 3, outcome.stderr
    assert not still_writing(canary)
    assert all(pid > 1 for pid in outcome.swept) and os.getpid() not in outcome.swept  # the namespace's pids, still
    assert os.path.exists(f"/proc/{os.getpid()}/stat")  # the host's /proc is untouched


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a nested pid namespace without a user namespace")
def test_a_nested_pid_namespace_dies_with_the_outer_one(namespace: None, chain: tuple[Path, Path, Path], tmp_path: Path) -> None:
    script, canary, stop = chain
    command = f"unshare --pid --fork --mount-proc {sys.executable} {script} {canary} {stop} $$ & sleep 0.5"
    code, output, timed_out = run_shell(command, tmp_path, 60)
    assert code == 0 and not timed_out, output
    assert not still_writing(canary)


def test_a_process_of_the_namespace_cannot_read_the_inits_descriptors(namespace: None, tmp_path: Path) -> None:
    """Pid 1 is not dumpable: without CAP_SYS_PTRACE (an agent that is not root) its fds and memory are out of reach."""
    code = "import os; os.listdir('/proc/1/fd')"
    if os.geteuid() != 0:
        outcome = run_process(python(code, tmp_path), lambda line: None)
        assert "PermissionError" in outcome.stderr
        return
    python3 = _unprivileged_python(tmp_path)
    result = _unprivileged([python3, "-c", _RUN_IN_NAMESPACE.format(code=code)], tmp_path)
    output = result.stdout + result.stderr
    assert "namespace=True" in output and "PermissionError" in output, output


_RUN_IN_NAMESPACE = """
import sys
from ralph.containment import containment
from ralph.contracts import ProcessSpec
from ralph.process import run_process
print(containment())
print(run_process(ProcessSpec([sys.executable, '-c', {code!r}], {{}}, '.'), print).stderr)
"""


def _unprivileged(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` as nobody, with this checkout's ralph importable."""
    os.chmod(cwd, 0o777)
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(root)})


def _unprivileged_python(cwd: Path) -> str:
    """A Python nobody can run that imports ``ralph.process`` (skip the test without one, or without setpriv)."""
    import shutil

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed: cannot run a process as an unprivileged user")
    for candidate in (sys.executable, shutil.which("python3") or "", "/usr/bin/python3"):
        check = "import ralph.process, subprocess, sys; subprocess.run([sys.executable, '-c', ''], check=True)"
        if candidate and _unprivileged([candidate, "-c", check], cwd).returncode == 0:
            return candidate
    pytest.skip("no Python an unprivileged user can run with ralph.process importable")


# -- what ralph says: the doctor line, and the fallback where no namespace can be made ----------------

NO_UNSHARE = textwrap.dedent("""
    # Run argv[1:] with unshare(2) failing with EPERM (a seccomp filter, as a container's default profile has).
    import ctypes, os, platform, struct, sys
    NR_UNSHARE = {"x86_64": 272, "aarch64": 97}[platform.machine()]
    ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]
    LOAD, JUMP_IF_EQUAL, RETURN, ALLOW, EPERM = 0x20, 0x15, 0x06, 0x7FFF0000, 0x00050000 | 1

    def op(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)

    program = ctypes.create_string_buffer(b"".join([
        op(LOAD, 4), op(JUMP_IF_EQUAL, ARCH, 1, 0), op(RETURN, ALLOW),
        op(LOAD, 0), op(JUMP_IF_EQUAL, NR_UNSHARE, 0, 1), op(RETURN, EPERM), op(RETURN, ALLOW),
    ]))

    class Filter(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(Filter(7, ctypes.addressof(program))), 0, 0) == 0  # a seccomp filter
    os.execvp(sys.argv[1], sys.argv[1:])
""")


def no_unshare(tmp_path: Path) -> list[str]:
    """The command prefix that runs a program where unshare(2) fails (skip where seccomp filters cannot be set)."""
    import platform

    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the seccomp filter of this test knows x86_64 and aarch64 Linux")
    script = tmp_path / "no_unshare.py"
    script.write_text(NO_UNSHARE)
    return [sys.executable, str(script)]


def doctor(project: Any, *prefix: str) -> subprocess.CompletedProcess[str]:
    from ralph.testing.project import ralph_command

    return subprocess.run([*prefix, *ralph_command(), "doctor", "--runner", "direct"], cwd=project.path,
                          env=project.process_env(None), capture_output=True, text=True, timeout=120)


def test_ralph_doctor_names_the_containment_in_use(namespace: None, ralph_project: Any) -> None:
    result = doctor(ralph_project)
    line = next(line for line in result.stdout.splitlines() if "processes:" in line)
    assert line.startswith("[ok  ]") and "a pid namespace per command" in line, result.stdout


def test_where_unshare_is_forbidden_doctor_warns_with_the_fix_and_the_sweep_still_runs(
        namespace: None, ralph_project: Any, tmp_path: Path) -> None:
    prefix = no_unshare(tmp_path)
    result = doctor(ralph_project, *prefix)
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "processes:" in line)
    assert lines[at].startswith("[warn]") and "no pid namespace can be made here (unshare: Operation not permitted)" in lines[at]
    assert "fast fork chain can outrun" in lines[at] and "fix: " in lines[at + 1] and "docker-sandbox" in lines[at + 1]
    # the fallback still runs commands and sweeps what a slow daemon leaves (here: a plain double fork)
    code = textwrap.dedent(f"""
        import os, sys, time
        from ralph.api import ProcessSpec
        from ralph.api.process import containment, run_process
        daemon = "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\\n    time.sleep(60)"
        outcome = run_process(ProcessSpec([sys.executable, '-c', daemon + "\\ntime.sleep(0.5)"], {{}}, '.'), print)
        pid = int(open({str(tmp_path / 'pid')!r}).read())
        print(containment().namespace, pid in outcome.swept, os.path.exists(f'/proc/{{pid}}'))
    """)
    swept = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert swept.stdout.split() == ["False", "True", "False"], swept.stdout + swept.stderr


def test_the_starter_runs_the_source_read_before_the_first_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A rewritten ``nsinit.py`` (ralph in a virtualenv inside the project) is not what the next command runs."""
    import ralph.containment as containment

    copy = tmp_path / "nsinit.py"
    copy.write_text(containment.NSINIT.read_text(encoding="utf-8"))
    monkeypatch.setattr(containment, "NSINIT", copy)
    monkeypatch.setattr(containment, "_source", None)
    before = containment._nsinit_source()
    copy.write_text("import os; open('pwned', 'w').close()\n")
    assert containment._nsinit_source() == before
