"""Doctests: with ``pytest --doctest-modules`` the examples in the code's docstrings are tests.

They live in the code, which the agent must be able to change, so the trusted tree cannot put them back.
What stays deterministic is the examples themselves: :func:`doctest_findings` compares, in every Python file
that is not a test path and changed since the story started, the ``>>>`` examples of each docstring (its owner
named by its qualified name: ``calc.add``, ``Calc.add``, the module) with those of the same docstring at story
start.  An example that existed then and is gone now, or whose expected output changed, is a finding: a test
of the story's spec changed.  New examples are welcome, as new tests are.

Doctests are on when a verifyCommand names ``--doctest-modules``, or a story-start pytest configuration file
holds it (``addopts``).  Text files of doctests (``--doctest-glob='*.rst'``, there or in such a file) are tests
as a whole: :func:`doctest_text_files` names those of the story's start, which the trusted tree puts back.  Files are read with :mod:`ast` (never imported) and hashed by the loop, as the look
does; a file larger than :data:`ralph.testintegrity.export.MAX_FINDINGS_BYTES` or that does not parse gets no
findings.
"""

from __future__ import annotations

import ast
import doctest
import fnmatch
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ralph.testintegrity.export import (
    Entry, MAX_FINDINGS_BYTES, object_format, read_blobs, worktree_entry,
)
from ralph.testintegrity.findings import Finding
from ralph.testintegrity.paths import TestRules, matches_any

OPTION = "--doctest-modules"
CONFIG_FILES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
                          "pyproject.toml"})
"""Story-start files whose pytest ``addopts`` may turn doctests on."""

Examples = dict[str, tuple[int, Counter[tuple[str, str]]]]
"""qualified name -> (line of the docstring's owner, its examples as (source, expected output))."""


_GLOB = re.compile(r"--doctest-glob(?:=|\s+)[\"']?([^\s\"']+)")


def doctest_text_files(commands: Iterable[str], project_dir: Path, start: dict[str, Entry]) -> list[str]:
    """The story-start files a ``--doctest-glob`` pattern (on a verifyCommand, or in a story-start pytest
    configuration file) names: pytest matches it against the file's name."""
    texts = [*commands, *_config_texts(project_dir, start)]
    patterns = {pattern for text in texts if "--doctest-glob" in text for pattern in _GLOB.findall(text)}
    if not patterns:
        return []
    return sorted(p for p in start if any(fnmatch.fnmatch(p.rsplit("/", 1)[-1], pattern) for pattern in patterns))


def doctests_on(commands: Iterable[str], project_dir: Path, start: dict[str, Entry]) -> bool:
    """Do the verifyCommands run the doctests of the code (``--doctest-modules`` on a command line or in a
    story-start pytest configuration file)?"""
    if any(OPTION in command for command in commands):
        return True
    return any(OPTION in text for text in _config_texts(project_dir, start))


_texts: dict[tuple[str, tuple[str, ...]], list[str]] = {}


def _config_texts(project_dir: Path, start: dict[str, Entry]) -> list[str]:
    """The story-start texts of the pytest configuration files (remembered by their blob ids)."""
    sources = tuple(sorted(e[1] for p, e in start.items()
                           if p.rsplit("/", 1)[-1] in CONFIG_FILES and e[0].startswith("100")))
    key = (str(project_dir), sources)
    if key not in _texts:
        if len(_texts) > 16:
            _texts.clear()
        _texts[key] = [data.decode("utf-8", "replace") for data in read_blobs(project_dir, sources).values()]
    return _texts[key]


def doctest_findings(
    project_dir: Path, start: dict[str, Entry], rules: TestRules, allowed: Iterable[str] = (),
) -> tuple[list[str], list[Finding]]:
    """(the changed code files whose story-start examples changed, the findings) -- see the module's docstring."""
    allowed = list(allowed)
    algorithm = object_format(project_dir)
    old_ids: dict[str, str] = {}
    new_texts: dict[str, str | None] = {}
    for path, entry in start.items():  # only story-start files hold story-start examples
        if (not path.endswith(".py") or not entry[0].startswith("100") or rules.is_protected(path)
                or matches_any(path, allowed)):
            continue
        before = _stat(project_dir, path)
        if before is None:  # deleted: its examples went with it
            old_ids[path], new_texts[path] = entry[1], ""
            continue
        if _hashed.get((str(project_dir), path)) == (before, entry):
            continue
        now, data = worktree_entry(project_dir, path, algorithm)
        if now == entry:
            if _stat(project_dir, path) == before:  # the bytes hashed are the file's
                if len(_hashed) > 100_000:
                    _hashed.clear()
                _hashed[(str(project_dir), path)] = (before, entry)
            continue
        old_ids[path] = entry[1]
        new_texts[path] = _decode(data)
    blobs = read_blobs(project_dir, old_ids.values())
    changed: list[str] = []
    found: list[Finding] = []
    for path in sorted(old_ids):
        old = _examples(_decode(blobs.get(old_ids[path])))
        new_text = new_texts[path]
        new = _examples(new_text) if new_text is not None else None
        if not old or not any(examples for _, examples in old.values()):
            continue
        lost = _lost(path, old, new) if new is not None else [Finding(
            path, None, "doctest-changed", "not a regular UTF-8 Python file that parses any more, so its story-start "
            "doctest examples cannot be read (doctests are tests here)")]
        if lost:
            changed.append(path)
            found += lost
    return changed, found


_hashed: dict[tuple[str, str], tuple[tuple[int, ...], Entry]] = {}
"""(project, path) -> (the file's device, inode, size, ctime, mtime, mode; the entry it hashed to): a code file the
loop hashed as its story-start blob is not hashed again while these stay (every write moves ``st_ctime``, which
no one can set back)."""


def _stat(project_dir: Path, path: str) -> tuple[int, ...] | None:
    try:
        info = os.lstat(project_dir / path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_ctime_ns, info.st_mtime_ns, info.st_mode)


def _lost(path: str, old: Examples, new: Examples) -> list[Finding]:
    found = []
    for owner, (_, examples) in sorted(old.items()):
        line, now = new.get(owner, (None, Counter()))
        for (source, want), count in sorted(examples.items()):
            if now[(source, want)] >= count:
                continue
            first = source.splitlines()[0] if source else ""
            what = "gone" if owner not in new else "removed or its expected output changed"
            found.append(Finding(path, line, "doctest-changed",
                                 f"doctest example `>>> {first}` of {owner} {what} (it existed when the story "
                                 "started; doctests are tests here)"))
    return found


def _decode(data: bytes | None) -> str | None:
    if data is None or len(data) > MAX_FINDINGS_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _examples(text: str | None) -> Examples | None:
    """The doctest examples of every docstring in ``text`` (None: not parsable)."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    parser = doctest.DocTestParser()
    found: Examples = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                _collect(child, name, child.lineno)
                visit(child, f"{name}.")

    def _collect(node: ast.AST, name: str, line: int) -> None:
        docstring = ast.get_docstring(node, clean=False)  # type: ignore[arg-type]
        examples: list[doctest.Example] = []
        if docstring and ">>>" in docstring:
            try:
                examples = parser.get_examples(docstring)
            except ValueError:  # doctest's own complaint about an example's indentation: the text still counts
                examples = []
        found[name] = (line, Counter((e.source.strip(), e.want.strip()) for e in examples))

    _collect(tree, "the module", 1)
    visit(tree, "")
    return found
