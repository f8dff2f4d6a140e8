"""Reading a sed script the way GNU sed does, in one pass: does it run shell commands, which files does it write?

A regular expression over the script (what the guards used before) backtracks: a crafted script of a
few thousand characters kept it busy for seconds.  This scanner reads commands, addresses, ``s`` and
``y`` with their delimiters (a delimiter inside a bracket expression of the regex is literal, as in
GNU sed) and looks at every character at most a few times.  What it cannot read is reported as
unreadable, and the caller treats that like a script that runs commands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_NO_ARGUMENT = frozenset("=dDgGhHnNpPxzF")
_TEXT = frozenset("aic")
_FILE = frozenset("rRwW")
_LABEL = frozenset("btT:v")
_NUMBER = frozenset("qQlL")
_S_FLAGS = frozenset("gpiImMe0123456789")


@dataclass
class SedScript:
    """What one sed script does besides editing text."""

    executes: bool = False
    """The ``e`` command or the ``s///e`` flag: text run as a shell command."""
    writes: list[str] = field(default_factory=list)
    """Files named by ``w``/``W`` and the ``s///w`` flag."""
    reads: list[str] = field(default_factory=list)
    """Files named by ``r``/``R``."""
    readable: bool = True
    """False when the script is not sed as the scanner knows it (treat it as running commands)."""


def read_sed(script: str) -> SedScript:
    """Scan ``script`` (linear time) into a :class:`SedScript`."""
    out = SedScript()
    try:
        _Scanner(script, out).commands()
    except _Unreadable:
        out.readable = False
    return out


class _Unreadable(Exception):
    pass


class _Scanner:
    def __init__(self, text: str, out: SedScript) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.out = out

    def peek(self) -> str:
        return self.s[self.i] if self.i < self.n else ""

    def skip_blanks(self, newlines: bool = False) -> None:
        while self.i < self.n and (self.s[self.i] in " \t" or (newlines and self.s[self.i] in "\n;")):
            self.i += 1

    def commands(self) -> None:
        while True:
            self.skip_blanks(newlines=True)
            if self.i >= self.n:
                return
            if self.peek() == "#":
                self.to_line_end()
                continue
            self.address()
            self.skip_blanks()
            if self.peek() == ",":
                self.i += 1
                self.skip_blanks()
                if self.peek() in ("+", "~"):
                    self.i += 1
                    self.digits(required=True)
                else:
                    self.address(required=True)
                self.skip_blanks()
            while self.peek() == "!":
                self.i += 1
                self.skip_blanks()
            self.command()

    def command(self) -> None:
        c = self.peek()
        self.i += 1
        if c == "{":
            return  # a block: its first command may follow at once
        if c == "}" or c in _NO_ARGUMENT:
            pass
        elif c == "s":
            self.substitute()
        elif c == "y":
            delim = self.delimiter()
            self.i = self.part_end(delim, regex=False) + 1
            self.i = self.part_end(delim, regex=False) + 1
        elif c == "e":
            self.out.executes = True
            self.to_line_end()
        elif c in _TEXT:
            self.text()
        elif c in _FILE:
            name = self.to_line_end().strip()
            (self.out.writes if c in "wW" else self.out.reads).append(name)
        elif c in _LABEL:
            while self.i < self.n and self.s[self.i] not in "\n;":
                self.i += 1
        elif c in _NUMBER:
            self.skip_blanks()
            self.digits(required=False)
        else:
            raise _Unreadable(c)
        self.end_of_command()

    def end_of_command(self) -> None:
        self.skip_blanks()
        c = self.peek()
        if c in ("", "\n", ";", "}", "#"):
            return
        raise _Unreadable(c)

    def substitute(self) -> None:
        delim = self.delimiter()
        self.i = self.part_end(delim, regex=True) + 1
        self.i = self.part_end(delim, regex=False) + 1
        while self.i < self.n and self.s[self.i] in _S_FLAGS:
            if self.s[self.i] == "e":
                self.out.executes = True
            self.i += 1
        if self.peek() == "w":
            self.i += 1
            self.out.writes.append(self.to_line_end().strip())

    def delimiter(self) -> str:
        c = self.peek()
        if c in ("", "\n", "\\"):
            raise _Unreadable(c)
        self.i += 1
        return c

    def address(self, required: bool = False) -> None:
        c = self.peek()
        if c.isdigit():
            self.digits(required=True)
            if self.peek() == "~":
                self.i += 1
                self.digits(required=True)
        elif c == "$":
            self.i += 1
        elif c in ("/", "\\"):
            self.i += 1
            delim = "/"
            if c == "\\":
                delim = self.delimiter()
            self.i = self.part_end(delim, regex=True) + 1
            while self.peek() in ("I", "M"):
                self.i += 1
        elif required:
            raise _Unreadable(c)

    def digits(self, required: bool) -> None:
        start = self.i
        while self.i < self.n and self.s[self.i].isdigit():
            self.i += 1
        if required and self.i == start:
            raise _Unreadable(self.peek())

    def part_end(self, delim: str, regex: bool) -> int:
        """The index of the ``delim`` closing the part that starts at ``self.i``."""
        s, n, i = self.s, self.n, self.i
        while i < n:
            c = s[i]
            if c == "\\":
                i += 2
            elif c == delim:
                return i
            elif c == "[" and regex:
                i = self.bracket_end(i) + 1
            else:
                i += 1
        raise _Unreadable("unterminated")

    def bracket_end(self, i: int) -> int:
        """The ``]`` closing the bracket expression opened at ``i`` (``[]x]``, ``[^]x]``, ``[[:alpha:]]``)."""
        s, n = self.s, self.n
        j = i + 1
        if j < n and s[j] == "^":
            j += 1
        if j < n and s[j] == "]":
            j += 1
        while j < n:
            c = s[j]
            if c == "]":
                return j
            if c == "[" and j + 1 < n and s[j + 1] in ":.=":
                close = s.find(s[j + 1] + "]", j + 2)
                if close < 0:
                    raise _Unreadable("bracket")
                j = close + 2
                continue
            j += 1
        raise _Unreadable("bracket")

    def text(self) -> None:
        """``a``/``i``/``c`` text: to the end of the line, a backslash-newline continuing it."""
        while self.i < self.n:
            c = self.s[self.i]
            if c == "\\":
                self.i += 2
            elif c == "\n":
                return
            else:
                self.i += 1

    def to_line_end(self) -> str:
        start = self.i
        end = self.s.find("\n", start)
        self.i = self.n if end < 0 else end
        return self.s[start : self.i]
