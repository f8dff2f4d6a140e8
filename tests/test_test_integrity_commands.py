"""Test integrity, unit level: what the test command itself reads (scripts, makefiles, rc files), doctests, and
the diff-coverage gate's own configuration.  Through the real CLI: tests/test_redteam4_testintegrity.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ralph.testintegrity.commands import command_inputs
from ralph.testintegrity.export import tree_entries
from ralph.testintegrity.paths import TestRules
from ralph.testing.project import GIT_IDENTITY

RULES = TestRules()
PY = shlex.quote(sys.executable)


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


def make_repo(path: Path, files: dict[str, str]) -> str:
    """A repository holding ``files``, committed; returns the commit."""
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    return git(path, "rev-parse", "HEAD").strip()


FILES = {
    "Makefile": "include ci/vars.mk\n-include local.mk\ntest:\n\t@sh ci/run.sh\n",
    "ci/vars.mk": "X = 1\n",
    "ci/run.sh": ". ./ci/settings.sh\npython3 -m pytest\n",
    "ci/settings.sh": "export A=1\n",
    "run-tests.sh": "source ci/env.sh\n",
    "ci/env.sh": "",
    "ci/check.sh": "cd .. && ./tools/t\n",
    "tools/t": "#!/bin/sh\n. tools/u.sh\n",
    "tools/u.sh": "",
    "package.json": json.dumps({"scripts": {"test": "sh ci/npm.sh"}}),
    "ci/npm.sh": "",
    "sub/Makefile": "all: build\n\nbuild:\n\tsh ci/build.sh\n\tpython3 gen.py\n\ndeploy:\n\tsh ci/deploy.sh\n",
    "sub/ci/build.sh": "", "sub/ci/deploy.sh": "", "sub/gen.py": "",
    "calc.py": "def add(a, b):\n    return a + b\n",
}


@pytest.mark.parametrize(("command", "expected"), [
    ("make test", ["GNUmakefile", "Makefile", "ci/run.sh", "ci/settings.sh", "ci/vars.mk", "local.mk", "makefile"]),
    ("make -C sub", ["sub/GNUmakefile", "sub/Makefile", "sub/ci/build.sh", "sub/makefile"]),  # the first target's
    ("make -C sub deploy", ["sub/GNUmakefile", "sub/Makefile", "sub/ci/deploy.sh", "sub/makefile"]),
    ("make -f ci/vars.mk test", ["ci/vars.mk"]),
    ("sh run-tests.sh", ["ci/env.sh", "run-tests.sh"]),
    ("cd ci && sh check.sh", ["ci/check.sh", "tools/t", "tools/u.sh"]),
    ("npm test", [".npmrc", ".pnpmfile.cjs", ".yarnrc", ".yarnrc.yml", "ci/npm.sh"]),
    ("python3 -m pytest calc.py", []),  # a file named as an argument is command_files' (the older rule)
    ("sh $SCRIPT", []),  # only known at run time: not followed
])
def test_what_a_command_reads(tmp_path: Path, command: str, expected: list[str]) -> None:
    start = make_repo(tmp_path, FILES)
    assert command_inputs([command], tree_entries(tmp_path, start), tmp_path) == expected


def check(repo: Path, start: str, commands: list[str], work: Path, rules: TestRules = RULES):  # type: ignore[no-untyped-def]
    from ralph.testintegrity.check import check_tests

    work.mkdir(exist_ok=True)
    return check_tests(repo, start, rules, commands, None, workdir=work)


@pytest.mark.parametrize("how", ["Makefile rewritten", "GNUmakefile added", "included file rewritten"])
def test_the_makefile_is_the_story_starts(tmp_path: Path, how: str) -> None:
    repo = tmp_path / "repo"
    start = make_repo(repo, {
        "tests/test_x.py": "", "Makefile": "include ci/vars.mk\ntest:\n\t@echo recipe $(WHO)\n",
        "ci/vars.mk": "WHO = person\n"})
    path, text = {"Makefile rewritten": ("Makefile", "test:\n\t@echo agent\n"),
                  "GNUmakefile added": ("GNUmakefile", "test:\n\t@echo agent\n"),
                  "included file rewritten": ("ci/vars.mk", "WHO = agent\n")}[how]
    (repo / path).write_text(text)
    result = check(repo, start, ["make test"], tmp_path / "work")
    assert result.ran and "recipe person" in result.output and "agent" not in result.output.split("$ make test")[1]
    assert path in result.changes.paths()
    if how == "GNUmakefile added":
        assert result.export is not None and result.export.set_aside == ["GNUmakefile"]


def test_a_script_after_a_cd_and_what_it_sources_are_the_story_starts(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    start = make_repo(repo, {"tests/test_x.py": "", "ci/check.sh": ". ./env.sh\necho checked $WHO\n",
                             "ci/env.sh": "WHO=person\n"})
    (repo / "ci" / "env.sh").write_text("echo agent; exit 0\n")
    result = check(repo, start, ["cd ci && sh check.sh"], tmp_path / "work")
    assert result.ran and "checked person" in result.output and "ci/env.sh" in result.changes.changed
    (repo / "ci" / "env.sh").write_text("WHO=person\n")
    (repo / "ci" / "check.sh").write_text("exit 0\n")
    result = check(repo, start, ["cd ci && sh check.sh"], tmp_path / "work2")
    assert result.ran and "checked person" in result.output and result.changes.changed == ["ci/check.sh"]


def test_an_npmrc_the_agent_added_is_set_aside(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    start = make_repo(repo, {"tests/test_x.py": "", "package.json": json.dumps({"scripts": {"test": "echo tested"}})})
    (repo / ".npmrc").write_text("script-shell=/bin/true\n")
    result = check(repo, start, ["npm test"], tmp_path / "work")
    assert result.changes.added == [".npmrc"] and result.export is not None and result.export.set_aside == [".npmrc"]
    assert result.passed and "tested" in result.output


# -- doctests ---------------------------------------------------------------------------------------------

DOCTESTED = (
    '"""Calc.\n\n>>> 1 + 1\n2\n"""\n\n\ndef add(a, b):\n    """The sum.\n\n    >>> add(2, 2)\n    4\n    """\n'
    "    return a + b\n\n\nclass Calc:\n    def mul(self, a, b):\n        \"\"\"\n        >>> Calc().mul(2, 3)\n"
    "        6\n        \"\"\"\n        return a * b\n"
)


@pytest.mark.parametrize(("change", "messages"), [
    (lambda t: t.replace("    return a + b", "    return a + b + 0"), []),  # the code changed, not the examples
    (lambda t: t.replace("    4\n    \"\"\"", "    4\n    >>> add(1, 1)\n    2\n    \"\"\""), []),  # a new example
    (lambda t: t.replace("    4\n", "    0\n"), ["calc.py:8: doctest example `>>> add(2, 2)` of add removed or its "
                                              "expected output changed"]),
    (lambda t: t.replace("        6\n", "        7\n"), ["calc.py:18: doctest example `>>> Calc().mul(2, 3)` of Calc.mul"]),
    (lambda t: t.replace(">>> 1 + 1\n2\n", ""), ["calc.py:1: doctest example `>>> 1 + 1` of the module removed"]),
    (lambda t: t.replace("def add(", "def plus("), ["doctest example `>>> add(2, 2)` of add gone"]),
    (lambda t: t + "def (:\n", ["calc.py: not a regular UTF-8 Python file that parses"]),
])
def test_a_doctest_example_of_the_story_start_may_not_change(tmp_path: Path, change, messages) -> None:  # type: ignore[no-untyped-def]
    from ralph.testintegrity.doctests import doctest_findings

    start = make_repo(tmp_path, {"calc.py": DOCTESTED, "tests/test_x.py": ""})
    (tmp_path / "calc.py").write_text(change(DOCTESTED))
    changed, found = doctest_findings(tmp_path, tree_entries(tmp_path, start), RULES)
    assert len(found) == len(messages), found
    for finding, message in zip(found, messages):
        assert message in str(finding)
    assert changed == (["calc.py"] if messages else [])


def test_doctests_are_on_by_the_command_or_the_story_start_config(tmp_path: Path) -> None:
    from ralph.testintegrity.doctests import doctests_on

    start = make_repo(tmp_path, {"calc.py": DOCTESTED, "pytest.ini": "[pytest]\naddopts = --doctest-modules\n"})
    entries = tree_entries(tmp_path, start)
    assert doctests_on(["pytest"], tmp_path, entries)
    assert doctests_on(["pytest --doctest-modules"], tmp_path, {})
    assert not doctests_on(["pytest"], tmp_path, {})


def test_doctest_text_files_a_glob_names_are_tests(tmp_path: Path) -> None:
    from ralph.testintegrity.doctests import doctest_text_files

    start = make_repo(tmp_path, {"docs/usage.rst": "", "README.md": "", "setup.cfg": "[tool:pytest]\naddopts = --doctest-glob=*.md\n"})
    entries = tree_entries(tmp_path, start)
    assert doctest_text_files(["pytest --doctest-glob '*.rst'"], tmp_path, entries) == ["README.md", "docs/usage.rst"]
    assert doctest_text_files(["pytest"], tmp_path, {p: e for p, e in entries.items() if p != "setup.cfg"}) == []


def test_a_changed_doctest_fails_the_check_although_no_test_file_changed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    start = make_repo(repo, {"calc.py": DOCTESTED, "tests/test_x.py": "def test_x():\n    pass\n"})
    (repo / "calc.py").write_text(DOCTESTED.replace("    4\n", "    0\n").replace("a + b", "a - b"))
    result = check(repo, start, [f"{PY} -m pytest -q -p no:cacheprovider --doctest-modules"], tmp_path / "work")
    assert not result.passed and [f.kind for f in result.findings] == ["doctest-changed"]
    assert "calc.py (doctests)" in result.output
    result = check(repo, start, [f"{PY} -m pytest -q -p no:cacheprovider"], tmp_path / "work")
    assert result.passed and not result.ran  # no doctests: the code is the agent's to change


# -- diff coverage: the loop's configuration, the real tool --------------------------------------------------

@pytest.mark.parametrize(("files", "expected"), [
    ({}, "[report]\nexclude_lines = \n"),
    ({".coveragerc": "[run]\nomit = gen/*\n[report]\nexclude_also =\n    if TYPE_CHECKING:\n"},
     "[run]\nomit = gen/*\n\n[report]\nexclude_lines = \n"),
    ({"setup.cfg": "[metadata]\nname = x\n[coverage:run]\nbranch = true\n"},
     "[run]\nbranch = true\n\n[report]\nexclude_lines = \n"),
    ({"pyproject.toml": "[tool.coverage.run]\nsource = ['calc']\nbranch = true\n"},
     "[run]\nsource = \n    calc\nbranch = true\n\n[report]\nexclude_lines = \n"),
])
def test_coverage_reads_the_story_start_configuration_without_exclusions(
        tmp_path: Path, files: dict[str, str], expected: str) -> None:
    from ralph.testintegrity.coverage import trusted_config

    start = make_repo(tmp_path, {"calc.py": "", **files})
    (tmp_path / ".coveragerc").write_text("[report]\nexclude_also =\n    .*\n")  # the agent's: never read
    assert trusted_config(tmp_path, start) == expected


def test_a_module_shadowing_coverage_is_named(tmp_path: Path) -> None:
    from ralph.testintegrity.coverage import shadowing_modules

    start = make_repo(tmp_path, {"calc.py": "", "src/pytest/__init__.py": ""})
    commands = [f"{PY} -m coverage run -m pytest", f"{PY} -m coverage json"]
    assert shadowing_modules(tmp_path, start, commands) == []  # the story-start pytest/ is the person's
    (tmp_path / "coverage.py").write_text("print('{}')\n")
    (tmp_path / "src" / "coverage").mkdir()
    (tmp_path / "src" / "coverage" / "__main__.py").write_text("")
    (tmp_path / "src" / "pytest" / "__init__.py").write_text("x = 1\n")
    assert shadowing_modules(tmp_path, start, commands) == ["coverage.py", "src/coverage/__main__.py",
                                                            "src/pytest/__init__.py"]
    assert shadowing_modules(tmp_path, start, ["coverage run -m unittest"]) == []  # no unittest.py here


def test_a_pragma_does_not_take_the_storys_lines_out_of_the_measure(tmp_path: Path) -> None:
    from ralph.process import run_shell
    from ralph.testintegrity.coverage import changed_lines, measure, parse_report, shell_command, trusted_config

    start = make_repo(tmp_path, {"calc.py": "def add(a, b):\n    raise NotImplementedError\n",
                                 "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"})
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef mul(a, b):  # pragma: no cover\n"
                                      "    return a * b\n")
    (tmp_path / ".coveragerc").write_text("[report]\nexclude_also =\n    .*\n")
    command = shell_command(f"{PY} -m coverage run -m pytest -q -p no:cacheprovider tests",
                            f"{PY} -m coverage json -q -o /dev/stdout", trusted_config(tmp_path, start))
    code, output, _ = run_shell(command, tmp_path, 120)
    report = parse_report(output)
    assert code == 0 and report is not None, output
    coverage = measure(tmp_path, changed_lines(tmp_path, start, RULES), report)
    assert coverage.missed == {"calc.py": [6]} and (coverage.covered, coverage.total) == (2, 3), coverage
    assert not list(Path("/tmp").glob(f"ralph-coveragerc-*{command.split('ralph-coveragerc-')[1][:16]}*"))
