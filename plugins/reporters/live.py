"""The live footer: a status block kept at the bottom of the terminal while output scrolls above.

Drawn with rich, which is imported only here, and this module only when a
terminal is attached (``ralph --help`` and the hooks never import it).  Every
line written to stdout or stderr while the footer is up goes above it.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ralph.api.text import counted

from .runstate import RunState, fmt_elapsed

__all__ = ["Footer", "LiveFooter", "terminal_attached"]

REFRESH_PER_SECOND = 4


def terminal_attached(stream: TextIO | None = None) -> bool:
    """True when ``stream`` (stdout) and stderr are a real, capable terminal."""
    stream = stream or sys.stdout
    try:
        if not (stream.isatty() and sys.stderr.isatty()):
            return False
    except (AttributeError, ValueError):
        return False
    console = Console(file=stream)
    return console.is_terminal and not console.is_dumb_terminal


class Footer:
    """Renders :class:`RunState` afresh at every refresh (so the elapsed time ticks)."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def __rich__(self) -> Group:
        s = self.state
        bar = ProgressBar(total=max(s.stories, 1), completed=s.done, width=20)
        top = Table.grid(padding=(0, 1))
        top.add_column(no_wrap=True)
        top.add_column(no_wrap=True)
        top.add_column(no_wrap=True)
        top.add_column(no_wrap=True, overflow="ellipsis")
        iteration = f"iteration {s.iteration}/{s.max_iterations}" if s.iteration else "starting"
        where = " ".join(part for part in (s.mode, s.story) if part)
        top.add_row(
            Text("ralph", style="bold"),
            bar,
            Text(f"{s.done}/{counted(s.stories, 'story')} │", style="bold green" if s.stories and s.done == s.stories else ""),
            Text(" │ ".join(part for part in (iteration, where, fmt_elapsed(s.elapsed()), f"${s.cost:.4f}") if part)),
        )
        details = []
        if s.gate:
            details.append(Text(f"last gate: {s.gate}", style="red" if "FAILED" in s.gate else ""))
        if s.note:
            details.append(Text(s.note, style="yellow"))
        if s.runner:
            details.append(Text(f"runner {s.runner} · agent {s.agent}", style="dim"))
        second = Text("   ").join(details) if details else Text("")
        second.no_wrap = True
        second.overflow = "ellipsis"
        return Group(Rule(style="dim"), top, second)


class LiveFooter:
    """Starts and stops the rich ``Live`` region; safe to stop twice."""

    def __init__(self, state: RunState, stream: TextIO | None = None) -> None:
        self.console = Console(file=stream or sys.stdout)
        self.live: Any = Live(
            Footer(state),
            console=self.console,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=True,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.active = False

    def start(self) -> None:
        if not self.active:
            self.live.start()
            self.active = True

    def refresh(self) -> None:
        if self.active:
            self.live.refresh()

    def stop(self) -> None:
        """Remove the footer and give the terminal back (cursor shown, streams restored)."""
        if self.active:
            self.active = False
            self.live.stop()
