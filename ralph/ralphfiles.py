"""Conventions of the files in a ralph directory that every part shares: story ids, the progress log,
the task-list file names, and telling a folder that holds a loop.

Stdlib only (hook calls and ``ralph --help`` import it).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "FRANKBRIA", "KNOWN_LOOP_DIRS", "ORCHESTRATOR", "STORY_ID_PATTERN", "TASK_LIST_FILES", "find_project", "holds_loop",
    "loop_folders", "other_tool_loop", "progress_log", "repository_top", "story_id_problem",
]

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


def loop_folders(directory: Path) -> list[str]:
    """The loop folders ``directory`` holds (as relative paths): the known ones
    (:data:`KNOWN_LOOP_DIRS`) and ``.ralph/PRD-N/`` folders that hold a loop."""
    found = [name for name in KNOWN_LOOP_DIRS if holds_loop(directory / name)]
    prds = directory / ".ralph"
    if ".ralph" not in found and prds.is_dir():
        try:
            found += sorted(f".ralph/{p.name}" for p in prds.glob("PRD-*") if holds_loop(p))
        except OSError:
            pass
    return found


def repository_top(start: Path) -> Path | None:
    """The top level of the git repository ``start`` is in (the nearest directory upwards with a
    ``.git`` directory or file), or None outside any repository."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def find_project(start: Path) -> Path:
    """The project around ``start``, found as git finds its repository: the nearest directory from
    ``start`` up to the repository's top level that holds a loop folder (:func:`loop_folders`), else
    the top level itself; ``start`` outside a repository.  Nothing above the top level counts."""
    start = Path(start).absolute()
    top = repository_top(start)
    if top is None:
        return start
    for directory in (start, *start.parents):
        if loop_folders(directory) or directory == top:
            return directory
    return top


FRANKBRIA = "ralph-claude-code"
ORCHESTRATOR = "ralph-orchestrator"


def other_tool_loop(project_dir: Path) -> str | None:
    """The other Ralph tool whose loop ``project_dir`` holds, which ``ralph init`` takes over
    (``ralph/lifecycle/adopt.py``): ``ralph-claude-code`` (``.ralph/fix_plan.md``, ``.ralph/PROMPT.md``)
    or ``ralph-orchestrator`` (``ralph.yml`` at the root); None."""
    names = _file_names(project_dir / ".ralph")
    if "fix_plan.md" in names or ("PROMPT.md" in names and "prompt.md" not in names):
        return FRANKBRIA
    if "ralph.yml" in _file_names(project_dir):
        return ORCHESTRATOR
    return None


def _file_names(directory: Path) -> set[str]:
    """The exact file names in ``directory`` (a case-insensitive file system answers ``is_file`` for any case)."""
    try:
        return {entry.name for entry in directory.iterdir() if entry.is_file()}
    except OSError:
        return set()
