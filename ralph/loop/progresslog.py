"""The progress log: split it into its header and entries, keep it bounded, quote it in the prompt.

``progress.txt`` (seed 000 §9) is a header -- title, start date, PRD name and the
**Codebase Patterns** section -- followed by entries, each starting with a level-2
heading (``## <date> - Iteration N - <mode> - US-xxx: <title>``) or a loop note
(``[ralph loop <time>] iteration N: ...``).  Every iteration reads and appends to it,
so it grows without end; the loop therefore keeps the header and the last N entries
and moves older entries, verbatim and in order, to an archive file next to it
(``progress-archive.txt``), between iterations.  Nothing is lost: text that does not
parse as entries is never moved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PATTERNS_HEADING = re.compile(r"^##\s+Codebase Patterns\b", re.IGNORECASE)
_ENTRY_START = re.compile(r"^(##\s+\S|\[ralph loop )")

PATTERNS_MAX_CHARS = 2000
"""Most characters of the Codebase Patterns section quoted in a prompt (the file keeps all)."""
ENTRIES_MAX_CHARS = 1200
"""Most characters of progress entries quoted in a prompt; newest entries win."""


@dataclass
class ProgressLog:
    """A progress log split into its header (with the patterns section) and its entries."""

    header: str
    entries: list[str]

    @property
    def patterns(self) -> str:
        """The Codebase Patterns section of the header (heading included), or ``""``."""
        lines = self.header.splitlines(keepends=True)
        for index, line in enumerate(lines):
            if PATTERNS_HEADING.match(line):
                section = "".join(lines[index:])
                return section.rstrip().removesuffix("---").rstrip()
        return ""


def parse(text: str) -> ProgressLog:
    """Split ``text``; ``"".join([header, *entries]) == text`` always holds."""
    lines = text.splitlines(keepends=True)
    starts = [
        i for i, line in enumerate(lines) if _ENTRY_START.match(line) and not PATTERNS_HEADING.match(line)
    ]
    # The header ends where the first entry starts, but never before the patterns section ends:
    # a heading inside the header (a "## Notes" under the title) is not an entry.
    patterns_at = next((i for i, line in enumerate(lines) if PATTERNS_HEADING.match(line)), None)
    if patterns_at is not None:
        starts = [i for i in starts if i > patterns_at]
    if not starts:
        return ProgressLog(text, [])
    # An entry takes the blank lines before its heading with it, so trimming leaves no gap.
    bounds: list[int] = []
    for start in starts:
        while start > 0 and not lines[start - 1].strip() and (not bounds or start - 1 > bounds[-1]):
            start -= 1
        bounds.append(start)
    header = "".join(lines[: bounds[0]])
    entries = ["".join(lines[a:b]) for a, b in zip(bounds, [*bounds[1:], len(lines)])]
    return ProgressLog(header, entries)


def archive_path(progress: Path) -> Path:
    """``progress-archive.txt`` next to ``progress.txt`` (``.md`` for ``progress.md``)."""
    return progress.with_name(f"{progress.stem}-archive{progress.suffix}")


def trim(progress: Path, keep: int, root: Path | None = None) -> int:
    """Move all but the last ``keep`` entries to the archive file; returns how many moved.

    The archive is appended to (and flushed) before ``progress`` is rewritten atomically, so a
    crash in between can duplicate entries in the archive but never lose one.  ``keep <= 0``
    turns trimming off.  Both files are read and written through :mod:`ralph.safeio` below
    ``root`` (default: their folder): a symlink or hard link there raises ``UnsafePath``.
    """
    from ralph import safeio

    root = progress.parent if root is None else root
    if keep <= 0:
        return 0
    try:
        text = safeio.read_text(progress, root)
    except FileNotFoundError:
        return 0
    log = parse(text)
    if len(log.entries) <= keep:
        return 0
    moved, kept = log.entries[:-keep], log.entries[-keep:]
    archive = archive_path(progress)
    new_archive = safeio.kind(archive, root) == "absent"
    addition = "".join(moved) + ("" if moved[-1].endswith("\n") else "\n")
    if new_archive:
        addition = f"# Progress log archive: older entries of {progress.name}, oldest first\n" + addition
    safeio.append_text(archive, root, addition, sync=True)
    safeio.write_text(progress, root, log.header + "".join(kept))
    return len(moved)


def excerpt(progress: Path, story_id: str | None, entries: int, root: Path | None = None) -> str:
    """What the prompt quotes: the Codebase Patterns section and the latest ``entries`` entries.

    Entries about ``story_id`` come first in the choice (a review-fix needs the review's
    history), then the most recent ones; they are quoted oldest first, bounded by
    :data:`ENTRIES_MAX_CHARS` (and the patterns by :data:`PATTERNS_MAX_CHARS`).  The file is read
    through :mod:`ralph.safeio` below ``root`` (default: its folder); one it refuses quotes nothing.
    """
    from ralph import safeio

    try:  # never a symlink's target (a host file) into the prompt
        log = parse(safeio.read_text(progress, progress.parent if root is None else root))
    except (OSError, UnicodeDecodeError):
        return ""
    parts = []
    patterns = log.patterns
    if patterns:
        if len(patterns) > PATTERNS_MAX_CHARS:
            patterns = patterns[:PATTERNS_MAX_CHARS].rstrip() + f"\n... (more in {progress.name})"
        parts.append(patterns)
    if entries > 0 and log.entries:
        indexed = list(enumerate(log.entries))
        mentioning = [(i, e) for i, e in indexed if story_id and story_id in e][-entries:]
        chosen = {i for i, _ in mentioning}
        for i, _ in reversed(indexed):
            if len(chosen) >= entries:
                break
            chosen.add(i)
        picked: list[str] = []
        budget = ENTRIES_MAX_CHARS
        for i in sorted(chosen, reverse=True):  # newest first until the budget is spent
            entry = log.entries[i].strip("\n")
            if len(entry) > budget:
                if not picked:
                    picked.append(entry[:budget].rstrip() + " ...")
                break
            picked.append(entry)
            budget -= len(entry)
        parts.append("\n\n".join(reversed(picked)))
    return "\n\n".join(p for p in parts if p)
