"""Conventions of the files in a ralph directory that every part shares: story ids, the progress log,
the task-list file names, and telling a folder that holds a loop.

Stdlib only (hook calls and ``ralph --help`` import it).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["KNOWN_LOOP_DIRS", "STORY_ID_PATTERN", "TASK_LIST_FILES", "holds_loop", "progress_log", "story_id_problem"]

STORY_ID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,47}-[0-9]{1,9}")
"""A letter, then letters, digits, ``_`` or ``-``, then ``-`` and a number: ``US-001``,
``BUG-12``, ``api_v2-3``, ``US-003-2`` (a slice split off ``US-003``).  No spaces, quotes,
dots, colons, brackets or shell/regex metacharacters, so an id is safe in a commit message,
a ``grep -F``, a file name and a plan.md story line (``- [ ] US-001: Title``)."""


def story_id_problem(story_id: str) -> str | None:
    """Why ``story_id`` is not a valid story id, or None when it is."""
    if STORY_ID_PATTERN.fullmatch(story_id):
        return None
    return (
        f"{story_id!r} is not a valid story id: use a letter-led prefix and a number, "
        "like US-001 (letters, digits, '_' and '-' only; split slices as US-001-2)"
    )


def progress_log(ralph_dir: Path) -> Path:
    """``progress.txt`` (seed 000), or ``progress.md`` where a PRD folder uses seed 001's name."""
    text, markdown = ralph_dir / "progress.txt", ralph_dir / "progress.md"
    return markdown if markdown.is_file() and not text.is_file() else text


#: Task-list files of the formats ralph reads, in the order the loop prefers them.
TASK_LIST_FILES = ("tasks.json", "prd.json", "plan.md")


def holds_loop(directory: Path) -> bool:
    """True when ``directory`` already holds a Ralph loop (a task list, or a prompt with a progress log)."""
    if any((directory / name).is_file() for name in TASK_LIST_FILES):
        return True
    return (directory / "prompt.md").is_file() and any(
        (directory / name).is_file() for name in ("progress.txt", "progress.md")
    )


#: Where other Ralph tools keep their loop (snarktank/ralph: scripts/ralph/); `ralph init` and `ralph run` look there.
KNOWN_LOOP_DIRS = ("scripts/ralph", "ralph", ".ralph")
