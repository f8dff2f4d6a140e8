"""Could ``find`` run its action (``-delete``, ``-exec``...) on a given path?  Yes, no, or cannot tell (yes).

``find . -name '*.py' -exec sed -i ... {} +`` never reaches ``.git/config``; ``find . -type f -exec sed
-i ...`` does, so does ``find . -delete``, and ``find . -path ./.git -prune -o -type f -exec ...`` does
not.  :func:`may_act` evaluates the expression the way find does (left to right, ``-a`` and ``-o``
short-circuiting, ``-prune`` on a directory keeping find out of it) for one candidate path, with the
tests that depend only on the name and the kind of file (``-name``, ``-iname``, ``-path``,
``-wholename``, ``-type``, ``-maxdepth``/``-mindepth``, ``!``/``-not``, parentheses, ``,``); every
other test may be true, and an expression it cannot read may act on anything.
"""

from __future__ import annotations

import fnmatch

_NAME_TESTS = {"-name": False, "-iname": True}
_PATH_TESTS = {"-path": False, "-wholename": False, "-ipath": True, "-iwholename": True}
_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete"})
_WITH_VALUE = frozenset(
    """-lname -ilname -regex -iregex -user -group -uid -gid -perm -size -mtime -mmin -atime -amin -ctime -cmin
    -newer -anewer -cnewer -inum -links -samefile -used -fstype -context -printf -fprint -fprint0 -fprintf -fls
    -regextype -files0-from""".split())
_MAYBE, _YES, _NO = "maybe", "yes", "no"


class _Unreadable(Exception):
    pass


def may_act(expression: list[str], start: str, relative: str, kind: str = "f",
            actions: frozenset[str] | None = None) -> bool:
    """Might ``find START EXPRESSION`` run an action (``-delete``, ``-exec`` ...; or one of ``actions``, such as
    ``-print0``) on ``START/RELATIVE`` (a file of ``kind``: ``f``, ``d``, ``l``)?"""
    args = list(expression)
    limits: dict[str, int] = {}
    for option in ("-maxdepth", "-mindepth"):
        while option in args:
            k = args.index(option)
            value = args[k + 1] if k + 1 < len(args) else ""
            del args[k : k + 2]
            if value.isdigit():
                limits[option] = int(value)
    parts = [p for p in relative.split("/") if p]
    if len(parts) > limits.get("-maxdepth", len(parts)) or len(parts) < limits.get("-mindepth", 0):
        return False
    try:
        for k in range(1, len(parts)):  # find descends only into directories it did not prune
            if len(parts[:k]) >= limits.get("-maxdepth", len(parts) + 1):
                return False
            if _evaluate(args, start, parts[:k], "d", actions).pruned:
                return False
        return _evaluate(args, start, parts, kind, actions).acted
    except _Unreadable:
        return True


def _evaluate(args: list[str], start: str, parts: list[str], kind: str,
              actions: frozenset[str] | None = None) -> "_Parser":
    path = "/".join([start.rstrip("/") or "/", *parts]) if start != "/" else "/" + "/".join(parts)
    parser = _Parser(args, path, parts[-1] if parts else start.rstrip("/").rsplit("/", 1)[-1], kind,
                     actions or _ACTIONS)
    parser.expression(True)
    if parser.i < len(args):
        raise _Unreadable()
    return parser


class _Parser:
    """Find's operators, evaluated for one candidate: each primary gives yes, no or maybe; ``live`` is false
    where find would not evaluate (after a false ``-a`` operand, after a true ``-o`` operand)."""

    def __init__(self, args: list[str], path: str, name: str, kind: str, actions: frozenset[str]) -> None:
        self.actions = actions
        self.args = args
        self.i = 0
        self.path = path
        self.name = name
        self.kind = kind
        self.acted = False
        self.pruned = False

    def peek(self) -> str | None:
        return self.args[self.i] if self.i < len(self.args) else None

    def expression(self, live: bool) -> str:
        value = self.disjunction(live)
        while self.peek() == ",":
            self.i += 1
            value = self.disjunction(live)
        return value

    def disjunction(self, live: bool) -> str:
        value = self.conjunction(live)
        while self.peek() in ("-o", "-or"):
            self.i += 1
            right = self.conjunction(live and value != _YES)
            value = _or(value, right)
        return value

    def conjunction(self, live: bool) -> str:
        value = self.unary(live, _YES)
        while self.peek() not in (None, "-o", "-or", ",", ")"):
            if self.peek() in ("-a", "-and"):
                self.i += 1
            value = _and(value, self.unary(live and value != _NO, value))
        return value

    def unary(self, live: bool, so_far: str) -> str:
        token = self.peek()
        if token in ("!", "-not"):
            self.i += 1
            return _not(self.unary(live, so_far))
        if token == "(":
            self.i += 1
            value = self.expression(live)
            if self.peek() != ")":
                raise _Unreadable()
            self.i += 1
            return value
        return self.primary(live, so_far)

    def primary(self, live: bool, so_far: str) -> str:
        token = self.peek()
        if token is None:
            raise _Unreadable()
        self.i += 1
        if token in ("-exec", "-execdir", "-ok", "-okdir"):
            while self.peek() not in (None, ";", "+"):
                self.i += 1
            if self.peek() is None:
                raise _Unreadable()
            self.i += 1
        if token in self.actions:
            if live:
                self.acted = True
            return _MAYBE  # the command's exit status (-delete: whether it worked)
        if token in ("-exec", "-execdir", "-ok", "-okdir", "-delete"):
            return _MAYBE
        if token == "-prune":
            if live and so_far == _YES and self.kind == "d":
                self.pruned = True
            return _YES
        if token in _NAME_TESTS or token in _PATH_TESTS:
            pattern = self.value()
            subject = self.name if token in _NAME_TESTS else self.path
            if _NAME_TESTS.get(token) or _PATH_TESTS.get(token):
                pattern, subject = pattern.lower(), subject.lower()
            return _YES if fnmatch.fnmatchcase(subject, pattern) else _NO
        if token in ("-type", "-xtype"):
            kinds = self.value().split(",")
            if token == "-xtype":
                return _MAYBE
            return _YES if self.kind in kinds else _NO
        if token == "-true":
            return _YES
        if token == "-false":
            return _NO
        if token in _WITH_VALUE or (token.startswith("-newer") and len(token) == 8):
            self.value()
        elif not token.startswith("-"):
            raise _Unreadable()
        return _MAYBE

    def value(self) -> str:
        token = self.peek()
        if token is None:
            raise _Unreadable()
        self.i += 1
        return token


def _not(v: str) -> str:
    return _NO if v == _YES else _YES if v == _NO else _MAYBE


def _and(a: str, b: str) -> str:
    if _NO in (a, b):
        return _NO
    return _YES if a == b == _YES else _MAYBE


def _or(a: str, b: str) -> str:
    if _YES in (a, b):
        return _YES
    return _NO if a == b == _NO else _MAYBE


GIT_PATHS = ((".git/config", "f"), (".git/HEAD", "f"), (".git/index", "f"), (".git/objects", "d"), (".git/refs", "d"))
"""Paths in a repository's ``.git`` whose deletion or rewriting destroys or redirects it (besides ``.git`` itself;
acting on ``.git/refs`` is what reaching ``.git/refs/heads/main`` takes)."""


PRINTS = frozenset({"-print", "-print0", "-printf", "-fprint", "-fprint0", "-fprintf", "-ls", "-fls"})
"""Actions that print the path (what ``find ... -print0 | xargs`` passes on)."""


def may_reach_git(expression: list[str], start: str, actions: frozenset[str] | None = None) -> bool:
    """Might ``find START EXPRESSION`` act on (or with ``actions=PRINTS``, print) the ``.git`` of a repository at
    START?"""
    from ralph.shell.budget import active

    memo = active().memo
    key = ("find-git", tuple(expression), start, actions)
    if key not in memo:
        if actions is not None and not any(a in actions or a in _ACTIONS for a in expression):
            expression = [*expression, "-print"]  # find's default action
        memo[key] = _reaches(expression, start, actions)
    return bool(memo[key])


def _reaches(expression: list[str], start: str, actions: frozenset[str] | None) -> bool:
    """:func:`may_reach_git` without the memo: ``.git`` once (acted on, or pruned), then the names in it."""
    args = list(expression)
    limits: dict[str, int] = {}
    for option in ("-maxdepth", "-mindepth"):
        while option in args:
            k = args.index(option)
            value = args[k + 1] if k + 1 < len(args) else ""
            del args[k : k + 2]
            if value.isdigit():
                limits[option] = int(value)
    deepest, shallowest = limits.get("-maxdepth", 99), limits.get("-mindepth", 0)
    try:
        git = _evaluate(args, start, [".git"], "d", actions) if deepest >= 1 else None
        if git is not None and git.acted and shallowest <= 1:
            return True
        if deepest < 2 or (git is not None and git.pruned):
            return False
        return any(_evaluate(args, start, relative.split("/"), kind, actions).acted for relative, kind in GIT_PATHS)
    except _Unreadable:
        return True
