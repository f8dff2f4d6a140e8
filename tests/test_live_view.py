"""The live view in a real terminal (a tmux pane): the footer is drawn at the bottom, updates as
iterations pass, and leaves the screen clean at the end and on Ctrl-C; ``ralph status --follow``
shows the same view for a run started elsewhere.  Each test prints screenshot-like captures
(``pytest -s`` shows them)."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from ralph.testing.project import RalphProject, ralph_command, story, wait_for
from ralph.testing.requirements import require

pytestmark = pytest.mark.slow
FOOTER_MARK = "stories │"
_sessions = itertools.count(1)


class Terminal:
    """A detached tmux session on a private server: a real terminal we can read back."""

    def __init__(self, width: int = 110, height: int = 30) -> None:
        require(shutil.which("tmux") is not None, "tmux is not installed (apt-get install tmux)")
        self.socket = f"ralph-test-{os.getpid()}-{next(_sessions)}"
        self.width, self.height = width, height
        self.captures: list[str] = []

    def tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def start(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        command = f"cd {shlex.quote(str(cwd))} && {shlex.join(argv)}; echo EXITED:$?; sleep 600"
        # a new server inherits this environment, and the pane's shell inherits the server's
        self.tmux("new-session", "-d", "-s", "ralph", "-x", str(self.width), "-y", str(self.height), command, env=env)

    def screen(self) -> str:
        text = self.tmux("capture-pane", "-p", "-t", "ralph")
        self.captures.append(text)
        return text

    def cursor_visible(self) -> bool:
        return self.tmux("display-message", "-p", "-t", "ralph", "#{cursor_flag}").strip() == "1"

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "ralph", *keys)

    def wait_for(self, predicate: Any, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.15)
        raise AssertionError("the terminal never showed what was expected; last screen:\n" + self.screen())

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def show(title: str, screen: str) -> None:
    """Print a capture as a framed screenshot."""
    lines = screen.rstrip("\n").split("\n")
    width = max([len(line) for line in lines] + [len(title) + 4])
    print(f"\n┌─ {title} " + "─" * (width - len(title) - 2) + "┐")
    for line in lines:
        print(f"│{line.ljust(width + 1)}│")
    print("└" + "─" * (width + 1) + "┘")


def footer_lines(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if FOOTER_MARK in line]


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    yield term
    term.close()


def two_story_project(project: RalphProject, tmp_path: Path, pause: float = 0.6) -> dict[str, str]:
    """Two stories, each implemented and reviewed by the replay agent, slowly enough to watch."""
    project.write_stories([story("US-001"), story("US-002", priority=2)], verifyCommands=["true"])

    def implement(sid: str) -> list[dict[str, Any]]:
        return [{"say": f"Implementing {sid}"}, {"sleep": pause}, {"write": {"path": f"{sid}.txt", "content": sid}},
                {"set": {"story": sid, "fields": {"reviewStatus": "needs_review"}}}, {"commit": f"feat {sid}"},
                {"cost": 0.0125}, {"sleep": pause}, {"say": f"{sid} ready for review"}]

    def review(sid: str) -> list[dict[str, Any]]:
        return [{"say": f"Reviewing {sid}"}, {"sleep": pause},
                {"set": {"story": sid, "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1,
                                                   "notes": "ok"}}},
                {"commit": f"review {sid}"}, {"cost": 0.01}, {"say": "Approved"}]

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": implement("US-001"), "2": review("US-001"),
                                                 "3": implement("US-002"), "4": review("US-002")}}))
    return project.process_env({"RALPH_REPLAY_SCRIPT": str(script)})


def test_footer_is_drawn_updates_and_is_gone_at_the_end(ralph_project: RalphProject, tmp_path: Path,
                                                         terminal: Terminal) -> None:
    env = two_story_project(ralph_project, tmp_path)
    terminal.start([*ralph_command(), "run", "--runner", "direct", "--agent", "replay"], ralph_project.path, env)
    seen: dict[str, str] = {}  # footer text -> the screen it was on
    misplaced: list[str] = []
    drawn = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        screen = terminal.screen()
        if "EXITED:" in screen:
            break
        footer = footer_lines(screen)
        if footer:
            drawn += 1
            seen.setdefault(footer[0], screen)
            # the footer is the bottom of the output: its rule right above it, only its own line below
            content = screen.rstrip("\n").splitlines()
            index = max(i for i, line in enumerate(content) if FOOTER_MARK in line)
            if len(content) - index > 2 or not content[index - 1].strip().startswith("─"):
                misplaced.append(screen)
        time.sleep(0.1)
    # a capture may catch the terminal between two writes of one redraw: allow a rare one, not a pattern
    assert drawn and len(misplaced) <= max(1, drawn // 10), misplaced[:2]
    final = terminal.wait_for(lambda s: "EXITED:" in s)
    states = list(seen)
    for text in states[:1] + states[len(states) // 2 : len(states) // 2 + 1] + states[-1:]:
        show("ralph run, footer drawn", seen[text])
    show("ralph run, at the end", final)
    assert any("iteration 1/15" in text and "implement US-001" in text for text in states), states
    assert any("iteration 4/15" in text and "review US-002" in text for text in states), states
    assert any("1/2 stories" in text for text in states), states
    assert any("$0.0125" in text for text in states), states
    assert any("last gate: tests passed" in screen for screen in seen.values())
    # the agent's output scrolled above the footer
    assert any("Implementing US-002" in screen for screen in seen.values())
    # the end: footer gone, the summary and the exit code are there, the cursor is back
    assert "EXITED:0" in final and footer_lines(final) == [] and "━" not in final
    assert "2/2 stories done | 4 iterations" in final
    assert terminal.cursor_visible()


def test_ctrl_c_leaves_the_screen_clean(ralph_project: RalphProject, tmp_path: Path, terminal: Terminal) -> None:
    env = two_story_project(ralph_project, tmp_path, pause=30)
    terminal.start([*ralph_command(), "run", "--runner", "direct", "--agent", "replay"], ralph_project.path, env)
    drawn = terminal.wait_for(lambda s: footer_lines(s) and "Implementing US-001" in s)
    # the agent is quiet for 30 s, yet the footer's elapsed time goes on ticking
    first = footer_lines(drawn)[0].split("│")[3]
    ticked = terminal.wait_for(lambda s: bool(footer_lines(s)) and footer_lines(s)[0].split("│")[3] != first)
    assert "Implementing US-001" in ticked and "US-001 ready" not in ticked
    show("before Ctrl-C", ticked)
    terminal.keys("C-c")
    final = terminal.wait_for(lambda s: "EXITED:" in s)
    show("after Ctrl-C", final)
    assert "EXITED:130" in final
    assert "SIGINT received" in final and "interrupted" in final
    assert footer_lines(final) == [] and "━" not in final
    assert terminal.cursor_visible()


def test_no_live_and_no_terminal_give_plain_lines(ralph_project: RalphProject, tmp_path: Path,
                                                  terminal: Terminal) -> None:
    env = two_story_project(ralph_project, tmp_path, pause=0.05)
    terminal.start([*ralph_command(), "run", "--runner", "direct", "--agent", "replay", "--no-live"],
                   ralph_project.path, env)
    final = terminal.wait_for(lambda s: "EXITED:" in s)
    assert "EXITED:0" in final and not any(footer_lines(c) for c in terminal.captures)
    piped = subprocess.run([*ralph_command(), "run", "--runner", "direct", "--agent", "replay"], cwd=ralph_project.path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0  # nothing left to do: complete
    assert "━" not in piped.stdout + piped.stderr and "\x1b[" not in piped.stdout + piped.stderr


def test_status_follow_shows_a_run_started_elsewhere(ralph_project: RalphProject, tmp_path: Path,
                                                      terminal: Terminal) -> None:
    env = two_story_project(ralph_project, tmp_path)
    log = (tmp_path / "background.log").open("w")
    background = subprocess.Popen([*ralph_command(), "run", "--runner", "direct", "--agent", "replay"],
                                  cwd=ralph_project.path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ralph_project.events("iteration_started"), timeout=60)
        terminal.start([*ralph_command(), "status", "--follow"], ralph_project.path, env)
        seen: list[str] = []  # the footer's "iteration n/N" part, as it changed
        while background.poll() is None:
            footer = footer_lines(terminal.screen())
            if footer and footer[0].split("│")[1] not in seen:
                seen.append(footer[0].split("│")[1])
                show("ralph status --follow", terminal.captures[-1])
            time.sleep(0.1)
        final = terminal.wait_for(lambda s: "EXITED:" in s)
    finally:
        if background.poll() is None:
            background.kill()
        background.wait()
        log.close()
    show("ralph status --follow, at the end", final)
    assert background.returncode == 0
    assert len(seen) >= 2, seen  # it followed the iterations as they passed
    assert "EXITED:0" in final and footer_lines(final) == [] and "━" not in final
    assert "2/2 stories done | 4 iterations" in final
    assert terminal.cursor_visible()


def test_follow_reads_only_complete_lines(tmp_path: Path) -> None:
    from ralph.lifecycle.follow import _new_events

    log = tmp_path / "events.jsonl"
    log.write_text('{"kind": "run_started", "stories": 2}\n{"kind": "iteration_st')
    events, offset = _new_events(log, 0)
    assert [e["kind"] for e in events] == ["run_started"]
    with log.open("a") as handle:
        handle.write('arted", "iteration": 1}\nnot json\n')
    events, offset = _new_events(log, offset)
    assert [(e["kind"], e["iteration"]) for e in events] == [("iteration_started", 1)]
    assert _new_events(log, offset) == ([], offset)
