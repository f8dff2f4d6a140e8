"""Diff coverage: how much of the story's changed Python code its tests run (optional, off by default).

The project's tests run under coverage.py (the configured command, where the agent runs, with
``COVERAGE_FILE`` outside the project); its JSON report comes back on stdout after a marker line.  The
changed lines come from the loop's own hardened ``git diff -U0`` against the story's start (plus every
line of new untracked files), test files left out — what diff-cover computes, without running a tool
that calls git in the agent's tree.  A changed line counts when coverage.py lists it as a statement;
a changed file the tests never imported counts every non-blank, non-comment line as missed.

What decides the measure is the loop's, not the agent's: coverage.py reads a configuration the loop writes
outside the project (``COVERAGE_RCFILE``, :func:`trusted_config`): the story-start one, with every
exclusion removed, so neither a new ``.coveragerc`` nor a ``# pragma: no cover`` on the story's own lines
takes them out of the count; and :func:`shadowing_modules` names a module of the project that a command's
``python -m coverage`` would import instead of coverage.py.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.testintegrity.paths import TestRules

MARKER = "@@ralph-diff-coverage-report@@"
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


@dataclass
class DiffCoverage:
    """The story's changed statements, how many the tests ran, and the missed ones per file."""

    covered: int = 0
    total: int = 0
    missed: dict[str, list[int]] = field(default_factory=dict)

    @property
    def percent(self) -> float:
        """Covered share of the changed statements (100 when no statement changed)."""
        return 100.0 if self.total == 0 else 100.0 * self.covered / self.total

    def describe(self) -> str:
        """``calc.py:3-5, 9; util.py:1`` — the missed lines, as ranges."""
        return "; ".join(f"{path}:{_ranges(lines)}" for path, lines in sorted(self.missed.items()))


def shell_command(command: str, report: str, config: str | None = None) -> str:
    """The tests under coverage.py, then the JSON report after :data:`MARKER`; the data file outside the project.

    ``config``: the text of coverage.py's configuration (:func:`trusted_config`), written by the command
    itself to a file outside the project (so it is there wherever the command runs: in a sandbox too) and
    named by ``COVERAGE_RCFILE``: coverage.py then reads no configuration of the project's."""
    token = secrets.token_hex(8)
    data = shlex.quote(f"/tmp/ralph-coverage-{token}")
    setup, cleanup = "", ""
    if config is not None:
        rc = shlex.quote(f"/tmp/ralph-coveragerc-{token}")
        setup = f"(umask 077; printf '%s' {shlex.quote(config)} > {rc}) || exit 2; export COVERAGE_RCFILE={rc}; "
        cleanup = f" {rc}"
    return (f"{setup}export COVERAGE_FILE={data}; {command}; status=$?; echo {MARKER}; {report} --data-file={data}; "
            f"rm -f {data}{cleanup}; exit $status")


CONFIG_FILES = (".coveragerc", ".coveragerc.toml", "setup.cfg", "tox.ini", "pyproject.toml")
"""Where coverage.py looks for its configuration, in its order (the first holding coverage settings wins)."""
EXCLUSIONS = ("exclude_lines", "exclude_also")
MAX_CONFIG_BYTES = 64_000


def trusted_config(project_dir: Path, story_start: str) -> str:
    """coverage.py's configuration as the story started (the first of :data:`CONFIG_FILES` that held coverage
    settings then), as one INI text with every exclusion removed (``exclude_lines`` empty: the story's
    changed lines are statements whatever pragma or pattern marks them).  No configuration then: only that."""
    from ralph.testintegrity.export import read_blobs, tree_entries

    start = tree_entries(project_dir, story_start)
    sections: dict[str, dict[str, str]] = {}
    for name in CONFIG_FILES:
        entry = start.get(name)
        if entry is None or not entry[0].startswith("100"):
            continue
        data = read_blobs(project_dir, [entry[1]]).get(entry[1], b"")
        if len(data) > MAX_CONFIG_BYTES:
            continue
        try:
            found = _sections(name, data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, configparser.Error):
            continue
        if found or name.startswith(".coveragerc"):
            sections = found
            break
    sections.setdefault("report", {})
    for option in EXCLUSIONS:
        sections["report"].pop(option, None)
    sections["report"]["exclude_lines"] = ""
    text = []
    for section, options in sections.items():
        text.append(f"[{section}]")
        text += [f"{key} = {value}".replace("\n", "\n    ") for key, value in options.items()]
        text.append("")
    return "\n".join(text)


def _sections(name: str, text: str) -> dict[str, dict[str, str]]:
    """coverage.py's sections of one configuration file (``run``, ``report``, ``paths`` ...), values as INI text."""
    if name.endswith(".toml"):
        import tomllib

        data = tomllib.loads(text)
        tool = data.get("tool", {}).get("coverage") if isinstance(data.get("tool"), dict) else None
        if not isinstance(tool, dict):
            tool = data if name == ".coveragerc.toml" else {}
        return {section: {key: _ini_value(value) for key, value in options.items() if not isinstance(value, dict)}
                for section, options in tool.items() if isinstance(options, dict)}
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    found: dict[str, dict[str, str]] = {}
    for section in parser.sections():
        if section.startswith("coverage:"):
            found[section[len("coverage:"):]] = dict(parser[section])
        elif name == ".coveragerc":
            found[section] = dict(parser[section])
    return found


def _ini_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "".join(f"\n{item}" for item in value)
    return str(value)


_RUN_MODULE = re.compile(r"(?:^|\s)-m\s*([A-Za-z_][\w.]*)")
"""``-m MODULE`` anywhere on a command line: ``python -m coverage run -m pytest`` imports both from the path."""


def shadowing_modules(project_dir: Path, story_start: str, commands: list[str]) -> list[str]:
    """Files of the project that would be imported instead of a module the ``commands`` run with ``python -m``
    (a root ``coverage.py``, a ``coverage/`` package, also under ``src/``), ignored by git or not, unless they
    are exactly as they were when the story started (a project that is itself such a module)."""
    from ralph.testintegrity.export import object_format, tree_entries, worktree_entry

    modules = {module.split(".")[0] for command in commands for module in _RUN_MODULE.findall(command)}
    if not modules:
        return []
    start = tree_entries(project_dir, story_start)
    algorithm = object_format(project_dir)
    found: list[str] = []
    for folder in ("", "src/"):
        try:
            names = sorted(os.listdir(project_dir / folder)) if (project_dir / folder).is_dir() else []
        except OSError:
            continue
        for name in names:
            stem, _, suffix = name.partition(".")
            path = f"{folder}{name}"
            if stem not in modules:
                continue
            if suffix.rsplit(".", 1)[-1] in ("py", "pyc", "so", "pyd"):
                files = [path]
            elif not suffix and (project_dir / path).is_dir() and not (project_dir / path).is_symlink():
                files = [f"{path}/{f}" for f in ("__init__.py", "__init__.pyc", "__main__.py")
                         if os.path.lexists(project_dir / path / f)]
            else:
                continue
            for file in files:
                entry, _ = worktree_entry(project_dir, file, algorithm)
                if entry != start.get(file):
                    found.append(file)
    return found


def parse_report(output: str) -> dict[str, Any] | None:
    """The JSON report after the marker line (None: no report)."""
    if MARKER not in output:
        return None
    text = output.rsplit(MARKER, 1)[1].strip()
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        try:
            report, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            return None
    return report if isinstance(report, dict) else None


def changed_lines(project_dir: Path, story_start: str, rules: TestRules) -> dict[str, set[int]]:
    """The story's added or changed lines of Python files that are not tests, per path."""
    from ralph.gitutil import git, untracked_files

    diff = git(project_dir, "diff", "-U0", "--no-color", "--no-renames", story_start, "--", "*.py", check=False).stdout
    lines: dict[str, set[int]] = {}
    path: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            path = name[2:] if name.startswith("b/") else None
        elif path is not None and (hunk := _HUNK.match(line)):
            first, count = int(hunk.group(1)), int(hunk.group(2) or "1")
            lines.setdefault(path, set()).update(range(first, first + count))
    for name in untracked_files(project_dir):
        if name.endswith(".py"):
            text = _read(project_dir, name)
            if text is not None:
                lines[name] = set(range(1, len(text.splitlines()) + 1))
    return {p: ls for p, ls in lines.items() if ls and not rules.is_protected(p)}


def measure(project_dir: Path, changed: dict[str, set[int]], report: dict[str, Any]) -> DiffCoverage:
    """How many of the ``changed`` lines coverage.py's ``report`` ran."""
    files: dict[str, Any] = {}
    for name, data in (report.get("files") or {}).items():
        key = str(name)
        if Path(key).is_absolute():
            try:
                key = str(Path(key).relative_to(project_dir))
            except ValueError:
                continue
        files[key.replace("\\", "/")] = data
    result = DiffCoverage()
    for path, lines in sorted(changed.items()):
        data = files.get(path)
        if isinstance(data, dict):
            executed = set(data.get("executed_lines") or [])
            statements = executed | set(data.get("missing_lines") or [])
            wanted = lines & statements
            missed = sorted(wanted - executed)
        else:  # never imported by the tests: every line of code is missed
            text = _read(project_dir, path) or ""
            source = text.splitlines()
            wanted = {n for n in lines if 0 < n <= len(source) and source[n - 1].strip()
                      and not source[n - 1].strip().startswith("#")}
            missed = sorted(wanted)
        result.total += len(wanted)
        result.covered += len(wanted) - len(missed)
        if missed:
            result.missed[path] = missed
    return result


def _read(project_dir: Path, path: str) -> str | None:
    from ralph.safeio import UnsafePath, read_text

    try:
        return read_text(project_dir / path, project_dir)
    except (UnsafePath, OSError, UnicodeDecodeError):
        return None


def _ranges(lines: list[int]) -> str:
    parts: list[str] = []
    start = prev = lines[0]
    for line in [*lines[1:], None]:
        if line is not None and line == prev + 1:
            prev = line
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if line is not None:
            start = prev = line
    return ", ".join(parts)
