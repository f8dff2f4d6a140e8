"""The tests as they were at story start, against the agent's code: what changed, and the trusted tree.

:func:`changes_since` is the cheap look taken after every gated iteration: the story-start commit's
test paths (``git ls-tree``) against the working tree's (names from ``git ls-files``; the contents
hashed here, from regular files opened without following links).  The index's cached stat data is
never trusted: the agent can write ``.git/index``.

:func:`build_export` makes the trusted tree in a directory the loop created outside the project: a
temporary index holding the agent's tree (``HEAD`` plus ``git add -A``, so uncommitted and untracked
work counts and ignored files do not), every protected path put back to its story-start blob, the
protected paths the agent added left out, the test sections of shared files merged
(:mod:`ralph.testintegrity.sections`), then ``git checkout-index --prefix``.  Git writes every file;
the loop writes none through a path the agent made.  Dependency directories the project ignores
(``.venv``, ``node_modules`` ...) are linked in so the commands find their tools.

Every git call is :func:`ralph.gitutil.git` (hardened, after the metadata check).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ralph.testintegrity.paths import TestRules, is_metadata, matches_any

Entry = tuple[str, str]
"""(mode, object id) of one path, as git stores it (``100644``, ``100755``, ``120000`` ...)."""

MAX_FINDINGS_BYTES = 2_000_000
"""Files larger than this get no findings (the trusted run still covers them)."""


@dataclass
class TestChanges:
    """How the story's work changed its tests: the paths, and each side's text for the findings."""

    __test__ = False

    changed: list[str] = field(default_factory=list)
    """Protected paths that existed at story start and differ now (deleted ones included)."""
    deleted: list[str] = field(default_factory=list)
    """Those of :attr:`changed` that are gone."""
    added: list[str] = field(default_factory=list)
    """Protected paths that did not exist at story start."""
    sections: list[str] = field(default_factory=list)
    """Shared files (``pyproject.toml`` ...) whose test sections differ."""
    ignored: list[str] = field(default_factory=list)
    """Test code or test configuration git ignores (a ``.gitignore``d ``conftest.py``, a ``test_*.py``, a
    test module's bytecode written since ``ignored_since``): the ordinary tests gate would load it, the
    trusted tree never holds it."""
    texts: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """path -> (story-start text, text now) of the changed and added files (None: absent or not text)."""

    @property
    def touched(self) -> bool:
        """Did the story's work touch a test path or test configuration?"""
        return bool(self.changed or self.added or self.sections or self.ignored)

    def paths(self) -> list[str]:
        """Every touched path, sorted."""
        return sorted({*self.changed, *self.added, *self.sections, *self.ignored})


@dataclass
class Export:
    """The trusted tree the loop made, and what it put back or left out."""

    root: Path
    restored: list[str] = field(default_factory=list)
    """Protected paths put back to their story-start version (changed or deleted by the agent)."""
    set_aside: list[str] = field(default_factory=list)
    """Protected paths the agent added, left out of the tree."""
    merged: list[str] = field(default_factory=list)
    """Shared files whose test sections were put back."""
    linked: list[str] = field(default_factory=list)
    """Ignored dependency directories linked in from the project."""
    start_tests: list[str] = field(default_factory=list)
    """The test files of the story's start in the tree (a person-allowed one as the agent left it): what the
    trusted run has to run.  Empty when no test existed at story start."""


def _git(project_dir: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None) -> bytes:  # noqa: A002
    from ralph.gitutil import git

    return git(project_dir, *args, env=env, binary=True, input=input).stdout  # type: ignore[no-any-return]


_TREES: dict[str, dict[str, Entry]] = {}
"""The files of commits named by their full object id, as listed once: what an id names never changes, so the
gate lists a story's start once per story rather than twice per iteration."""
TREES_KEPT = 8


def tree_entries(project_dir: Path, commit: str) -> dict[str, Entry]:
    """Every file of ``commit``: path -> (mode, object id) (a copy: the caller may change it)."""
    if _full_id(commit) and commit in _TREES:
        return dict(_TREES[commit])
    out = _git(project_dir, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries: dict[str, Entry] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, oid = meta.decode().split(" ")
        entries[path.decode("utf-8", "surrogateescape")] = (mode, oid)
    if _full_id(commit):
        if len(_TREES) >= TREES_KEPT:
            _TREES.pop(next(iter(_TREES)))
        _TREES[commit] = dict(entries)
    return entries


def index_entries(project_dir: Path, env: dict[str, str]) -> dict[str, Entry]:
    """Every stage-0 entry of the index ``env`` names: path -> (mode, object id)."""
    out = _git(project_dir, "ls-files", "-s", "-z", env=env)
    entries: dict[str, Entry] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, oid, stage = meta.decode().split(" ")
        if stage == "0":
            entries[path.decode("utf-8", "surrogateescape")] = (mode, oid)
    return entries


def read_blobs(project_dir: Path, oids: Iterable[str]) -> dict[str, bytes]:
    """The contents of the blobs ``oids`` (one ``git cat-file --batch``)."""
    wanted = list(dict.fromkeys(oids))
    if not wanted:
        return {}
    out = _git(project_dir, "cat-file", "--batch", input=("\n".join(wanted) + "\n").encode())
    blobs: dict[str, bytes] = {}
    pos = 0
    for oid in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split(b" ")
        pos = end + 1
        if len(header) < 3 or header[1] == b"missing":
            continue
        size = int(header[2])
        blobs[oid] = out[pos:pos + size]
        pos += size + 1
    return blobs


def object_format(project_dir: Path) -> str:
    """``sha1`` or ``sha256``: how this repository names its objects."""
    out = _git(project_dir, "rev-parse", "--show-object-format").decode().strip()
    return out or "sha1"


def _full_id(commit: str) -> bool:
    """Is ``commit`` a full object id (not a name whose meaning can change)?"""
    return len(commit) in (40, 64) and all(c in "0123456789abcdef" for c in commit)


def _algorithm(project_dir: Path, commit: str) -> str:
    """The object format, from a full object id's length when ``commit`` is one (one git call less)."""
    if _full_id(commit):
        return "sha1" if len(commit) == 40 else "sha256"
    return object_format(project_dir)


def blob_id(data: bytes, algorithm: str = "sha1") -> str:
    """The id git gives a blob holding ``data``."""
    digest = hashlib.new(algorithm)
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def worktree_entry(project_dir: Path, path: str, algorithm: str) -> tuple[Entry | None, bytes | None]:
    """(mode, blob id) of ``path`` in the working tree and its bytes; (None, None) when it is not there.

    Never follows a link: a symlink is its target's text (as git stores it); a fifo, device, hard
    link or a path through a symlinked directory is reported as ``("other", "")`` without reading it.
    """
    from ralph.safeio import UnsafePath, read_bytes

    full = project_dir / path
    try:
        info = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError:
        return ("other", ""), None
    if stat.S_ISLNK(info.st_mode):
        target = os.fsencode(os.readlink(full))
        return ("120000", blob_id(target, algorithm)), None
    if not stat.S_ISREG(info.st_mode):
        return ("other", ""), None
    try:
        data = read_bytes(full, project_dir)
    except (UnsafePath, OSError):
        return ("other", ""), None
    mode = "100755" if info.st_mode & 0o111 else "100644"
    return (mode, blob_id(data, algorithm)), data


def worktree_names(project_dir: Path) -> list[str]:
    """The names in the working tree git would see: tracked (or deleted) and untracked, not ignored."""
    out = _git(project_dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate")
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def command_files(commands: Iterable[str], paths: Iterable[str], project_dir: Path | None = None) -> list[str]:
    """The files among ``paths`` that a verifyCommand names (``python3 check.py``, ``./scripts/test.sh``,
    or by its absolute path in ``project_dir``)."""
    known = set(paths)
    prefixes = [f"{p}/" for p in dict.fromkeys([str(project_dir), str(project_dir.resolve())])] if project_dir else []
    found = []
    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        for word in words:
            name = word[2:] if word.startswith("./") else word
            for prefix in prefixes:
                if name.startswith(prefix):
                    name = name[len(prefix):]
            if name in known and name not in found:
                found.append(name)
    return found


PLUGIN_SOURCES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                            "setup.cfg", "pyproject.toml"})
"""Story-start files that name pytest plugins: ``pytest_plugins = [...]`` in a conftest, ``-p NAME`` in addopts."""
_PLUGIN_OPTION = re.compile(r"(?:^|[\s'\"\[,])-p\s*['\"]?([A-Za-z_][\w.]*)")
_plugin_cache: dict[tuple[str, str], list[str]] = {}


def plugin_files(project_dir: Path, story_start: str, start: dict[str, Entry]) -> list[str]:
    """The story-start files of the modules the story-start test configuration loads into pytest: the plugins
    it names (``pytest_plugins = ["helpers.fixtures"]`` in a ``conftest.py``, ``-p helpers.plugin`` in addopts)
    and what a conftest or such a plugin takes hooks and fixtures from (``from helpers.fixtures import *``,
    ``from helpers import pytest_configure``, a fixture imported by name), transitively, each with the
    ``__init__.py`` of its packages (importing ``helpers.checks`` runs ``helpers/__init__.py`` first).  A
    plugin decides a test run as much as a conftest does, wherever it lives (:mod:`ralph.testintegrity.imports`)."""
    from ralph.testintegrity.imports import loaded_modules

    key = (str(project_dir), story_start)
    if key in _plugin_cache:
        return _plugin_cache[key]
    sources = {p: e for p, e in start.items() if p.rsplit("/", 1)[-1] in PLUGIN_SOURCES and e[0].startswith("100")}
    blobs = read_blobs(project_dir, [e[1] for e in sources.values()])
    configs: dict[str, str] = {}
    options: dict[str, list[str]] = {}
    for path, (_, oid) in sorted(sources.items()):
        text = _text(blobs.get(oid))
        if text is None:
            continue
        if path.endswith(".py"):
            configs[path] = text
        else:
            options[path] = [m for m in _PLUGIN_OPTION.findall(text) if not m.startswith("no:")]

    def read(paths: list[str]) -> dict[str, str]:
        wanted = {p: start[p] for p in paths if p in start and start[p][0].startswith("100")}
        found = read_blobs(project_dir, [e[1] for e in wanted.values()])
        return {p: t for p, e in wanted.items() if (t := _text(found.get(e[1]))) is not None}

    found = loaded_modules(set(start), configs, options, read)
    _plugin_cache[key] = found
    return found


def _text(data: bytes | None) -> str | None:
    if data is None or len(data) > MAX_FINDINGS_BYTES or b"\0" in data[:8000]:
        return None
    return data.decode("utf-8", "replace")


TRUSTED_TREE_LINKS = (".venv", "venv", "node_modules", ".tox")
"""The project's ignored directories linked into the trusted tree unless configured otherwise (the
``test-integrity`` gate's ``link``): where the tests' commands find their tools.  The sandbox runners
show the same names from this machine, read-only, when a gate runs in that tree.

A linked directory is the agent's to write and the check never looks into it, so only tool directories the
test runners do not collect from are linked by default (pytest's ``norecursedirs`` and jest's ignore
patterns skip these, and pytest skips any virtualenv).  ``target/`` is not one: pytest recurses into it (a
``target/conftest.py`` would load), and cargo or maven would take build output the agent left there for
the trusted build's.  A Rust or Java project that wants the speed names it in ``link`` and accepts that."""


CODE_SUFFIXES = frozenset({
    ".py", ".pyi", ".pth", ".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".mts", ".cts", ".go", ".rs", ".rb", ".exs",
    ".java", ".kt", ".cs", ".php", ".sh", ".bats", ".so", ".json", ".toml", ".ini", ".cfg", ".yml", ".yaml",
})
"""Ignored files under a test path with these suffixes are code or configuration a test runner may load."""

SKIPPED_DIRS = frozenset({
    ".git", ".venv", "venv", "node_modules", ".tox", ".nox", "target", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    ".hypothesis", "dist", "build", ".eggs", ".cache",
})
"""Ignored directories never looked into for test code (dependencies, tool caches, build output)."""

MAX_IGNORED_FILES = 20_000
"""Ignored files looked at per check, at most (a bound on the walk)."""


def ignored_test_files(project_dir: Path, rules: TestRules, since: float | None = None) -> list[str]:
    """Test code and configuration git ignores (see :attr:`TestChanges.ignored`); bytecode under
    ``__pycache__`` counts only when its ``st_ctime`` (which no one can set back) is at or after ``since``."""
    return ignored_files(project_dir, lambda path: _loads_as_test(project_dir, path, rules, since))


def ignored_files(project_dir: Path, wanted: Callable[[str], bool]) -> list[str]:
    """The files git ignores for which ``wanted(path)`` holds (dependency and cache directories,
    :data:`SKIPPED_DIRS`, are not looked into; at most :data:`MAX_IGNORED_FILES` are looked at)."""
    out = _git(project_dir, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
    found: list[str] = []
    budget = [MAX_IGNORED_FILES]
    for raw in out.split(b"\0"):
        entry = raw.decode("utf-8", "surrogateescape")
        if not entry or SKIPPED_DIRS.intersection(entry.rstrip("/").split("/")):
            continue
        paths = _walk(project_dir, entry.rstrip("/"), budget) if entry.endswith("/") else [entry]
        found += [p for p in paths if wanted(p)]
    return sorted(found)


def _walk(project_dir: Path, top: str, budget: list[int]) -> list[str]:
    """The files below ``top`` (relative), links not followed, skipped directories left out."""
    files: list[str] = []
    for root, dirs, names in os.walk(project_dir / top, followlinks=False):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        relative = os.path.relpath(root, project_dir).replace(os.sep, "/")
        for name in names:
            if budget[0] <= 0:
                return files
            budget[0] -= 1
            files.append(f"{relative}/{name}")
    return files


def _loads_as_test(project_dir: Path, path: str, rules: TestRules, since: float | None) -> bool:
    parts = path.split("/")
    if any(is_metadata(part) for part in parts[:-1]):
        # an ignored install's metadata (an editable install's ``*.egg-info``) is there in honest projects too:
        # only the plugins it registers count, and only when written during the story
        if since is None or parts[-1] != "entry_points.txt":
            return False
        try:
            return os.lstat(project_dir / path).st_ctime >= since
        except OSError:
            return False
    if "__pycache__" in parts:
        index = parts.index("__pycache__")
        if since is None or not rules.is_protected("/".join([*parts[:index], parts[-1].split(".")[0] + ".py"])):
            return False
        try:
            return os.lstat(project_dir / path).st_ctime >= since
        except OSError:
            return False
    if rules.is_config(path) or rules.has_sections(path):
        return True
    return rules.is_test(path) and os.path.splitext(path)[1].lower() in CODE_SUFFIXES


def changes_since(
    project_dir: Path, story_start: str, rules: TestRules, allowed: Iterable[str] = (), ignored_since: float | None = None,
) -> TestChanges:
    """What the work since ``story_start`` did to the protected paths and test sections (``allowed`` left out).

    ``ignored_since``: bytecode of test modules written at or after this time counts as ignored test code.
    """
    from ralph.testintegrity.sections import sections_of

    allowed = list(allowed)
    algorithm = _algorithm(project_dir, story_start)
    start = {p: e for p, e in tree_entries(project_dir, story_start).items() if not matches_any(p, allowed)}
    names = {p for p in worktree_names(project_dir) if not matches_any(p, allowed)}
    changes = TestChanges()
    old_blobs: dict[str, str] = {}
    new_data: dict[str, bytes | None] = {}
    for path in sorted(names | set(start)):
        kind = rules.kind(path)
        if kind is None:
            continue
        protected, sectioned = kind == "protected", kind == "sections"
        entry, data = worktree_entry(project_dir, path, algorithm) if path in names else (None, None)
        was = start.get(path)
        if entry == was:
            continue
        if protected:
            (changes.changed if was is not None else changes.added).append(path)
            if was is not None and entry is None:
                changes.deleted.append(path)
        elif sectioned:
            old = read_blobs(project_dir, [was[1]]).get(was[1]) if was is not None else None
            if sections_of(path, _text(old)) == sections_of(path, _text(data)):
                continue
            changes.sections.append(path)
        if was is not None and was[0] != "120000":
            old_blobs[path] = was[1]
        new_data[path] = data
    changes.ignored = [p for p in ignored_test_files(project_dir, rules, ignored_since) if not matches_any(p, allowed)]
    for path in changes.ignored:
        if not path.endswith(".pyc"):
            new_data[path] = worktree_entry(project_dir, path, algorithm)[1]
    blobs = read_blobs(project_dir, old_blobs.values())
    for path, data in new_data.items():
        old = blobs.get(old_blobs[path]) if path in old_blobs else None
        changes.texts[path] = (_text(old), _text(data))
    return changes


CODE_PATTERNS = ("*.py",)
"""The code files whose diff gets findings of their own (:mod:`ralph.testintegrity.codefindings`)."""


_CODE_INDEXES: dict[tuple[str, str], tuple[bytes, int]] = {}
"""(project, story start) -> the bytes and mtime of the last :func:`changed_code` index.  Kept in the loop's
memory, never in a file the agent could write between checks; its stat data is git's own, from ``lstat``
(a change shows in the file's ctime, which no one can set back), so only the files changed since are hashed."""


def changed_code(
    project_dir: Path, story_start: str, rules: TestRules, allowed: Iterable[str] = (),
) -> dict[str, tuple[str | None, str | None]]:
    """path -> (story-start text, text now) of every code file (:data:`CODE_PATTERNS`) the work since
    ``story_start`` changed or added that is no test path and no test configuration (``allowed`` left out).

    The working tree is added to a temporary index read from ``story_start`` (git hashes every such file: the
    repository's index and its cached stat data are never used) and compared with it; only the changed files
    are read, from git's objects."""
    from ralph.gitutil import git

    allowed = list(allowed)
    key = (str(project_dir), story_start)
    with tempfile.TemporaryDirectory(prefix="ralph-code-") as tmp:
        index_file = Path(tmp) / "code"
        index = {"GIT_INDEX_FILE": str(index_file)}
        kept = _CODE_INDEXES.get(key)
        if kept is not None:  # the last check's index, from this process's memory: git rehashes what changed since
            index_file.write_bytes(kept[0])
            os.utime(index_file, ns=(kept[1], kept[1]))
        else:
            _git(project_dir, "read-tree", story_start, env=index)
        added = git(project_dir, "add", "-A", "--ignore-errors", "--", *CODE_PATTERNS, env=index, check=False, binary=True)
        if added.returncode != 0 and b"did not match any files" in (added.stderr or b""):
            return {}  # no such file at the story's start or now
        out = _git(project_dir, "diff-index", "--cached", "--no-renames", "-z", "--full-index", story_start, "--",
                   *CODE_PATTERNS, env=index)
        if len(_CODE_INDEXES) >= TREES_KEPT and key not in _CODE_INDEXES:
            _CODE_INDEXES.pop(next(iter(_CODE_INDEXES)))
        _CODE_INDEXES[key] = (index_file.read_bytes(), os.stat(index_file).st_mtime_ns)
    fields = out.split(b"\0")
    changed: dict[str, tuple[str, str]] = {}
    for meta, raw in zip(fields[0::2], fields[1::2]):
        if not meta.startswith(b":"):
            continue
        _old_mode, new_mode, old_oid, new_oid, _status = meta[1:].decode().split(" ")
        path = raw.decode("utf-8", "surrogateescape")
        if not new_mode.startswith("100") or rules.is_protected(path) or matches_any(path, allowed):
            continue
        changed[path] = (old_oid, new_oid)
    blobs = read_blobs(project_dir, [oid for pair in changed.values() for oid in pair if set(oid) != {"0"}])
    return {path: (_text(blobs.get(old)), _text(blobs.get(new))) for path, (old, new) in changed.items()}


def build_export(
    project_dir: Path,
    story_start: str,
    rules: TestRules,
    target: Path,
    allowed: Iterable[str] = (),
    link: Iterable[str] = (),
) -> Export:
    """Write the trusted tree into the empty directory ``target`` (made by the caller, outside the project)."""
    from ralph.testintegrity.sections import merge_sections

    allowed = list(allowed)
    export = Export(target)
    with tempfile.TemporaryDirectory(prefix="ralph-testint-") as tmp:
        agent_index = {"GIT_INDEX_FILE": str(Path(tmp) / "agent")}
        _git(project_dir, "read-tree", *(["HEAD"] if _has_head(project_dir) else ["--empty"]), env=agent_index)
        _git(project_dir, "add", "-A", "--", ".", env=agent_index)
        agent = index_entries(project_dir, agent_index)
        start = tree_entries(project_dir, story_start)
        final = dict(agent)
        ours: list[str] = []  # entries the loop decided: they win over the agent's on a file/directory clash
        for path in agent:
            if rules.is_protected(path) and not matches_any(path, allowed) and path not in start:
                del final[path]
                export.set_aside.append(path)
        for path, entry in start.items():
            if rules.is_protected(path) and not matches_any(path, allowed):
                if final.get(path) != entry:
                    export.restored.append(path)
                final[path] = entry
                ours.append(path)
        for path in sorted(set(agent) | set(start)):
            if not rules.has_sections(path) or matches_any(path, allowed):
                continue
            agent_entry, start_entry = agent.get(path), start.get(path)
            blobs = read_blobs(project_dir, [e[1] for e in (agent_entry, start_entry) if e and e[0].startswith("100")])
            agent_text = _decoded(blobs, agent_entry)
            start_text = _decoded(blobs, start_entry)
            merged = merge_sections(path, agent_text, start_text)
            if merged == agent_text and agent_entry is not None and agent_entry[0].startswith("100"):
                continue
            if merged is None:
                final.pop(path, None)
            else:
                oid = _git(project_dir, "hash-object", "-w", "--stdin", input=merged.encode()).decode().strip()
                final[path] = ("100644", oid)
                ours.append(path)
            export.merged.append(path)
        _drop_clashes(final, ours)
        export.start_tests = sorted(p for p, e in final.items() if p in start and e[0] != "other" and rules.is_test(p))
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "trusted")}
        _git(project_dir, "read-tree", "--empty", env=index)
        records = b"".join(
            f"{mode} {oid}\t".encode() + path.encode("utf-8", "surrogateescape") + b"\0"
            for path, (mode, oid) in sorted(final.items())
            if mode != "other"
        )
        if records:
            _git(project_dir, "update-index", "-z", "--index-info", env=index, input=records)
        _git(project_dir, "checkout-index", "-a", "-f", f"--prefix={target}/", env=index)
    export.linked = _link_dependencies(project_dir, target, link, final) + _link_submodules(project_dir, target, final)
    return export


def _has_head(project_dir: Path) -> bool:
    from ralph.gitutil import head

    return head(project_dir) is not None


def _decoded(blobs: dict[str, bytes], entry: Entry | None) -> str | None:
    if entry is None or not entry[0].startswith("100") or entry[1] not in blobs:
        return None
    try:
        return blobs[entry[1]].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _drop_clashes(final: dict[str, Entry], ours: list[str]) -> None:
    """Remove the agent's entries that clash with the loop's (a symlink or file where a directory must be)."""
    for path in ours:
        if path not in final:
            continue
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in final and prefix not in ours:
                del final[prefix]
        below = path + "/"
        for other in [p for p in final if p.startswith(below) and p not in ours]:
            del final[other]


def environment_changes(project_dir: Path, link: Iterable[str], since: float | None) -> list[str]:
    """Files that make Python load code at start-up or pytest load a plugin (``*.pth``,
    ``sitecustomize.py``, a ``pytest11`` entry point), written at or after ``since`` in the project's
    virtualenvs among ``link``: a test plugin the agent installed runs in every test process."""
    if since is None:
        return []
    found = []
    for name in link:
        if not name or "/" in name or name in (".", ".."):
            continue
        for site in (project_dir / name).glob("lib/python*/site-packages"):
            try:
                entries = list(os.scandir(site))
            except OSError:
                continue
            for entry in entries:
                candidates = []
                if entry.name.endswith(".pth") or entry.name in ("sitecustomize.py", "usercustomize.py"):
                    candidates.append(Path(entry.path))
                elif entry.name.lower().endswith(".dist-info"):
                    candidates.append(Path(entry.path) / "entry_points.txt")
                for path in candidates:
                    if _new_file(path, since) and (path.suffix != ".txt" or b"[pytest11]" in _head(path)):
                        found.append(os.path.relpath(path, project_dir))
    return sorted(found)


def _new_file(path: Path, since: float) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_ctime >= since


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as handle:
            return handle.read(65536)
    except OSError:
        return b""


def _link_submodules(project_dir: Path, target: Path, tree: dict[str, Entry]) -> list[str]:
    """Symlink the project's submodule checkouts into ``target`` (``checkout-index`` writes none)."""
    linked = []
    root = os.path.realpath(target)
    for path, (mode, _) in sorted(tree.items()):
        source, where = project_dir / path, target / path
        if mode != "160000" or not source.is_dir():
            continue
        if os.path.realpath(where.parent) != os.path.join(root, os.path.dirname(path)).rstrip("/"):
            continue  # never through a link git made in the tree
        if where.is_dir() and not where.is_symlink() and not any(where.iterdir()):
            where.rmdir()
        if os.path.lexists(where):
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(source, where)
        linked.append(path)
    return linked


def _link_dependencies(project_dir: Path, target: Path, names: Iterable[str], tree: dict[str, Entry]) -> list[str]:
    """Symlink the project's ignored dependency directories (``.venv`` ...) into ``target``."""
    top = {p.split("/", 1)[0] for p in tree}
    linked = []
    for name in names:
        if not name or "/" in name or name in (".", "..", ".git") or name in top:
            continue
        source = project_dir / name
        if not source.is_dir() or os.path.lexists(target / name):
            continue
        os.symlink(source, target / name)
        linked.append(name)
    return linked

