"""The run's trusted inputs, taken once at the start and put back after every iteration.

At the start: the task list's non-story fields, ``prd.md``, ``prompt.md``, the agent CLIs'
project settings and ``[tool.ralph]`` (see :mod:`ralph.loop.trustedfiles`), kept in this
process and copied to ``<run dir>/trusted/``.  After an iteration :meth:`TrustedCopy.restore`
puts back what the agent changed, reports it as violations and events, notes it in the
progress log and commits the restored files git tracks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.contracts import Violation
from ralph.fsutil import atomic_write_text

if TYPE_CHECKING:
    from ralph.loop.progressnotes import ProgressNotes
    from ralph.loop.records import IterationRecord
    from ralph.loop.taskfile import TaskFile
    from ralph.loop.trustedfiles import TrustedConfigTable, TrustedFiles
    from ralph.settings import Settings
    from ralph.tasks import TaskList


class TrustedCopy:
    """Takes the trusted copy when the run starts; restores protected files after each iteration."""

    def __init__(self, settings: Settings, taskfile: TaskFile, notes: ProgressNotes, emit: Callable[..., None]) -> None:
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.taskfile = taskfile
        self.notes = notes
        self.emit = emit
        self.files: TrustedFiles | None = None
        self.config_table: TrustedConfigTable | None = None
        self.tracked: set[Path] = set()
        """The protected files git tracked as the run started (restoring them is committed)."""

    def take(self, run_dir: Path, tasks: TaskList) -> None:
        """Read the run's trusted inputs once (in process and in the run directory); warn about weak settings."""
        from ralph.hooks.wiring import weakening_settings
        from ralph.loop.trustedfiles import TrustedConfigTable, TrustedFiles, protected_files

        self.taskfile.trust(tasks, run_dir)
        self.files = TrustedFiles(self.project_dir, protected_files(self.project_dir, self.ralph_dir))
        self.files.save(run_dir)
        self.config_table = TrustedConfigTable(self.project_dir)
        self.tracked = {path for path in self.files.paths if tracked(self.project_dir, path)}
        config = self.config.model_dump(mode="json") if hasattr(self.config, "model_dump") else {}
        atomic_write_text(run_dir / "trusted" / "config.json", json.dumps(config, indent=2, default=str) + "\n")
        for warning in weakening_settings(self.project_dir):
            self.emit("hook_settings_warning", warning=warning)

    def restore(self, record: IterationRecord) -> list[Violation]:
        """Put back prd.md, prompt.md and the project settings the iteration changed; log and commit them."""
        if self.files is None:
            return []
        restored = self.files.restore()
        violations = []
        table = self.config_table
        if table is not None:
            config_restored, config_message = table.check()
            if config_restored is not None:
                restored.append(config_restored)
            if config_message is not None:
                violations.append(Violation("protected-file", config_message))
                self.emit("protected_file_restored", iteration=record.number, path="pyproject.toml", how="reported",
                          message=config_message)
                self.notes.note(record, config_message, subject="agent changed [tool.ralph]", paths=[])
        if not restored:
            return violations
        names = []
        for item in restored:
            name = str(item.path.relative_to(self.project_dir)) if item.path.is_relative_to(self.project_dir) else str(item.path)
            names.append(name)
            message = (
                f"{name} is protected during the run and was {item.how} by the agent; the loop restored it from its "
                "trusted copy. It is the person's to change between runs: propose the change in progress.txt."
            )
            violations.append(Violation("protected-file", message))
            self.emit("protected_file_restored", iteration=record.number, path=name, how=item.how, message=message)
        # commit the restored files git tracks now or tracked when the run started, so the tree stays clean
        committed = [item.path for item in restored if item.path in self.tracked or tracked(self.project_dir, item.path)]
        self.notes.note(
            record,
            f"the loop restored protected files the agent changed: {', '.join(names)}",
            subject="loop restored protected files",
            paths=committed,
        )
        return violations


def tracked(project_dir: Path, path: Path) -> bool:
    """Does git track ``path`` (in the index)?"""
    from ralph.gitutil import git

    return git(project_dir, "ls-files", "--error-unmatch", "--", str(path), check=False).returncode == 0
