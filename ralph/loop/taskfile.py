"""The task file of one run: reading it, writing the loop's repairs, and the trusted parts.

:class:`TaskFile` owns everything the loop knows about the file on disk: the last text
that passed the loop's checks (repairs are rendered against it, so a store keeps the
file's formatting) and the non-story fields taken when the run started, which are the
only ones the gates and the checks use for the whole run (``verifyCommands`` included).

Inside :func:`shared_reads` (the Stop hook's checks, which only look) a read whose text is
exactly the text read last time there returns the same parse: the file is read from disk on
every call and compared whole, so an edit by the agent between two Stop calls is always seen.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ralph import safeio
from ralph.contracts import TaskStore
from ralph.errors import TaskListError
from ralph.fsutil import atomic_write_text
from ralph.loop.listcheck import top_level
from ralph.loop.parsecopy import ParseCache
from ralph.ralphfiles import story_id_problem
from ralph.tasks import Story, TaskList

_SHARED = ContextVar("ralph_taskfile_shared_reads", default=False)


@contextmanager
def shared_reads() -> Iterator[None]:
    """Within this block (this thread only), :meth:`TaskFile.read` may return the parse it returned
    in an earlier shared read of the very same text; the caller promises not to change it."""
    token = _SHARED.set(True)
    try:
        yield
    finally:
        _SHARED.reset(token)


class TaskFile:
    """One store's task file: read, render + persist, last good text, trusted non-story fields."""

    def __init__(self, store: TaskStore, path: Path, root: Path | None = None) -> None:
        self.store = store
        self.path = path
        self.root = path.parent if root is None else root
        """The project: no symlink below it is followed on the way to the file (:mod:`ralph.safeio`)."""
        self.last_good: str | None = None
        """The file's text as the loop last accepted or wrote it."""
        self.trusted: dict[str, Any] | None = None
        """The non-story fields (``verifyCommands`` ...) taken at run start (:meth:`trust`)."""
        self.started_stories: dict[str, Story] = {}
        """Each story as the run started (:meth:`trust`): where person-only fields are read from."""
        self._parses = ParseCache()
        """The last parse of a text read twice in a row (:mod:`ralph.loop.parsecopy`): equal text, a copy of it."""
        self._shared: tuple[str, TaskList] | None = None
        # (text, its parse) of the last shared read; only ever handed to shared readers, so
        # no caller that changes its list (gates, repairs) can hold it.

    def read(self) -> tuple[str | None, TaskList | None, str | None]:
        """(raw text, parsed list or None, parse error or None) of the file on disk now.

        Outside :func:`shared_reads` every call returns a fresh parse the caller may change: a new parse, or for
        text equal to a text parsed before (compared whole) a copy of that parse sharing nothing mutable with it.
        """
        from ralph.tasks import read_task_text

        try:
            raw = read_task_text(self.path, self.root)
        except FileNotFoundError:
            return None, None, f"{self.path} does not exist"
        except TaskListError as exc:  # a directory, unreadable, not UTF-8
            return None, None, str(exc)
        shared = _SHARED.get()
        cached = self._shared
        if shared and cached is not None and cached[0] == raw:  # the whole text, not size or mtime
            return raw, cached[1], None
        reuse = getattr(self.store, "parse_reads_only_its_text", False)  # a store that reads more than the text: parsed every time
        tasks = self._parses.get(raw) if reuse else None  # the same text as a parse kept: a fresh copy of it
        if tasks is None:
            try:
                # a Stop hook's read is not remembered: the read-back after it would keep a copy the next
                # iteration (the agent's edit) has no use for
                tasks = self.store.parse(raw, self.path)
                if reuse:
                    tasks = self._parses.put(raw, tasks, remember=not shared)
            except TaskListError as exc:
                return raw, None, str(exc)
        if shared:
            self._shared = (raw, tasks)
        return raw, tasks, None

    def accept(self, raw: str | None) -> None:
        """``raw`` passed the loop's checks: later repairs are rendered against it."""
        self.last_good = raw

    def write(self, tasks: TaskList, base: str | None) -> str:
        """Render ``tasks`` changing as little of ``base`` as the store can, write it, and accept it."""
        text = self.store.render(tasks, base)
        # replaces whatever the agent left at the name (a symlink, a hard link, a directory), never its target
        safeio.write_text(self.path, self.root, text, replace_dir=True)
        self.last_good = text
        return text

    def persist(self, tasks: TaskList) -> str:
        """Write a list the loop changed (gates, failures), rendered against the last good text."""
        return self.write(tasks, self.last_good)

    def sha256(self) -> str | None:
        """The file's SHA-256 as it is on disk now (None when it cannot be read)."""
        import hashlib

        try:
            return hashlib.sha256(safeio.read_bytes(self.path, self.root)).hexdigest()
        except OSError:
            return None

    # -- the trusted part ---------------------------------------------------------------

    def trust(self, tasks: TaskList, run_dir: Path | None = None) -> None:
        """Take ``tasks``' non-story fields as the run's trusted copy (and save it in ``run_dir``)."""
        self.trusted = top_level(tasks)
        self.started_stories = {story.id: _own_copy(story) for story in tasks.userStories}
        if run_dir is not None:
            target = run_dir / "trusted"
            target.mkdir(parents=True, exist_ok=True)
            atomic_write_text(target / "task-list-fields.json", json.dumps(self.trusted, indent=2) + "\n")

    def trusted_view(self, tasks: TaskList) -> TaskList:
        """``tasks`` with the trusted non-story fields (what gates read ``verifyCommands`` from)."""
        if self.trusted is None or top_level(tasks) == self.trusted:
            return tasks
        return TaskList.model_validate({**self.trusted, "userStories": [s.model_dump() for s in tasks.userStories]})

    def started_story(self, story_id: str) -> Story | None:
        """The story ``story_id`` as the run started (None: the run added it); a copy."""
        story = self.started_stories.get(story_id)
        return _own_copy(story) if story is not None else None

    @property
    def verify_commands(self) -> list[str]:
        """The trusted ``verifyCommands``."""
        return list((self.trusted or {}).get("verifyCommands") or [])


def unsafe_ids(tasks: TaskList) -> list[str]:
    """One line per story whose id does not match :data:`ralph.ralphfiles.STORY_ID_PATTERN`."""
    return [problem for story in tasks.userStories if (problem := story_id_problem(story.id))]


def _own_copy(story: Story) -> Story:
    """``story`` copied so that no model, list or dict is shared (the fast copier; pydantic's deep copy for
    what it cannot copy exactly: a NaN, a tuple in an extra key)."""
    from ralph.loop.parsecopy import Uncopyable, fresh_copy

    try:
        return fresh_copy(story)
    except Uncopyable:
        return story.model_copy(deep=True)
