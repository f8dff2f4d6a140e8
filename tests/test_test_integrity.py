"""Test integrity, unit level: test paths, the findings in the diff of the tests, test sections, the
trusted tree.  End to end through the real CLI: tests/test_test_integrity_claude.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ralph.testintegrity.export import build_export, command_files, changes_since
from ralph.testintegrity.findings import findings_for
from ralph.testintegrity.paths import TestRules, matches
from ralph.testintegrity.sections import merge_sections, sections_of
from ralph.testing.project import GIT_IDENTITY

RULES = TestRules()

# -- paths -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "tests/test_calc.py", "test/unit/helpers.py", "pkg/tests/data/golden.json", "test_calc.py", "pkg/calc_test.py",
    "src/calc.test.ts", "src/Button.test.tsx", "web/app.spec.js", "src/__tests__/calc.js",
    "src/__snapshots__/calc.test.ts.snap", "calc/calc_test.go", "calc/testdata/case1.txt", "spec/models/user_spec.rb",
    "tests/integration.rs", "src/test/java/com/x/CalcTest.java", "tests",
])
def test_test_paths(path: str) -> None:
    assert RULES.is_test(path) and RULES.touches(path)


@pytest.mark.parametrize("path", [
    "calc.py", "src/testing_utils.py", "src/contest.py", "src/calc.ts", "main.go", "src/lib.rs", "README.md",
    "ralph/tasks.json", "docs/testing.md",
])
def test_not_test_paths(path: str) -> None:
    assert not RULES.is_protected(path)


@pytest.mark.parametrize("path", [
    "conftest.py", "src/pkg/conftest.py", "pytest.ini", "tox.ini", "noxfile.py", ".coveragerc", "jest.config.js",
    "vitest.config.ts", ".mocharc.yml", "karma.conf.js", "setupTests.ts",
    "sitecustomize.py", "src/usercustomize.py", "src/evil.pth",  # start-up hooks run before any test
])
def test_whole_file_test_configuration(path: str) -> None:
    assert RULES.is_config(path) and RULES.is_protected(path)


def test_section_files_and_config() -> None:
    assert RULES.has_sections("pyproject.toml") and RULES.has_sections("web/package.json")
    assert RULES.has_sections("setup.cfg") and RULES.has_sections("Cargo.toml")
    assert not RULES.has_sections("tests/pyproject.toml")  # inside a test directory: a test file, whole
    rules = TestRules(extra_tests=("checks/",), extra_config=("Makefile",), excluded=("test/fixtures-not/",))
    assert rules.is_test("checks/a.sh") and rules.is_config("Makefile") and not rules.is_test("test/fixtures-not/x")
    assert not TestRules(defaults=False).is_protected("tests/test_calc.py")
    assert rules.with_config(["check.py"]).is_config("check.py")


def test_patterns() -> None:
    assert matches("tests/test_a.py", "tests/") and matches("a/tests/b.py", "tests/")
    assert matches("tests/test_a.py", "tests/test_a.py") and matches("tests/test_a.py", "./tests/test_a.py")
    assert matches("tests/test_a.py", "test_*.py") and matches("tests/unit/test_a.py", "tests/*.py")
    assert matches("pkg/tests/x.py", "pkg/tests/") and not matches("other/tests/x.py", "pkg/tests/")
    assert not matches("tests/test_a.py", "tests/test_b.py") and not matches("x", "")


def test_command_files() -> None:
    paths = ["check.py", "scripts/test.sh", "calc.py"]
    assert command_files(["python3 check.py", "./scripts/test.sh --fast", "pytest tests"], paths) == [
        "check.py", "scripts/test.sh"]
    assert command_files(["echo 'unbalanced"], paths) == []


# -- findings: Python ----------------------------------------------------------------------------------

PY_OLD = """import unittest
import pytest
from calc import add


def expected():
    return 4


def test_add():
    assert add(2, 2) == expected()
    assert add(1, 1) == 2


class CalcTest(unittest.TestCase):
    def test_neg(self):
        self.assertEqual(add(-1, -1), -2)

    def test_raises(self):
        with pytest.raises(TypeError):
            add("a", 1)
"""


def kinds(found: list) -> list[tuple[int | None, str]]:
    return [(f.line, f.kind) for f in found]


def test_python_honest_changes_have_no_findings() -> None:
    new = PY_OLD.replace("assert add(2, 2) == expected()", "assert add(2,2)==expected()  # reformatted")
    new += "\n\ndef test_more():\n    assert add(3, 3) == 6\n\n\n@pytest.mark.skip('not yet')\ndef test_new_skipped():\n    pass\n"
    new = new.replace("def expected():\n    return 4", "def expected():\n    return 2 + 2")  # helpers: the trusted run decides
    assert findings_for("tests/test_calc.py", PY_OLD, new) == []


def test_python_skips() -> None:
    new = PY_OLD.replace("def test_add", "@pytest.mark.skip(reason='flaky')\ndef test_add")
    new = new.replace("    def test_neg(self):\n", "    @unittest.skip('later')\n    def test_neg(self):\n        self.skipTest('x')\n")
    found = findings_for("tests/test_calc.py", PY_OLD, new + "\npytestmark = pytest.mark.xfail\n")
    assert kinds(found) == [(10, "skip"), (17, "skip"), (19, "skip"), (26, "skip")], found
    assert "in test_add" in found[0].message and "CalcTest.test_neg" in found[1].message
    assert str(found[0]).startswith("tests/test_calc.py:10: new skip `pytest.mark.skip(reason='flaky')`")


def test_python_removed_and_changed_assertions_and_tests() -> None:
    new = PY_OLD.replace("    assert add(1, 1) == 2\n", "").replace("add(-1, -1), -2", "add(-1, -1), add(-1, -1)")
    new = new.replace("    def test_raises(self):\n        with pytest.raises(TypeError):\n            add(\"a\", 1)\n", "")
    found = findings_for("tests/test_calc.py", PY_OLD, new)
    assert kinds(found) == [(12, "assertion-removed"), (17, "assertion-removed"), (19, "test-removed")], found
    assert "`assert add(1, 1) == 2` in test_add" in found[0].message
    assert "CalcTest.test_raises removed" in found[2].message


PARAM_OLD = """import pytest


@pytest.mark.parametrize("a, b, total", [(2, 2, 4), (1, 2, 3)])
def test_add(a, b, total):
    assert add(a, b) == total


class TestMore:
    def test_zero(self):
        assert add(0, 0) == 0
"""


def test_python_parameter_sets_lost_and_dunder_test_are_findings() -> None:
    shrunk = PARAM_OLD.replace("[(2, 2, 4), (1, 2, 3)]", "[(2, 2, 4)]")
    assert [(f.line, f.kind) for f in findings_for("tests/t.py", PARAM_OLD, shrunk)] == [(4, "case-removed")]
    grown = PARAM_OLD.replace("[(2, 2, 4), (1, 2, 3)]", "[(2, 2, 4), (1, 2, 3), (0, 1, 1)]")
    assert findings_for("tests/t.py", PARAM_OLD, grown) == []  # a new case is new test work
    named = PARAM_OLD.replace("[(2, 2, 4), (1, 2, 3)]", "CASES").replace("import pytest", "import pytest\nCASES = []")
    assert [f.kind for f in findings_for("tests/t.py", PARAM_OLD, named)] == ["case-removed", "case-removed"]
    dropped = PARAM_OLD.replace('@pytest.mark.parametrize("a, b, total", [(2, 2, 4), (1, 2, 3)])\n', "")
    assert {f.kind for f in findings_for("tests/t.py", PARAM_OLD, dropped)} == {"case-removed"}
    hidden = "__test__ = False\n" + PARAM_OLD.replace("class TestMore:\n", "class TestMore:\n    __test__ = 0\n")
    found = findings_for("tests/t.py", PARAM_OLD, hidden)
    assert [(f.line, f.kind) for f in found] == [(1, "skip"), (11, "skip")], found
    assert "TestMore" in found[1].message
    kept = PARAM_OLD.replace("class TestMore:\n", "class TestMore:\n    __test__ = True\n")
    assert findings_for("tests/t.py", PARAM_OLD, kept) == []


def test_python_renamed_test_is_removed() -> None:
    found = findings_for("tests/test_calc.py", PY_OLD, PY_OLD.replace("def test_add", "def _test_add"))
    assert [f.kind for f in found] == ["test-removed"]


@pytest.mark.parametrize("source, line", [
    ("import os\nos._exit(0)\n", 2),
    ("import sys\nsys.exit(0)\n", 2),
    ("from os import _exit as leave\n", 1),
    ("import atexit, os\natexit.register(os._exit, 0)\n", 2),
    ("import pytest\ndef pytest_sessionstart(session):\n    pytest.exit('ok', returncode=0)\n", 3),
    ("raise SystemExit(0)\n", 1),
])
def test_python_process_exits_in_new_files(source: str, line: int) -> None:
    found = findings_for("tests/conftest.py", None, source)
    assert found and found[0].line == line and found[0].kind == "exit", found


def test_python_exit_inside_a_test_is_no_finding_and_a_new_file_gets_only_the_exit_check() -> None:
    source = "import sys, pytest\n\ndef test_cli():\n    with pytest.raises(SystemExit):\n        sys.exit(2)\n"
    assert findings_for("tests/test_cli.py", None, source) == []
    helper = "import sys\n\ndef main():\n    sys.exit(run())\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
    assert findings_for("tests/test_cli.py", None, helper) == []  # a helper, and code that runs only as a script
    fixture = "import pytest, sys\n\n@pytest.fixture(autouse=True)\ndef stop():\n    sys.exit(0)\n"
    assert kinds(findings_for("tests/conftest.py", None, fixture)) == [(5, "exit")]
    setup = "import sys, unittest\n\nclass T(unittest.TestCase):\n    def setUp(self):\n        sys.exit(0)\n"
    assert kinds(findings_for("tests/test_t.py", None, setup)) == [(5, "exit")]
    assert findings_for("tests/test_new.py", None, "import pytest\n\n@pytest.mark.skip\ndef test_x():\n    assert 0\n") == []
    found = findings_for("tests/test_calc.py", PY_OLD, PY_OLD + "\nimport os\nos._exit(0)\n")
    assert kinds(found) == [(24, "exit")]


def test_python_deleted_and_unparsable() -> None:
    assert kinds(findings_for("tests/test_calc.py", PY_OLD, None)) == [(None, "deleted")]
    assert [f.kind for f in findings_for("tests/test_calc.py", PY_OLD, "def test_add(:\n")] == ["unparsable"]


# -- findings: JS/TS, Go, Rust, others -----------------------------------------------------------------

JS_OLD = """import { add } from "./calc";

describe("calc", () => {
  it("adds", () => {
    expect(add(2, 2)).toBe(4);
  });
  test("subtracts", () => {
    expect(add(2, -1)).toBe(1);
  });
});
"""


def test_js_findings() -> None:
    added = JS_OLD.replace("});\n});", "});\n  it(\"zero\", () => {\n    expect(add(0, 0)).toBe(0);\n  });\n});")
    assert findings_for("src/calc.test.ts", JS_OLD, added) == []
    renamed = findings_for("src/calc.test.ts", JS_OLD, JS_OLD.replace('"adds"', '"adds two numbers"'))
    assert kinds(renamed) == [(4, "test-removed")] and "'adds'" in renamed[0].message
    new = JS_OLD.replace('it("adds"', 'it.skip("adds"').replace("    expect(add(2, -1)).toBe(1);", "    // expect(add(2, -1)).toBe(1);")
    new = new.replace('describe("calc"', 'process.exit(0);\ndescribe("calc"')
    found = findings_for("src/calc.test.ts", JS_OLD, new)
    assert kinds(found) == [(3, "exit"), (5, "skip"), (8, "assertion-removed")], found
    assert kinds(findings_for("web/a.spec.js", JS_OLD, JS_OLD.replace('test("subtracts"', 'xtest("subtracts"'))) == [(7, "skip")]
    assert kinds(findings_for("web/a.spec.js", JS_OLD, JS_OLD.replace('it("adds"', 'it.only("adds"'))) == [(4, "skip")]
    assert kinds(findings_for("src/__tests__/new.js", None, "process.exit(0)\n")) == [(1, "exit")]


GO_OLD = """package calc

import (
\t"os"
\t"testing"
)

func TestAdd(t *testing.T) {
\tif Add(2, 2) != 4 {
\t\tt.Errorf("Add(2, 2) = %d", Add(2, 2))
\t}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
"""


def test_go_findings() -> None:
    assert findings_for("calc_test.go", GO_OLD, GO_OLD + "\nfunc TestSub(t *testing.T) {}\n") == []
    new = GO_OLD.replace("\tif Add", "\tt.Skip(\"later\")\n\tif Add").replace("\t\tt.Errorf(\"Add(2, 2) = %d\", Add(2, 2))\n", "")
    new = new.replace("os.Exit(m.Run())", "os.Exit(0)")
    found = findings_for("calc_test.go", GO_OLD, new)
    assert kinds(found) == [(9, "skip"), (10, "assertion-removed"), (14, "exit")], found
    assert kinds(findings_for("calc_test.go", GO_OLD, GO_OLD.replace("func TestAdd", "func testAdd"))) == [(8, "test-removed")]


RS_OLD = """use calc::add;

#[test]
fn adds() {
    assert_eq!(add(2, 2), 4);
}

#[test]
fn subtracts() {
    assert_eq!(add(2, -1), 1);
}
"""


def test_rust_findings() -> None:
    new = RS_OLD.replace("#[test]\nfn adds", "#[test]\n#[ignore]\nfn adds").replace("assert_eq!(add(2, -1), 1);", "")
    found = findings_for("tests/calc.rs", RS_OLD, new)
    assert kinds(found) == [(4, "skip"), (10, "assertion-removed")], found
    gone = findings_for("tests/calc.rs", RS_OLD, RS_OLD.split("#[test]\nfn subtracts")[0])
    assert kinds(gone) == [(9, "test-removed"), (10, "assertion-removed")], gone
    assert kinds(findings_for("tests/new.rs", None, "fn main() { std::process::exit(0) }\n")) == [(1, "exit")]


def test_other_languages() -> None:
    old = 'describe Calc do\n  it "adds" do\n    expect(add(2, 2)).to eq(4)\n  end\nend\n'
    new = old.replace('it "adds"', 'xit "adds"')
    assert kinds(findings_for("spec/calc_spec.rb", old, new)) == [(2, "skip")]
    java = "class CalcTest {\n  @Test\n  void adds() { assertEquals(4, add(2, 2)); }\n}\n"
    found = findings_for("src/test/java/CalcTest.java", java, java.replace("  @Test\n", "  @Test\n  @Disabled\n"))
    assert kinds(found) == [(3, "skip")], found


# -- sections ------------------------------------------------------------------------------------------

PYPROJECT_START = """[project]
name = "calc"  # the name
dependencies = []

[tool.pytest.ini_options]
addopts = "-q"
testpaths = ["tests"]

[tool.coverage.run]
branch = true
"""


def test_pyproject_test_sections_restored_rest_kept() -> None:
    agent = PYPROJECT_START.replace("dependencies = []", 'dependencies = ["attrs"]').replace(
        'addopts = "-q"', 'addopts = "-q -p no:calc --co"').replace("branch = true", "branch = false")
    agent += "\n[tool.ruff]\nline-length = 100\n"
    merged = merge_sections("pyproject.toml", agent, PYPROJECT_START)
    assert merged is not None
    assert 'dependencies = ["attrs"]' in merged and "[tool.ruff]" in merged and "# the name" in merged
    assert 'addopts = "-q"\n' in merged and "--co" not in merged and "branch = true" in merged
    assert sections_of("pyproject.toml", merged) == sections_of("pyproject.toml", PYPROJECT_START)
    added = merge_sections("pyproject.toml", '[project]\nname = "x"\n\n[tool.pytest.ini_options]\naddopts = "--co"\n', None)
    assert added is not None and "pytest" not in added and 'name = "x"' in added
    assert merge_sections("pyproject.toml", "[broken", PYPROJECT_START) == PYPROJECT_START
    assert merge_sections("pyproject.toml", None, PYPROJECT_START) == PYPROJECT_START


def test_package_json_test_scripts_and_tool_keys() -> None:
    start = json.dumps({"name": "calc", "scripts": {"build": "tsc", "test": "npm run unit", "unit": "jest"},
                        "jest": {"bail": True}, "devDependencies": {"jest": "29"}})
    agent = json.dumps({"name": "calc", "scripts": {"build": "tsc -p .", "test": "npm run unit", "unit": "true",
                                                      "test:watch": "jest --watch"},
                        "jest": {"testPathIgnorePatterns": ["calc"]}, "devDependencies": {"jest": "29", "x": "1"}})
    merged = json.loads(merge_sections("package.json", agent, start) or "")
    assert merged["scripts"] == {"build": "tsc -p .", "test": "npm run unit", "unit": "jest"}
    assert merged["jest"] == {"bail": True} and merged["devDependencies"] == {"jest": "29", "x": "1"}


def test_setup_cfg_and_cargo_sections() -> None:
    start = "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -q\n"
    agent = "[metadata]\nname = calc2\n\n[tool:pytest]\naddopts = --co\n\n[flake8]\nmax-line-length = 99\n"
    merged = merge_sections("setup.cfg", agent, start) or ""
    assert "name = calc2" in merged and "--co" not in merged and "addopts = -q" in merged and "[flake8]" in merged
    cargo = '[package]\nname = "calc"\n\n[[test]]\nname = "it"\nharness = true\n'
    merged = merge_sections("Cargo.toml", cargo.replace('"calc"', '"calc2"').replace("harness = true", "harness = false"), cargo) or ""
    assert 'name = "calc2"' in merged and "harness = true" in merged


# -- the trusted tree --------------------------------------------------------------------------------


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    (path / "tests").mkdir(parents=True)
    (path / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (path / "tests" / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    (path / "pyproject.toml").write_text(PYPROJECT_START)
    (path / "check.py").write_text("print('checked')\n")
    (path / ".gitignore").write_text(".venv/\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    return path


def test_plugin_modules_of_the_story_start_config_are_test_configuration(repo: Path, tmp_path: Path) -> None:
    """A pytest plugin the story-start conftest or addopts loads decides the run as much as the conftest does."""
    from ralph.testintegrity.check import check_tests
    from ralph.testintegrity.export import plugin_files, tree_entries

    (repo / "tests" / "conftest.py").write_text("pytest_plugins = ('helpers.fixtures', \"no_such_module\")\n")
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p helpers.marks -p no:cacheprovider\n")
    for name in ("__init__", "fixtures", "marks", "unrelated"):
        (repo / "helpers").mkdir(exist_ok=True)
        (repo / "helpers" / f"{name}.py").write_text("\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "plugins")
    start = git(repo, "rev-parse", "HEAD").strip()
    assert sorted(plugin_files(repo, start, tree_entries(repo, start))) == [
        "helpers/__init__.py", "helpers/fixtures.py", "helpers/marks.py"]  # importing a module runs its package
    (repo / "helpers" / "unrelated.py").write_text("x = 1\n")  # code: no test change
    assert not check_tests(repo, start, RULES, ["true"], None).ran
    (repo / "helpers" / "fixtures.py").write_text("def pytest_collection_modifyitems(items):\n    items.clear()\n")
    check = check_tests(repo, start, RULES, ["true"], None, workdir=tmp_path)
    assert check.ran and check.changes.changed == ["helpers/fixtures.py"] and check.export is not None
    assert check.export.restored == ["helpers/fixtures.py"]


def test_untouched_tests_are_no_change(repo: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "helper.py").write_text("x = 1\n")
    assert not changes_since(repo, start, RULES).touched


def test_changes_and_the_trusted_tree(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text("def test_add():\n    pass\n")  # uncommitted
    (repo / "tests" / "test_aaa.py").write_text("import os\nos._exit(0)\n")  # untracked
    (repo / "conftest.py").write_text("import os\n")
    git(repo, "add", "conftest.py")
    git(repo, "commit", "-q", "-m", "work")
    (repo / "pyproject.toml").write_text(PYPROJECT_START.replace('addopts = "-q"', 'addopts = "--co"') + "\n[tool.x]\ny = 1\n")
    (repo / ".venv").mkdir()
    (repo / ".venv" / "marker").write_text("venv")
    changes = changes_since(repo, start, RULES)
    assert changes.changed == ["tests/test_calc.py"] and sorted(changes.added) == ["conftest.py", "tests/test_aaa.py"]
    assert changes.sections == ["pyproject.toml"] and changes.deleted == []
    assert changes.texts["tests/test_aaa.py"] == (None, "import os\nos._exit(0)\n")

    export = build_export(repo, start, RULES, tmp_path / "tree", link=[".venv", "node_modules"])
    tree = tmp_path / "tree"
    assert (tree / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"  # the agent's code
    assert "assert add(2, 2) == 4" in (tree / "tests" / "test_calc.py").read_text()  # the story-start test
    assert not (tree / "tests" / "test_aaa.py").exists() and not (tree / "conftest.py").exists()
    pyproject = (tree / "pyproject.toml").read_text()
    assert 'addopts = "-q"' in pyproject and "[tool.x]" in pyproject
    assert (tree / ".venv").is_symlink() and (tree / ".venv" / "marker").read_text() == "venv"
    assert export.restored == ["tests/test_calc.py"] and sorted(export.set_aside) == ["conftest.py", "tests/test_aaa.py"]
    assert export.merged == ["pyproject.toml"] and export.linked == [".venv"]
    # the project itself is as the agent left it, and git's own index untouched
    assert (repo / "tests" / "test_aaa.py").exists() and "M tests/test_calc.py" in git(repo, "status", "--porcelain")


def test_allowed_paths_are_the_agents(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "tests" / "test_calc.py").write_text("def test_add():\n    assert True\n")
    assert not changes_since(repo, start, RULES, allowed=["tests/test_calc.py"]).touched
    build_export(repo, start, RULES, tmp_path / "tree", allowed=["tests/"])
    assert (tmp_path / "tree" / "tests" / "test_calc.py").read_text() == "def test_add():\n    assert True\n"


def test_a_symlinked_test_directory_is_replaced_not_followed(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "test_calc.py").write_text("def test_add():\n    pass\n")
    git(repo, "rm", "-q", "-r", "tests")
    os.symlink(elsewhere, repo / "tests")
    fifo = repo / "test_fifo.py"
    os.mkfifo(fifo)  # never opened: reading it would block the loop
    changes = changes_since(repo, start, RULES)
    assert "tests/test_calc.py" in changes.deleted and "tests" in changes.added
    build_export(repo, start, RULES, tmp_path / "tree")
    tree = tmp_path / "tree"
    assert not (tree / "tests").is_symlink() and "assert add(2, 2) == 4" in (tree / "tests" / "test_calc.py").read_text()
    assert (elsewhere / "test_calc.py").read_text() == "def test_add():\n    pass\n"


def test_a_deleted_test_with_findings_and_scripts_named_by_commands(repo: Path, tmp_path: Path) -> None:
    from ralph.testintegrity.check import check_tests

    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "check.py").write_text("print('weakened')\n")
    (repo / "tests" / "test_calc.py").unlink()
    (tmp_path / "work").mkdir()
    check = check_tests(repo, start, RULES, ["python3 check.py"], None, workdir=tmp_path / "work")
    assert check.ran and check.passed is False
    assert [str(f) for f in check.findings] == ["tests/test_calc.py: test file deleted (it existed when the story started)"]
    assert "checked" in check.output and "weakened" not in check.output  # check.py ran as it was at story start
    assert "check.py" in check.changes.changed
    assert list((tmp_path / "work").iterdir()) == []  # the trusted tree is gone


def test_ignored_test_code_counts_and_bytecode_only_when_new(repo: Path, tmp_path: Path) -> None:
    import time

    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / ".gitignore").write_text(".venv/\ntests/conftest.py\n*.log\n__pycache__/\nout/\n")
    (repo / "tests" / "run.log").write_text("output of a test run\n")  # data, not code
    (repo / ".venv" / "lib" / "tests").mkdir(parents=True)
    (repo / ".venv" / "lib" / "tests" / "test_dep.py").write_text("import os\nos._exit(0)\n")  # a dependency's
    cache = repo / "tests" / "__pycache__"
    cache.mkdir()
    (cache / "test_calc.cpython-311-pytest-8.0.pyc").write_bytes(b"old")
    (cache / "helper.cpython-311.pyc").write_bytes(b"not a test module")
    time.sleep(0.05)
    from ralph.loop.gates import file_clock

    since = file_clock()
    assert not changes_since(repo, start, RULES, ignored_since=since).touched  # a cache from before counts for nothing
    (cache / "test_calc.cpython-311-pytest-8.0.pyc").write_bytes(b"forged")
    assert changes_since(repo, start, RULES, ignored_since=since).ignored == ["tests/__pycache__/test_calc.cpython-311-pytest-8.0.pyc"]
    (repo / "tests" / "conftest.py").write_text("import os\n\ndef pytest_configure(config):\n    os._exit(0)\n")
    (repo / "out").mkdir()
    (repo / "out" / "test_zz.py").write_text("import os\nos._exit(0)\n")
    changes = changes_since(repo, start, RULES)
    assert changes.ignored == ["out/test_zz.py", "tests/conftest.py"] and changes.touched
    from ralph.testintegrity.check import check_tests

    (tmp_path / "work").mkdir()
    check = check_tests(repo, start, RULES, ["python3 -c 'import os; assert not os.path.exists(\"tests/conftest.py\")'"],
                        None, workdir=tmp_path / "work")
    assert check.passed is False and check.ran  # named as a finding; the trusted run never had it
    assert [str(f) for f in check.findings] == [
        "out/test_zz.py:2: process exit `os._exit` in a new test file",
        "tests/conftest.py:4: process exit `os._exit` in a new test file",
    ]
    assert "[exit 0]" in check.output and "tests/conftest.py (ignored by git" in check.output


def test_submodules_are_linked_into_the_trusted_tree(repo: Path, tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "lib.py").write_text("VALUE = 1\n")
    git(sub, "init", "-q", "-b", "main")
    git(sub, "add", "-A")
    git(sub, "commit", "-q", "-m", "sub")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor/sub")
    git(repo, "commit", "-q", "-m", "submodule")
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "tests" / "test_calc.py").write_text("def test_add():\n    pass\n")
    export = build_export(repo, start, RULES, tmp_path / "tree")
    assert export.linked == ["vendor/sub"]
    assert (tmp_path / "tree" / "vendor" / "sub" / "lib.py").read_text() == "VALUE = 1\n"


# -- diff coverage ---------------------------------------------------------------------------------------


def test_diff_coverage_of_the_storys_changed_lines(repo: Path) -> None:
    import sys

    from ralph.testintegrity.coverage import changed_lines, measure, parse_report, shell_command
    from ralph.process import run_shell

    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    # product\n    result = a * b\n"
                                  "    return result\n")
    (repo / "util.py").write_text("X = 1\n\nY = 2\n")  # untracked, never imported by a test
    (repo / "tests" / "test_new.py").write_text("from calc import add\n\ndef test_more():\n    assert add(1, 2) == 3\n")
    changed = changed_lines(repo, start, RULES)
    assert changed == {"calc.py": set(range(2, 9)), "util.py": {1, 2, 3}}  # the tests are not measured
    py = sys.executable
    command = shell_command(f"{py} -m coverage run -m pytest -q -p no:cacheprovider tests",
                            f"{py} -m coverage json -q -o /dev/stdout")
    code, output, _ = run_shell(command, repo, 120)
    assert code == 0, output
    report = parse_report(output)
    assert report is not None and "calc.py" in report["files"]
    coverage = measure(repo, changed, report)
    # changed statements: calc.py 2, 5, 7, 8 (2 and the def on 5 ran), util.py 1, 3 (never imported)
    assert (coverage.covered, coverage.total) == (2, 6), coverage
    assert coverage.missed == {"calc.py": [7, 8], "util.py": [1, 3]} and coverage.describe() == "calc.py:7-8; util.py:1, 3"
    assert round(coverage.percent) == 33
    assert not (repo / ".coverage").exists() and "?? util.py" in git(repo, "status", "--porcelain")
    assert parse_report("no marker") is None


def test_pytest_never_finds_config_above_the_trusted_tree(repo: Path, tmp_path: Path) -> None:
    import sys

    from ralph.testintegrity.check import check_tests

    (repo / "pyproject.toml").unlink()  # no pytest configuration in the project: pytest searches upward
    git(repo, "commit", "-qam", "no pyproject")
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 2) == 0\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")  # planted where the agent can write (the temp dir)
    (work / "conftest.py").write_text("import os\nos._exit(0)\n")
    check = check_tests(repo, start, RULES, [f"{sys.executable} -m pytest -q -p no:cacheprovider tests"], None,
                        workdir=work)
    assert check.ran and check.passed is False and "1 failed" in check.output, check.output


def test_a_command_naming_the_project_by_its_absolute_path_runs_the_trusted_tree(repo: Path, tmp_path: Path) -> None:
    from ralph.testintegrity.check import check_tests, retarget

    tree = Path("/tmp/t/tree")
    assert retarget(f"cd {repo} && pytest {repo}/tests '{repo}'", repo, tree) == f"cd {tree} && pytest {tree}/tests '{tree}'"
    assert retarget(f"pytest {repo}-other/tests", repo, tree) == f"pytest {repo}-other/tests"  # another folder
    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "check.py").write_text("print('weakened')\n")
    (tmp_path / "work").mkdir()
    check = check_tests(repo, start, RULES, [f"python3 {repo}/check.py"], None, workdir=tmp_path / "work")
    assert "checked" in check.output and "weakened" not in check.output, check.output


def test_a_test_plugin_written_into_the_projects_virtualenv_is_named(repo: Path) -> None:
    import time

    from ralph.loop.gates import file_clock
    from ralph.testintegrity.export import environment_changes

    site = repo / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "honest-1.0.dist-info").mkdir(parents=True)
    (site / "honest-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nx = y:z\n")
    (site / "old.pth").write_text("import os\n")
    time.sleep(0.05)  # past the coarse clock's tick
    since = file_clock()
    assert environment_changes(repo, [".venv"], since) == []
    (site / "evil-1.0.dist-info").mkdir()
    (site / "evil-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nevil = evil_plugin\n")
    (site / "zz.pth").write_text("import os; os._exit(0)\n")
    (site / "honest-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nx = y:w\n")  # no plugin
    assert environment_changes(repo, [".venv", "node_modules"], since) == [
        ".venv/lib/python3.11/site-packages/evil-1.0.dist-info/entry_points.txt",
        ".venv/lib/python3.11/site-packages/zz.pth",
    ]
    assert environment_changes(repo, [".venv"], None) == []


def test_a_tree_git_cannot_build_fails_the_check_not_the_loop(repo: Path, tmp_path: Path, monkeypatch) -> None:
    import ralph.testintegrity.check as check_module

    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "tests" / "test_calc.py").write_text("def test_add():\n    pass\n")

    def refuse(*args, **kwargs):  # what git add says about a file it cannot open
        raise subprocess.CalledProcessError(128, ["git", "add"], stderr=b"error: open(\"x\"): Permission denied")

    monkeypatch.setattr(check_module, "build_export", refuse)
    (tmp_path / "work").mkdir()
    check = check_module.check_tests(repo, start, RULES, ["true"], None, workdir=tmp_path / "work")
    assert check.passed is False and "Permission denied" in check.output and list((tmp_path / "work").iterdir()) == []


def test_no_test_at_story_start_leaves_the_trusted_run_nothing_to_run(tmp_path: Path) -> None:
    """A story that adds the first tests: whatever a command says of a tree without tests is no failure; the
    findings still judge what was added, and a story-start test that was deleted still runs."""
    from ralph.testintegrity.check import check_tests

    path = tmp_path / "repo"
    (path / "tests").mkdir(parents=True)
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "conftest.py").write_text("\n")  # test configuration is no test: nothing to run still
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    start = git(path, "rev-parse", "HEAD").strip()
    (path / "tests" / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    check = check_tests(path, start, RULES, ["false"], None, workdir=tmp_path)
    assert check.passed and check.nothing_to_run and not check.ran, check.output
    assert check.export is not None and check.export.set_aside == ["tests/test_calc.py"]
    assert "no test existed when the story started" in check.output
    (path / "tests" / "conftest.py").write_text("import os\n\nos._exit(0)\n")
    check = check_tests(path, start, RULES, ["false"], None, workdir=tmp_path)
    assert not check.passed and check.nothing_to_run and [f.line for f in check.findings] == [3]

    (path / "tests" / "conftest.py").unlink()
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "the first tests")
    second = git(path, "rev-parse", "HEAD").strip()
    (path / "tests" / "test_calc.py").unlink()  # the next story's start has a test: deleting it runs it anyway
    check = check_tests(path, second, RULES, ["test -f tests/test_calc.py && false"], None, workdir=tmp_path)
    assert check.ran and not check.nothing_to_run and not check.passed and check.exit_code == 1


def test_one_list_of_trusted_tree_links_serves_the_gate_and_the_sandboxes(tmp_path: Path) -> None:
    """The gate's default ``link`` and what the docker sandbox mounts for a gate run in the trusted tree
    are ``ralph.api.testintegrity.TRUSTED_TREE_LINKS`` (once three copies that could drift apart)."""
    import subprocess

    from ralph.api.testintegrity import TRUSTED_TREE_LINKS
    from ralph.testing.project import settings_for
    from ralph_plugins.gates.config import TestIntegrityConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    assert TestIntegrityConfig().link == list(TRUSTED_TREE_LINKS)
    assert {".venv", "node_modules"} <= set(TRUSTED_TREE_LINKS)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert DockerSandboxRunner(settings_for(tmp_path, environ={}))._dependency_dirs() == list(TRUSTED_TREE_LINKS)
    (tmp_path / "ralph.toml").write_text('[test-integrity]\nlink = [".venv"]\n', encoding="utf-8")
    assert DockerSandboxRunner(settings_for(tmp_path, environ={}))._dependency_dirs() == [".venv"]


# -- red team 4: what the test run loads that its file names did not say ----------------------------------------


@pytest.mark.parametrize("path", [
    "testing/helpers.py", "pkg/testing/util.py", "fixtures/add.json", "src/__fixtures__/a.js", "test_utils/x.py",
    "testutils/x.py", "testlib/x.sh", "test-fixtures/x.json",
])
def test_test_folders_of_other_layouts_are_tests(path: str) -> None:
    assert RULES.is_test(path)


@pytest.mark.parametrize("path", [
    "sitecustomize/__init__.py", "src/usercustomize/__init__.py",  # start-up hooks as packages
    "zz-1.0.DIST-INFO/entry_points.txt", "zz-1.0.Egg-Info/PKG-INFO", "zz.Egg-Link",  # metadata, whatever the case
])
def test_start_up_packages_and_metadata_in_any_case_are_test_configuration(path: str) -> None:
    assert RULES.is_config(path)


def test_a_module_shadowing_the_environments_on_an_import_root_is_test_configuration(tmp_path: Path) -> None:
    """The standard library's names and the interpreter's installed modules (pytest's ``py``), on the root,
    ``src/`` or a ``PYTHONPATH`` folder of the commands; Python code only, and not the project's own package."""
    from ralph.testintegrity.shadows import environment_modules, own_modules, pythonpath_roots

    names = environment_modules(tmp_path)
    assert {"argparse", "shlex", "json", "py", "pluggy"} <= names and "calc" not in names
    rules = RULES.with_environment(names, pythonpath_roots(["PYTHONPATH=lib:./vendor/ python -m pytest"]))
    for path in ("argparse.py", "shlex/__init__.py", "shlex/extra.py", "py.py", "src/json/__init__.py",
                 "lib/argparse.py", "vendor/argparse.cpython-312-x86_64-linux-gnu.so"):
        assert rules.is_config(path), path
    for path in ("calc.py", "pkg/argparse.py", "html/index.html", "docs/json.md", "other/argparse.py"):
        assert not rules.is_config(path), path
    # what the project held on an import root at the story's start is its own code (an installed copy aside)
    assert own_modules(["calc/__init__.py", "src/json/__init__.py", "py.py", "tools/argparse.py", "README.md"],
                       ["", "src/"]) == {"calc", "json", "py"}


def test_a_folder_inside_the_project_on_sys_path_is_not_the_environment(tmp_path: Path, monkeypatch) -> None:
    """An editable install puts the project (or its src/) on ``sys.path``: its modules are the project's."""
    import sys

    from ralph.testintegrity.shadows import environment_modules

    (tmp_path / "src" / "mypkg").mkdir(parents=True)
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text("")
    outside = tmp_path.parent / f"{tmp_path.name}-site"
    (outside / "otherpkg").mkdir(parents=True)
    (outside / "otherpkg" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "src"), str(outside)])
    names = environment_modules(tmp_path)
    assert "mypkg" not in names and "otherpkg" in names


def test_what_a_conftest_takes_hooks_and_fixtures_from_is_test_configuration() -> None:
    from ralph.testintegrity.imports import loaded_modules

    files = {
        "tests/conftest.py": "from helpers.fixtures import *\nfrom helpers.hooks import pytest_configure\n"
                             "from helpers.named import numbers\nfrom calc import add\nimport helpers.plain\n",
        "helpers/__init__.py": "", "helpers/fixtures.py": "from .more import *\n", "helpers/more.py": "",
        "helpers/hooks.py": "", "helpers/named.py": "import pytest\n\n@pytest.fixture\ndef numbers():\n    return 2\n",
        "helpers/plain.py": "", "calc.py": "def add(a, b):\n    return a + b\n",
        "plugins/__init__.py": "", "plugins/checks.py": "pytest_plugins = ['plugins.nested']\n", "plugins/nested.py": "",
        "pytest.ini": "",
    }
    configs = {"tests/conftest.py": files["tests/conftest.py"]}
    found = loaded_modules(set(files), configs, {"pytest.ini": ["plugins.checks"]},
                           lambda paths: {p: files[p] for p in paths if p in files})
    assert sorted(found) == ["helpers/__init__.py", "helpers/fixtures.py", "helpers/hooks.py", "helpers/more.py",
                             "helpers/named.py", "plugins/__init__.py", "plugins/checks.py", "plugins/nested.py"]


def test_a_pytest_section_header_is_read_as_pytest_and_configparser_read_it() -> None:
    cfg = "[metadata]\nname = calc\n\n[tool:pytest]  # test settings\naddopts = -k 'not add'\n"
    assert sections_of("setup.cfg", cfg) == ["[tool:pytest]  # test settings\naddopts = -k 'not add'\n"]
    assert merge_sections("setup.cfg", cfg, "[metadata]\nname = calc\n") == "[metadata]\nname = calc\n\n"
    value = "[metadata]\ndescription =\n  a text\n  [tool:pytest]\n"  # a value's continuation line: no header
    assert sections_of("setup.cfg", value) is None
    for ambiguous in ("[metadata]\n [tool:pytest]\naddopts = -x\n", "[a] ; [tool:pytest]\n"):
        assert sections_of("setup.cfg", ambiguous) == "<does not parse>"  # the parsers disagree: taken whole
        assert merge_sections("setup.cfg", ambiguous, "[metadata]\n") == "[metadata]\n"


@pytest.mark.parametrize(("source", "kind"), [
    ("import unittest\n\ndef add(a, b):\n    raise unittest.SkipTest('no')\n", "code-skip"),
    ("from unittest import SkipTest\n", "code-skip"),
    ("import pytest\n\ndef add(a, b):\n    pytest.skip('no')\n", "code-skip"),
    ("import pytest\n\ndef add(a, b):\n    pytest.exit('x', 0)\n", "code-exit"),
    ("import atexit, os\n\natexit.register(os._exit, 0)\n", "code-exit"),
    ("def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n", "code-result"),
    ("from _pytest import runner\n", "code-internals"),
])
def test_code_that_skips_or_ends_the_test_run_is_a_finding(source: str, kind: str) -> None:
    from ralph.testintegrity.codefindings import code_findings

    assert kind in {f.kind for f in code_findings("calc.py", "", source)}
    assert code_findings("calc.py", source, source) == []  # only what the story added
    assert code_findings("calc.py", None, source)  # a new file too


def test_ordinary_code_is_no_finding() -> None:
    from ralph.testintegrity.codefindings import code_findings

    cli = "import sys\n\ndef main():\n    sys.exit(2)\n\nif __name__ == '__main__':\n    raise SystemExit(main())\n"
    assert code_findings("cli.py", "", cli) == [] and code_findings("x.py", "", "def (:\n") == []
    daemon = "import os\n\ndef detach():\n    if os.fork():\n        os._exit(0)\n    os.setsid()\n"
    assert code_findings("daemon.py", "", daemon) == []  # a forked parent's plain call: how it ends
    assert [f.kind for f in code_findings("x.py", "", "import os, signal\nsignal.signal(15, os._exit)\n")] == ["code-exit"]


def test_code_findings_fail_the_check_without_a_test_change(repo: Path, tmp_path: Path) -> None:
    """No test changed (the look would return at once), yet ``add`` now skips its test: a violation, named."""
    from ralph.testintegrity.check import check_tests

    start = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("import unittest\n\ndef add(a, b):\n    raise unittest.SkipTest('no')\n")
    check = check_tests(repo, start, RULES, ["true"], None, workdir=tmp_path)
    assert not check.passed and not check.ran and not check.changes.touched
    assert [f.kind for f in check.findings] == ["code-skip"] and "calc.py:4" in check.output
    assert check_tests(repo, start, RULES, ["true"], None, allowed=["calc.py"]).passed  # a person allowed it
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    assert check_tests(repo, start, RULES, ["true"], None).passed
    # the next check reuses the last one's index (kept in memory): a change of the same size since is seen too
    (repo / "calc.py").write_text("def add(a, b):\n    f = os._exit\n")
    assert [f.kind for f in check_tests(repo, start, RULES, ["true"], None).findings] == ["code-exit"]


def test_target_is_not_linked_into_the_trusted_tree_by_default() -> None:
    """pytest recurses into ``target/`` and a build tool trusts the output there: the agent's to write."""
    from ralph.testintegrity.export import TRUSTED_TREE_LINKS

    assert "target" not in TRUSTED_TREE_LINKS
