"""The loop's ledger of each story's failed attempts: one state file per story in ralph's state
directory (``stories/``), kept across runs until the story is approved, moved aside by ``--fresh``.
The file's format and stuck detection are :mod:`ralph.loop.storystate`'s.

The files are read once, when the ledger is made at the run's start, before any agent runs: the
state directory is outside the project but not out of reach of code the agent runs as you, and a
story's state holds its start commit, the one test-integrity compares the tests with.  A file an
agent plants during the run for a story selected later (a start commit whose tests are the ones it
weakens next) is never read; this run's own state is kept in process and only written out.  Files
are read without following a link and only when regular (a fifo never blocks the loop).
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict
from pathlib import Path

from ralph.loop.storystate import StoryAttempts, state_path

MAX_STATE_BYTES = 4_000_000
"""A state file larger than this is not read (the loop writes far smaller ones)."""


class StoryLedger:
    """The state files of the stories in ``directory`` (each loaded the first time it is asked for)."""

    def __init__(self, directory: Path, max_attempts: int) -> None:
        self.directory = directory
        self.max_attempts = max_attempts
        self.states: dict[str, StoryAttempts] = {}
        """The stories asked for so far, by id."""
        self._saved: dict[str, str] = {}
        """What this ledger last wrote of each story (an unchanged state is not written again)."""
        self._found: dict[Path, str] = {path: text for path in self.pending() if (text := _read(path)) is not None}
        """The state files an earlier run left, as they were when the ledger was made (path -> text)."""

    def state(self, story_id: str) -> StoryAttempts:
        """The story's attempts so far (loaded from its state file the first time)."""
        if story_id not in self.states:
            text = self._found.get(state_path(self.directory, story_id).with_suffix(".json"))
            self.states[story_id] = StoryAttempts.parse(text, story_id, self.max_attempts)
        return self.states[story_id]

    def save(self, state: StoryAttempts) -> None:
        """Write the story's state file, unless it holds this already (as this ledger last wrote it)."""
        text = json.dumps(asdict(state))
        if self._saved.get(state.task_id) == text and state_path(self.directory, state.task_id).is_file():
            return
        state.save(self.directory)
        self._saved[state.task_id] = text

    def note_start(self, story_id: str, checkpoint: str | None) -> None:
        """Remember where the story's work started, unless its first implement iteration already did."""
        state = self.state(story_id)
        if state.start_commit is None:
            state.start_commit = checkpoint
            self.save(state)

    def pending(self) -> list[Path]:
        """State files left by an earlier (interrupted) run."""
        return sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []

    def archive(self) -> Path | None:
        """Move earlier state files aside (``--fresh``); returns where they went."""
        self._found.clear()
        if not self.pending():
            return None
        target = self.directory.parent / "stories-archive" / time.strftime("%Y%m%d-%H%M%S")
        target.mkdir(parents=True, exist_ok=True)
        for path in self.directory.iterdir():
            path.rename(target / path.name)
        return target

    def forget(self, story_id: str, run_dir: Path | None) -> None:
        """The story was approved: its state file goes to ``run_dir`` (seed: deleted on success)."""
        self.states.pop(story_id, None)
        self._saved.pop(story_id, None)
        for suffix in (".md", ".json"):
            path = state_path(self.directory, story_id).with_suffix(suffix)
            if path.exists() and run_dir is not None:
                path.rename(run_dir / f"story-{path.name}")


def _read(path: Path) -> str | None:
    """``path``'s text if it is a regular file (never through a link, a fifo never opened for long)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_STATE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(MAX_STATE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
