"""Which files are tests and test configuration: language-aware defaults plus the project's config.

A path (POSIX, relative to the project root) is

- a **test path** when one of its directory names (or its own name) is a test directory
  (``tests/``, ``test/``, ``spec/``, ``__tests__/``, ``testdata/`` ...) or its name matches a test
  file pattern (``test_*.py``, ``*_test.go``, ``*.test.ts``, ``*.spec.js``, ``*_spec.rb`` ...);
- **test configuration** as a whole file (``conftest.py`` anywhere, ``pytest.ini``, ``tox.ini``,
  jest/vitest/mocha configs ...);
- a file with **test sections** (``pyproject.toml``, ``setup.cfg``, ``package.json``,
  ``Cargo.toml``): only those sections are test configuration (:mod:`ralph.testintegrity.sections`).

A pattern of the project's (``[tool.ralph.test-integrity]``, a story's ``allowTestChanges``) is
matched by :func:`matches`: ``name/`` is a directory name anywhere in the path, a pattern without a
``/`` matches the file name, any other is a glob on the whole path (``*`` crosses ``/``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

TEST_DIRS = frozenset({
    "tests", "test", "testing", "testing-data", "testdata", "test-data", "test_data", "spec", "specs", "__tests__",
    "__snapshots__", "__mocks__", "e2e", "integration-tests", "integration_tests",
    "fixtures", "__fixtures__", "test-fixtures", "test_fixtures", "testutils", "test_utils", "test-utils", "testlib",
    "test_helpers", "test-helpers",
})
"""Directory names whose whole content is tests (fixtures, snapshots and golden files decide results too).

Only names that mean test material whatever the project: ``testing/`` is pytest's own layout (and where
libraries keep the helpers their tests assert with), ``fixtures/`` the data tests compare against
(Django, Rails, jest's ``__fixtures__``).  ``golden/`` and ``snapshots/`` are left out on purpose: they
also name product features (a snapshot store, a "golden" image); a project adds them (``test_paths``)."""

TEST_FILES = (
    # Python
    "test_*.py", "*_test.py", "tests.py",
    # JavaScript / TypeScript
    "*.test.js", "*.test.jsx", "*.test.ts", "*.test.tsx", "*.test.mjs", "*.test.cjs", "*.test.mts", "*.test.cts",
    "*.spec.*", "*.snap",
    # Go, Rust benches/tests live in tests/; Ruby, Elixir, Java/Kotlin, C#, PHP, shell
    "*_test.go", "*_spec.rb", "*_test.rb", "*_test.exs", "*Test.java", "*Tests.java", "*IT.java", "*Test.kt",
    "*Tests.kt", "*Tests.cs", "*Test.cs", "*Test.php", "*.bats",
)
"""File-name patterns of test files, whatever directory they are in."""

CONFIG_FILES = (
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "noxfile.py",
    ".coveragerc", "jest.config.*", "jest.setup.*", "jest.preset.*", "vitest.config.*", "vitest.workspace.*",
    "vitest.setup.*", ".mocharc*", "karma.conf.*", "ava.config.*", "playwright.config.*", "cypress.config.*",
    ".nycrc*", ".c8rc*", "setupTests.*", "phpunit.xml*", ".rspec", "nextest.toml",
    # Python start-up hooks: imported by every interpreter that finds them (a PYTHONPATH entry, a src/ an
    # editable install puts on the path), a test run's before any test; a .pth acts so in a site directory
    "sitecustomize.py", "usercustomize.py", "*.pth",
)
"""File-name patterns of whole-file test configuration (restored whole; a new one is set aside)."""

RUNNER_MODULES = frozenset({
    "pytest", "_pytest", "pluggy", "iniconfig", "xdist", "unittest", "doctest", "nose", "nose2",
    # start-up hooks as packages: ``import sitecustomize`` finds ``sitecustomize/__init__.py`` as well
    "sitecustomize", "usercustomize",
})
"""Top-level modules of the test runners: a module or package of that name in the project (``pytest.py``,
``unittest/__main__.py``) is found before the installed one (the working directory, ``PYTHONPATH`` and an
editable install's folders come first on ``sys.path``), so ``python -m pytest`` would run the project's
stand-in.  Such a file, anywhere in the tree, is whole-file test configuration; so is one named after the
module a verifyCommand runs with ``-m`` (:meth:`TestRules.with_runner_modules`)."""

METADATA_DIRS = (".dist-info", ".egg-info")
"""Distribution metadata folders: on any ``sys.path`` entry (the project's root under ``python -m``) their
``entry_points.txt`` registers plugins a runner loads by itself (``[pytest11]``), so their files are test
configuration, as is an ``.egg-link``.  Matched whatever the case (:func:`is_metadata`): importlib.metadata
lower-cases the names it finds (``zz-1.0.DIST-INFO`` is a distribution too)."""

SHADOW_SUFFIXES = ("py", "pyc", "pyw", "so", "pyd")
"""What Python imports a module from (``NAME.py``, ``NAME.cpython-312-x86_64-linux-gnu.so`` ...)."""


def is_metadata(name: str) -> bool:
    """Is the file or folder ``name`` distribution metadata (``*.dist-info``, ``*.egg-info``, ``*.egg-link``)?"""
    return name.lower().endswith((*METADATA_DIRS, ".egg-link"))

SECTION_FILES = frozenset({"pyproject.toml", "setup.cfg", "package.json", "Cargo.toml"})
"""Files of which only the test sections are test configuration."""


def matches(path: str, pattern: str) -> bool:
    """Does the relative POSIX ``path`` match the project's ``pattern`` (see the module's docstring)?"""
    pattern = pattern.strip()
    if pattern.startswith("./"):
        pattern = pattern[2:]
    if not pattern:
        return False
    if pattern.endswith("/"):
        name = pattern.rstrip("/")
        if "/" in name:  # a directory path: the path is in it
            return path == name or path.startswith(name + "/") or fnmatch.fnmatchcase(path, name + "/*")
        return any(fnmatch.fnmatchcase(part, name) for part in path.split("/"))
    if "/" not in pattern:
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    return path == pattern or fnmatch.fnmatchcase(path, pattern) or path.startswith(pattern.rstrip("/") + "/")


def matches_any(path: str, patterns: Iterable[str]) -> bool:
    """Does ``path`` match one of ``patterns``?"""
    return bool(patterns) and any(matches(path, pattern) for pattern in patterns)


@functools.lru_cache(maxsize=8)
def _names(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching a file name against every pattern of ``patterns``."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


_TEST_NAME = _names(TEST_FILES)
_MODULE_NAME = re.compile(r"[A-Za-z_][\w.]*")


def run_modules(command: str) -> list[str]:
    """The modules ``command`` runs with a Python interpreter's ``-m`` (``python3 -I -m pytest`` -> pytest)."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found = []
    for index, word in enumerate(words):
        if not word.rsplit("/", 1)[-1].startswith("python"):
            continue
        rest = iter(words[index + 1:])
        for option in rest:
            if option in ("-W", "-X"):  # an option with a value: the value is next
                next(rest, None)
                continue
            if option.startswith("-m"):
                module = option[2:] or next(rest, "")
                if _MODULE_NAME.fullmatch(module):
                    found.append(module)
                break
            if not option.startswith("-") or option in ("-c", "--"):
                break
    return found
_CONFIG_NAME = _names(CONFIG_FILES)


@dataclass(frozen=True)
class TestRules:
    """The test paths and test configuration of one project: the defaults, plus and minus its config."""

    __test__ = False  # not a pytest test class

    extra_tests: tuple[str, ...] = ()
    """More test paths (``test_paths``)."""
    extra_config: tuple[str, ...] = ()
    """More whole-file test configuration (``config_files``; scripts the verifyCommands name join it)."""
    excluded: tuple[str, ...] = ()
    """Paths that are not tests although a default says so (``not_test_paths``)."""
    defaults: bool = True
    """Use the language-aware defaults (False: only the configured patterns)."""
    section_files: frozenset[str] = field(default=SECTION_FILES)
    runner_modules: frozenset[str] = field(default=RUNNER_MODULES)
    """Module names a project file may not shadow (:data:`RUNNER_MODULES` and the verifyCommands' ``-m``)."""
    config_paths: frozenset[str] = frozenset()
    """Exact paths that are whole-file test configuration: what the verifyCommands read
    (:func:`ralph.testintegrity.commands.command_inputs`), there or not at story start."""
    shadowed: frozenset[str] = frozenset()
    """Top-level modules of the interpreter's environment (the standard library, installed distributions):
    a module or package of that name on one of :attr:`import_roots` is imported instead of the real one by
    the test runner, before any test (:meth:`with_environment`)."""
    import_roots: tuple[str, ...] = ("", "src/")
    """Folders (``""`` the root, else ending with ``/``) the test run puts on ``sys.path``."""

    def is_test(self, path: str) -> bool:
        """A test file (or directory) by the defaults or the config, and not excluded."""
        if matches_any(path, self.excluded):
            return False
        if matches_any(path, self.extra_tests):
            return True
        if not self.defaults:
            return False
        parts = path.split("/")
        return not TEST_DIRS.isdisjoint(parts) or _TEST_NAME.match(parts[-1]) is not None

    def is_config(self, path: str) -> bool:
        """Whole-file test configuration."""
        if path in self.config_paths or matches_any(path, self.extra_config):
            return True
        if not self.defaults or matches_any(path, self.excluded):
            return False
        return _CONFIG_NAME.match(path.rsplit("/", 1)[-1]) is not None or self.shadows_runner(path)

    def shadows_runner(self, path: str) -> bool:
        """Would ``path`` stand in for a test runner's module, or register a plugin it loads by itself?"""
        *folders, name = path.split("/")
        if any(folder in self.runner_modules or is_metadata(folder) for folder in folders):
            return True
        stem, dot, suffix = name.partition(".")
        if dot and stem in self.runner_modules and suffix.rsplit(".", 1)[-1] in SHADOW_SUFFIXES:
            return True
        return is_metadata(name) or self.shadows_environment(path)

    def shadows_environment(self, path: str) -> bool:
        """Is ``path`` Python code of a module or package on an import root named like one of the environment's
        (:attr:`shadowed`): ``argparse.py``, ``shlex/__init__.py``, ``src/py.py``?"""
        if not self.shadowed or not path.endswith(tuple("." + s for s in SHADOW_SUFFIXES)):
            return False
        for root in self.import_roots:
            if not path.startswith(root):
                continue
            top, slash, _ = path[len(root):].partition("/")
            if (top if slash else top.partition(".")[0]) in self.shadowed:
                return True
        return False

    def with_environment(self, shadowed: Iterable[str], roots: Iterable[str] = ()) -> TestRules:
        """These rules with ``shadowed`` module names (see :attr:`shadowed`) and more import roots."""
        names = self.shadowed | frozenset(shadowed)
        more = tuple(r for r in roots if r not in self.import_roots)
        if names == self.shadowed and not more:
            return self
        return dataclasses.replace(self, shadowed=names, import_roots=self.import_roots + more)

    def with_runner_modules(self, commands: Iterable[str]) -> TestRules:
        """These rules with the top-level module of every ``python -m MODULE`` in ``commands`` as a runner module."""
        found = {module.split(".")[0] for command in commands for module in run_modules(command)}
        if found <= self.runner_modules:
            return self
        return dataclasses.replace(self, runner_modules=self.runner_modules | found)

    def is_protected(self, path: str) -> bool:
        """A test file or whole-file test configuration: restored to its story-start version."""
        return self.is_test(path) or self.is_config(path)

    def has_sections(self, path: str) -> bool:
        """A shared file whose test sections are test configuration (when not protected whole)."""
        return self.defaults and path.rsplit("/", 1)[-1] in self.section_files and not self.is_protected(path)

    def kind(self, path: str) -> str | None:
        """``protected``, ``sections`` or None (neither), in one pass."""
        if self.is_protected(path):
            return "protected"
        if self.defaults and path.rsplit("/", 1)[-1] in self.section_files:
            return "sections"
        return None

    def touches(self, path: str) -> bool:
        """Is a change of ``path`` a change of the tests or their configuration (a section file counts)?"""
        return self.is_protected(path) or self.has_sections(path)

    def with_config_paths(self, paths: Iterable[str]) -> TestRules:
        """These rules with the exact ``paths`` as more whole-file test configuration."""
        added = frozenset(paths) - self.config_paths
        return dataclasses.replace(self, config_paths=self.config_paths | added) if added else self

    def with_config(self, paths: Iterable[str]) -> TestRules:
        """These rules with ``paths`` as more whole-file test configuration."""
        added = tuple(p for p in paths if p not in self.extra_config)
        if not added:
            return self
        return dataclasses.replace(self, extra_config=self.extra_config + added)
