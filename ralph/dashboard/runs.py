"""The runs under ralph's state directory, as the dashboard finds and reads them.

Layout (written by the loop, :mod:`ralph.loop.rundir`): ``<root>/projects/<project key>/runs/<run>/``
with ``events.jsonl``, ``summary.json`` (once the run ended) and ``state.json``; a Ray fleet's loops
are mirrored under ``<root>/projects/<project key>/fleet/<fleet>/<unit>/`` with the same files
(:mod:`ralph.api.fleet`).  A run is named by its path under the project key (``runs/<run>``), and the
dashboard serves only runs it found by scanning: a name in a request is looked up, never joined
onto a path.  Nothing here follows a symbolic link, and files are read with a size cap.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.dashboard.fold import GATE_LOG, Question, RunFold, clean

__all__ = ["EventTail", "RunIndex", "RunRef", "read_book", "read_json", "read_capped", "scan"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
MAX_JSON_BYTES = 8 * 1024 * 1024
CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RunRef:
    """One run directory found under the state root."""

    project: str
    """The project key (the directory under ``projects/``)."""
    name: str
    """``runs/<run>`` or ``fleet/<fleet>/<unit>``: the run's path under the project key."""
    path: Path

    @property
    def id(self) -> str:
        """``<project key>/<name>``: how URLs name the run."""
        return f"{self.project}/{self.name}"

    @property
    def fleet(self) -> str | None:
        """The fleet's directory name when the run is a Ray fleet's loop."""
        parts = self.name.split("/")
        return parts[1] if parts[0] == "fleet" else None


def _dirs(path: Path) -> Iterator[os.DirEntry[str]]:
    """The sub-directories of ``path`` with a plain name (never through a symbolic link)."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if _NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                    yield entry
    except OSError:
        return


def scan(root: Path) -> list[RunRef]:
    """Every run directory under ``root`` (the state root), newest first by name (a start time)."""
    found: list[RunRef] = []
    projects = root / "projects"
    if os.path.islink(projects):
        return []
    for project in _dirs(projects):
        base = Path(project.path)
        for run in _dirs(base / "runs"):
            found.append(RunRef(project.name, f"runs/{run.name}", Path(run.path)))
        for fleet in _dirs(base / "fleet"):
            for unit in _dirs(Path(fleet.path)):
                found.append(RunRef(project.name, f"fleet/{fleet.name}/{unit.name}", Path(unit.path)))
    found.sort(key=lambda ref: (ref.name.rsplit("/", 2)[-2 if ref.fleet else -1], ref.id), reverse=True)
    return found


def _open_regular(path: Path) -> int:
    """An fd on ``path`` itself: a symbolic link, a special file or a hard-linked file is refused (OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def read_capped(path: Path, limit: int, offset: int = 0) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` from ``offset`` (OSError when it is not one)."""
    fd = _open_regular(path)
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        parts, wanted = [], limit
        while wanted > 0:
            chunk = os.read(fd, min(wanted, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            wanted -= len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (a regular file under the size cap), or None."""
    try:
        data = json.loads(read_capped(path, MAX_JSON_BYTES))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class EventTail:
    """Reads ``events.jsonl`` from an offset: complete lines only, a JSON object with a ``kind`` each."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read(self, limit: int = CHUNK_BYTES) -> list[tuple[int, dict[str, Any]]]:
        """The events appended since the last read (at most ``limit`` bytes of them), each with its end offset."""
        try:
            chunk = read_capped(self.path, limit, self.offset)
        except OSError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(chunk) >= limit:  # one line longer than the limit: skip it
                self.offset += len(chunk)
            return []
        events = []
        position = self.offset
        for line in chunk[: end + 1].split(b"\n")[:-1]:
            position += len(line) + 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("kind"), str):
                events.append((position, record))
        self.offset += end + 1
        return events

    def read_all(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every event from the offset to the end, chunk by chunk."""
        while True:
            batch = self.read()
            if not batch:
                return
            yield from batch


def is_latest(ref: RunRef) -> bool:
    """Whether ``ref`` is the newest run of its project (or of its fleet): only that one can be running."""
    if ref.fleet:
        fleets = sorted(entry.name for entry in _dirs(ref.path.parent.parent))
        return bool(fleets) and fleets[-1] == ref.fleet
    names = sorted(entry.name for entry in _dirs(ref.path.parent))
    return bool(names) and names[-1] == ref.path.name


def read_book(root: Path, project: str) -> list[Question] | None:
    """The open questions in project key ``project``'s question book (``questions.json``), as the page shows
    them; None when there is no book or it cannot be read (a link, not a file ...): the run's events stand in."""
    from ralph import safeio
    from ralph.questions import BOOK_NAME, QuestionBook

    try:
        text = safeio.read_text(root / "projects" / project / BOOK_NAME, root)
    except (OSError, UnicodeDecodeError):
        return None
    found = []
    for entry in QuestionBook.parse(text).open():
        context = entry.context if isinstance(entry.context, dict) else {}
        tools = context.get("tools")
        found.append(Question(
            clean(entry.story, 200), clean(entry.question, 8000), entry.iteration, clean(entry.asked_at, 40),
            clean("\n".join(str(t) for t in tools), 8000) if isinstance(tools, list) else "", None, clean(entry.id, 200),
            clean(context.get("title") or "", 400), clean(entry.run, 200),
        ))
    return found


def gate_log(ref: RunRef, name: str) -> Path | None:
    """The kept output file ``name`` of a gate in ``ref``'s directory, when ``name`` is one."""
    return ref.path / name if GATE_LOG.fullmatch(name) else None


# -- whether a run is still going --------------------------------------------------------------


class Liveness:
    """Whether a project's loop holds its lock (``ralph run`` does while it runs), or a fleet's head its own."""

    def __init__(self) -> None:
        self._git_dirs: dict[str, Path | None] = {}
        self._lock = threading.Lock()

    def project_running(self, project_dir: str) -> bool:
        """True while a ``ralph run`` holds the lock of the repository at ``project_dir``."""
        from ralph.loop.lock import ProjectLock

        with self._lock:
            known = project_dir in self._git_dirs
            git_dir = self._git_dirs.get(project_dir)
        if not known:
            git_dir = _git_dir(project_dir)
            with self._lock:
                self._git_dirs[project_dir] = git_dir
        return git_dir is not None and ProjectLock(git_dir).is_held()

    @staticmethod
    def fleet_running(fleet_dir: Path) -> bool:
        """True while the ``ralph run --parallel`` that mirrors a fleet into ``fleet_dir`` runs."""
        from ralph.loop.lock import ProjectLock

        return ProjectLock(fleet_dir).is_held()


def _git_dir(project_dir: str) -> Path | None:
    from ralph.errors import RalphError
    from ralph.gitutil import git_dir

    try:
        return git_dir(Path(project_dir))
    except (RalphError, OSError):
        return None


# -- the index: every run, kept up to date ---------------------------------------------------


@dataclass
class RunEntry:
    """A run as the index knows it: its fold (kept up to date from the log) and what the index shows."""

    ref: RunRef
    fold: RunFold = field(default_factory=RunFold)
    tail: EventTail | None = None
    summary_seen: bool = False
    state: str = ""
    tone: str = ""

    @property
    def project_dir(self) -> str:
        """The project's directory as the run recorded it (empty when unknown)."""
        return str(self.fold.meta.get("project") or "")

    @property
    def project_name(self) -> str:
        """The project's directory name (else its key), plus the fleet unit for a fleet's loop."""
        base = Path(self.project_dir).name if self.project_dir else self.ref.project.rsplit("-", 1)[0]
        if self.ref.fleet:
            unit = self.ref.name.rsplit("/", 1)[-1]
            return f"{base} [fleet {unit}]"
        return base

    def row(self) -> tuple[Any, ...]:
        """What the index row shows (to tell whether it changed)."""
        fold = self.fold
        current = fold.current or {}
        return (self.state, fold.iterations, current.get("mode"), current.get("story"), fold.done(), round(fold.cost, 6),
                fold.tokens, len(fold.pending), fold.events)


class RunIndex:
    """Every run under the state root, each folded once and then only from what its log gained.

    A run that has a summary is folded from it (and its log's first line), so a long history costs
    one small read per run; a run without one (running, or killed) is folded from its log.
    """

    def __init__(self, root: Path, liveness: Liveness | None = None) -> None:
        self.root = root
        self.liveness = liveness or Liveness()
        self._entries: dict[str, RunEntry] = {}
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()

    def refresh(self) -> list[RunEntry]:
        """Scan again and bring every run up to date; the entries, newest first."""
        with self._refreshing:  # one refresh at a time: an entry's log is folded once
            return self._refresh()

    def _refresh(self) -> list[RunEntry]:
        refs = scan(self.root)
        newest: dict[tuple[str, bool], str] = {}
        for ref in refs:
            line, name = (ref.project, ref.fleet is not None), ref.fleet or ref.path.name
            newest[line] = max(newest.get(line, name), name)
        entries = []
        with self._lock:
            for ref in refs:
                entry = self._entries.get(ref.id)
                if entry is None:
                    entry = self._entries[ref.id] = RunEntry(ref)
                entries.append(entry)
            gone = set(self._entries) - {ref.id for ref in refs}
            for key in gone:
                del self._entries[key]
        books: dict[str, list[Question] | None] = {}
        for entry in entries:
            ref = entry.ref
            latest = newest[(ref.project, ref.fleet is not None)] == (ref.fleet or ref.path.name)
            if latest and not ref.fleet:  # a project's questions show on its latest run
                if ref.project not in books:
                    books[ref.project] = read_book(self.root, ref.project)
                entry.fold.set_book(books[ref.project])
            else:
                entry.fold.set_book([])
            update(entry, self.liveness, latest)
        return entries

    def get(self, run_id: str) -> RunEntry | None:
        """The entry of a run found by the last :meth:`refresh` (None for any other name)."""
        with self._lock:
            return self._entries.get(run_id)


def update(entry: RunEntry, liveness: Liveness, latest: bool) -> None:
    """Bring ``entry`` up to date: its summary once the run ended, else the events its log gained; its state."""
    ref, fold = entry.ref, entry.fold
    if not entry.summary_seen:
        summary = read_json(ref.path / "summary.json")
        if summary is not None and entry.tail is None:
            first = EventTail(ref.path / "events.jsonl").read(64 * 1024)[:1]
            for offset, event in first:
                fold.feed(event, offset)
            fold.finish(summary)
            entry.summary_seen = True
        else:
            if entry.tail is None:
                entry.tail = EventTail(ref.path / "events.jsonl")
            for offset, event in entry.tail.read_all():
                fold.feed(event, offset)
            if summary is not None:
                fold.finish(summary)
                entry.summary_seen = True
    entry.state, entry.tone = run_state(entry, liveness, latest)


def run_state(entry: RunEntry, liveness: Liveness, latest: bool) -> tuple[str, str]:
    """The run's state in words, and its tone (running, ok, fail, warn)."""
    fold = entry.fold
    waiting = len(fold.pending)
    asks = f"; {waiting} question{'s' if waiting != 1 else ''} waiting for a person" if waiting else ""
    if fold.ended is not None:
        code = fold.ended.get("exit_code")
        reason = str(fold.ended.get("reason") or "finished")
        if code == 0:
            return "complete" + asks, "warn" if waiting else "ok"
        return f"ended (exit {code}): {reason}" + asks, "warn" if waiting else "fail"
    if latest:
        if entry.ref.fleet:
            alive = liveness.fleet_running(entry.ref.path.parent)
        else:
            alive = bool(entry.project_dir) and liveness.project_running(entry.project_dir)
        if alive:
            return ("running" + (f" ({fold.note})" if fold.note else "") + asks), "running"
    return "stopped (no summary: the run was killed or its machine went away)" + asks, "fail"
