"""The loop's own entries in the progress log, each committed with exactly the files it concerns.

The loop writes there what a person (and the next iteration's agent) should know of its
own doings: a repaired task list, a story sent back or flagged, restored protected files,
an iteration that timed out or failed; and before an iteration it keeps the log bounded.
Every append goes through :mod:`ralph.safeio` (by descriptor, to a regular single-link file
reached without symlinks), so a log the agent replaced with a link to a host file is refused,
never appended to (:mod:`ralph.loop.loopfiles` puts the regular file back after each iteration).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ralph import safeio
from ralph.agenttext import one_line
from ralph.gitutil import commit_paths
from ralph.loop.prompt import relative_dir
from ralph.ralphfiles import progress_log

if TYPE_CHECKING:
    from ralph.loop.records import IterationRecord
    from ralph.settings import Settings


def symbolic_paths(text: str, project_dir: Path, state_dir: Path) -> str:
    """``text`` without this machine's absolute paths, for a file that gets committed: a run directory
    becomes ``<run dir ID>``, the rest of ralph's state directory ``<state dir>``, the project's own paths
    relative to it, the home directory ``~``."""
    for root in dict.fromkeys((str(state_dir), os.path.realpath(state_dir))):
        text = re.sub(re.escape(root) + r"/projects/[^/\s]+/runs/([^/\s]+)", r"<run dir \1>", text)
        text = text.replace(root, "<state dir>")
    for project in dict.fromkeys((str(project_dir), os.path.realpath(project_dir))):
        text = text.replace(project + os.sep, "").replace(project, ".")
    home = os.path.expanduser("~")
    if home not in ("", "/", "~"):
        text = text.replace(home + os.sep, "~" + os.sep)
    return text


class ProgressNotes:
    """Appends the loop's notes to the progress log and commits them."""

    def __init__(self, settings: Settings, tasks_path: Path, emit: Callable[..., None]) -> None:
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.keep_entries = settings.config.progress_keep_entries
        self.tasks_path = tasks_path
        self.emit = emit
        self.root = safeio.root_for(self.ralph_dir / "progress.txt", self.project_dir)
        """Below it no symlink is followed on the way to the log (the project, unless the ralph dir is elsewhere)."""
        from ralph.loop.rundir import state_root

        self.state_dir = state_root(settings.config.state_dir)
        """ralph's state directory: its paths are written as ``<run dir ID>`` / ``<state dir>`` (committed notes)."""

    def symbolic(self, text: str) -> str:
        """``text`` with this machine's paths made symbolic (:func:`symbolic_paths`)."""
        return symbolic_paths(text, self.project_dir, self.state_dir)

    def progress(self) -> Path:
        """The progress log's path (``progress.txt``, or ``progress.md`` in seed 001's folders)."""
        return progress_log(self.ralph_dir)

    def append(self, text: str) -> Path:
        """Append ``text`` to the progress log by descriptor; ``UnsafePath`` when it is not a regular file."""
        progress = self.progress()
        safeio.append_text(progress, self.root, text)
        return progress

    def note(
        self, record: IterationRecord, message: str, subject: str = "loop repaired the task list", paths: list[Path] | None = None
    ) -> None:
        """Record the loop's own change in the progress log and commit the task file, the log and ``paths``.

        A note is one line (agent text it quotes cannot start a line, e.g. a forged ``[ralph loop]`` entry).
        """
        self.loop_note(f"iteration {record.number}", message, subject, paths, iteration=record.number)

    def loop_note(
        self, where: str, message: str, subject: str, paths: list[Path] | None = None, iteration: int | None = None
    ) -> None:
        """:meth:`note` for a change the loop makes ``where`` it says (``before iteration 4``), not in an iteration."""
        stamp = time.strftime("%Y-%m-%d %H:%M")
        progress = self.append(f"\n[ralph loop {stamp}] {where}: {self.symbolic(one_line(message))}\n")
        error = commit_paths(
            self.project_dir, [self.tasks_path, progress, *(paths or [])], f"ralph: {where} - {self.symbolic(one_line(subject))}",
        )
        if error:
            self.emit("loop_commit_failed", iteration=iteration, error=error)

    def unfinished(self, record: IterationRecord, run_dir: Path, timeout: float, cancelled: bool) -> None:
        """A timed-out iteration goes to the progress log (and its commit), not only the event log.

        An iteration whose agent failed (a non-zero exit: not logged in, a crash) adds nothing to the
        project and makes no commit: the console, the run's events, ``sessions.log`` and the next
        prompt say it, and the person's history is not filled with a commit per failure."""
        if not record.timed_out:
            return
        what = f"timed out after {timeout:g}s; the loop stopped the agent"
        raw = run_dir / f"iteration-{record.number:03d}.agent.jsonl"
        stamp = time.strftime("%Y-%m-%d %H:%M")
        try:
            progress = self.append(
                f"\n[ralph loop {stamp}] iteration {record.number} ({record.mode} {record.story_id}): {what}; "
                f"work it left uncommitted is still in the tree; the agent's output: {self.symbolic(str(raw))}\n"
            )
        except OSError as exc:
            self.emit("loop_commit_failed", iteration=record.number, error=f"progress log: {exc}")
            return
        error = commit_paths(self.project_dir, [progress], f"ralph: iteration {record.number} - {what.split(';')[0]}")
        if error:
            self.emit("loop_commit_failed", iteration=record.number, error=error)

    def trim_before(self, iteration: int) -> bool:
        """Before ``iteration``: keep the progress log bounded (older entries move to its archive, committed).
        True when it trimmed (and committed)."""
        from ralph.gitutil import dirty_paths
        from ralph.loop import progresslog

        keep = self.keep_entries
        progress = self.progress()
        if keep <= 0:
            return False
        try:
            text = safeio.read_text(progress, self.root)
        except (OSError, UnicodeDecodeError):
            return False  # missing, or not a regular file: nothing to trim (loopfiles deals with a link)
        if len(progresslog.parse(text).entries) <= keep:
            return False
        rel = relative_dir(progress, self.project_dir)
        if any(line[3:].strip().strip('"') == rel for line in dirty_paths(self.project_dir)):
            return False  # uncommitted edits of the log are the agent's work: leave them for the git-clean check
        moved = progresslog.trim(progress, keep, self.root)
        archive = progresslog.archive_path(progress)
        error = commit_paths(
            self.project_dir, [progress, archive], f"ralph: before iteration {iteration} - archive {moved} progress entries"
        )
        if error:
            self.emit("loop_commit_failed", iteration=iteration, error=error)
        self.emit("progress_trimmed", iteration=iteration, moved=moved, kept=keep, archive=str(archive))
        return True
