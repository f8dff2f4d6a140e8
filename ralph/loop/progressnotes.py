"""The loop's own entries in the progress log, each committed with exactly the files it concerns.

The loop writes there what a person (and the next iteration's agent) should know of its
own doings: a repaired task list, a story sent back or flagged, restored protected files,
an iteration that timed out or failed; and before an iteration it keeps the log bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.gitutil import commit_paths
from ralph.loop.prompt import relative_dir
from ralph.ralphfiles import progress_log

if TYPE_CHECKING:
    from ralph.loop.records import IterationRecord
    from ralph.settings import Settings


class ProgressNotes:
    """Appends the loop's notes to the progress log and commits them."""

    def __init__(self, settings: Settings, tasks_path: Path, emit: Callable[..., None]) -> None:
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.keep_entries = settings.config.progress_keep_entries
        self.tasks_path = tasks_path
        self.emit = emit

    def note(
        self, record: IterationRecord, message: str, subject: str = "loop repaired the task list", paths: list[Path] | None = None
    ) -> None:
        """Record the loop's own change in the progress log and commit the task file, the log and ``paths``."""
        progress = progress_log(self.ralph_dir)
        stamp = time.strftime("%Y-%m-%d %H:%M")
        with progress.open("a", encoding="utf-8") as handle:
            handle.write(f"\n[ralph loop {stamp}] iteration {record.number}: {message}\n")
        error = commit_paths(
            self.project_dir, [self.tasks_path, progress, *(paths or [])], f"ralph: iteration {record.number} - {subject}"
        )
        if error:
            self.emit("loop_commit_failed", iteration=record.number, error=error)

    def unfinished(self, record: IterationRecord, run_dir: Path, timeout: float, cancelled: bool) -> None:
        """A timed-out or failed iteration goes to the progress log (and its commit), not only the event log."""
        if record.timed_out:
            what = f"timed out after {timeout:g}s; the loop stopped the agent"
        elif record.exit_code not in (0, None) and not cancelled:
            what = f"the agent failed (exit code {record.exit_code})"
        else:
            return
        raw = run_dir / f"iteration-{record.number:03d}.agent.jsonl"
        progress = progress_log(self.ralph_dir)
        stamp = time.strftime("%Y-%m-%d %H:%M")
        try:
            with progress.open("a", encoding="utf-8") as handle:
                handle.write(
                    f"\n[ralph loop {stamp}] iteration {record.number} ({record.mode} {record.story_id}): {what}; "
                    f"work it left uncommitted is still in the tree; the agent's output: {raw}\n"
                )
        except OSError as exc:
            self.emit("loop_commit_failed", iteration=record.number, error=f"progress log: {exc}")
            return
        error = commit_paths(self.project_dir, [progress], f"ralph: iteration {record.number} - {what.split(';')[0]}")
        if error:
            self.emit("loop_commit_failed", iteration=record.number, error=error)

    def trim_before(self, iteration: int) -> None:
        """Before ``iteration``: keep the progress log bounded (older entries move to its archive, committed)."""
        from ralph.gitutil import dirty_paths
        from ralph.loop import progresslog

        keep = self.keep_entries
        progress = progress_log(self.ralph_dir)
        if keep <= 0 or not progress.is_file():
            return
        if len(progresslog.parse(progress.read_text(encoding="utf-8")).entries) <= keep:
            return
        rel = relative_dir(progress, self.project_dir)
        if any(line[3:].strip().strip('"') == rel for line in dirty_paths(self.project_dir)):
            return  # uncommitted edits of the log are the agent's work: leave them for the git-clean check
        moved = progresslog.trim(progress, keep)
        archive = progresslog.archive_path(progress)
        error = commit_paths(
            self.project_dir, [progress, archive], f"ralph: before iteration {iteration} - archive {moved} progress entries"
        )
        if error:
            self.emit("loop_commit_failed", iteration=iteration, error=error)
        self.emit("progress_trimmed", iteration=iteration, moved=moved, kept=keep, archive=str(archive))
