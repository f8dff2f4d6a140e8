"""Helpers the program handlers share: option parsing (GNU and git abbreviations), stdin paths, nested code."""

from __future__ import annotations

import os
import re
import stat
from typing import Callable

from ralph.shell.walker import Call, Flow, State, Val, Walker, Word


Handler = Callable[[Walker, Call], None]


FETCHERS = frozenset({"curl", "wget", "fetch", "nc", "ncat", "aria2c", "http", "https", "xh"})


STDIN_PATHS = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/thread-self/fd/0", "-"})


def emit(w: Walker, call: Call) -> None:
    w.result.simple.append(call.cmd)


def inner(w: Walker, call: Call, start: int, *, env: dict[str, Val] | None = None, st: State | None = None,
          flow: Flow | None = None, words: list[Word] | None = None) -> None:
    """Run ``call.words[start:]`` (or ``words``) as the command ``call`` wraps."""
    rest = words if words is not None else call.words[start:]
    if not rest:
        return
    w.run(rest, {**call.env, **(env or {})}, st or call.st, flow or call.flow, [*call.wrappers, call.name],
          call.redirects)


_KNOWN_LONGS = frozenset(
    {"--pid", "--pgid", "--uid", "--list", "--validate", "--reset-timestamp", "--remove-timestamp", "--version",
     "--edit", "--shell", "--login", "--replace", "--command", "--exec", "--file", "--makefile", "--eval", "--append",
     "--ignore-environment", "--null", "--preserve-status", "--foreground", "--verbose", "--interval"}
)


SED_LONGS = frozenset({"--quiet", "--silent", "--debug", "--expression", "--file", "--follow-symlinks", "--in-place",
                       "--line-length", "--null-data", "--zero-terminated", "--posix", "--regexp-extended",
                       "--sandbox", "--separate", "--unbuffered", "--binary", "--help", "--version"})
"""Every long option of GNU sed (an abbreviation is only read right against all of them: ``--in`` is
``--in-place``, ``--s`` is ambiguous)."""

def long_option(arg: str, table: frozenset[str] | set[str]) -> str | None:
    """The long option of ``table`` that ``arg`` (``--name`` or ``--name=value``) spells, as GNU getopt_long
    and git's parse-options read it: the name itself, or any prefix of exactly one name (``--in`` and
    ``--in-pl`` are sed's ``--in-place``).  None: not one of them (unknown, or an ambiguous prefix).

    ``table`` must hold *every* long option of the program: a prefix is only unambiguous against all of
    them.  The one helper for abbreviations: every reader of a program's options goes through it."""
    key = arg.partition("=")[0]
    if not key.startswith("--") or len(key) < 3:
        return None
    if key in table:
        return key
    found = [n for n in table if n.startswith(key)]
    return found[0] if len(found) == 1 else None


def expand_long(key: str, names: frozenset[str] | set[str]) -> str:
    """GNU getopt_long accepts any unambiguous prefix of a long option (``--comm`` is ``--command``)."""
    return long_option(key, names) or key


def has_long(args: list[str], name: str, shortest: int = 4) -> str | None:
    """The argument that is ``name`` or an abbreviation of it (at least ``shortest`` characters)."""
    for a in args:
        key = a.partition("=")[0]
        if key.startswith("--") and len(key) >= shortest and name.startswith(key):
            return a
    return None


def getopts(words: list[Word], start: int, values: frozenset[str] | set[str]) -> tuple[dict[str, Word | None], int]:
    """Options from ``start`` up to the first operand: ({option: value or None}, index of that operand)."""
    longs = frozenset(v for v in values if v.startswith("--")) | _KNOWN_LONGS
    opts: dict[str, Word | None] = {}
    i = start
    while i < len(words):
        word = words[i]
        t = word.text
        if word.dynamic:
            break
        if t == "--":
            return opts, i + 1
        if t.startswith("--") and len(t) > 2:
            key, eq, val = t.partition("=")
            key = expand_long(key, longs)
            if not eq and key in values and i + 1 < len(words):
                opts[key] = words[i + 1]
                i += 2
                continue
            opts[key] = Word(val) if eq else None
            i += 1
            continue
        if t.startswith("-") and len(t) > 1:
            skip = 1
            for j in range(1, len(t)):
                opt = "-" + t[j]
                if opt in values:
                    if t[j + 1 :]:
                        opts[opt] = Word(t[j + 1 :])
                    elif i + 1 < len(words):
                        opts[opt] = words[i + 1]
                        skip = 2
                    break
                opts[opt] = None
            i += skip
            continue
        break
    return opts, i


MAX_READ = 1 << 20
"""Bytes the guard reads of a file a command reads (a diff, a ``.git`` file, ``HEAD``)."""


class Unreadable(OSError):
    """A file the guard must read to know what a command does, but will not: not a regular file (a FIFO, a
    device: opening or reading it could block the guard), or larger than :data:`MAX_READ`."""


def read_regular(path: str, limit: int = MAX_READ) -> bytes:
    """The content of the regular file at ``path`` (symlinks followed first), without ever blocking: opened
    ``O_NONBLOCK|O_NOFOLLOW|O_NOCTTY`` on its real path, checked with ``fstat`` to be a regular file, read up
    to ``limit`` bytes.  Raises :class:`Unreadable` for anything else (a FIFO, a device, a socket, too big),
    ``OSError`` when it does not exist."""
    real = os.path.realpath(path)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"{path} is not a regular file")
        if info.st_size > limit:
            raise Unreadable(f"{path} is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise Unreadable(f"{path} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def is_stdin_path(text: str, cwd: str = "/") -> bool:
    """Does ``text`` name the program's own stdin (``/dev/stdin``, ``/dev/fd//0``, ``/dev/./stdin``, ``-`` ...)?"""
    if text == "-":
        return True
    path = os.path.normpath(os.path.join(cwd, text))
    return (
        path in STDIN_PATHS
        or path.startswith("/dev/fd/")
        or bool(re.fullmatch(r"/proc/(self|thread-self|[0-9]+)/fd/[0-9]+", path))
    )


def run_code(w: Walker, call: Call, word: Word | None, what: str, flow: Flow | None = None, shared: bool = False) -> None:
    """Analyse the code in ``word`` (run by ``what``); a run-time word is opaque."""
    if word is None:
        return
    if word.dynamic:
        w.opaque(f"{what} runs code only known at run time (`{word.text}`)", "run the commands themselves")
        if word.output:
            w.pipe(f"{what} of a command's output")
        return
    w.code(word.text, call.st if shared else call.st.copy(), flow or call.flow, what)


def fetches(names: list[str]) -> bool:
    """Does any of these programs download (for the pipe-to-shell reason)?"""
    return any(n in FETCHERS for n in names)


def quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'" if text and not re.fullmatch(r"[A-Za-z0-9_./=:@%+,-]+", text) else (
        text or "''")
