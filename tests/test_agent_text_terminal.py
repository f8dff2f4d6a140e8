"""Agent text never drives the person's terminal, in the live view: the agent's words (replay agent)
carry an OSC 52 clipboard write and CSI sequences that erase lines, and a real terminal (a tmux pane
that accepts clipboard writes) shows the words with no buffer set and no line of the loop's erased.
Plain output through the real Claude Code CLI: tests/test_agent_text_claude.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from ralph.testing.project import RalphProject, ralph_command, story
from test_live_view import Terminal, show

pytestmark = pytest.mark.slow

OSC52 = "\x1b]52;c;RVZJTCBDTElQQk9BUkQ=\x07"
ERASE_ABOVE = "\x1b[1A\x1b[2K\x1b[1A\x1b[2K"


class ClipboardTerminal(Terminal):
    """A tmux pane whose applications may set tmux's paste buffers (``set-clipboard on``)."""

    def start(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        conf = Path(env["RALPH_STATE_DIR"]).parent / "tmux.conf"
        conf.write_text("set -g set-clipboard on\n")
        import shlex

        command = f"cd {shlex.quote(str(cwd))} && {shlex.join(argv)}; echo EXITED:$?; sleep 600"
        self.tmux("-f", str(conf), "new-session", "-d", "-s", "ralph", "-x", str(self.width), "-y", str(self.height),
                  command, env=env)

    def buffers(self) -> str:
        return self.tmux("list-buffers", "-F", "#{buffer_name}: #{buffer_sample}")


@pytest.fixture
def terminal() -> Iterator[ClipboardTerminal]:
    term = ClipboardTerminal(width=120, height=60)
    yield term
    term.close()


@pytest.mark.parametrize("view", ["live", "no-live"])
def test_escapes_in_the_agents_words_never_reach_the_terminal(
    ralph_project: RalphProject, tmp_path: Path, terminal: ClipboardTerminal, view: str
) -> None:
    ralph_project.write_stories([story("US-001")], verifyCommands=["true"])
    implement = [
        {"say": "LINE-A the agent starts"},
        {"say": f"{ERASE_ABOVE}LINE-B copying {OSC52}to your clipboard\u202e"},
        {"write": {"path": "US-001.txt", "content": "x"}},
        {"set": {"story": "US-001", "fields": {"reviewStatus": "needs_review"}}}, {"commit": "feat US-001"},
    ]
    review = [{"say": "Approved" + OSC52},
              {"set": {"story": "US-001", "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1,
                                                      "notes": "ok"}}},
              {"commit": "review US-001"}]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": implement, "2": review}}))
    env = ralph_project.process_env({"RALPH_REPLAY_SCRIPT": str(script)})
    flags = ["--no-live"] if view == "no-live" else []
    terminal.start([*ralph_command(), "run", "--runner", "direct", "--agent", "replay", *flags], ralph_project.path, env)
    final = terminal.wait_for(lambda s: "EXITED:" in s, timeout=120)
    show(f"ralph run ({view}) with escapes in the agent's words", final)

    assert "EXITED:0" in final
    assert terminal.buffers() == ""  # no clipboard write reached the terminal
    lines = final.splitlines()
    assert any("LINE-A the agent starts" in line for line in lines)  # not erased by the next line's escapes
    assert any("LINE-B copying to your clipboard" in line for line in lines)
    assert any("iteration 1/15 | implement | US-001" in line for line in lines)
