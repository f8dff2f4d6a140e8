"""The test-integrity gate (hard): the tests that exist when a story starts are part of its spec.

After an implement or review-fix iteration whose story touched a test path or test configuration
(since the story started), the loop runs the trusted ``verifyCommands`` against the agent's code with
the tests and test configuration as they were at story start, the test files the agent added set
aside, in a tree the loop made outside the project (through the runner: in the sandbox with
docker-sandbox).  Deterministic findings in the diff of the tests (a new skip, a removed assertion or
test, a process exit) are violations naming the file and line.  Either fails the gate: the story goes
back with the output verbatim.  A person allows a story to change named tests (``allowTestChanges``,
read from the task list as the run started).  See docs/tests.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ralph.api import Gate, GateContext, GateResult, hookimpl


class TestIntegrityGate(Gate):
    """Runs the story-start tests against the agent's code when the story's work touched the tests."""

    __test__ = False  # not a pytest test class

    name = "test-integrity"
    description = "the story-start tests against the agent's code; skips, removed assertions, exits — hard gate"
    hard = True
    order = 5  # before the tests gate: a weakened suite is named before it is run, and before it writes caches
    # the tests that decide are those of the last story's start, on the tree the run ends with: whatever a review
    # or a gate session left (ignored files the review check does not compare) is judged against them once more
    on_final_tree = True

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._sticky: set[str] = set()
        """Stories whose work wrote ignored test code: checked after every later iteration of this run."""

    def _section(self) -> Any:
        from ralph.api import section_or_default
        from ralph_plugins.gates.config import TestIntegrityConfig

        return section_or_default(self.settings, "test-integrity", TestIntegrityConfig)

    def enabled(self) -> bool:
        return bool(self._section().enabled)

    @property
    def timeouts(self) -> tuple[float, float]:
        section, verify = self._section(), self.settings.section("verify")
        soft = section.soft_timeout or (verify.soft_timeout if verify is not None else 300.0)
        hard = section.hard_timeout or (verify.hard_timeout if verify is not None else 600.0)
        return soft, hard

    def run(self, context: GateContext) -> GateResult:
        from ralph.api.testintegrity import ALLOW_FIELD, TestRules, check_tests, environment_changes

        final = bool(getattr(context, "final", False))
        story_start = context.story_start or (_head(context.project_dir) if final else None)
        if not story_start:
            return GateResult(self.name, True, "the story's start is not known: nothing to compare", skipped=True)
        section = self._section()
        rules = TestRules(
            tuple(section.test_paths), tuple(section.config_files), tuple(section.not_test_paths), section.defaults
        )
        allowed = list(getattr(context.trusted_story, ALLOW_FIELD, None) or [])
        started = time.monotonic()
        story = context.story_id or ""
        check = check_tests(
            context.project_dir, story_start, rules, list(context.tasks.verifyCommands),
            context.run_command_in, allowed=allowed, link=section.link, timeout=context.hard_timeout,
            findings=section.findings, ignored_since=context.iteration_started,
            # on the final tree the trusted run always runs: it holds no ignored file, whatever the tree holds
            force=story in self._sticky or final,
        )
        seconds = time.monotonic() - started
        warnings = [
            f"{path} was written during this iteration: it makes every Python or pytest process of the project "
            "load code (a start-up hook or a pytest plugin), the trusted run's too; check that the story needed it"
            for path in environment_changes(context.project_dir, section.link, context.iteration_started)
        ]
        if check.changes.ignored:  # git keeps no trace of these: the story's later iterations are checked too
            self._sticky.add(story)
        if check.passed and not check.ran and not check.nothing_to_run:  # nothing changed, or no command to run
            return GateResult(self.name, True, check.output, seconds=seconds, where=context.where, skipped=True,
                              warnings=warnings)
        data: dict[str, Any] = {"touched": check.changes.paths(), "ran": check.ran, "nothing_to_run": check.nothing_to_run}
        if check.findings:
            data["violations"] = [str(f) for f in check.findings]
        if check.export is not None:
            data.update(restored=check.export.restored, set_aside=check.export.set_aside, merged=check.export.merged)
        return GateResult(
            self.name, check.passed, check.output, exit_code=check.exit_code, timed_out=check.timed_out,
            seconds=seconds, soft_timeout_exceeded=context.soft_timeout is not None and seconds > context.soft_timeout,
            where=check.where if check.ran else context.where, data=data, warnings=warnings,
        )


def _head(project_dir: Path) -> str | None:
    """The commit checked out (None before the first commit).

    The final tree's check uses it when the story's start is not known (a run that finds every story done
    after an earlier one ended between an approval and its check, the story's state file gone): the tests
    are then compared with themselves, but the trusted run still runs, on the tracked tree alone, so what git
    ignores (a forged ``__pycache__``) cannot make wrong code pass."""
    from ralph.api.process import git

    result = git(project_dir, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


@hookimpl(trylast=True)
def ralph_register_gates(register):  # type: ignore[no-untyped-def]
    """Register the test-integrity gate."""
    register(TestIntegrityGate)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """``[tool.ralph.test-integrity]``: test paths, findings, linked dependency directories, timeouts."""
    from ralph_plugins.gates.config import TestIntegrityConfig

    return {"test-integrity": TestIntegrityConfig}
