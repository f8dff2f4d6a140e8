"""Test integrity for gates and tools: which files are tests, the findings in their diff, the trusted run.

``TestRules`` (test paths and test configuration) and ``check_tests`` (the whole check, as the
``test-integrity`` gate runs it: a :class:`TestCheck` with the story's :class:`TestChanges`, each
:class:`Finding` in the tests' diff, such as a new skip or a removed assertion, with file and line,
and the :class:`Export` the story-start tests ran in); ``environment_changes`` and ``ALLOW_FIELD``;
for the optional diff-coverage gate ``changed_lines``, ``shell_command``, ``parse_report`` and
``measure`` (a :class:`DiffCoverage`).
See docs/tests.md.
"""

from __future__ import annotations

from ralph.testintegrity.check import ALLOW_FIELD, TestCheck, check_tests
from ralph.testintegrity.coverage import DiffCoverage, changed_lines, measure, parse_report, shell_command
from ralph.testintegrity.export import Export, TestChanges, environment_changes
from ralph.testintegrity.findings import Finding
from ralph.testintegrity.paths import TestRules

__all__ = [
    "ALLOW_FIELD", "DiffCoverage", "Export", "Finding", "TestChanges", "TestCheck", "TestRules", "changed_lines",
    "check_tests", "environment_changes", "measure", "parse_report", "shell_command",
]
