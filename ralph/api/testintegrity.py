"""Test integrity for gates and tools: which files are tests, the findings in their diff, the trusted run.

``TestRules`` (test paths and test configuration) and ``check_tests`` (the whole check, as the
``test-integrity`` gate runs it: a :class:`TestCheck` with the story's :class:`TestChanges`, each
:class:`Finding` in the tests' diff, such as a new skip or a removed assertion, with file and line,
and the :class:`Export` the story-start tests ran in); ``environment_changes`` and ``ALLOW_FIELD``;
``TRUSTED_TREE_LINKS``, the project's directories linked into the trusted tree by default (a runner
that runs gate commands elsewhere shows them there); for the optional diff-coverage gate
``changed_lines``, ``shell_command``, ``parse_report`` and ``measure`` (a :class:`DiffCoverage`), with
``trusted_config`` (coverage.py's story-start configuration, exclusions removed) and ``shadowing_modules``
(a project module ``python -m coverage`` would import instead of coverage.py).
Each name loads its module on first use.  See docs/tests.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes

if TYPE_CHECKING:
    from ralph.testintegrity.check import ALLOW_FIELD, TestCheck, check_tests
    from ralph.testintegrity.coverage import (
        DiffCoverage, changed_lines, measure, parse_report, shadowing_modules, shell_command, trusted_config,
    )
    from ralph.testintegrity.export import TRUSTED_TREE_LINKS, Export, TestChanges, environment_changes
    from ralph.testintegrity.findings import Finding
    from ralph.testintegrity.paths import TestRules

__all__ = [
    "ALLOW_FIELD", "TRUSTED_TREE_LINKS", "DiffCoverage", "Export", "Finding", "TestChanges", "TestCheck", "TestRules",
    "changed_lines", "check_tests", "environment_changes", "measure", "parse_report", "shadowing_modules",
    "shell_command", "trusted_config",
]

__getattr__ = lazy_attributes(__name__, {
    "ALLOW_FIELD": "ralph.testintegrity.check",
    "TestCheck": "ralph.testintegrity.check",
    "check_tests": "ralph.testintegrity.check",
    "DiffCoverage": "ralph.testintegrity.coverage",
    "changed_lines": "ralph.testintegrity.coverage",
    "measure": "ralph.testintegrity.coverage",
    "parse_report": "ralph.testintegrity.coverage",
    "shell_command": "ralph.testintegrity.coverage",
    "shadowing_modules": "ralph.testintegrity.coverage",
    "trusted_config": "ralph.testintegrity.coverage",
    "TRUSTED_TREE_LINKS": "ralph.testintegrity.export",
    "Export": "ralph.testintegrity.export",
    "TestChanges": "ralph.testintegrity.export",
    "environment_changes": "ralph.testintegrity.export",
    "Finding": "ralph.testintegrity.findings",
    "TestRules": "ralph.testintegrity.paths",
})
