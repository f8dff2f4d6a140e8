"""The module names a project file must not shadow: what the test run imports from outside the project.

``python -m pytest`` puts the project's root first on ``sys.path`` (so do ``PYTHONPATH=.`` and a ``src/``
an editable install adds): a root ``argparse.py`` or ``shlex/`` package is imported instead of the standard
library's by pytest itself, before any test, as a root ``pytest.py`` would be.  So a module or package there
named like one of the environment's top-level modules is test configuration
(:meth:`ralph.testintegrity.paths.TestRules.shadows_environment`).

The environment is the standard library (``sys.stdlib_module_names``), the folders on this interpreter's
``sys.path`` outside the project, and the ``site-packages`` of the project's linked virtualenvs (where its own
``python`` finds pytest's dependencies, ``py.py`` among them).  Names the project itself provides are not
counted: a folder inside the project on ``sys.path`` (an editable install) is not listed, and a module or
package the project held on an import root when the story started is its own code (:func:`own_modules`),
so an installed copy of the project does not make its own package test configuration.  A shadow the story
adds is test configuration (set aside: the trusted run imports the real module).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

RUNNER_DEPENDENCIES = frozenset({
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli", "colorama", "pygments",
    "coverage", "xdist", "execnet",
})
"""pytest's own modules and dependencies, counted whether or not this interpreter has them installed."""

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_MODULE_FILE = re.compile(r"([A-Za-z_]\w*)(?:\.[\w-]+)?\.(?:py|pyc|pyw|so|pyd)$")
_PYTHONPATH = re.compile(r"(?:^|\s)PYTHONPATH=(\S+)")


@functools.lru_cache(maxsize=32)
def _listed(folder: str) -> frozenset[str]:
    """The top-level module names in ``folder`` (``NAME.py``, ``NAME.*.so``, packages with ``__init__``)."""
    names = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return frozenset()
    for entry in entries:
        match = _MODULE_FILE.fullmatch(entry.name)
        if match:
            names.add(match.group(1))
        elif _IDENTIFIER.fullmatch(entry.name) and any(
                os.path.exists(os.path.join(entry.path, f"__init__.{suffix}")) for suffix in ("py", "pyc")):
            names.add(entry.name)
    return frozenset(names)


def _inside(path: str, project: str) -> bool:
    return path == project or path.startswith(project.rstrip(os.sep) + os.sep)


def environment_modules(project_dir: Path, link: Iterable[str] = ()) -> frozenset[str]:
    """The top-level module names the test run finds outside ``project_dir`` (see the module's docstring;
    the project's own names are the caller's to take out, :func:`own_modules`)."""
    project = os.path.realpath(project_dir)
    folders = [p for p in sys.path if p and not _inside(os.path.realpath(p), project)]
    for name in link:
        if name and "/" not in name and name not in (".", ".."):
            folders += [str(p) for p in sorted((project_dir / name).glob("lib/python*/site-packages"))]
    names: set[str] = set(sys.stdlib_module_names)
    for folder in folders:
        names |= _listed(folder)
    return frozenset(names | RUNNER_DEPENDENCIES)


def own_modules(paths: Iterable[str], roots: Iterable[str]) -> set[str]:
    """The modules and packages the project itself held on the import ``roots`` when the story started
    (``paths``: the story-start tree's files): its own code, even where an installed copy of it is in the
    environment too.  Only the story's start counts, so the agent cannot add a name to this set."""
    roots = list(roots)
    own = set()
    for path in paths:
        for root in roots:
            if not path.startswith(root):
                continue
            top, slash, rest = path[len(root):].partition("/")
            if slash and "/" not in rest and rest.startswith("__init__."):
                own.add(top)
            elif not slash:
                match = _MODULE_FILE.fullmatch(top)
                if match:
                    own.add(match.group(1))
    return own


def pythonpath_roots(commands: Iterable[str]) -> list[str]:
    """The project-relative folders a verifyCommand puts on ``PYTHONPATH`` (``PYTHONPATH=.:lib pytest`` -> lib/)."""
    roots = []
    for command in commands:
        for value in _PYTHONPATH.findall(command):
            try:
                value = " ".join(shlex.split(value))
            except ValueError:
                pass
            for part in value.split(":"):
                part = part.strip().removeprefix("./").rstrip("/")
                if part in ("", ".", "$PWD", "${PWD}", "$(pwd)"):
                    continue
                if not part.startswith(("/", "$", "~")) and ".." not in part.split("/"):
                    roots.append(part + "/")
    return list(dict.fromkeys(roots))
