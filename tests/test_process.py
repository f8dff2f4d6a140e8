"""``ralph.api.process.run_process``: the process helper every host runner uses."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ralph.api import ProcessSpec
from ralph.api.process import descendants, run_process, run_shell
from ralph.testing.project import process_alive, wait_for


def python(code: str, tmp_path: Path, env: dict[str, str] | None = None, stdin: str | None = None) -> ProcessSpec:
    return ProcessSpec(argv=[sys.executable, "-c", textwrap.dedent(code)], env=env or {}, cwd=tmp_path, stdin=stdin)


def test_lines_arrive_without_their_endings_on_a_reader_thread(tmp_path: Path) -> None:
    seen: list[tuple[str, bool]] = []
    spec = python(r"import sys; sys.stdout.write('one\ntwo\r\n\nlast without newline')", tmp_path)
    outcome = run_process(spec, lambda line: seen.append((line, threading.current_thread() is threading.main_thread())))
    assert outcome.exit_code == 0 and not outcome.timed_out and not outcome.interrupted
    assert [line for line, _ in seen] == ["one", "two", "", "last without newline"]
    assert not any(on_main for _, on_main in seen)


def test_env_is_merged_over_the_loops_environment_and_stdin_is_fed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RALPH_TEST_FROM_LOOP", "loop")
    monkeypatch.setenv("RALPH_TEST_OVERRIDDEN", "loop")
    lines: list[str] = []
    code = """
        import os, sys
        print(os.environ['RALPH_TEST_FROM_LOOP'], os.environ['RALPH_TEST_OVERRIDDEN'], sys.stdin.read().strip())
        sys.stderr.write('complaint\\n'); sys.exit(3)
    """
    spec = python(code, tmp_path, env={"RALPH_TEST_OVERRIDDEN": "spec"}, stdin="the prompt\n")
    outcome = run_process(spec, lines.append)
    assert lines == ["loop spec the prompt"]
    assert outcome.exit_code == 3 and outcome.stderr == "complaint"


def test_timeout_stops_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
        open({str(pid_file)!r}, 'w').write(str(child.pid))
        print('started', flush=True); time.sleep(60)
    """
    lines: list[str] = []
    outcome = run_process(python(code, tmp_path), lines.append, timeout=2, kill_grace=1)
    assert outcome.timed_out and not outcome.interrupted and outcome.exit_code != 0
    assert lines == ["started"]
    child = int(pid_file.read_text())
    wait_for(lambda: not process_alive(child), timeout=5)


def test_a_child_that_does_not_read_its_stdin_still_times_out(tmp_path: Path) -> None:
    outcomes = []
    spec = python("import time; print('ignoring stdin', flush=True); time.sleep(60)", tmp_path, stdin="x" * 4_000_000)
    runner = threading.Thread(target=lambda: outcomes.append(run_process(spec, lambda line: None, timeout=1, kill_grace=1)),
                              daemon=True)
    runner.start()
    runner.join(timeout=30)
    assert outcomes and outcomes[0].timed_out


def test_cancel_interrupts(tmp_path: Path) -> None:
    cancel = threading.Event()
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        cancel.set()

    outcome = run_process(python("import time; print('go', flush=True); time.sleep(60)", tmp_path), on_line, cancel=cancel)
    assert outcome.interrupted and not outcome.timed_out and lines == ["go"]


def test_no_descendant_outlives_the_process_even_one_that_left_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    # a double-forked daemon in its own session, the way `setsid nohup cmd &` leaves one
    code = f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pid_file)!r}, 'w').write(str(os.getpid()))
                time.sleep(60)
            os._exit(0)
        time.sleep(0.5)
        print('parent done', flush=True)
    """
    outcome = run_process(python(code, tmp_path), lambda line: None, kill_grace=1)
    assert outcome.exit_code == 0
    daemon = int(pid_file.read_text())
    wait_for(lambda: not process_alive(daemon), timeout=5)


def test_an_on_line_that_raises_stops_the_process_and_raises_in_the_caller(tmp_path: Path) -> None:
    def on_line(line: str) -> None:
        raise ValueError(f"bad line {line!r}")

    pid_file = tmp_path / "child.pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('x', flush=True); time.sleep(60)"
    with pytest.raises(ValueError, match="bad line 'x'"):
        run_process(python(code, tmp_path), on_line, kill_grace=1)
    assert not process_alive(int(pid_file.read_text()))


def test_a_daemon_that_cleared_its_environment_is_swept_too(tmp_path: Path) -> None:
    # what an agent hiding a process would do: a new session, a double fork and an empty environment
    pid_file = tmp_path / "daemon.pid"
    daemon = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    code = f"""
        import os, subprocess, sys
        if os.fork() == 0:
            os.setsid()
            subprocess.Popen(['env', '-i', sys.executable, '-c', {daemon!r}])
            os._exit(0)
        os.wait()
        while not os.path.exists({str(pid_file)!r}): pass
    """
    outcome = run_process(python(code, tmp_path), lambda line: None, kill_grace=1)
    pid = int(pid_file.read_text())
    assert outcome.exit_code == 0 and pid in outcome.swept
    assert not process_alive(pid)


def test_what_ran_before_is_spared_and_the_whole_environment_can_be_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setenv("RALPH_TEST_FROM_LOOP", "loop")
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lines: list[str] = []
        code = "import os; print(*(os.environ.get(name) for name in ('ONLY', 'FROM_SPEC', 'RALPH_TEST_FROM_LOOP')))"
        outcome = run_process(python(code, tmp_path, env={"FROM_SPEC": "1"}), lines.append, env={"ONLY": "this"})
        assert outcome.exit_code == 0 and outcome.swept == []
        assert lines == ["this None None"]
        assert older.poll() is None  # the sweep kills only what is new
    finally:
        older.kill()
        older.wait()


def test_a_spared_process_keeps_the_child_it_starts_during_the_run_while_the_runs_daemon_dies(tmp_path: Path) -> None:
    import subprocess

    go, child_pid, daemon_pid = (str(tmp_path / name) for name in ("go", "child_pid", "daemon_pid"))
    # started before the run, like a local Ray cluster: during the run it starts a worker
    helper_code = f"""
        import os, subprocess, sys, time
        while not os.path.exists({go!r}): time.sleep(0.02)
        worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
        open({child_pid!r} + '.tmp', 'w').write(str(worker.pid)); os.rename({child_pid!r} + '.tmp', {child_pid!r})
        worker.wait()
    """
    helper = subprocess.Popen([sys.executable, "-c", textwrap.dedent(helper_code)])
    daemon = f"import os, time; open({daemon_pid!r} + '.tmp', 'w').write(str(os.getpid())); os.rename({daemon_pid!r} + '.tmp', {daemon_pid!r}); time.sleep(60)"
    run_code = f"""
        import os, subprocess, sys, time
        open({go!r}, 'w').close()
        while not os.path.exists({child_pid!r}): time.sleep(0.02)
        if os.fork() == 0:
            os.setsid()
            subprocess.Popen([sys.executable, '-c', {daemon!r}])
            os._exit(0)
        os.wait()
        while not os.path.exists({daemon_pid!r}): time.sleep(0.02)
    """
    try:
        outcome = run_process(python(run_code, tmp_path), lambda line: None, timeout=60, kill_grace=1)
        worker, leftover = int(Path(child_pid).read_text()), int(Path(daemon_pid).read_text())
        assert outcome.exit_code == 0
        assert leftover in outcome.swept and not process_alive(leftover)
        assert worker not in outcome.swept and process_alive(worker) and helper.poll() is None
    finally:
        helper.kill()
        helper.wait()
        if Path(child_pid).exists():
            try:
                os.kill(int(Path(child_pid).read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_run_ending_spares_another_run_still_in_flight(tmp_path: Path) -> None:
    go, spawned, release = (str(tmp_path / name) for name in ("go", "spawned", "release"))
    # the slow run starts a child while the quick one runs: new to the quick run's sweep, yet not its own
    child = f"import os, time; open({spawned!r}, 'w').close()\nwhile not os.path.exists({release!r}): time.sleep(0.02)"
    slow_code = f"""
        import os, subprocess, sys, time
        while not os.path.exists({go!r}): time.sleep(0.02)
        print('child', subprocess.run([sys.executable, '-c', {child!r}]).returncode, flush=True)
    """
    quick_code = f"""
        import os, time
        open({go!r}, 'w').close()
        while not os.path.exists({spawned!r}): time.sleep(0.02)
    """
    slow_lines: list[str] = []
    outcomes = []
    slow = threading.Thread(target=lambda: outcomes.append(run_process(python(slow_code, tmp_path), slow_lines.append)))
    slow.start()
    try:
        quick = run_process(python(quick_code, tmp_path), lambda line: None, timeout=60)
    finally:
        Path(release).write_text("go")
        slow.join(timeout=60)
    assert quick.exit_code == 0 and quick.swept == []
    assert outcomes[0].exit_code == 0 and slow_lines == ["child 0"]


def test_run_shell_merges_stderr_and_sweeps_like_run_process(tmp_path: Path) -> None:
    before = descendants()
    code, output, timed_out = run_shell("echo out; echo err >&2; (sleep 60 &); exit 3", tmp_path, 30)
    assert (code, output, timed_out) == (3, "out\nerr\n", False)
    assert descendants() == before
    code, output, timed_out = run_shell("echo started; sleep 60", tmp_path, 1)
    assert timed_out and output == "started\n" and code != 0
    assert descendants() == before


def test_a_missing_program_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_process(ProcessSpec(argv=[str(tmp_path / "nope")], env={}, cwd=tmp_path), lambda line: None)
