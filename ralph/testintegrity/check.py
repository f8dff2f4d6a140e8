"""One check of a story's tests after a gated iteration: the look, the findings, the trusted run.

:func:`check_tests` is what the ``test-integrity`` gate does.  Nothing is run when the story's work
touched no test path and no test configuration (the cost is then one ``git ls-tree``, one
``git ls-files``, hashing the test files, and the code's findings: the changed ``*.py`` files found with a
temporary index, :mod:`ralph.testintegrity.codefindings`; one of those fails the check without a run).
Otherwise the deterministic findings are collected and
the trusted ``verifyCommands`` run, through the runner, in the trusted tree
(:func:`ralph.testintegrity.export.build_export`); either failing fails the check, with the findings
first and the commands' output verbatim.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ralph.contracts import CommandResult
from ralph.testintegrity.commands import command_inputs
from ralph.testintegrity.doctests import doctest_findings, doctest_text_files, doctests_on
from ralph.testintegrity.export import (
    Export, TestChanges, build_export, changed_code, changes_since, command_files, plugin_files, tree_entries,
)
from ralph.testintegrity.codefindings import code_findings
from ralph.testintegrity.findings import Finding, findings_for
from ralph.testintegrity.paths import TestRules
from ralph.testintegrity.shadows import pythonpath_roots

RunIn = Callable[[str, Path, "float | None"], CommandResult]
"""``run_in(command, cwd, timeout)``: run a command where the agent runs, in a directory the loop made."""

ALLOW_FIELD = "allowTestChanges"
"""The story field (person-only) naming the existing tests a story may change."""

STOP_SEARCH = "# written by ralph: the trusted tests' configuration search ends here (defaults)\n"

HOW_TO_ALLOW = (
    f"Existing tests are part of the story's spec. If this story really must change one, say why in the "
    f"progress log: only a person can allow it (the story's {ALLOW_FIELD} field, read from the task list as "
    "the run started)."
)


@dataclass
class TestCheck:
    """What one check found and ran."""

    __test__ = False

    passed: bool
    output: str
    changes: TestChanges
    findings: list[Finding] = field(default_factory=list)
    export: Export | None = None
    exit_code: int | None = None
    timed_out: bool = False
    where: str = "host"
    ran: bool = False
    """Were the trusted commands run?"""
    nothing_to_run: bool = False
    """No test existed at story start: the trusted run had nothing to run (not a failure)."""


def check_tests(
    project_dir: Path,
    story_start: str,
    rules: TestRules,
    commands: list[str],
    run_in: RunIn | None,
    *,
    allowed: Iterable[str] = (),
    link: Iterable[str] = (),
    timeout: float | None = None,
    findings: bool = True,
    workdir: Path | None = None,
    ignored_since: float | None = None,
    force: bool = False,
) -> TestCheck:
    """Check the story's tests since ``story_start`` (see the module's docstring).

    ``workdir``: where the trusted tree is made (a fresh directory inside it; default the system's
    temporary directory).  ``run_in`` None: the commands run on this machine.  ``ignored_since``:
    bytecode of test modules written since then counts as ignored test code.  ``force``: run the
    trusted commands even when nothing changed now (the story touched its tests in an earlier iteration
    in ways git does not keep).
    """
    allowed = list(allowed)
    start_paths = tree_entries(project_dir, story_start)
    named = command_files(commands, start_paths, project_dir) + plugin_files(project_dir, story_start, start_paths)
    rules = rules.with_runner_modules(commands)
    if rules.defaults:
        roots = pythonpath_roots(commands)
        rules = rules.with_environment(_shadowed(project_dir, start_paths, link, roots), roots)
    rules = rules.with_config(p for p in named if not rules.is_protected(p))
    rules = rules.with_config_paths(command_inputs(commands, start_paths, project_dir, story_start)
                                    + doctest_text_files(commands, project_dir, start_paths))
    changes = changes_since(project_dir, story_start, rules, allowed, ignored_since)
    doctested: list[str] = []
    doctest_found: list[Finding] = []
    if findings and doctests_on(commands, project_dir, start_paths):
        doctested, doctest_found = doctest_findings(project_dir, start_paths, rules, allowed)
    # the code under test can skip or end the test run as well as a test can: its diff is looked at every time
    in_code = _code_findings(project_dir, story_start, rules, allowed) if findings else []
    if not changes.touched and not doctested and not force and not in_code:
        return TestCheck(True, "no test file or test configuration changed since the story started", changes)
    found = (_findings(changes) if findings else []) + doctest_found + in_code
    run = changes.touched or bool(doctested) or force
    described = [_describe(p, changes) for p in changes.paths()] + [f"{p} (doctests)" for p in doctested]
    lines = [
        "The tests and the test configuration as they were when the story started are part of its spec; "
        "they run against your code.",
        "Changed since the story started: " + (", ".join(described) or (
            "nothing now; an earlier iteration of the story changed them" if run else
            "no test file or test configuration; code that decides the test run's result (below)")),
    ]
    if found:
        lines += ["", "Findings in the diff of the tests and the code (each one is a violation):"]
        lines += [f"  {f}" for f in found]
    check = TestCheck(not found, "", changes, found)
    if not run:  # only the code's findings: they fail the check, the tests need no run for that
        pass
    elif commands:
        lines.append("")
        _trusted_run(check, project_dir, story_start, rules, commands, run_in, allowed, link, timeout, workdir, lines)
    else:
        lines += ["", "(no verifyCommands: nothing to run)"]
    if not check.passed:
        lines += ["", HOW_TO_ALLOW]
    check.output = "\n".join(lines)
    return check


def _shadowed(project_dir: Path, start: dict[str, tuple[str, str]], link: Iterable[str], roots: list[str]) -> set[str]:
    """The environment's module names a project file must not shadow, less the project's own (those it held
    on an import root at the story's start)."""
    from ralph.testintegrity.shadows import environment_modules, own_modules

    return set(environment_modules(project_dir, link)) - own_modules(start, ["", "src/", *roots])


def _code_findings(project_dir: Path, story_start: str, rules: TestRules, allowed: list[str]) -> list[Finding]:
    found: list[Finding] = []
    for path, (old, new) in sorted(changed_code(project_dir, story_start, rules, allowed).items()):
        found += code_findings(path, old, new)
    return found


def _describe(path: str, changes: TestChanges) -> str:
    if path in changes.deleted:
        return f"{path} (deleted)"
    if path in changes.added:
        return f"{path} (new)"
    if path in changes.sections:
        return f"{path} (test sections)"
    if path in changes.ignored:
        return f"{path} (ignored by git: never in the trusted run)"
    return path


def _findings(changes: TestChanges) -> list[Finding]:
    found: list[Finding] = []
    for path in changes.changed:
        old, new = changes.texts.get(path, (None, None))
        if path in changes.deleted:
            found += findings_for(path, old or "", None)
        elif old is not None and new is not None:
            found += findings_for(path, old, new)
    for path in [*changes.added, *changes.ignored]:
        _, new = changes.texts.get(path, (None, None))
        if new is not None:
            found += findings_for(path, None, new)
    return found


def _trusted_run(
    check: TestCheck, project_dir: Path, story_start: str, rules: TestRules, commands: list[str], run_in: RunIn | None,
    allowed: list[str], link: Iterable[str], timeout: float | None, workdir: Path | None, lines: list[str],
) -> None:
    """Build the trusted tree, run every command in it until one fails; record the result in ``check``."""
    root = Path(tempfile.mkdtemp(prefix="ralph-trusted-tests-", dir=workdir))
    try:
        # pytest looks for its config (and then conftest.py files) in the tree's ancestors when the tree
        # has none: an empty pytest.ini here ends that search before /tmp, where the agent could write
        (root / "pytest.ini").write_text(STOP_SEARCH, encoding="utf-8")
        try:
            export = check.export = build_export(project_dir, story_start, rules, root / "tree", allowed, link)
        except subprocess.CalledProcessError as exc:  # e.g. a file of the agent's git cannot read
            error = (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
            lines.append(f"The trusted tree could not be built from your work (git: {error.strip() or exc}); "
                         "make every file of the project readable.")
            check.passed = False
            return
        aside = f"; set aside (new): {', '.join(export.set_aside)}" if export.set_aside else ""
        if not export.start_tests:
            # its purpose is running the story-start tests against the agent's code: with none, whatever a test
            # runner says of an empty tree (pytest's exit 5, jest's "No tests found", a missing tests/) is not
            # about the agent's work; the story-start tree is the loop's, so no work of the agent's gets here
            check.nothing_to_run = True
            lines.append(f"The trusted run: no test existed when the story started{aside}, so it has nothing to "
                         "run; the tests you added are the tests gate's to run.")
            return
        lines.append(f"The trusted run (the story-start tests against your code{aside}):")
        started = time.monotonic()
        check.ran = True
        for command in commands:
            remaining = None if timeout is None else max(0.1, timeout - (time.monotonic() - started))
            result = _run(run_in, retarget(command, project_dir, export.root), export.root, remaining)
            check.where = result.where
            lines.append(f"$ {command}\n{result.output.rstrip()}\n[exit {result.exit_code}"
                         f"{', TIMEOUT' if result.timed_out else ''}]")
            if result.exit_code != 0 or result.timed_out:
                check.passed = False
                check.exit_code, check.timed_out = result.exit_code, result.timed_out
                return
        check.exit_code = 0 if check.exit_code is None else check.exit_code
    finally:
        shutil.rmtree(root, ignore_errors=True)


def retarget(command: str, project_dir: Path, tree: Path) -> str:
    """``command`` with the project's absolute path (as given, and resolved) pointing at ``tree`` instead:
    ``pytest /home/me/app/tests`` must run the trusted tests, not the agent's."""
    for path in dict.fromkeys([str(project_dir), str(project_dir.resolve())]):
        if path and path != "/":
            command = re.sub(re.escape(path.rstrip("/")) + r"(?=$|[/\s'\";:&|)])", lambda _: str(tree), command)
    return command


def _run(run_in: RunIn | None, command: str, cwd: Path, timeout: float | None) -> CommandResult:
    if run_in is not None:
        return run_in(command, cwd, timeout)
    from ralph.process import run_shell

    code, output, timed_out = run_shell(command, cwd, timeout)
    return CommandResult(code, output, timed_out, "host")
