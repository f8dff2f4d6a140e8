"""``ralph.api.run_process``: the process helper every host runner uses."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ralph.api import ProcessSpec, run_process
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

    with pytest.raises(ValueError, match="bad line 'x'"):
        run_process(python("import time; print('x', flush=True); time.sleep(60)", tmp_path), on_line, kill_grace=1)


def test_a_missing_program_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_process(ProcessSpec(argv=[str(tmp_path / "nope")], env={}, cwd=tmp_path), lambda line: None)
