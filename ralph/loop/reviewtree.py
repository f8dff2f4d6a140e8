"""A review changes no code (Trust boundary rule 4): after an iteration of a mode the gates do not
follow (a review), the loop compares the work tree with the one the iteration started from.

What counts is decided before the iteration, never by what it wrote.  :class:`TreeView` walks the
tree itself (directory descriptors, no link followed) and takes git's ignore rules **as they were
when the review started**: every ``.gitignore`` it met then and ``info/exclude`` are copied into a
directory of the loop's, and ``git check-ignore --no-index`` answers from that copy.  So a review
that lists a new file in ``.gitignore`` or ``info/exclude``, writes a ``.gitignore`` that ignores its
own directory, or un-ignores a file, changes nothing about what is compared; a nested repository
is a directory like any other (its files compared, a new ``.git`` in it removed); a directory
replaced by a file or a link is put back.  Files ignored when the review started (``build/``, a
``.env``) are neither compared nor ever touched, except ignored test code (compared, put back).
Contents are hashed by the loop (a git blob id; a stat cache in memory, keyed on what no one can
set back: inode, size, mtime and ctime); the project's ``.git/index`` is the agent's to forge and
is never read.  What a review may change: the task list, the progress log, the loop's marker.

Anything else that differs is undone: a copy of the iteration's work is saved in the run directory,
the run's branch goes back to the iteration's checkpoint (the agent's commits dropped), what the
review added is removed (deepest first; what it removed or changed is written back from the
loop's copy of the contents, or from git's objects when their id checks out), and the task list and
progress log stay as the agent left them.  Then the iteration's verdict is not accepted: the
selected story's review fields go back to what they were before it (:meth:`ReviewFreeze.reject_verdict`),
noted in the progress log and committed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ralph import safeio
from ralph.agenttext import name
from ralph.contracts import Violation
from ralph.errors import UsageError
from ralph.gitutil import git

if TYPE_CHECKING:
    from ralph.contracts import Policy, Selection
    from ralph.loop.progressnotes import ProgressNotes
    from ralph.loop.records import IterationRecord
    from ralph.loop.taskfile import TaskFile
    from ralph.tasks import TaskList

CHECK = "review-changed-code"
MAX_KEPT_BYTES = 4 * 1024 * 1024
"""An ignored test file larger than this is compared but not kept (it is removed when changed)."""
HOME_NAME = "review-tree"
"""The loop's directory for the view (in the run directory): the frozen ignore rules, the contents kept."""
GATED_MODES = ("implement", "review-fix")
"""The modes after which the gates run; every other mode changes no code (the same tuple as :mod:`ralph.loop.gates`)."""
BYTECODE_SUFFIXES = frozenset({".pyc", ".pyo"})
"""Ignored bytecode counts too: Python runs a ``__pycache__`` file whose header matches the source, and a sourceless one."""
MARKER_NAME = ".ralph-active"
"""The loop's marker in the project (:mod:`ralph.loop.activestate`): the loop writes it during the iteration."""
UNDO_ROUNDS = 3
"""Undo passes before the loop gives up (each pass fixes what the one before uncovered)."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

Entry = tuple[str, str]
"""(mode, id) of one path: ``100644``/``100755`` and the blob id, ``120000`` and the link text's blob id,
or ``other`` and the file's kind (a fifo, a socket, a device: never read, never written back)."""


def changes_code(mode: str) -> bool:
    """Whether an iteration of ``mode`` may change the project's code (the gates check it afterwards)."""
    return mode in GATED_MODES


@dataclass
class Snapshot:
    """What the view saw: every file it compares, the directories it went into, the nested ``.git`` entries."""

    entries: dict[str, Entry] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    gitdirs: set[str] = field(default_factory=set)
    """``.git`` entries below the project's top (nested repositories, submodules): never looked into."""


def _blob_id(data: bytes, algorithm: str) -> str:
    import hashlib

    digest = hashlib.new(algorithm)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def _stat_key(info: os.stat_result) -> tuple[int, ...]:
    """What identifies a file's version without reading it: no one can set its ctime back."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


class TreeView:
    """The work tree for the review check: walked by the loop, filtered by the rules frozen at the review's start."""

    def __init__(self, project_dir: Path, home: Path) -> None:
        self.project_dir = project_dir
        self.home = home
        self.objects = home / "objects"
        """Contents the loop kept (by blob id): what git's objects do not hold (untracked files ...)."""
        self.rules: Path | None = None
        """The frozen rules: ``tree/`` holds the ``.gitignore`` files at their paths, ``git/`` a git directory of
        the loop's with ``info/exclude`` (set by :meth:`freeze`)."""
        self._cache: dict[str, tuple[tuple[int, ...], Entry]] = {}
        self._in_git: set[str] = set()
        self._algorithm: str | None = None
        self._common: Path | None = None

    # -- the two views ---------------------------------------------------------------------------

    def freeze(self) -> Snapshot:
        """Before the review: take the ignore rules as they are now, and the tree through them (contents kept)."""
        import shutil

        rules = self.rules = self.home / "rules"
        shadow = rules / "git"
        if not (shadow / "HEAD").is_file():
            rules.mkdir(parents=True, exist_ok=True)
            git(rules, "init", "-q", "--bare", "--template=", str(shadow))  # no hooks or samples: only the rules
        (shadow / "info").mkdir(exist_ok=True)
        (shadow / "info" / "exclude").write_bytes(self._project_excludes())
        shutil.rmtree(rules / "tree", ignore_errors=True)  # the last review's rules
        (rules / "tree").mkdir()
        held: dict[str, bytes] = {}
        snapshot = self._scan(learn=True, held=held)
        self._keep(snapshot, held)
        return snapshot

    def scan(self) -> Snapshot:
        """The tree now, through the rules :meth:`freeze` took."""
        return self._scan(learn=False, held=None)

    @staticmethod
    def changed(before: Snapshot, after: Snapshot) -> list[str]:
        """Paths that differ (added, removed, changed content, mode or kind), nested ``.git`` entries added."""
        paths = {p for p in before.entries.keys() | after.entries.keys() if before.entries.get(p) != after.entries.get(p)}
        return sorted(paths | (after.gitdirs - before.gitdirs))

    def content(self, oid: str) -> bytes | None:
        """The bytes whose blob id is ``oid``: the loop's copy, else git's object when its id checks out."""
        algorithm = self._object_format()
        try:
            data = (self.objects / oid[:2] / oid[2:]).read_bytes()
        except OSError:
            data = None
        if data is None or _blob_id(data, algorithm) != oid:
            shown = git(self.project_dir, "cat-file", "blob", oid, binary=True, check=False)
            data = shown.stdout if shown.returncode == 0 else None
        return data if data is not None and _blob_id(data, algorithm) == oid else None

    # -- the walk -------------------------------------------------------------------------------

    def _scan(self, learn: bool, held: dict[str, bytes] | None) -> Snapshot:
        """Walk the tree breadth first: each level's entries classified by one ``git check-ignore`` call."""
        snapshot = Snapshot()
        level = [""]
        while level:
            children: list[tuple[str, os.stat_result]] = []
            for rel in level:
                children += self._list(rel, snapshot, learn)
            # a directory is asked about as "dir/": the rules' copy has no directories for "name/" patterns to see
            ignored = self._ignored([child + "/" if stat.S_ISDIR(info.st_mode) else child for child, info in children])
            level = []
            unknown: dict[str, list[tuple[str, os.stat_result]]] = {}  # by directory: files the cache cannot answer
            for child, info in children:
                if child in ignored:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    snapshot.dirs.add(child)
                    level.append(child)
                elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                    cached = self._cache.get(child)
                    if cached is not None and cached[0] == _stat_key(info):
                        snapshot.entries[child] = cached[1]
                    else:
                        unknown.setdefault(child.rpartition("/")[0], []).append((child, info))
                else:
                    snapshot.entries[child] = ("other", _kind(info.st_mode))
            for parent, files in unknown.items():
                snapshot.entries.update(self._hash(parent, files, held))
        return snapshot

    def _list(self, rel: str, snapshot: Snapshot, learn: bool) -> list[tuple[str, os.stat_result]]:
        """The entries of directory ``rel`` (lstat), its ``.git`` noted; ``learn``: its ``.gitignore`` copied."""
        assert self.rules is not None
        try:
            with safeio.open_dir(self.project_dir / rel, self.project_dir) as fd:
                found = []
                for entry in os.listdir(fd):
                    child = f"{rel}/{entry}" if rel else entry
                    if entry == ".git":
                        if rel:
                            snapshot.gitdirs.add(child)
                        continue
                    try:
                        info = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    found.append((child, info))
                    if learn and entry == ".gitignore" and stat.S_ISREG(info.st_mode):
                        data = self._read(fd, entry, info)
                        if data is not None:
                            (self.rules / "tree" / rel).mkdir(parents=True, exist_ok=True)
                            (self.rules / "tree" / child).write_bytes(data)
                return found
        except (OSError, ValueError):
            return []  # gone, or no longer a directory reached without links: its entries count as removed

    def _ignored(self, paths: list[str]) -> set[str]:
        """Those of ``paths`` the frozen rules ignore (one ``git check-ignore --no-index`` call)."""
        assert self.rules is not None
        if not paths:
            return set()
        shadow, tree = self.rules / "git", self.rules / "tree"
        listing = b"".join(os.fsencode(p) + b"\0" for p in paths)
        out = git(tree, "-c", "core.excludesFile=/dev/null", "check-ignore", "--no-index", "--stdin", "-z", "-v", "-n",
                  env={"GIT_DIR": str(shadow), "GIT_WORK_TREE": str(tree)}, binary=True, input=listing, check=False)
        if out.returncode not in (0, 1):
            raise UsageError(f"the loop could not read git's ignore rules to check that a review changed no code: "
                             f"{out.stderr.decode('utf-8', 'replace').strip()}")
        fields = out.stdout.split(b"\0")
        ignored = set()
        for index in range(0, len(fields) - 3, 4):  # source, line, pattern, path
            pattern, path = fields[index + 2], fields[index + 3]
            if pattern and not pattern.startswith(b"!"):
                ignored.add(os.fsdecode(path).rstrip("/"))
        return ignored

    def _hash(self, parent: str, files: list[tuple[str, os.stat_result]], held: dict[str, bytes] | None) -> dict[str, Entry]:
        """(mode, blob id) of files and links of directory ``parent`` (one descriptor for all), into the stat cache."""
        found: dict[str, Entry] = {}
        try:
            with safeio.open_dir(self.project_dir / parent, self.project_dir) as fd:
                for rel, info in files:
                    entry_name = rel.rpartition("/")[2]
                    data: bytes | None
                    if stat.S_ISLNK(info.st_mode):
                        try:
                            data, mode = os.fsencode(os.readlink(entry_name, dir_fd=fd)), "120000"
                        except OSError:
                            continue
                    else:
                        data, mode = self._read(fd, entry_name, info), ("100755" if info.st_mode & stat.S_IXUSR else "100644")
                    if data is None:
                        continue  # gone, or not the file that was listed: the next look sees what is there
                    entry = found[rel] = (mode, _blob_id(data, self._object_format()))
                    self._cache[rel] = (_stat_key(info), entry)
                    if held is not None:
                        held[entry[1]] = data
        except (OSError, ValueError):
            pass
        return found

    @staticmethod
    def _read(fd: int, entry_name: str, info: os.stat_result) -> bytes | None:
        """The regular file ``entry_name`` of directory ``fd``, when it is still the one ``info`` describes."""
        try:
            handle = os.open(entry_name, _READ_FLAGS, dir_fd=fd)
        except OSError:
            return None
        try:
            now = os.fstat(handle)
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
                return None
            chunks = []
            while chunk := os.read(handle, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(handle)

    # -- contents ---------------------------------------------------------------------------------

    def _keep(self, snapshot: Snapshot, held: dict[str, bytes]) -> None:
        """Keep a copy of every content of ``snapshot`` that git's objects do not hold (read again if need be)."""
        wanted = {oid for mode, oid in snapshot.entries.values() if mode != "other"} - self._in_git
        wanted = {oid for oid in wanted if not (self.objects / oid[:2] / oid[2:]).is_file()}
        if not wanted:
            return
        out = git(self.project_dir, "cat-file", "--batch-check", input="\n".join(sorted(wanted)) + "\n", check=False).stdout
        present = {line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["blob"]}
        self._in_git |= present
        missing = wanted - present
        if not missing:
            return
        for rel, (mode, oid) in snapshot.entries.items():
            if oid in missing and oid not in held and mode != "other":  # the stat cache answered: read it again
                try:
                    self._hash(rel.rpartition("/")[0], [(rel, os.lstat(self.project_dir / rel))], held)
                except OSError:
                    continue
        for oid in missing:
            data = held.get(oid)
            if data is not None:
                (self.objects / oid[:2]).mkdir(parents=True, exist_ok=True)
                (self.objects / oid[:2] / oid[2:]).write_bytes(data)

    def _object_format(self) -> str:
        if self._algorithm is None:
            from ralph.testintegrity.export import object_format

            self._algorithm = object_format(self.project_dir)
        return self._algorithm

    def _project_excludes(self) -> bytes:
        """The repository's ``info/exclude`` as it is now (empty when there is none or it is not a regular file)."""
        from ralph.gitutil import common_dir

        if self._common is None:
            self._common = common_dir(self.project_dir)
        root = self._common
        try:
            return safeio.read_bytes(root / "info" / "exclude", root)
        except (OSError, ValueError):
            return b""

    def ignored_code(self) -> dict[str, tuple[str, bytes | None]]:
        """Files git ignores that code can run or load: test code and configuration (an ignored ``conftest.py``
        decides a test run as much as a tracked one), source, bytecode and start-up files (a ``.pth``, a
        sourceless ``.pyc``, a ``local_settings.py``).  Each path's SHA-256 and its bytes (None when larger
        than :data:`MAX_KEPT_BYTES`); one that is not a regular file reached without links counts by its kind."""
        import hashlib

        from ralph.testintegrity.export import CODE_SUFFIXES, ignored_files
        from ralph.testintegrity.paths import TestRules

        rules = TestRules()

        def wanted(path: str) -> bool:
            suffix = os.path.splitext(path)[1].lower()
            return suffix in CODE_SUFFIXES or suffix in BYTECODE_SUFFIXES or rules.touches(path) or rules.is_test(path)

        found: dict[str, tuple[str, bytes | None]] = {}
        for path in ignored_files(self.project_dir, wanted):
            try:
                data = safeio.read_bytes(self.project_dir / path, self.project_dir)
            except OSError:
                found[path] = (f"not a regular file: {safeio.kind(self.project_dir / path, self.project_dir)}", None)
                continue
            found[path] = (hashlib.sha256(data).hexdigest(), data if len(data) <= MAX_KEPT_BYTES else None)
        return found


@dataclass
class Undone:
    """What :meth:`ReviewFreeze.after_iteration` found and undid."""

    paths: list[str] = field(default_factory=list)
    saved: str | None = None


class ReviewFreeze:
    """Takes the tree before a review iteration; afterwards undoes its code changes and its verdict."""

    def __init__(
        self, project_dir: Path, taskfile: TaskFile, notes: ProgressNotes, emit: Callable[..., None],
        policy: Policy | None = None,
    ) -> None:
        self.project_dir = project_dir
        self.policy = policy
        """Whose state fields hold a story's verdict (None: the task model's review fields)."""
        self.taskfile = taskfile
        self.notes = notes
        self.emit = emit
        self.view: TreeView | None = None
        self.before: Snapshot | None = None
        """The tree the running review iteration started from (None: not a review iteration)."""
        self.ignored_before: dict[str, tuple[str, bytes | None]] = {}
        """The ignored code (:meth:`TreeView.ignored_code`) as the running review iteration found it."""

    def before_iteration(self, run_dir: Path, mode: str) -> None:
        """Before an iteration: remember its tree (and freeze the ignore rules) when it is one that changes no code."""
        self.before = None
        if changes_code(mode):
            return
        if self.view is None or self.view.home.parent != run_dir:
            self.view = TreeView(self.project_dir, run_dir / HOME_NAME)
        self.before = self.view.freeze()
        self.ignored_before = self.view.ignored_code()

    def allowed(self) -> set[str]:
        """What a review may change: the task list, the progress log, the loop's marker (relative paths)."""
        paths = {self.taskfile.path, self.notes.progress(), self.project_dir / MARKER_NAME}
        allowed = set()
        for path in paths:
            try:
                allowed.add(path.relative_to(self.project_dir).as_posix())
            except ValueError:
                continue
        return allowed

    def after_iteration(self, record: IterationRecord, checkpoint: str | None, run_dir: Path) -> list[Violation]:
        """Undo every change but the task list's and the progress log's; a violation naming them, or none."""
        if self.before is None or self.view is None:
            return []
        before, self.before = self.before, None
        allowed = self.allowed()
        changed = [p for p in self.view.changed(before, self.view.scan()) if p not in allowed]
        if changed:
            saved = self._save(record, checkpoint, run_dir)
            if checkpoint:  # the iteration's commits dropped: the index as the checkpoint has it, the tree untouched
                git(self.project_dir, "reset", "-q", "--mixed", checkpoint)
            left = changed
            for _ in range(UNDO_ROUNDS):  # a pass may uncover more (a directory that was a link ...)
                self._undo(before, left)
                left = [p for p in self.view.changed(before, self.view.scan()) if p not in allowed]
                if not left:
                    break
        else:
            saved, left = None, []
        ignored = self._ignored_changes()  # after the tree is back: its .gitignore files are as they were
        caches = [p for p in ignored if "__pycache__" in p.split("/")]  # put back quietly: running code writes them
        self._put_back_ignored(ignored)
        ignored = [p for p in ignored if p not in caches]
        if not changed and not ignored:
            return []
        left += self._ignored_changes()
        if left:
            raise UsageError(
                f"iteration {record.number} ({record.mode}) changed code, which a review may not do, and the loop "
                f"could not undo {', '.join(name(p) for p in left[:5])}: put them back by hand "
                f"({saved or 'no copy could be saved'})"
            )
        changed = sorted({*changed, *ignored})
        self.emit("review_changes_undone", iteration=record.number, story=record.story_id, paths=changed[:50],
                  saved=saved)
        shown = ", ".join(name(p) for p in changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        return [Violation(
            CHECK,
            f"The {record.mode} iteration changed {shown}. A review changes no code: the loop undid it (a copy "
            "is saved outside the project) and did not accept the iteration's verdict. Review only: what "
            "needs fixing goes into reviewFeedback, and a review-fix iteration changes the code.",
            record.story_id,
        )]

    def _ignored_changes(self) -> list[str]:
        """Ignored code files that differ from what the iteration found (added, removed, changed)."""
        assert self.view is not None
        now = self.view.ignored_code()
        before = self.ignored_before
        return sorted(p for p in set(before) | set(now) if p not in now or p not in before or now[p][0] != before[p][0])

    def _put_back_ignored(self, paths: list[str]) -> None:
        """Each changed ignored code file back as it was (its bytes), or removed when it was not there."""
        for path in paths:
            data = self.ignored_before.get(path, ("", None))[1]
            target = self.project_dir / path
            try:
                if data is None:
                    safeio.remove(target, self.project_dir)
                else:
                    safeio.write_bytes(target, self.project_dir, data, parents=True, replace_dir=True)
            except OSError:
                continue  # behind a link: reported by the check that follows

    def _undo(self, before: Snapshot, changed: list[str]) -> None:
        """What the review added removed (deepest first), then what it changed or removed written back
        (shallowest first): nothing that was there before is ever removed, no link is followed."""
        assert self.view is not None
        added = [p for p in changed if p not in before.entries]
        for path in sorted(added, key=lambda p: (-p.count("/"), p)):
            try:
                safeio.remove(self.project_dir / path, self.project_dir)  # a new .git: with what is in it
            except (OSError, ValueError):
                continue  # behind a link (removed below, then the next pass), or gone: the check that follows says
        for path in sorted({p.rpartition("/")[0] for p in added} - {""}, key=lambda p: (-p.count("/"), p)):
            parent = path
            while parent and parent not in before.dirs and safeio.remove_empty_dir(self.project_dir / parent, self.project_dir):
                parent = parent.rpartition("/")[0]
        for path in sorted((p for p in changed if p in before.entries), key=lambda p: (p.count("/"), p)):
            self._put_back(path, before.entries[path])

    def _put_back(self, path: str, entry: Entry) -> None:
        """``path`` as ``entry`` has it: its bytes from the loop's copy (or git's verified object), mode, link."""
        assert self.view is not None
        mode, oid = entry
        if mode == "other":
            return  # a fifo, socket or device the person had: never the loop's to make
        data = self.view.content(oid)
        if data is None:
            return  # no content to write back: the check that follows names the path
        target = self.project_dir / path
        self._clear_way(path)
        try:
            if mode == "120000":
                safeio.remove(target, self.project_dir)
                safeio.symlink(os.fsdecode(data), target, self.project_dir)
            else:
                safeio.write_bytes(target, self.project_dir, data, parents=True, replace_dir=True,
                                   mode=0o755 if mode == "100755" else 0o644)
        except OSError:
            return

    def _clear_way(self, path: str) -> None:
        """Remove a non-directory the review left where a directory on the way to ``path`` was (a file, a link)."""
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            what = safeio.kind(self.project_dir / prefix, self.project_dir)
            if what == "absent":
                return
            if what not in ("dir", "unsafe"):
                safeio.remove(self.project_dir / prefix, self.project_dir)
                return

    def _save(self, record: IterationRecord, checkpoint: str | None, run_dir: Path) -> str | None:
        from ralph.gitutil import work_patch
        from ralph.loop.savedwork import record_saved_work

        if not checkpoint:
            return None
        patch = work_patch(self.project_dir, checkpoint)
        if not patch:
            return None
        what = f"iteration {record.number}'s changes to the code ({record.mode}: undone)"
        where = record_saved_work(run_dir, "review", patch, what)
        self.emit("work_saved", iteration=record.number, what=what, where=where)
        return where

    def reject_verdict(self, record: IterationRecord, selection: Selection, before: TaskList, after: TaskList) -> TaskList:
        """The selected story's state fields (the policy's; the review fields) back to what they were before the
        iteration: written, noted, committed."""
        from ralph.tasks import REVIEW_FIELDS

        fields = tuple(self.policy.state_fields) if self.policy is not None else REVIEW_FIELDS
        story = after.story(selection.story_id or "")
        old = before.story(selection.story_id or "")
        if story is None or old is None:
            self.notes.note(record, "the loop undid the review's changes to the code", subject="review changed code: undone")
            return after
        repaired = after.model_copy(deep=True)
        target = repaired.story(story.id)
        assert target is not None
        changed = [f for f in fields if getattr(target, f, None) != getattr(old, f, None)]
        if self.policy is not None:
            self.policy.restore_state(target, old)
        else:
            for field_name in fields:
                setattr(target, field_name, getattr(old, field_name))
        if changed:
            raw, _, _ = self.taskfile.read()
            self.taskfile.write(repaired, raw)
            record.undone.append(story.id)
        _, reread, _ = self.taskfile.read()
        repaired = reread if reread is not None else repaired
        verdict = f"; its verdict was not accepted ({', '.join(changed)} of {story.id} back as before)" if changed else ""
        self.notes.note(record, f"the {record.mode} iteration changed code; the loop undid it{verdict}",
                        subject="review changed code: undone")
        if changed:
            self.emit("transition_undone", iteration=record.number, stories=[story.id],
                      reasons=[f"the {record.mode} iteration changed code"])
        return repaired
