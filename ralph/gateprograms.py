"""The programs a gate command runs, and their look-up inside a sandbox (for runners' pre-flight checks).

A gate that cannot start where the gates run (``No module named pytest``, ``exit 127``) fails every
iteration, each one paid for.  A sandbox runner therefore parses each gate command with ralph's shell
model, makes a :class:`ProgramNeed` per program it runs (and per ``python -m MODULE``), and runs
:data:`LOOKUP_SCRIPT` once inside its sandbox with ``python3 -I -S -c LOOKUP_SCRIPT PAYLOAD``
(:func:`lookup_payload`); :func:`lookup_answer` reads what it printed: per need, ``found`` (the
program's path there, or None) and, for a module, ``module`` (whether that interpreter finds it).
What to make of a miss (the fix to propose) is the runner's: its sandbox decides.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from ralph.shell import Command

BUILTINS = frozenset({
    ":", ".", "[", "[[", "alias", "bg", "break", "builtin", "case", "cd", "command", "continue", "declare", "echo",
    "eval", "exec", "exit", "export", "false", "fg", "for", "function", "getopts", "hash", "if", "jobs", "kill",
    "let", "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test", "time", "times",
    "trap", "true", "type", "typeset", "ulimit", "umask", "unalias", "unset", "wait", "while",
})
"""Shell builtins and keywords: nothing to look up."""
PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
"""A Python interpreter's file name (``python``, ``python3``, ``python3.11``)."""
PYTHON_FLAGS_WITH_VALUE = frozenset({"-W", "-X", "-Q"})
"""Interpreter options whose value is the next word (``-W error -m pytest``)."""

LOOKUP_SCRIPT = r"""
import json, os, shutil, subprocess, sys
FIND = "import importlib.util, sys\ntry:\n    s = importlib.util.find_spec(sys.argv[1])\nexcept Exception:\n    s = None\nsys.exit(0 if s else 3)"
out = []
for need in json.loads(sys.argv[1]):
    cwd = need.get("cwd")
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    path = need.get("path") or os.environ.get("PATH", "")
    name = need["program"]
    found = shutil.which(name, path=path)
    if found and "/" in name:
        found = os.path.abspath(found)
    item = {"found": found}
    if found and need.get("module"):
        try:
            done = subprocess.run([found, "-c", FIND, need["module"]], cwd=cwd if cwd and os.path.isdir(cwd) else "/tmp",
                                  env=dict(os.environ, PATH=path), timeout=60,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            item["module"] = done.returncode == 0
        except Exception:
            item["module"] = False
    out.append(item)
print(json.dumps(out))
"""
"""Run inside the sandbox with ``python3 -I -S -c LOOKUP_SCRIPT PAYLOAD``: each need's program as the
gate would find it (on the need's ``path``, else the sandbox's ``PATH``; a name with a ``/`` from the
need's ``cwd``), and its module with that interpreter, run from ``cwd`` (else ``/tmp``, where no
project module is found by accident).  Prints one JSON line: a list, one item per need."""


@dataclass(frozen=True)
class ProgramNeed:
    """One program a gate command runs (and the module, for ``python -m``)."""

    command: str
    """The gate command it is for (the first one that needs it)."""
    program: str
    module: str | None = None
    path: str | None = None
    """The ``PATH`` the command sets itself (``PATH=... pytest``), else None (the sandbox's)."""
    cwd: str | None = None
    """Where the command runs (``cd sub && make``), when the sandbox shows the project at its own path."""


def python_module(argv: list[str]) -> str | None:
    """``MODULE`` of ``python3 [flags] -m MODULE ...`` (None: not a python, or no ``-m``)."""
    if not argv or not PYTHON.fullmatch(argv[0].rsplit("/", 1)[-1]):
        return None
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if word.startswith("-m") and len(word) > 2:
            return word[2:]
        if word in PYTHON_FLAGS_WITH_VALUE:
            i += 2
            continue
        if word == "-c" or not word.startswith("-") or word == "-":
            return None
        i += 1
    return None


def gate_calls(commands: Iterable[str], project_dir: str) -> tuple[list[tuple[str, Command]], list[str]]:
    """Each simple command the gate ``commands`` run whose program is named in the text, with the gate
    command it belongs to (``ralph.api.shell.analyze``: wrappers and ``bash -c`` code followed), and a
    note per command, or part of one, that cannot be checked before it runs (unparseable, a program only
    known at run time)."""
    from ralph.shell import analyze

    calls: list[tuple[str, Command]] = []
    unchecked: list[str] = []
    for command in commands:
        analysis = analyze(command, project_dir=project_dir)
        if analysis.unparseable:
            unchecked.append(f"`{command}`: {analysis.unparseable}")
            continue
        for each in analysis.simple:
            if not each.argv:
                continue
            if each.dynamic_name:
                unchecked.append(f"`{command}`: the program `{each.argv[0]}` is only known at run time")
                continue
            calls.append((command, each))
    return calls, unchecked


def lookup_payload(needs: Iterable[ProgramNeed], path: str | None = None) -> str:
    """The argument :data:`LOOKUP_SCRIPT` takes for ``needs`` (``path``: the gates' ``PATH``, for a need
    that sets none)."""
    return json.dumps([{"program": n.program, "module": n.module, "path": n.path or path, "cwd": n.cwd}
                       for n in needs])


def lookup_answer(output: str, needs: list[ProgramNeed]) -> list[dict[str, Any]]:
    """What :data:`LOOKUP_SCRIPT` printed (its last line), one item per need; ValueError when it is not that."""
    lines = output.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        found = None
    if not isinstance(found, list) or len(found) != len(needs) or not all(isinstance(i, dict) for i in found):
        raise ValueError(f"the program look-up printed no answer for {len(needs)} programs: {output.strip()[-300:]!r}")
    return found


__all__ = ["BUILTINS", "LOOKUP_SCRIPT", "PYTHON", "PYTHON_FLAGS_WITH_VALUE", "ProgramNeed", "gate_calls",
           "lookup_answer", "lookup_payload", "python_module"]
