"""The loop's own files in the project stay regular files: the task file, the progress log and its
archive, the ``.ralph-active`` marker.

The loop reads and writes these after every iteration, so an agent that replaces one with a symlink
(or a hard link, a fifo, a directory, or links a folder on the way) would have the loop read a host file
into the run directory and the next prompt, or append to one.  Every read and write goes through
:mod:`ralph.safeio`, which refuses such a path; :meth:`LoopFiles.secure` runs right after the agent's
session, before anything is read back, and puts the regular files back: it removes what is in the
way (the link itself, never its target) and writes the loop's own copy: the task file's last good
text (kept in this process), the progress log and its archive as committed before the iteration,
the marker as the loop wrote it.  Each is a violation told to the next iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ralph import safeio
from ralph.contracts import Violation
from ralph.errors import UsageError

if TYPE_CHECKING:
    from ralph.loop.activestate import ActiveState
    from ralph.loop.progressnotes import ProgressNotes
    from ralph.loop.records import IterationRecord
    from ralph.loop.taskfile import TaskFile

CHECK = "unsafe-file"
"""The violation's check name."""


@dataclass(frozen=True)
class LoopFile:
    """One file the loop reads or writes in the project, and where its regular copy comes from."""

    path: Path
    root: Path
    source: Callable[[], bytes | None]
    """The bytes to put back (None: leave it absent)."""
    label: str
    """What is put back, in words."""


class LoopFiles:
    """Checks the loop's files after each agent session and puts regular ones back."""

    def __init__(
        self, project_dir: Path, taskfile: TaskFile, notes: ProgressNotes, state: ActiveState, emit: Callable[..., None]
    ) -> None:
        self.project_dir = project_dir
        self.taskfile = taskfile
        self.notes = notes
        self.state = state
        self.emit = emit

    def files(self, checkpoint: str | None = None) -> list[LoopFile]:
        """The task file, the progress log, its archive and the marker, each with its regular copy."""
        from ralph.gitutil import committed_file
        from ralph.loop.progresslog import archive_path

        def last_good() -> bytes | None:
            text = self.taskfile.last_good
            return None if text is None else text.encode("utf-8")

        def committed(path: Path) -> Callable[[], bytes | None]:
            return lambda: committed_file(self.project_dir, checkpoint, path)

        progress = self.notes.progress()
        archive = archive_path(progress)
        marker = self.state.marker
        return [
            LoopFile(self.taskfile.path, self.taskfile.root, last_good, "the task list as the loop last accepted it"),
            LoopFile(progress, self.notes.root, committed(progress), "the progress log as committed before the iteration"),
            LoopFile(archive, self.notes.root, committed(archive), "the archive as committed before the iteration"),
            LoopFile(marker, safeio.root_for(marker, self.project_dir), lambda: self.state.written,
                     "the marker as the loop wrote it"),
        ]

    def refuse_unsafe(self) -> None:
        """Before a run: a task file or progress log reached through a link is refused with a clear line."""
        for item in self.files()[:3]:
            found = safeio.check(item.path, item.root)
            if found is not None:
                raise UsageError(
                    f"{found.rel} is {found.what}: the loop never reads or writes through a symlink, a special "
                    f"file or a file with other hard links; replace it with a regular file (e.g. remove it and "
                    f"`git checkout -- {found.rel}`) and run again"
                )

    def secure(self, record: IterationRecord, checkpoint: str | None) -> list[Violation]:
        """After the agent's session: put back every loop file that is not a regular file reached without links."""
        files = self.files(checkpoint)
        found = [(item, problem) for item in files if (problem := safeio.check(item.path, item.root)) is not None]
        if not found:
            return []
        offenders: dict[Path, tuple[Path, str, str]] = {}
        for item, problem in found:
            offenders.setdefault(item.root / problem.rel, (item.root, problem.what, problem.rel))
        for path in sorted(offenders, key=lambda p: len(p.parts)):
            safeio.remove(path, offenders[path][0])  # the link, fifo, directory or extra hard link itself
        put_back: dict[Path, list[str]] = {path: [] for path in offenders}
        for item, problem in found:
            data = item.source()
            if data is not None:
                safeio.write_bytes(item.path, item.root, data, parents=True, replace_dir=True)
                put_back[item.root / problem.rel].append(item.label)
        violations = []
        for path, (_, what, rel) in offenders.items():
            restored = "; put back " + ", ".join(put_back[path]) if put_back[path] else ""
            message = (
                f"{rel} was {what} after the iteration: the loop never reads or writes through a symlink, a special "
                f"file or a file with other hard links, so it removed it (not what it pointed to){restored}. "
                "Keep the loop's files regular files."
            )
            violations.append(Violation(CHECK, message))
            self.emit("loop_file_replaced", iteration=record.number, path=rel, what=what, restored=put_back[path],
                      message=message)
        return violations
