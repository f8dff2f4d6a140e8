"""Diff coverage: how much of the story's changed Python code its tests run (optional, off by default).

The project's tests run under coverage.py (the configured command, where the agent runs, with
``COVERAGE_FILE`` outside the project); its JSON report comes back on stdout after a marker line.  The
changed lines come from the loop's own hardened ``git diff -U0`` against the story's start (plus every
line of new untracked files), test files left out — what diff-cover computes, without running a tool
that calls git in the agent's tree.  A changed line counts when coverage.py lists it as a statement;
a changed file the tests never imported counts every non-blank, non-comment line as missed.
"""

from __future__ import annotations

import json
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


def shell_command(command: str, report: str) -> str:
    """The tests under coverage.py, then the JSON report after :data:`MARKER`; the data file outside the project."""
    data = shlex.quote(f"/tmp/ralph-coverage-{secrets.token_hex(8)}")
    return (f"export COVERAGE_FILE={data}; {command}; status=$?; echo {MARKER}; {report} --data-file={data}; "
            f"rm -f {data}; exit $status")


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
