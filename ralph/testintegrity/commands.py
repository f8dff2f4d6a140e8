"""What the verifyCommands read besides the tests: whatever the test command itself reads decides the result.

``make test`` runs the recipe of the ``Makefile`` in its directory (or of a ``GNUmakefile`` there, which make
reads first); ``sh run-tests.sh`` runs whatever that script sources; ``npm test`` runs its script with the shell
``.npmrc`` names.  :func:`command_inputs` finds those files statically, from the story-start versions (the
agent's cannot decide what is protected), and returns them as exact paths: the test-integrity look counts a
change to them as a change of the test configuration, and the trusted tree holds their story-start versions,
a new one of them (a ``GNUmakefile`` the agent added) set aside.

What is followed (each command parsed with :func:`ralph.shell.analyze`, every path placed after the line's
``cd`` steps):

- a program or script a command runs that is a project file (``./ci/test.sh``, ``cd ci && sh check.sh``,
  ``python3 tools/check.py``), and, for a shell script, what it sources (``. ./ci/settings.sh``) or runs in
  turn with a shell or as a program (``./tools/lint``), transitively;
- ``make``/``gmake``: the makefiles it would read in its directory (``-C``, ``-f``; ``GNUmakefile``,
  ``makefile``, ``Makefile``), the files they ``include``/``-include``, and what the recipes of the targets it
  runs (the goals named, else the first target; their prerequisites too) run;
- ``npm``/``yarn``/``pnpm``/``npx``: their rc files in the command's directory and the project's root
  (``.npmrc``, ``.yarnrc``, ``.yarnrc.yml`` and the ``yarnPath`` it names, ``.pnpmfile.cjs``), and what the
  ``package.json`` script a command runs runs in turn.

Bounded (:data:`MAX_FILES`, :data:`MAX_DEPTH`); what is only known at run time (``$(SCRIPT)``, ``. "$dir/x"``)
is not followed.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from collections.abc import Iterable
from pathlib import Path

from ralph.testintegrity.export import Entry, read_blobs

MAX_FILES = 64
"""Files looked at per set of commands, at most."""
MAX_DEPTH = 4
"""Scripts followed into scripts, at most this deep."""

MAKE = frozenset({"make", "gmake"})
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
"""The makefiles GNU make looks for, in its order: a new one earlier in the list replaces the others."""
PACKAGE_MANAGERS = frozenset({"npm", "npx", "yarn", "pnpm", "pnpx"})
PACKAGE_RC = (".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs")
"""Project files npm, yarn and pnpm read for their settings (the shell a script runs with, hooks, the tool)."""
SHELL_RUNNERS = frozenset({".", "source", "sh", "bash", "dash", "zsh", "ksh", "ash"})

_INCLUDE = re.compile(r"^[ ]*(?:-include|sinclude|include)[ \t]+(.+?)[ \t]*(?:#.*)?$", re.M)
_RULE = re.compile(r"^([^\t#=:][^#=:]*?)[ \t]*::?(?!=)[ \t]*([^=]*)$")
"""A rule's first line: ``targets: prerequisites`` (not a ``:=`` or ``::=`` assignment)."""
_YARN_PATH = re.compile(r"^yarnPath:[ \t]*[\"']?([^\"'\s#]+)", re.M)
_cache: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}


def command_inputs(
    commands: Iterable[str], start: dict[str, Entry], project_dir: Path, story_start: str | None = None,
) -> list[str]:
    """The paths (relative, POSIX) that ``commands`` read as they run, by the story-start tree ``start``
    (see the module's docstring): files of ``start``, and names that would be read if they existed.

    ``story_start``: the commit ``start`` lists, when it is a full object id the answer is remembered (what
    an id names never changes)."""
    commands = tuple(commands)
    if story_start is None or len(story_start) not in (40, 64):
        return _Follow(start, project_dir).run(commands)
    key = (str(project_dir), story_start, commands)
    if key not in _cache:
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = _Follow(start, project_dir).run(commands)
    return list(_cache[key])


class _Follow:
    """One walk of the commands and of the files they read."""

    def __init__(self, start: dict[str, Entry], project_dir: Path) -> None:
        self.start = start
        self.project_dir = project_dir
        self.found: dict[str, None] = {}
        self.read: set[str] = set()
        self.todo: list[tuple[str, str, int]] = []

    def run(self, commands: tuple[str, ...]) -> list[str]:
        """Walk every command, then every script they lead to, breadth first."""
        self.todo = [(command, "", 0) for command in commands]
        while self.todo and len(self.read) < MAX_FILES:
            text, base, depth = self.todo.pop(0)
            self._shell(text, base, depth)
        return sorted(self.found)

    def _text(self, path: str) -> str | None:
        """The story-start text of ``path`` (None: not a regular file then); counts against the bound."""
        entry = self.start.get(path)
        if entry is None or not entry[0].startswith("100") or path in self.read or len(self.read) >= MAX_FILES:
            return None
        self.read.add(path)
        data = read_blobs(self.project_dir, [entry[1]]).get(entry[1])
        if data is None or b"\0" in data[:8000] or len(data) > 1_000_000:
            return None
        return data.decode("utf-8", "replace")

    def _shell(self, text: str, base: str, depth: int) -> None:
        from ralph.shell import analyze

        analysis = analyze(text, cwd=str(self.project_dir / base), project_dir=str(self.project_dir))
        scripts = set(analysis.scripts)
        for command in analysis.simple:
            if not command.argv or command.cd_unknown:
                continue
            where = self._place(base, command.cd)
            if where is None:
                continue
            if command.name in MAKE:
                self._make(command.argv[1:], where, depth)
            elif command.name in PACKAGE_MANAGERS:
                self._package_manager(command.name, command.argv[1:], where, depth)
            # deeper down, only what a shell runs: a Python script a recipe of the build runs is the code's own
            runs_scripts = depth == 0 or command.name in SHELL_RUNNERS
            words = [command.argv[0]] + [w for w in command.argv[1:] if runs_scripts and w in scripts]
            for word, dynamic, glob in zip(command.argv, command.dynamic, command.glob):
                if word not in words or dynamic or glob:
                    continue
                path = self._place(where, [word])
                if path is None or path not in self.start:
                    continue
                self.found[path] = None
                shell = command.name in SHELL_RUNNERS or word == command.argv[0]
                if shell and depth < MAX_DEPTH:
                    script = self._text(path)
                    if script is not None and (command.name in SHELL_RUNNERS or _is_shell(path, script)):
                        self.todo.append((script, where, depth + 1))

    def _place(self, base: str, steps: Iterable[str]) -> str | None:
        """``base`` after ``cd`` to each of ``steps`` (a file name last), relative to the project; None: outside
        it or not known."""
        path = base
        root = str(self.project_dir).rstrip("/")
        for step in steps:
            if not step or step.startswith(("~", "-")) or "\0" in step:
                return None
            if step.startswith("/"):
                resolved = str(self.project_dir.resolve()).rstrip("/")
                for prefix in dict.fromkeys([root, resolved]):
                    if step == prefix or step.startswith(prefix + "/"):
                        path = step[len(prefix) + 1:]
                        break
                else:
                    return None
            else:
                path = posixpath.join(path, step)
        normal = posixpath.normpath(path) if path else "."
        if normal == "..":
            return None
        if normal.startswith("../"):
            return None
        return "" if normal == "." else normal

    def _make(self, args: list[str], where: str, depth: int) -> None:
        """``make`` in ``where``: its makefiles, what they include, what the recipes of the targets it runs run."""
        folders: list[str] = []
        files: list[str] = []
        goals: list[str] = []
        rest = iter(args)
        for arg in rest:
            if arg in ("-C", "--directory"):
                folders.append(next(rest, ""))
            elif arg in ("-f", "--file", "--makefile"):
                files.append(next(rest, ""))
            elif arg.startswith(("--directory=", "--file=", "--makefile=")):
                (folders if arg.startswith("--directory=") else files).append(arg.split("=", 1)[1])
            elif arg.startswith(("-C", "-f")) and len(arg) > 2:
                (folders if arg[1] == "C" else files).append(arg[2:])
            elif arg in ("-I", "-o", "-W", "--include-dir", "--old-file", "--what-if", "--assume-new"):
                next(rest, None)
            elif not arg.startswith("-") and "=" not in arg:
                goals.append(arg)
        folder = self._place(where, folders)
        if folder is None:
            return
        names = [self._place(folder, [name]) for name in files] if files else [
            posixpath.join(folder, name) if folder else name for name in MAKEFILES]
        rules: dict[str, tuple[list[str], list[str]]] = {}
        order: list[str] = []
        for name in names:
            if name is not None:
                self.found[name] = None
                self._makefile(name, folder, rules, order)
        if depth >= MAX_DEPTH:
            return
        todo = goals or [t for t in order[:1]]
        done: set[str] = set()
        recipes: list[str] = []
        while todo and len(done) < 200:
            target = todo.pop(0)
            if target in done or target not in rules:
                continue
            done.add(target)
            prerequisites, lines = rules[target]
            todo += prerequisites
            recipes += lines
        if recipes:
            self.todo.append(("\n".join(recipes), folder, depth + 1))

    def _makefile(self, path: str, folder: str, rules: dict[str, tuple[list[str], list[str]]], order: list[str]) -> None:
        """Read one makefile (and what it includes) into ``rules``: target -> (prerequisites, recipe lines)."""
        text = self._text(path)
        if text is None:
            return
        text = text.replace("\\\n", " ")
        for line in _INCLUDE.findall(text):
            for word in line.split():
                if "$" in word:
                    continue
                pattern = self._place(folder, [word])
                if pattern is None:
                    continue
                matched = [p for p in self.start if fnmatch.fnmatchcase(p, pattern)] if any(
                    c in word for c in "*?[") else [pattern]
                for included in matched:
                    self.found[included] = None
                    self._makefile(included, folder, rules, order)
        current: list[str] = []
        for line in text.splitlines():
            if line.startswith("\t"):
                for target in current:
                    rules[target][1].append(line.lstrip("\t").lstrip("@+- "))
                continue
            rule = _RULE.match(line)
            if rule is None:
                if line.strip() and not line.lstrip().startswith("#"):
                    current = []
                continue
            targets = [t for t in rule.group(1).split() if "%" not in t]
            prerequisites = rule.group(2).split(";", 1)
            current = targets
            for target in targets:
                entry = rules.setdefault(target, ([], []))
                entry[0].extend(w for w in prerequisites[0].split() if "$" not in w)
                if len(prerequisites) > 1 and prerequisites[1].strip():
                    entry[1].append(prerequisites[1].strip())
                if not target.startswith(".") and target not in order:
                    order.append(target)

    def _package_manager(self, name: str, args: list[str], where: str, depth: int) -> None:
        """npm, yarn, pnpm in ``where``: their rc files, and what the ``package.json`` script they run runs."""
        for folder in dict.fromkeys([where, ""]):
            for rc in PACKAGE_RC:
                path = posixpath.join(folder, rc) if folder else rc
                self.found[path] = None
                if rc == ".yarnrc.yml":
                    text = self._text(path) or ""
                    for tool in _YARN_PATH.findall(text):
                        placed = self._place(folder, [tool])
                        if placed is not None:
                            self.found[placed] = None
        words = [a for a in args if not a.startswith("-")]
        if not words or name in ("npx", "pnpx"):
            return
        script = words[0]
        if script in ("run", "run-script", "rum", "urn") and len(words) > 1:
            script = words[1]
        elif script in ("t", "tst"):
            script = "test"
        elif name == "npm" and script not in ("test", "start", "stop", "restart"):
            return
        package = self._text(posixpath.join(where, "package.json") if where else "package.json")
        try:
            scripts = json.loads(package or "{}").get("scripts") or {}
        except (ValueError, AttributeError):
            return
        if not isinstance(scripts, dict) or depth >= MAX_DEPTH:
            return
        for key in (f"pre{script}", script, f"post{script}"):
            body = scripts.get(key)
            if isinstance(body, str):
                self.todo.append((body, where, depth + 1))


def _is_shell(path: str, text: str) -> bool:
    """A shell script by its name or its ``#!`` line."""
    if path.endswith((".sh", ".bash")):
        return True
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and re.search(r"\b(?:ba|da|z|k)?sh\b", first) is not None
