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
        self.run_dir: Path | None = None
        self.tracked: set[Path] = set()
        """The protected files git tracked as the run started (restoring them is committed)."""

    def loop_inputs(self) -> list[Path]:
        """The files the loop reads and checks that a person may change, ignored by git or not."""
        protected = self.files.paths if self.files is not None else []
        return [self.taskfile.path, *protected, self.project_dir / "pyproject.toml"]

    def take(self, run_dir: Path, tasks: TaskList) -> None:
        """Read the run's trusted inputs once (in process and in the run directory); warn about weak settings."""
        from ralph.hooks.wiring import weakening_settings
        from ralph.loop.trustedfiles import TrustedConfigTable, TrustedFiles, protected_files

        self.run_dir = run_dir
        self.taskfile.trust(tasks, run_dir)
        protected = protected_files(self.project_dir, self.ralph_dir)
        protected += [path for path in self._local_plugins() if path not in protected]
        self.files = TrustedFiles(self.project_dir, protected)
        self._trust_executed()
        self.files.save(run_dir)
        self.config_table = TrustedConfigTable(self.project_dir)
        self.tracked = {path for path in self.files.paths if tracked(self.project_dir, path)}
        config = self.config.model_dump(mode="json") if hasattr(self.config, "model_dump") else {}
        atomic_write_text(run_dir / "trusted" / "config.json", json.dumps(config, indent=2, default=str) + "\n")
        for warning in weakening_settings(self.project_dir):
            self.emit("hook_settings_warning", warning=warning)

    def _local_plugins(self) -> list[Path]:
        """The local plugin files the config names (ralph/plugin/local.py), protected like prd.md even when
        not loaded (``RALPH_DISABLE_PLUGINS``): the agent may not change what a later run would execute."""
        from ralph.plugin import local

        names = list(getattr(self.config, "plugins", None) or [])
        return local.paths(self.project_dir, names)

    def _trust_executed(self) -> None:
        """Make what ralph executed of each local plugin its trusted copy (it is what runs)."""
        from ralph.plugin import local

        assert self.files is not None
        for path, data in local.executed().items():
            if path in self.files.content and self.files.content[path] != data:
                self.files.content[path] = data  # changed since it was read: the next restore puts back what runs
                self.files.shape[path] = None

    def restore(self, record: IterationRecord) -> list[Violation]:
        """Put back prd.md, prompt.md and the project settings the iteration changed; log and commit them."""
        if self.files is None:
            return []
        restored = self.files.restore()
        violations: list[Violation] = []
        table = self.config_table
        if table is not None:
            aside = self.run_dir / f"iteration-{record.number:03d}.pyproject.toml" if self.run_dir else None
            config_restored, _ = table.check(aside)
            if config_restored is not None:
                restored.append(config_restored)
        if not restored:
            return violations
        names = []
        for item in restored:
            name = str(item.path.relative_to(self.project_dir)) if item.path.is_relative_to(self.project_dir) else str(item.path)
            shown = f"{name} {item.part}" if item.part else name
            names.append(shown)
            message = (
                f"{shown} is protected during the run and was {item.how} by the agent; the loop restored it from its "
                "trusted copy" + (f" ({item.note})" if item.note else "") + ". It is the person's to change between "
                "runs: propose the change in progress.txt."
            )
            violations.append(Violation("protected-file", message))
            self.emit("protected_file_restored", iteration=record.number, path=name, how=item.how, message=message,
                      part=item.part)
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
