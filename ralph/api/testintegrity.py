"""Test integrity for gates and tools: which files are tests, the findings in their diff, the trusted run.

``TestRules`` (test paths and test configuration), ``findings_for(path, old, new)`` (a new skip, a
removed assertion or test, a process exit: :class:`Finding` with file and line), ``changes_since`` (what
a story's work did to its tests), ``build_export`` (the agent's code with the story-start tests, in a
directory the loop made) and ``check_tests`` (all of it, as the ``test-integrity`` gate runs it); for
the optional diff-coverage gate ``changed_lines``, ``shell_command``, ``parse_report`` and ``measure``.
See docs/tests.md.
"""

from __future__ import annotations

from ralph.testintegrity.check import ALLOW_FIELD, TestCheck, check_tests
from ralph.testintegrity.coverage import DiffCoverage, changed_lines, measure, parse_report, shell_command
from ralph.testintegrity.export import Export, TestChanges, build_export, changes_since, environment_changes
from ralph.testintegrity.findings import Finding, findings_for
from ralph.testintegrity.paths import TestRules, matches

__all__ = [
    "ALLOW_FIELD", "DiffCoverage", "Export", "Finding", "TestChanges", "TestCheck", "TestRules", "build_export",
    "changed_lines", "changes_since", "check_tests", "environment_changes", "findings_for", "matches", "measure",
    "parse_report", "shell_command",
]
