"""The diff-coverage gate (hard, off by default): the story's tests must run its changed Python code.

With ``[tool.ralph.diff-coverage] minimum = 80`` the loop runs the project's tests under coverage.py
where the agent runs (after the tests gate), and fails the story when fewer than ``minimum`` percent of
the statements it added or changed since the story started (test files aside) ran.  The changed lines
come from the loop's hardened ``git diff``; coverage.py reads the story-start configuration with its
exclusions removed (a file the loop's command writes outside the project), and a project module that would
stand in for coverage.py fails the gate.  See :mod:`ralph.testintegrity.coverage` and docs/tests.md.
"""

from __future__ import annotations

import time
from typing import Any

from ralph.api import Gate, GateContext, GateResult, hookimpl


class DiffCoverageGate(Gate):
    """Runs the tests under coverage.py and measures the story's changed lines."""

    name = "diff-coverage"
    description = "the share of the story's changed Python lines its tests run (off unless minimum is set) — hard gate"
    hard = True
    order = 15  # after the tests gate: only a passing suite is worth measuring

    def _section(self) -> Any:
        from ralph.api import section_or_default
        from ralph_plugins.gates.config import DiffCoverageConfig

        return section_or_default(self.settings, "diff-coverage", DiffCoverageConfig)

    def enabled(self) -> bool:
        return self._section().minimum is not None

    @property
    def timeouts(self) -> tuple[float, float]:
        section = self._section()
        return section.soft_timeout, section.hard_timeout

    def run(self, context: GateContext) -> GateResult:
        from ralph.api.testintegrity import (
            TestRules, changed_lines, measure, parse_report, shadowing_modules, shell_command, trusted_config,
        )

        section = self._section()
        if not context.story_start:
            return GateResult(self.name, True, "the story's start is not known: nothing to measure", skipped=True)
        changed = changed_lines(context.project_dir, context.story_start, TestRules())
        if not changed:
            return GateResult(self.name, True, "no Python code changed since the story started", skipped=True)
        shadows = shadowing_modules(context.project_dir, context.story_start, [section.command, section.report])
        if shadows:
            return GateResult(self.name, False, (
                f"{', '.join(shadows)}: a module of the project that the coverage commands' `python -m` would import "
                "instead of the installed tool (new or changed since the story started); the measure cannot be "
                "trusted with it there. Rename or remove it."), exit_code=1, where=context.where)
        started = time.monotonic()
        # coverage.py reads the story-start configuration, exclusions removed, not the project's as it is now
        command = shell_command(section.command, section.report, trusted_config(context.project_dir, context.story_start))
        if context.run_command is not None:
            result = context.run_command(command, context.hard_timeout)
            code, output, timed_out, where = result.exit_code, result.output, result.timed_out, result.where
        else:
            from ralph.api.process import run_shell

            code, output, timed_out = run_shell(command, context.project_dir, context.hard_timeout)
            where = "host"
        seconds = time.monotonic() - started
        report = parse_report(output)
        tests_output = output.split("@@ralph-diff-coverage-report@@")[0].rstrip()
        if code != 0 or timed_out or report is None:
            why = "TIMEOUT" if timed_out else f"exit {code}" if code != 0 else "no JSON report from coverage.py"
            return GateResult(self.name, False, f"$ {section.command}\n{tests_output}\n[{why}]", exit_code=code,
                              timed_out=timed_out, seconds=seconds, where=where)
        coverage = measure(context.project_dir, changed, report)
        passed = coverage.percent >= section.minimum
        summary = (f"diff coverage: {coverage.percent:.1f}% of the {coverage.total} statements the story added or "
                   f"changed ran under the tests ({coverage.covered} covered; minimum {section.minimum:g}%)")
        if coverage.missed:
            summary += f"\nnot run by any test: {coverage.describe()}"
        if not passed:
            summary += "\nAdd tests that run these lines (new test files and new tests are welcome)."
        return GateResult(self.name, passed, summary, exit_code=0 if passed else 1, seconds=seconds,
                          soft_timeout_exceeded=context.soft_timeout is not None and seconds > context.soft_timeout,
                          where=where, data={"diff_coverage": round(coverage.percent, 2), "missed": coverage.missed})


@hookimpl(trylast=True)
def ralph_register_gates(register):  # type: ignore[no-untyped-def]
    """Register the diff-coverage gate."""
    register(DiffCoverageGate)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """``[tool.ralph.diff-coverage]``: minimum, command, report, timeouts."""
    from ralph_plugins.gates.config import DiffCoverageConfig

    return {"diff-coverage": DiffCoverageConfig}
