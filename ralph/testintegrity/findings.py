"""Deterministic findings in the diff of the tests: each names its file and line.

For a test file that existed when the story started, compared with the agent's version:

- the file was deleted, or a test in it (a ``test*`` function, an ``it(...)``/``test(...)`` case, a Go
  ``TestXxx``, a Rust ``#[test]`` fn) is gone;
- a new skip or xfail (``@pytest.mark.skip``, ``pytest.skip(``, ``unittest.skip``, ``self.skipTest``,
  ``it.skip``/``xit``/``describe.skip``/``.only``, ``t.Skip``, ``#[ignore]``, ``#[should_panic]`` ...);
- an assertion that is no longer there as it was (removed or changed: ``assert``, ``self.assert*``,
  ``expect(``, ``t.Error``/``t.Fatal``, ``assert!``/``assert_eq!`` ...), or a parameter set of a
  ``parametrize`` decorator (Python) that is gone; ``__test__ = False`` counts as a skip;
- a new process exit (``os._exit``, ``sys.exit`` outside a test, ``pytest.exit``, ``process.exit``,
  ``os.Exit``, ``std::process::exit`` ...).

A test file the agent added gets the process-exit check only (new tests are welcome).  Python is read
with :mod:`ast` (formatting and comments do not count); the other languages line by line with small
patterns, comments stripped.  Cheap and deterministic; the trusted run (:mod:`ralph.testintegrity.check`)
is what decides in the end, these findings name what the agent did.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    """One deterministic finding: ``path:line: message`` (``line`` None: the whole file)."""

    path: str
    line: int | None
    kind: str
    """``deleted``, ``test-removed``, ``skip``, ``assertion-removed``, ``case-removed``, ``exit``, ``unparsable``
    (and ``doctest-changed``, :mod:`ralph.testintegrity.doctests`)."""
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


def findings_for(path: str, old: str | None, new: str | None) -> list[Finding]:
    """What changed in test file ``path``: ``old`` its story-start text (None: new), ``new`` the agent's (None: deleted)."""
    if new is None:
        return [] if old is None else [Finding(path, None, "deleted", "test file deleted (it existed when the story started)")]
    language = language_of(path)
    if language == "python":
        return _python(path, old, new)
    rules = RULES.get(language, RULES["generic"])
    return _by_lines(path, old, new, rules)


def language_of(path: str) -> str:
    """``python``, ``js``, ``go``, ``rust`` or ``generic``, by the file's extension."""
    name = path.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext in ("py", "pyi"):
        return "python"
    if ext in ("js", "jsx", "ts", "tsx", "mjs", "cjs", "mts", "cts", "vue", "svelte"):
        return "js"
    if ext == "go":
        return "go"
    if ext == "rs":
        return "rust"
    return "generic"


# -- Python ----------------------------------------------------------------------------------------

_HARD_EXITS = {("os", "_exit"), ("os", "abort"), ("os", "kill"), ("os", "killpg"), ("pytest", "exit"),
               ("signal", "raise_signal"), ("posix", "_exit")}
_SOFT_EXITS = {"sys.exit", "exit", "quit", "SystemExit", "builtins.exit"}
_SETUP_NAMES = {"setUp", "tearDown", "setUpClass", "tearDownClass", "setUpModule", "tearDownModule", "setup_module",
                "teardown_module", "setup_class", "teardown_class", "setup_method", "teardown_method", "setup_function",
                "teardown_function", "asyncSetUp", "asyncTearDown"}
_FAILS = {"fail", "failIf", "failUnless", "failUnlessEqual", "failIfEqual", "failUnlessRaises"}
_ASSERT_CALLS = {"pytest.raises", "pytest.warns", "pytest.approx", "pytest.fail"}
_SKIP_NAMES = re.compile(
    r"(^|\.)(skip|skipif|xfail|skipTest|skipUnless|skipIf|expectedFailure|importorskip|SkipTest)$"
)


@dataclass
class _Scope:
    """What one test (or the module, a class body, a helper) contains."""

    name: str
    line: int
    is_test: bool
    asserts: list[tuple[str, int]]
    skips: list[tuple[str, int]]
    exits: list[tuple[str, int]]
    cases: list[tuple[str, int]] = field(default_factory=list)
    """The parameter sets of a test's ``parametrize`` decorators (in the decorated name's ``@`` scope)."""
    runs_at_setup: bool = True
    """Code here runs when tests are collected or set up (the module, a class body, a pytest hook, a
    fixture, ``setUp``...): ``sys.exit`` here ends the test process; in a test or a helper it does not."""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _text(node: ast.AST) -> str:
    return " ".join(ast.unparse(node).split())


class _Collector(ast.NodeVisitor):
    """Walks one module: scopes (tests, helpers, class bodies, the module) and what each contains."""

    def __init__(self) -> None:
        self.scopes: dict[str, _Scope] = {}
        self.classes: set[str] = set()
        self.stack: list[_Scope] = []
        self._enter("<module>", 1, False)

    def _enter(self, name: str, line: int, is_test: bool) -> _Scope:
        key = name
        n = 2
        while key in self.scopes:  # the same name twice (a redefinition): keep both
            key, n = f"{name}#{n}", n + 1
        scope = _Scope(key, line, is_test, [], [], [])
        self.scopes[key] = scope
        self.stack.append(scope)
        return scope

    @property
    def scope(self) -> _Scope:
        return self.stack[-1]

    def _qualified(self, name: str) -> str:
        outer = self.scope.name
        return name if outer == "<module>" else f"{outer.split('#')[0]}.{name}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._decorators(node)
        scope = self._enter(self._qualified(node.name), node.lineno, node.name.startswith("test"))
        scope.runs_at_setup = node.name.startswith("pytest_") or node.name in _SETUP_NAMES or any(
            _dotted(d).endswith("fixture") for d in node.decorator_list)
        for child in node.body:
            self.visit(child)
        self.stack.pop()

    def visit_If(self, node: ast.If) -> None:
        test = node.test  # ``if __name__ == "__main__":`` never runs under a test runner
        if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._decorators(node)
        for base in node.bases:
            self.visit(base)
        self.classes.add(self._enter(self._qualified(node.name), node.lineno, False).name)
        for child in node.body:
            self.visit(child)
        self.stack.pop()

    def _decorators(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        # a decorator belongs to what it decorates: recorded in the decorated scope's name
        target = self._qualified(node.name)
        for decorator in node.decorator_list:
            name = _dotted(decorator)
            if _SKIP_NAMES.search(name):
                self._decorated(target, node.lineno).skips.append((_text(decorator), decorator.lineno))
                continue
            if name.endswith("parametrize") and isinstance(decorator, ast.Call):
                self._decorated(target, node.lineno).cases += _cases(decorator)
            self.visit(decorator)

    def _decorated(self, target: str, line: int) -> _Scope:
        """The ``@`` scope that holds what a decorator says about ``target`` (its skips, its parameter sets)."""
        return self.scopes.setdefault(target + "@", _Scope(target + "@", line, False, [], [], []))

    def visit_Assign(self, node: ast.Assign) -> None:
        # ``__test__ = False`` makes pytest and nose skip a module's or a class's tests without a skip marker
        if any(isinstance(t, ast.Name) and t.id == "__test__" for t in node.targets) and not (
                isinstance(node.value, ast.Constant) and node.value.value):
            self.scope.skips.append((_text(node), node.lineno))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self.scope.asserts.append((_text(node), node.lineno))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        classified = True
        if last.startswith("assert") or last in _FAILS or name in _ASSERT_CALLS:
            self.scope.asserts.append((_text(node), node.lineno))
            classified = False  # its arguments may hold more
        elif _SKIP_NAMES.search(name):
            self.scope.skips.append((_text(node), node.lineno))
        elif name in _SOFT_EXITS and self._at_setup():
            self.scope.exits.append((_text(node), node.lineno))
        else:
            classified = False
        if not classified:
            self.visit(node.func)
        for child in [*node.args, *node.keywords]:
            self.visit(child)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = _dotted(node.value)
        if (base.rsplit(".", 1)[-1], node.attr) in _HARD_EXITS or node.attr == "_exit":
            self.scope.exits.append((_text(node), node.lineno))
        elif _SKIP_NAMES.search(node.attr) and base.split(".")[0] in ("pytest", "unittest", "mark"):
            if not any(text == _text(node) for text, _ in self.scope.skips):
                self.scope.skips.append((_text(node), node.lineno))
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        name = _dotted(node.exc) if node.exc is not None else ""
        if name.endswith("SkipTest") or name.endswith("skip.Exception"):
            self.scope.skips.append((_text(node), node.lineno))
        elif name in _SOFT_EXITS and self._at_setup():
            self.scope.exits.append((_text(node), node.lineno))
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        # ``from os import _exit`` hides the call's module
        for alias in node.names:
            if (node.module or "", alias.name) in _HARD_EXITS or alias.name == "_exit":
                self.scope.exits.append((f"from {node.module} import {alias.name}", node.lineno))

    def _at_setup(self) -> bool:
        functions = [scope for scope in self.stack[1:] if scope.name not in self.classes]
        return not functions or functions[-1].runs_at_setup


def _cases(decorator: ast.Call) -> list[tuple[str, int]]:
    """Each parameter set of ``parametrize(names, values, ...)`` (the whole call when ``values`` is no literal list)."""
    values = decorator.args[1] if len(decorator.args) > 1 else next(
        (k.value for k in decorator.keywords if k.arg == "argvalues"), None)
    names = _text(decorator.args[0]) if decorator.args else ""
    if isinstance(values, (ast.List, ast.Tuple)):
        return [(f"{names}: {_text(value)}", value.lineno) for value in values.elts]
    return [(_text(decorator), decorator.lineno)]


def _scopes(source: str) -> dict[str, _Scope]:
    collector = _Collector()
    collector.visit(ast.parse(source))
    return collector.scopes


def _python(path: str, old: str | None, new: str) -> list[Finding]:
    try:
        now = _scopes(new)
    except (SyntaxError, ValueError, RecursionError) as exc:
        return [Finding(path, getattr(exc, "lineno", None), "unparsable", f"no longer parses as Python ({exc})")]
    if old is None:
        return [Finding(path, line, "exit", f"process exit `{text}` in a new test file")
                for scope in now.values() for text, line in scope.exits]
    try:
        was = _scopes(old)
    except (SyntaxError, ValueError, RecursionError):
        return _by_lines(path, old, new, RULES["python"])
    findings: list[Finding] = []
    for name, before in was.items():
        if before.is_test and name not in now:
            findings.append(Finding(path, before.line, "test-removed",
                                    f"test {name} removed (line {before.line} when the story started)"))
    for name, after in now.items():
        before_scope = was.get(name)
        where = "" if name == "<module>" else f" in {name.rstrip('@')}"
        if name.rstrip("@") in was:  # a skip on a test (or class, module) that existed; new tests may skip
            for text, line in _added(after.skips, before_scope.skips if before_scope else []):
                findings.append(Finding(path, line, "skip", f"new skip `{text}`{where}"))
        for text, line in _added(after.exits, before_scope.exits if before_scope else []):
            findings.append(Finding(path, line, "exit", f"new process exit `{text}`{where}"))
        if before_scope is not None:
            for text, line in _added(before_scope.asserts, after.asserts):
                findings.append(Finding(path, line, "assertion-removed",
                                        f"assertion `{text}`{where} removed or changed (line {line} when the story started)"))
            for text, line in _added(before_scope.cases, after.cases):  # new cases are welcome, lost ones are not
                findings.append(Finding(path, line, "case-removed",
                                        f"parameter set `{text}`{where} removed or changed (line {line} when the story started)"))
    for name, before in was.items():  # a test whose decorators held parameter sets and now hold none
        if name.endswith("@") and before.cases and name not in now:
            for text, line in before.cases:
                findings.append(Finding(path, line, "case-removed", f"parameter set `{text}` of {name.rstrip('@')} "
                                        f"removed (line {line} when the story started)"))
    return sorted(findings, key=lambda f: (f.line or 0, f.message))


def _added(now: list[tuple[str, int]], before: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
    """The entries of ``now`` beyond the count of the same text in ``before`` (each with its line)."""
    budget = Counter(text for text, _ in before)
    for text, line in now:
        if budget[text] > 0:
            budget[text] -= 1
        else:
            yield text, line


# -- other languages, line by line ---------------------------------------------------------------


@dataclass(frozen=True)
class LineRules:
    """Patterns of one language: comments, skips, exits, assertions, test names (group 1)."""

    comment: re.Pattern[str]
    skip: re.Pattern[str]
    exit: re.Pattern[str]
    assertion: re.Pattern[str]
    test_name: re.Pattern[str] | None = None
    exit_ok: re.Pattern[str] | None = None


RULES: dict[str, LineRules] = {
    "js": LineRules(
        comment=re.compile(r"^\s*(//|/\*|\*)|\s//.*$"),
        skip=re.compile(
            r"\b(?:describe|it|test|context|suite|specify|bench)\s*\.\s*(?:skip|todo|only|failing|skipIf|runIf)\b"
            r"|\b(?:xit|xdescribe|xtest|xcontext|xspecify|fit|fdescribe|ftest)\s*\(|\bthis\s*\.\s*skip\s*\("
            r"|\bt\s*\.\s*(?:skip|todo)\s*\("
        ),
        exit=re.compile(r"\bprocess\s*\.\s*(?:exit|abort|kill|reallyExit)\b|\bprocess\s*\.\s*exitCode\s*="),
        assertion=re.compile(r"\bexpect\s*\(|\bassert\b|\.should\b|\bt\s*\.\s*(?:is|not|deepEqual|true|false|truthy|"
                             r"falsy|throws|regex|like|equal|ok|same|match)\b"),
        test_name=re.compile(r"\b[xf]?(?:it|test|specify)(?:\s*\.\s*\w+)?\s*\(\s*(['\"`])(.+?)\1"),
    ),
    "go": LineRules(
        comment=re.compile(r"^\s*(//|/\*|\*)|\s//.*$"),
        skip=re.compile(r"\b[tb]\s*\.\s*Skip(?:Now|f)?\s*\("),
        exit=re.compile(r"\b(?:os|syscall)\s*\.\s*Exit\s*\(|\bruntime\s*\.\s*Goexit\s*\("),
        assertion=re.compile(r"\b[tb]\s*\.\s*(?:Error|Errorf|Fatal|Fatalf|Fail|FailNow)\s*\(|\b(?:assert|require)\s*\.\s*\w+\s*\("),
        test_name=re.compile(r"^\s*func\s+((?:Test|Benchmark|Fuzz|Example)\w*)\s*\("),
        exit_ok=re.compile(r"\bos\s*\.\s*Exit\s*\(\s*m\s*\.\s*Run\s*\(\s*\)\s*\)"),
    ),
    "rust": LineRules(
        comment=re.compile(r"^\s*//|\s//.*$"),
        skip=re.compile(r"#\s*\[\s*(?:ignore|should_panic)\b|#\s*\[\s*cfg\s*\(\s*any\s*\(\s*\)\s*\)\s*\]"),
        exit=re.compile(r"\bprocess\s*::\s*(?:exit|abort)\s*\("),
        assertion=re.compile(r"\b(?:debug_)?assert(?:_eq|_ne|_matches)?\s*!"),
        test_name=re.compile(r"^\s*(?:pub\s+)?(?:async\s+)?fn\s+(\w+)\s*\("),
    ),
    "python": LineRules(
        comment=re.compile(r"^\s*#|\s#.*$"),
        skip=re.compile(r"\b(?:skip|skipif|xfail|skipTest|skipUnless|skipIf|expectedFailure|importorskip)\b"),
        exit=re.compile(r"\b(?:os\s*\.\s*_exit|os\s*\.\s*abort|pytest\s*\.\s*exit|sys\s*\.\s*exit)\b"),
        assertion=re.compile(r"\bassert\w*\b"),
        test_name=re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)\s*\("),
    ),
    "generic": LineRules(
        comment=re.compile(r"^\s*(//|#|/\*|\*|--)"),
        skip=re.compile(r"\b(?:skip|pending|xit|xdescribe|xcontext|markTestSkipped|markTestIncomplete)\b|@Disabled\b"
                        r"|@Ignore\b|\[\s*Ignore\b|\[\s*Skip\b|\bAssume\s*\."),
        exit=re.compile(r"\bexit!?\s*[\(\d]|\bSystem\s*\.\s*exit\s*\(|\bEnvironment\s*\.\s*Exit\s*\(|\bexit\s*$"),
        assertion=re.compile(r"\bassert\w*|\bexpect\b|\bshould\b|\bverify\s*\("),
        test_name=re.compile(r"^\s*[xf]?(?:it|test|specify|scenario)\s*\(?\s*(['\"])(.+?)\1"),
    ),
}


def _code_lines(text: str, rules: LineRules) -> list[tuple[int, str]]:
    """(line number, code without comments, whitespace collapsed) of every non-empty line."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        code = rules.comment.sub("", line) if not rules.comment.match(line) else ""
        code = " ".join(code.split())
        if code:
            lines.append((number, code))
    return lines


def _test_names(lines: list[tuple[int, str]], rules: LineRules) -> list[tuple[str, int]]:
    if rules.test_name is None:
        return []
    names = []
    for number, code in lines:
        match = rules.test_name.search(code)
        if match:
            names.append((match.group(match.lastindex or 1), number))
    return names


def _by_lines(path: str, old: str | None, new: str, rules: LineRules) -> list[Finding]:
    now = _code_lines(new, rules)
    exits = [(code, n) for n, code in now if rules.exit.search(code) and not (rules.exit_ok and rules.exit_ok.search(code))]
    if old is None:
        return [Finding(path, n, "exit", f"process exit `{code}` in a new test file") for code, n in exits]
    was = _code_lines(old, rules)
    findings: list[Finding] = []
    old_exits = [(code, n) for n, code in was if rules.exit.search(code)]
    for code, n in _added(exits, old_exits):
        findings.append(Finding(path, n, "exit", f"new process exit `{code}`"))
    skips_now = [(code, n) for n, code in now if rules.skip.search(code)]
    skips_was = [(code, n) for n, code in was if rules.skip.search(code)]
    for code, n in _added(skips_now, skips_was):
        findings.append(Finding(path, n, "skip", f"new skip `{code}`"))
    asserts_was = [(code, n) for n, code in was if rules.assertion.search(code)]
    asserts_now = [(code, n) for n, code in now if rules.assertion.search(code)]
    for code, n in _added(asserts_was, asserts_now):
        findings.append(Finding(path, n, "assertion-removed",
                                f"assertion `{code}` removed or changed (line {n} when the story started)"))
    names_now = {name for name, _ in _test_names(now, rules)}
    if rules is not RULES["rust"]:
        for name, n in _test_names(was, rules):
            if name not in names_now:
                findings.append(Finding(path, n, "test-removed", f"test {name!r} removed (line {n} when the story started)"))
    else:
        for name, n in _rust_tests(was):
            if name not in {nm for nm, _ in _rust_tests(now)}:
                findings.append(Finding(path, n, "test-removed", f"test {name!r} removed (line {n} when the story started)"))
    return sorted(findings, key=lambda f: (f.line or 0, f.message))


def _rust_tests(lines: list[tuple[int, str]]) -> list[tuple[str, int]]:
    """Functions under a ``#[test]``-like attribute (``#[test]``, ``#[tokio::test]`` ...)."""
    names = []
    pending = False
    for number, code in lines:
        if re.match(r"#\s*\[\s*(?:\w+::)?test\b", code):
            pending = True
            continue
        match = RULES["rust"].test_name.search(code) if RULES["rust"].test_name else None
        if pending and match:
            names.append((match.group(1), number))
            pending = False
        elif pending and not code.startswith("#"):
            pending = False
    return names
