"""Deterministic findings in the diff of the code (not the tests): code that decides a test run's result.

The code under test runs inside the test process, so it can end that process or skip the test that calls
it as well as the test itself could: ``raise unittest.SkipTest(...)`` in ``add`` makes the story-start test
"skipped" and the run green; ``atexit.register(os._exit, 0)`` ends it with 0.  No test
changed, so only a look at the code sees it.  In every Python file the story's work changed that is no test
file and no test configuration, each of these that is *new* (not in the story-start version) is a violation:

- a skip or xfail raised or called: ``SkipTest`` (``unittest.SkipTest``, ``case.SkipTest``), ``pytest.skip``,
  ``pytest.xfail``, ``pytest.importorskip``, ``skip.Exception``, pytest's ``Skipped``/``XFailed``/``Exit``;
- a process exit past the runner: ``os._exit`` (any ``._exit``) handed over as a callable (``atexit.register``,
  a signal handler; a call ``os._exit(0)`` is how a forked child or a daemon's parent ends, and is left alone),
  ``pytest.exit``, ``from os import _exit``;
- a test session's result set: an assignment to ``exitstatus`` or ``testsfailed`` (``session.exitstatus = 0``);
- an import of pytest's internals (``_pytest``).

``sys.exit`` and ``raise SystemExit`` are left alone (a CLI's code uses them; the runner reports them as a
failure).  Only the changed files are read, from git's objects: the cost is one ``git add`` of the ``*.py``
files into a temporary index.  A story that must add such code gets the path allowed by a person
(``allowTestChanges``), as for a test.
"""

from __future__ import annotations

import ast
import re

from ralph.testintegrity.findings import Finding, _added, _dotted, _text

_MAYBE = re.compile(r"SkipTest|skip|xfail|exit|Exit|Skipped|XFailed|exitstatus|testsfailed|_pytest")
_OUTCOMES = {"skip", "xfail", "importorskip", "exit", "Skipped", "XFailed", "Exit", "SkipTest"}
_RESULT_FIELDS = {"exitstatus", "testsfailed"}


def code_findings(path: str, old: str | None, new: str | None) -> list[Finding]:
    """The new skips, exits and result changes in the code file ``path`` (``old`` None: a new file)."""
    if new is None or not _MAYBE.search(new):  # most diffs: no word any finding needs, nothing to parse
        return []
    now = _marks(new)
    if now is None:
        return []
    was = _marks(old) if old is not None else []
    return [Finding(path, line, "code-" + kind, f"{_WHAT[kind]} `{text}` in code that is no test")
            for (kind, text), line in _pairs(now, was or [])]


_WHAT = {
    "skip": "new skip",
    "exit": "new process exit",
    "result": "new change of the test session's result",
    "internals": "new import of pytest's internals",
}


def _pairs(now: list[tuple[str, str, int]], was: list[tuple[str, str, int]]) -> list[tuple[tuple[str, str], int]]:
    """The entries of ``now`` not in ``was`` (by kind and text, counted)."""
    keyed_now = [(f"{kind}\0{text}", line) for kind, text, line in now]
    keyed_was = [(f"{kind}\0{text}", line) for kind, text, line in was]
    found = []
    for key, line in _added(keyed_now, keyed_was):
        kind, _, text = key.partition("\0")
        found.append(((kind, text), line))
    return found


def _marks(source: str) -> list[tuple[str, str, int]] | None:
    """(kind, text, line) of every skip, exit, result change and internals import in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    found: list[tuple[str, str, int]] = []
    # ``os._exit(0)`` called is how a forked child or a daemon's parent ends (honest code); handed over as a
    # callable (``atexit.register(os._exit, 0)``, a signal handler) it ends a test run that reported a failure
    seen: set[int] = {id(node.func) for node in ast.walk(tree)
                      if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] == "_exit"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in seen:
            kind = _kind(_dotted(node))
            if kind:
                found.append((kind, _text(node), node.lineno))
                # the parts of ``pytest.skip.Exception`` are not counted again
                inner = node.value if isinstance(node, ast.Attribute) else None
                while isinstance(inner, ast.Attribute):
                    seen.add(id(inner))
                    inner = inner.value
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in _RESULT_FIELDS:
                    found.append(("result", _text(target), node.lineno))
        elif isinstance(node, ast.Call) and _dotted(node.func) in ("setattr", "builtins.setattr") and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value in _RESULT_FIELDS:
                found.append(("result", _text(node), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] == "_pytest":
                found.append(("internals", f"from {module} import ...", node.lineno))
            for alias in node.names:
                kind = _kind(f"{module}.{alias.name}") or ("exit" if alias.name == "_exit" else None)
                if kind:
                    found.append((kind, f"from {module} import {alias.name}", node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "_pytest":
                    found.append(("internals", f"import {alias.name}", node.lineno))
    return found


def _kind(name: str) -> str | None:
    """``skip``, ``exit`` or None for a dotted name used in code."""
    if not name:
        return None
    parts = name.split(".")
    last = parts[-1]
    if last == "_exit":
        return "exit"
    if last == "SkipTest" or name.endswith("skip.Exception"):
        return "skip"
    if parts[0] in ("pytest", "_pytest") and len(parts) > 1 and last in _OUTCOMES:
        return "exit" if last in ("exit", "Exit") else "skip"
    return None
