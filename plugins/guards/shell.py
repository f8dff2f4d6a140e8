"""What would this Bash command line run?  Shell analysis for the PreToolUse guards.

Stdlib only, no subprocesses, and :func:`analyze` never raises: whatever it
cannot follow is reported in ``ShellAnalysis.unparseable`` (a syntax error, too
deep a nesting) or ``ShellAnalysis.opaque`` (code that only exists at run time,
such as ``eval "$x"``), and the guards decide what that means.

What it understands (POSIX shell plus the bash forms agents use):

- lists and pipelines: ``;`` ``&`` ``&&`` ``||`` ``|`` ``|&`` newlines, ``( )``
  and ``{ }`` groups, ``if``/``while``/``for`` keywords, ``# comments``;
- quoting: ``'...'``, ``"..."``, backslashes, ANSI-C ``$'\\x72m'`` (gives ``rm``),
  so ``r''m``, ``"rm"``, ``\\rm`` and ``g\\it`` all read as the real names;
- expansions: ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` resolved from
  assignments earlier on the same line (``cmd=git; $cmd push``); unknown ones
  are kept as text (``$HOME``) and the word is marked *dynamic*;
- command substitution ``$(...)`` and backticks, process substitution
  ``<(...)``: their commands are analysed too, and a substitution made only of
  ``echo``/``printf``/``base64 -d``/``rev``/``xxd -r -p`` is evaluated
  (``$(echo git) push`` reads as ``git push``);
- code run by other commands: ``bash -c``/``sh -c``/``zsh -c``, ``eval``,
  ``env -S``, ``su -c``, ``flock -c``, ``watch``, ``find -exec``, ``alias``,
  ``trap``, heredocs and here-strings fed to a shell, and a shell's stdin when a
  static pipeline feeds it (``echo Z2l0IHB1c2g= | base64 -d | bash``);
- wrappers: leading ``NAME=value`` assignments, ``env``, ``command``,
  ``builtin``, ``exec``, ``nohup``, ``time``, ``nice``, ``ionice``,
  ``timeout``, ``stdbuf``, ``setsid``, ``xargs``, ``busybox``; privilege
  wrappers (``sudo``, ``doas`` ...) are reported as commands *and* unwrapped;
- redirections: output targets of ``>``, ``>>``, ``>|``, ``&>``, ``<>``,
  ``>&file`` and ``tee FILE``, with the directory they are relative to (``cd``
  on the same line is followed);
- pipes into a shell or interpreter (``curl ... | sh``, ``base64 -d | bash``,
  ``bash <(curl ...)``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Command", "ShellAnalysis", "WriteTarget", "analyze", "resolve_path", "basename"]

MAX_DEPTH = 6
"""Nesting of ``bash -c`` / ``eval`` / ``$(...)`` followed before giving up (unparseable)."""
MAX_CHARS = 100_000
"""A command line longer than this is not analysed (unparseable)."""
MAX_WORK = 400_000
"""Characters analysed in total, nested code included (guards against blow-ups)."""

SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "fish", "csh", "tcsh", "rbash"}
)
PRIVILEGE_WRAPPERS = frozenset({"sudo", "doas", "pkexec", "runuser", "sudoedit", "su"})
_INTERPRETER = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|php[0-9.]*|lua[0-9.]*|deno|bun|tclsh|osascript)$"
)
_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac", "coproc"})
_SKIP_COMMANDS = frozenset({"for", "case", "select", "function", "in"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FORK_BOMB = re.compile(r"(?P<n>[^\s(){};|&<>$`'\"]+)\s*\(\s*\)\s*\{[^}]*?(?P=n)\s*\|\s*&?\s*(?P=n)")
_OPS = (";;&", "&>>", "<<<", "<<-", "&&", "||", "|&", ";;", ";&", ">>", ">|", ">&", "<&", "<>", "<<", "&>",
        "|", "&", ";", "<", ">", "(", ")")
_REDIRECT_OPS = frozenset({">>", ">|", ">&", "<&", "<>", "<<", "<<-", "<<<", "&>", "&>>", "<", ">"})
_OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_SPECIAL = frozenset(" \t\r\n\\'\"$`|&;<>()")
_C_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
              "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


class _ParseError(Exception):
    pass


# -- results ------------------------------------------------------------------------


@dataclass
class Command:
    """One simple command after wrappers were stripped: what actually runs."""

    argv: list[str]
    dynamic: list[bool]
    """Per word: part of it is only known at run time (unknown variable, substitution)."""
    glob: list[bool]
    """Per word: it holds unquoted ``*``, ``?`` or ``[`` (a pattern, not a name)."""
    assignments: dict[str, str] = field(default_factory=dict)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    """(operator, target) pairs, e.g. ``(">", "out.txt")``, ``("<", "in")``, ``("<<", "<heredoc>")``."""
    piped_in: bool = False
    piped_out: bool = False
    wrappers: list[str] = field(default_factory=list)
    """Wrappers stripped to reach this command (``env``, ``sudo``, ``xargs``, ``find -exec`` ...)."""
    cd: list[str] = field(default_factory=list)
    """``cd`` targets seen earlier on the line, in order (resolve relative paths against them)."""
    cd_unknown: bool = False
    """An earlier ``cd`` went somewhere only known at run time."""
    depth: int = 0
    stdin: str | None = None
    """Static text fed by a heredoc or here-string, if any."""

    @property
    def name(self) -> str:
        return basename(self.argv[0]) if self.argv else ""

    @property
    def dynamic_name(self) -> bool:
        """The command name itself is computed at run time (``$cmd``, ``/???/r?``)."""
        return bool(self.argv) and (self.dynamic[0] or self.glob[0])

    @property
    def args(self) -> list[str]:
        return self.argv[1:]

    @property
    def from_xargs(self) -> bool:
        return "xargs" in self.wrappers


@dataclass
class WriteTarget:
    """A file a command line writes through a redirection or ``tee``."""

    path: str
    dynamic: bool
    glob: bool
    cd: list[str]
    cd_unknown: bool
    via: str


@dataclass
class ShellAnalysis:
    """Everything :func:`analyze` found in one command line (nested code included)."""

    command: str
    simple: list[Command] = field(default_factory=list)
    writes: list[WriteTarget] = field(default_factory=list)
    pipes_into_shell: bool = False
    pipe_detail: str = ""
    unparseable: str | None = None
    opaque: list[str] = field(default_factory=list)
    """Code the analysis cannot see: ``eval "$x"``, ``bash -c "$(cat f)"``."""
    scripts: list[str] = field(default_factory=list)
    """Script files run by a shell (``bash x.sh``, ``source x``): their content is not checked."""
    fork_bomb: bool = False

    @property
    def commands(self) -> list[list[str]]:
        return [c.argv for c in self.simple]

    @property
    def redirect_targets(self) -> list[str]:
        return [w.path for w in self.writes]


def basename(word: str) -> str:
    """The command name of an argv[0] (``/usr/bin/git`` -> ``git``)."""
    return word.rstrip("/").rsplit("/", 1)[-1] if "/" in word else word


# -- lexing ---------------------------------------------------------------------------


class _Word:
    __slots__ = ("parts",)

    def __init__(self, parts: list[tuple[Any, ...]]) -> None:
        self.parts = parts


class _Op:
    __slots__ = ("op", "fd", "body", "body_quoted")

    def __init__(self, op: str, fd: str = "") -> None:
        self.op = op
        self.fd = fd
        self.body: str | None = None
        self.body_quoted = False


def _match(s: str, k: int, open_: str, close: str) -> int:
    """Index of the ``close`` matching an ``open_`` just before ``k``, or -1."""
    depth, n = 1, len(s)
    while k < n:
        c = s[k]
        if c == "\\":
            k += 2
            continue
        if c == "'":
            k = s.find("'", k + 1)
            if k < 0:
                return -1
        elif c == '"':
            k = _skip_dq(s, k + 1)
            if k < 0:
                return -1
            continue
        elif c == "`":
            k = _skip_backtick(s, k + 1)
            if k < 0:
                return -1
            continue
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return k
        k += 1
    return -1


def _skip_dq(s: str, k: int) -> int:
    """Index just after the closing ``"`` of a double-quoted string starting at ``k``, or -1."""
    n = len(s)
    while k < n:
        c = s[k]
        if c == "\\":
            k += 2
        elif c == '"':
            return k + 1
        elif c == "$" and s.startswith("$(", k):
            m = _match(s, k + 2, "(", ")")
            if m < 0:
                return -1
            k = m + 1
        elif c == "`":
            k = _skip_backtick(s, k + 1)
            if k < 0:
                return -1
        else:
            k += 1
    return -1


def _skip_backtick(s: str, k: int) -> int:
    n = len(s)
    while k < n:
        if s[k] == "\\":
            k += 2
        elif s[k] == "`":
            return k + 1
        else:
            k += 1
    return -1


def _ansi_c(s: str, k: int) -> tuple[str, int]:
    """Decode ``$'...'`` content starting at ``k``; return (text, index after the closing quote)."""
    out: list[str] = []
    n = len(s)
    while k < n:
        c = s[k]
        if c == "'":
            return "".join(out), k + 1
        if c != "\\" or k + 1 >= n:
            out.append(c)
            k += 1
            continue
        e = s[k + 1]
        k += 2
        if e in _C_ESCAPES:
            out.append(_C_ESCAPES[e])
        elif e in "01234567":
            m = re.match(r"[0-7]{0,2}", s[k:])
            digits = e + (m.group(0) if m else "")
            k += len(digits) - 1
            out.append(chr(int(digits, 8) & 0xFF))
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            m = re.match(r"[0-9A-Fa-f]{1,%d}" % width, s[k:])
            if m:
                k += len(m.group(0))
                try:
                    out.append(chr(int(m.group(0), 16)))
                except (ValueError, OverflowError):
                    pass
            else:
                out.append("\\" + e)
        elif e == "c" and k < n:
            out.append(chr(ord(s[k]) & 0x1F))
            k += 1
        else:
            out.append("\\" + e)
    raise _ParseError("unterminated $'...' quote")


class _Lexer:
    """Turns shell text into words (lists of parts) and operators."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.n = len(s)
        self.i = 0
        self.tokens: list[_Word | _Op] = []
        self.parts: list[tuple[Any, ...]] = []
        self.in_word = False
        self.heredoc_wait: _Op | None = None
        self.pending: list[tuple[_Op, str, bool]] = []

    def add(self, text: str, quoted: bool) -> None:
        self.parts.append(("L", text, quoted))
        self.in_word = True

    def flush(self) -> None:
        if not self.in_word:
            return
        word = _Word(self.parts)
        self.tokens.append(word)
        if self.heredoc_wait is not None:
            op = self.heredoc_wait
            self.heredoc_wait = None
            delim = "".join(p[1] for p in word.parts if p[0] == "L")
            op.body_quoted = any(p[0] == "L" and p[2] for p in word.parts)
            self.pending.append((op, delim, op.op == "<<-"))
        self.parts = []
        self.in_word = False

    def lex(self) -> list[_Word | _Op]:
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in " \t\r":
                self.flush()
                self.i += 1
            elif c == "\n":
                self.flush()
                self.tokens.append(_Op(";"))
                self.i += 1
                if self.pending:
                    self.read_heredocs()
            elif c == "#" and not self.in_word:
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
            elif c == "\\":
                if self.i + 1 < n:
                    if s[self.i + 1] != "\n":
                        self.add(s[self.i + 1], True)
                    self.i += 2
                else:
                    self.add("\\", False)
                    self.i += 1
            elif c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise _ParseError("unterminated single quote")
                self.add(s[self.i + 1 : j], True)
                self.i = j + 1
            elif c == '"':
                self.i += 1
                self.double_quoted()
            elif c == "$":
                self.dollar(quoted=False)
            elif c == "`":
                self.backtick()
            elif c in "|&;<>()":
                self.operator()
            else:
                j = self.i + 1
                while j < n and s[j] not in _SPECIAL:
                    j += 1
                self.add(s[self.i : j], False)
                self.i = j
        self.flush()
        return self.tokens

    def double_quoted(self, until_eof: bool = False) -> None:
        s, n = self.s, self.n
        buf: list[str] = []
        while self.i < n:
            c = s[self.i]
            if c == '"' and not until_eof:
                self.add("".join(buf), True)
                self.i += 1
                return
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    buf.append(s[self.i + 1])
                self.i += 2
            elif c == "$" or c == "`":
                if buf:
                    self.add("".join(buf), True)
                    buf = []
                if c == "$":
                    self.dollar(quoted=True)
                else:
                    self.backtick()
            else:
                buf.append(c)
                self.i += 1
        if until_eof:
            self.add("".join(buf), True)
            return
        raise _ParseError("unterminated double quote")

    def dollar(self, quoted: bool) -> None:
        s, i = self.s, self.i
        nxt = s[i + 1] if i + 1 < self.n else ""
        if nxt == "'" and not quoted:
            text, self.i = _ansi_c(s, i + 2)
            self.add(text, True)
        elif nxt == '"' and not quoted:
            self.i = i + 2
            self.double_quoted()
        elif nxt == "(":
            j = _match(s, i + 2, "(", ")")
            if j < 0:
                raise _ParseError("unbalanced $( ... )")
            inner = s[i + 2 : j]
            if inner.startswith("(") and inner.endswith(")") and "$(" not in inner and "`" not in inner:
                self.parts.append(("A", inner))  # $(( arithmetic ))
            else:
                self.parts.append(("S", inner))  # a substitution (or arithmetic hiding one): analyse it
            self.in_word = True
            self.i = j + 1
        elif nxt == "{":
            j = _match(s, i + 2, "{", "}")
            if j < 0:
                raise _ParseError("unbalanced ${ ... }")
            self.parts.append(self.parameter(s[i + 2 : j]))
            self.in_word = True
            self.i = j + 1
        elif nxt and (nxt.isalpha() or nxt == "_"):
            m = _NAME.match(s, i + 1)
            assert m is not None
            self.parts.append(("V", m.group(0), None, False))
            self.in_word = True
            self.i = m.end()
        elif nxt and nxt in "0123456789@*#?$!-":
            self.parts.append(("V", nxt, None, False))
            self.in_word = True
            self.i = i + 2
        else:
            self.add("$", quoted)
            self.i = i + 1

    @staticmethod
    def parameter(body: str) -> tuple[Any, ...]:
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(.*)\Z", body, re.S)
        if not m:
            return ("V", body, None, True)
        name, rest = m.group(1), m.group(2)
        if not rest:
            return ("V", name, None, False)
        for op in (":-", ":=", "-", "="):
            if rest.startswith(op):
                default = _Lexer(rest[len(op) :]).lex()
                parts = [p for t in default if isinstance(t, _Word) for p in t.parts]
                return ("V", name, parts, False)
        # ${x#pat}, ${x/a/b}, ${x:+w}, ${#x} ...: the value is only known at run time
        inner = _Lexer(rest).lex() if ("$(" in rest or "`" in rest) else []
        parts = [p for t in inner if isinstance(t, _Word) for p in t.parts if p[0] == "S"]
        return ("V", name, parts or None, True)

    def backtick(self) -> None:
        s, n = self.s, self.n
        k = self.i + 1
        buf: list[str] = []
        while k < n:
            c = s[k]
            if c == "\\" and k + 1 < n and s[k + 1] in "`$\\":
                buf.append(s[k + 1])
                k += 2
            elif c == "`":
                self.parts.append(("S", "".join(buf)))
                self.in_word = True
                self.i = k + 1
                return
            else:
                buf.append(c)
                k += 1
        raise _ParseError("unterminated backtick")

    def operator(self) -> None:
        s, i = self.s, self.i
        c = s[i]
        if c in "<>" and s.startswith("(", i + 1):
            j = _match(s, i + 2, "(", ")")
            if j < 0:
                raise _ParseError(f"unbalanced {c}( ... )")
            self.flush()
            self.tokens.append(_Word([("P", c, s[i + 2 : j])]))
            self.i = j + 1
            return
        fd = ""
        if (
            c in "<>"
            and self.in_word
            and all(p[0] == "L" and not p[2] for p in self.parts)
            and "".join(p[1] for p in self.parts).isdigit()
        ):
            fd = "".join(p[1] for p in self.parts)
            self.parts = []
            self.in_word = False
        else:
            self.flush()
        op = next(o for o in _OPS if s.startswith(o, i))
        tok = _Op(op, fd)
        self.tokens.append(tok)
        self.i = i + len(op)
        if op in ("<<", "<<-"):
            self.heredoc_wait = tok

    def read_heredocs(self) -> None:
        s, n = self.s, self.n
        i = self.i
        for op, delim, strip_tabs in self.pending:
            body: list[str] = []
            while i < n:
                e = s.find("\n", i)
                if e < 0:
                    e = n
                line = s[i:e]
                i = e + 1
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    break
                body.append(line)
            op.body = "\n".join(body) + ("\n" if body else "")
        self.pending = []
        self.i = min(i, n)


def _dq_parts(text: str) -> list[tuple[Any, ...]]:
    """Parts of a text expanded like a double-quoted string (an unquoted heredoc body)."""
    lexer = _Lexer(text)
    lexer.double_quoted(until_eof=True)
    return lexer.parts


# -- static evaluation of tiny pipelines (echo / printf / base64 -d ...) ---------------


def _escapes(text: str, octal_needs_zero: bool) -> str:
    out: list[str] = []
    k, n = 0, len(text)
    while k < n:
        c = text[k]
        if c != "\\" or k + 1 >= n:
            out.append(c)
            k += 1
            continue
        e = text[k + 1]
        if e == "0" or (e in "1234567" and not octal_needs_zero):
            m = re.match(r"0?[0-7]{0,3}" if e == "0" else r"[0-7]{1,3}", text[k + 1 :])
            digits = m.group(0) if m else "0"
            out.append(chr(int(digits or "0", 8) & 0xFF))
            k += 1 + len(digits)
        elif e == "x":
            m = re.match(r"[0-9A-Fa-f]{1,2}", text[k + 2 :])
            if m:
                out.append(chr(int(m.group(0), 16)))
                k += 2 + len(m.group(0))
            else:
                out.append("\\x")
                k += 2
        elif e == "c":
            break
        elif e in _C_ESCAPES:
            out.append(_C_ESCAPES[e])
            k += 2
        else:
            out.append("\\" + e)
            k += 2
    return "".join(out)


def _echo(args: list[str]) -> str:
    newline, interpret = True, False
    while args and re.fullmatch(r"-[neE]+", args[0]):
        flags = args.pop(0)
        newline = newline and "n" not in flags
        interpret = ("e" in flags) or (interpret and "E" not in flags)
    text = " ".join(args)
    if interpret:
        text = _escapes(text, octal_needs_zero=True)
    return text + ("\n" if newline else "")


def _printf(args: list[str]) -> str | None:
    if args and args[0] == "--":
        args = args[1:]
    if not args or args[0] == "-v":
        return None
    fmt, values = args[0], list(args[1:])
    out: list[str] = []
    for _ in range(64):
        used = False
        k, n = 0, len(fmt)
        while k < n:
            c = fmt[k]
            if c == "%" and k + 1 < n:
                m = re.match(r"%[-+ #0]*[0-9]*(?:\.[0-9]+)?([a-zA-Z%])", fmt[k:])
                if not m:
                    out.append(c)
                    k += 1
                    continue
                conv = m.group(1)
                k += len(m.group(0))
                if conv == "%":
                    out.append("%")
                    continue
                value = values.pop(0) if values else ""
                used = True
                if conv == "b":
                    out.append(_escapes(value, octal_needs_zero=True))
                elif conv == "c":
                    out.append(value[:1])
                else:
                    out.append(value)
            elif c == "\\":
                m = re.match(r"\\(?:[0-7]{1,3}|x[0-9A-Fa-f]{1,2}|.)", fmt[k:], re.S)
                seq = m.group(0) if m else "\\"
                out.append(_escapes(seq, octal_needs_zero=False))
                k += len(seq)
            else:
                out.append(c)
                k += 1
        if not values or not used:
            break
    return "".join(out)


def _static_output(cmds: list[Command]) -> str | None:
    """What a small pipeline of echo/printf/base64 -d/rev/xxd -r -p/cat prints, if knowable."""
    if not cmds or len(cmds) > 8:
        return None
    data: str | None = cmds[0].stdin
    for idx, cmd in enumerate(cmds):
        if (idx and not cmd.piped_in) or any(cmd.dynamic) or not cmd.argv:
            return None
        if any(not op.startswith(("2", "<<")) for op, _ in cmd.redirects):
            return None
        name, args = cmd.name, cmd.args
        if name == "echo":
            data = _echo(list(args))
        elif name == "printf":
            data = _printf(list(args))
        elif name in ("base64", "base32", "basenc") and any(a in ("-d", "-D", "--decode") for a in args):
            if data is None:
                return None
            try:
                raw = re.sub(r"\s+", "", data)
                if name == "base32":
                    decoded = base64.b32decode(raw + "=" * (-len(raw) % 8))
                else:
                    decoded = base64.b64decode(raw + "=" * (-len(raw) % 4))
                data = decoded.decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                return None
        elif name == "xxd" and "-r" in args and any(a in ("-p", "-ps", "-plain") for a in args):
            if data is None:
                return None
            try:
                data = binascii.unhexlify(re.sub(r"\s+", "", data)).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                return None
        elif name == "rev" and not args:
            if data is None:
                return None
            data = "\n".join(line[::-1] for line in data.split("\n"))
        elif name == "cat" and not args:
            if data is None:
                return None
        else:
            return None
        if data is None:
            return None
    return data


# -- analysis -----------------------------------------------------------------------------


class _Resolved:
    """One word after expansion (``split``: an expansion put whitespace into it)."""

    __slots__ = ("text", "dynamic", "glob", "assign", "procsub", "split")

    def __init__(
        self, text: str, dynamic: bool, glob: bool, assign: bool, procsub: str | None = None, split: bool = False
    ) -> None:
        self.text = text
        self.dynamic = dynamic
        self.glob = glob
        self.assign = assign
        self.procsub = procsub
        self.split = split


class _State:
    """Per-line state while commands are processed in order."""

    def __init__(self, variables: dict[str, tuple[str, bool]], cd: list[str], cd_unknown: bool) -> None:
        self.vars = variables
        self.cd = cd
        self.cd_unknown = cd_unknown
        self.pipeline: list[Command] = []


_WRAPPER_ARGS: dict[str, frozenset[str]] = {
    "exec": frozenset({"-a"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u", "-E", "-P", "-a", "-b", "-I", "-S", "-X", "-O"}),
    "ltrace": frozenset({"-o", "-e", "-p", "-s", "-u", "-E", "-n", "-a", "-A", "-D", "-F", "-l", "-x"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "flock": frozenset({"-w", "-E", "--timeout", "--wait", "--conflict-exit-code"}),
    "xargs": frozenset({"-a", "-E", "-I", "-L", "-n", "-P", "-s", "-d", "--arg-file", "--delimiter",
                        "--max-args", "--max-procs", "--max-chars", "--max-lines", "--process-slot-var"}),
    "watch": frozenset({"-n", "--interval", "-q", "--equexit"}),
}
_PRIV_ARGS = frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R", "--user", "--group",
                        "--host", "--prompt", "--chdir", "--role", "--type"})
_PLAIN_WRAPPERS = frozenset({"builtin", "nohup", "setsid", "chronic", "unbuffer", "catchsegv", "busybox", "toybox", "then", "do"})


class _Analyzer:
    def __init__(self, result: ShellAnalysis) -> None:
        self.result = result
        self.work = 0

    def script(self, text: str, depth: int, state: _State) -> list[Command]:
        """Lex ``text``, split it into simple commands and process them in order."""
        if depth > MAX_DEPTH:
            raise _ParseError(f"code nested more than {MAX_DEPTH} levels deep")
        self.work += len(text)
        if self.work > MAX_WORK:
            raise _ParseError("too much nested code to check")
        if not self.result.fork_bomb and _FORK_BOMB.search(text):
            self.result.fork_bomb = True
        tokens = _Lexer(text).lex()
        emitted: list[Command] = []
        words: list[_Word] = []
        redirects: list[tuple[_Op, _Word]] = []
        piped_in = False
        k = 0
        while k < len(tokens):
            tok = tokens[k]
            if isinstance(tok, _Word):
                words.append(tok)
            elif tok.op in _REDIRECT_OPS:
                nxt = tokens[k + 1] if k + 1 < len(tokens) else None
                if not isinstance(nxt, _Word):
                    raise _ParseError(f"redirection {tok.fd}{tok.op} without a target")
                redirects.append((tok, nxt))
                k += 1
            else:
                piped = tok.op in ("|", "|&")
                if words or redirects:
                    emitted += self.simple(words, redirects, piped_in, piped, depth, state)
                elif not piped:
                    state.pipeline = []
                piped_in = piped
                words, redirects = [], []
            k += 1
        if words or redirects:
            emitted += self.simple(words, redirects, piped_in, False, depth, state)
        return emitted

    def resolve(self, word: _Word | list[tuple[Any, ...]], depth: int, state: _State) -> _Resolved:
        parts = word.parts if isinstance(word, _Word) else word
        text: list[str] = []
        dynamic = glob = split = False
        procsub = None
        first = parts[0] if parts else None
        prefix = first[1] if first and first[0] == "L" and not first[2] else ""
        for part in parts:
            kind = part[0]
            if kind == "L":
                text.append(part[1])
                if not part[2] and any(ch in part[1] for ch in "*?["):
                    glob = True
            elif kind == "V":
                _, name, default, transformed = part
                if default and transformed:  # ${x/$(cmd)/y}: still analyse the substitutions
                    self.resolve(default, depth, state)
                if not transformed and name in state.vars:
                    value, dyn = state.vars[name]
                    text.append(value)
                    split = split or any(ch in value for ch in " \t\n")
                    dynamic = dynamic or dyn
                else:
                    dynamic = True
                    if default and not transformed:
                        text.append(self.resolve(default, depth, state).text)
                    else:
                        text.append("$" + name)
            elif kind == "S":
                sub_state = _State(dict(state.vars), list(state.cd), state.cd_unknown)
                cmds = self.script(part[1], depth + 1, sub_state)
                out = _static_output(cmds)
                if out is None:
                    dynamic = True
                    text.append("$(" + part[1] + ")")
                else:
                    text.append(out.rstrip("\n"))
                    split = split or any(ch in out.strip() for ch in " \t\n")
            elif kind == "A":
                dynamic = True
                text.append("$(" + part[1] + ")")
            elif kind == "P":
                sub_state = _State(dict(state.vars), list(state.cd), state.cd_unknown)
                self.script(part[2], depth + 1, sub_state)
                dynamic = True
                procsub = part[2]
                text.append(part[1] + "(" + part[2] + ")")
        return _Resolved("".join(text), dynamic, glob, bool(_ASSIGNMENT.match(prefix)), procsub, split)

    def simple(
        self,
        words: list[_Word],
        redirects: list[tuple[_Op, _Word]],
        piped_in: bool,
        piped_out: bool,
        depth: int,
        state: _State,
    ) -> list[Command]:
        ws = []
        for w in words:
            r = self.resolve(w, depth, state)
            if r.split and not r.assign:
                ws += [_Resolved(piece, r.dynamic, r.glob, False) for piece in r.text.split()]
            else:
                ws.append(r)
        redirs = [(op.fd + op.op, self.resolve(target, depth, state), op) for op, target in redirects]
        while ws and ws[0].text in _KEYWORDS and not ws[0].dynamic:
            ws.pop(0)
        if ws and ws[0].text in _SKIP_COMMANDS and not ws[0].dynamic:
            if not piped_in:
                state.pipeline = []
            return []
        assignments: dict[str, str] = {}
        while ws and ws[0].assign:
            name, _, value = ws[0].text.partition("=")
            name = name.rstrip("+")
            assignments[name] = value
            if not ws[1:]:
                state.vars[name] = (value, ws[0].dynamic)
            ws.pop(0)
        stdin_code: list[tuple[str, bool, str]] = []
        redirect_pairs: list[tuple[str, str]] = []
        for op, target, tok in redirs:
            bare = op.lstrip("0123456789")
            if bare in ("<<", "<<-"):
                body = tok.body or ""
                if not tok.body_quoted and ("$" in body or "`" in body):
                    r = self.resolve(_dq_parts(body), depth, state)
                    stdin_code.append((r.text, r.dynamic, "heredoc"))
                else:
                    stdin_code.append((body, False, "heredoc"))
                redirect_pairs.append((op, "<heredoc>"))
                continue
            if bare == "<<<":
                stdin_code.append((target.text, target.dynamic, "here-string"))
            elif bare == "<":
                stdin_code.append(("", True, "file:" + target.text))
            redirect_pairs.append((op, target.text))
            if bare in _OUTPUT_OPS and not (bare in (">&", "<&") and re.fullmatch(r"[0-9]+-?|-", target.text)):
                self.result.writes.append(
                    WriteTarget(target.text, target.dynamic, target.glob, list(state.cd), state.cd_unknown, op)
                )
        if not ws:
            return []
        ctx = {
            "assignments": assignments,
            "redirects": redirect_pairs,
            "piped_in": piped_in,
            "piped_out": piped_out,
            "stdin_code": stdin_code,
        }
        if not piped_in:
            state.pipeline = []
        return self.dispatch(ws, ctx, [], depth, state)

    def emit(self, ws: list[_Resolved], ctx: dict[str, Any], wrappers: list[str], depth: int, state: _State) -> Command:
        cmd = Command(
            argv=[w.text for w in ws],
            dynamic=[w.dynamic for w in ws],
            glob=[w.glob for w in ws],
            assignments=dict(ctx["assignments"]),
            redirects=list(ctx["redirects"]),
            piped_in=ctx["piped_in"],
            piped_out=ctx["piped_out"],
            wrappers=list(wrappers),
            cd=list(state.cd),
            cd_unknown=state.cd_unknown,
            depth=depth,
            stdin=next((t for t, dyn, kind in ctx["stdin_code"] if not dyn and not kind.startswith("file:")), None),
        )
        self.result.simple.append(cmd)
        return cmd

    def code(self, text: str, dynamic: bool, what: str, depth: int, state: _State) -> list[Command]:
        """Analyse code another command runs (``bash -c``, ``eval`` ...)."""
        if dynamic:
            self.result.opaque.append(what)
        sub_state = _State(dict(state.vars), list(state.cd), state.cd_unknown)
        return self.script(text, depth + 1, sub_state)

    def dispatch(
        self, ws: list[_Resolved], ctx: dict[str, Any], wrappers: list[str], depth: int, state: _State
    ) -> list[Command]:
        out: list[Command] = []
        for _ in range(32):
            if not ws:
                return out
            head = ws[0]
            name = "" if head.dynamic else basename(head.text)
            rest = ws[1:]
            if name == "env":
                i = 0
                while i < len(rest):
                    a = rest[i].text
                    if a in ("-u", "--unset", "-C", "--chdir"):
                        i += 2
                    elif a in ("-S", "--split-string") or a.startswith("--split-string=") or (
                        a.startswith("-S") and len(a) > 2
                    ):
                        if a in ("-S", "--split-string"):
                            code_word = rest[i + 1] if i + 1 < len(rest) else None
                            after = rest[i + 2 :]
                        else:
                            value = a.split("=", 1)[1] if a.startswith("--") else a[2:]
                            code_word = _Resolved(value, rest[i].dynamic, False, False)
                            after = rest[i + 1 :]
                        if code_word is None:
                            break
                        text = code_word.text + "".join(" " + _quote(w.text) for w in after)
                        out.append(self.emit(ws, ctx, wrappers, depth, state))
                        out += self.code(text, code_word.dynamic, "env -S", depth, state)
                        return out
                    elif a == "--":
                        i += 1
                        break
                    elif a.startswith("-"):
                        i += 1
                    elif rest[i].assign:
                        k, _, v = a.partition("=")
                        ctx["assignments"][k] = v
                        i += 1
                    else:
                        break
                if i >= len(rest):
                    out.append(self.emit(ws, ctx, wrappers, depth, state))  # env alone prints the environment
                    return out
                ws, wrappers = rest[i:], wrappers + ["env"]
                continue
            if name == "command":
                i = 0
                while i < len(rest) and rest[i].text.startswith("-") and rest[i].text != "--":
                    if "v" in rest[i].text or "V" in rest[i].text:
                        out.append(self.emit(ws, ctx, wrappers, depth, state))  # a lookup, runs nothing
                        return out
                    i += 1
                if i < len(rest) and rest[i].text == "--":
                    i += 1
                ws, wrappers = rest[i:], wrappers + ["command"]
                continue
            if name in _PLAIN_WRAPPERS:
                skip = 0
                if name == "setsid":
                    while skip < len(rest) and rest[skip].text.startswith("-"):
                        skip += 1
                ws, wrappers = rest[skip:], wrappers + [name]
                continue
            if name in _WRAPPER_ARGS:
                spec = _WRAPPER_ARGS[name]
                i = 0
                flock_code = None
                while i < len(rest):
                    a = rest[i].text
                    if a == "--":
                        i += 1
                        break
                    if not a.startswith("-") or a == "-":
                        break
                    if name == "flock" and a in ("-c", "--command"):
                        flock_code = rest[i + 1] if i + 1 < len(rest) else None
                        break
                    if name == "nice" and re.fullmatch(r"-[0-9]+", a):
                        i += 1
                        continue
                    i += 2 if ("=" not in a and a in spec) else 1
                if flock_code is not None:
                    out.append(self.emit(ws, ctx, wrappers, depth, state))
                    out += self.code(flock_code.text, flock_code.dynamic, "flock -c", depth, state)
                    return out
                if name in ("timeout", "flock") and i < len(rest):
                    i += 1  # the duration / the lock file
                if name == "watch":
                    text = " ".join(w.text for w in rest[i:])
                    out += self.code(text, any(w.dynamic for w in rest[i:]), "watch", depth, state)
                    return out
                if i >= len(rest):
                    out.append(self.emit(ws, ctx, wrappers, depth, state))
                    return out
                if name == "xargs":  # words holding the -I replace string come from stdin
                    marker = next(
                        (rest[k + 1].text for k in range(i) if rest[k].text == "-I" and k + 1 < i), None
                    ) or next((rest[k].text[2:] for k in range(i) if rest[k].text.startswith("-I") and len(rest[k].text) > 2), None)
                    if marker:
                        rest = [
                            _Resolved(w.text, True, w.glob, w.assign, w.procsub) if marker in w.text else w for w in rest
                        ]
                ws, wrappers = rest[i:], wrappers + [name]
                continue
            if name in PRIVILEGE_WRAPPERS:
                out.append(self.emit(ws, ctx, wrappers, depth, state))
                i = 0
                while i < len(rest):
                    a = rest[i].text
                    if a == "--":
                        i += 1
                        break
                    if name == "su" and a in ("-c", "--command"):
                        if i + 1 < len(rest):
                            out += self.code(rest[i + 1].text, rest[i + 1].dynamic, "su -c", depth, state)
                        return out
                    if not a.startswith("-"):
                        break
                    i += 2 if a in _PRIV_ARGS else 1
                if name == "su":
                    return out  # su [user]: an interactive shell
                ws, wrappers = rest[i:], wrappers + [name]
                continue
            break
        else:
            raise _ParseError("too many nested command wrappers")

        if not ws:
            return out
        head = ws[0]
        name = basename(head.text)
        if head.dynamic and head.text.startswith("$("):
            self.result.opaque.append("a command name computed by $(...)")
        cmd = self.emit(ws, ctx, wrappers, depth, state)
        out.append(cmd)
        rest = ws[1:]
        state.pipeline.append(cmd)
        if name in SHELLS or (head.dynamic and rest and rest[0].text.startswith("-") and "c" in rest[0].text):
            out += self.shell(name or "$SHELL", rest, dict(ctx, wrappers=wrappers), depth, state)
        elif name == "eval":
            text = " ".join(w.text for w in rest)
            out += self.code(text, any(w.dynamic for w in rest), "eval", depth, state)
        elif name in ("source", "."):
            target = rest[0] if rest else None
            if target is not None and (target.procsub is not None or target.text in ("/dev/stdin", "-")):
                self._pipe(f"{name} {target.text}")
            elif target is not None:
                self.result.scripts.append(target.text)
        elif name == "alias":
            for w in rest:
                if "=" in w.text:
                    out += self.code(w.text.split("=", 1)[1], w.dynamic, "alias", depth, state)
        elif name == "trap" and rest and not rest[0].text.startswith("-"):
            out += self.code(rest[0].text, rest[0].dynamic, "trap", depth, state)
        elif name == "find":
            out += self.find_exec(rest, ctx, wrappers, depth, state)
        elif name in ("cd", "pushd"):
            args = [w for w in rest if not w.text.startswith("-") or w.text == "-"]
            if not args:
                state.cd.append("~")
            elif args[0].dynamic or args[0].text == "-":
                state.cd_unknown = True
            else:
                state.cd.append(args[0].text)
        elif name == "popd":
            state.cd_unknown = True
        elif name in ("export", "declare", "typeset", "local", "readonly"):
            for w in rest:
                if w.assign:
                    k, _, v = w.text.partition("=")
                    state.vars[k.rstrip("+")] = (v, w.dynamic)
        elif name == "tee":
            for w in rest:
                if not w.text.startswith("-"):
                    self.result.writes.append(
                        WriteTarget(w.text, w.dynamic, w.glob, list(state.cd), state.cd_unknown, "tee")
                    )
        elif _INTERPRETER.match(name) and ctx["piped_in"] and _reads_program_from_stdin(name, rest):
            self._pipe(f"a pipe into {name}")
        return out

    def shell(self, name: str, rest: list[_Resolved], ctx: dict[str, Any], depth: int, state: _State) -> list[Command]:
        has_c = reads_stdin = False
        i = 0
        while i < len(rest):
            a = rest[i].text
            if a in ("--", "-"):
                i += 1
                break
            if a in ("-o", "+o", "--rcfile", "--init-file", "-O", "+O"):
                i += 2
                continue
            if (a.startswith("-") or a.startswith("+")) and not rest[i].dynamic:
                if not a.startswith("--"):
                    has_c = has_c or "c" in a
                    reads_stdin = reads_stdin or "s" in a
                i += 1
                continue
            break
        operand = rest[i] if i < len(rest) else None
        if has_c:
            if operand is None:
                if "xargs" in ctx.get("wrappers", ()):
                    self.result.opaque.append(f"xargs {name} -c")
                return []
            return self.code(operand.text, operand.dynamic, f"{name} -c", depth, state)
        if operand is not None and not reads_stdin:
            if operand.procsub is not None or operand.text in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
                self._pipe(f"{name} {operand.text}")
            else:
                self.result.scripts.append(operand.text)
            return []
        out: list[Command] = []
        for text, dynamic, kind in ctx["stdin_code"]:
            if kind.startswith("file:"):
                self.result.scripts.append(kind[5:])
            else:
                out += self.code(text, dynamic, f"{name} <{kind}>", depth, state)
        if ctx["piped_in"]:
            self._pipe(f"a pipe into {name}")
            feeding = state.pipeline[:-1]
            static = _static_output(feeding) if feeding else None
            if static is not None:
                out += self.code(static, False, f"{name} stdin", depth, state)
        return out

    def find_exec(
        self, rest: list[_Resolved], ctx: dict[str, Any], wrappers: list[str], depth: int, state: _State
    ) -> list[Command]:
        out: list[Command] = []
        i = 0
        while i < len(rest):
            if rest[i].text in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(rest) and rest[j].text not in (";", "+"):
                    j += 1
                inner = rest[i + 1 : j]
                if inner:
                    sub_ctx = dict(ctx, piped_in=False, piped_out=False, stdin_code=[], redirects=[])
                    out += self.dispatch(inner, sub_ctx, wrappers + ["find -exec"], depth + 1, state)
                i = j
            i += 1
        return out

    def _pipe(self, detail: str) -> None:
        if not self.result.pipes_into_shell:
            self.result.pipes_into_shell = True
            self.result.pipe_detail = detail


def _reads_program_from_stdin(name: str, rest: list[_Resolved]) -> bool:
    """``python3`` / ``node`` / ``perl`` with no script, no ``-c``/``-e``/``-m``: the program comes from stdin."""
    for w in rest:
        a = w.text
        if a == "-":
            return True
        if a.startswith("-"):
            if a in ("-c", "-m", "-e", "-E", "-r", "-p", "--eval", "--print", "-x") or (
                not a.startswith("--")
                and any(ch in a[1:] for ch in "cmeE")
                and name.startswith(("python", "pypy", "perl", "ruby"))
            ):
                return False
            continue
        return False
    return True


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# -- public API ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def analyze(command: str) -> ShellAnalysis:
    """Analyse one Bash tool command line.  Never raises; the result is shared (do not mutate)."""
    result = ShellAnalysis(command=command if isinstance(command, str) else str(command))
    try:
        if len(result.command) > MAX_CHARS:
            raise _ParseError(f"command longer than {MAX_CHARS} characters")
        _Analyzer(result).script(result.command, 0, _State({}, [], False))
    except _ParseError as exc:
        result.unparseable = str(exc)
    except RecursionError:
        result.unparseable = "code nested too deeply"
    except Exception as exc:  # pragma: no cover - a bug here must not crash the hook
        result.unparseable = f"the guard could not analyse this command ({type(exc).__name__}: {exc})"
    return result


def resolve_path(
    text: str,
    cwd: str,
    home: str,
    dynamic: bool = False,
    cd: list[str] | None = None,
    cd_unknown: bool = False,
    known: dict[str, str] | None = None,
) -> str | None:
    """The absolute, normalised path a shell word names, or None if it cannot be known here.

    ``~`` and ``$HOME`` expand to ``home``; ``known`` maps other variables
    (``PWD``, ``TMPDIR``, ``CLAUDE_PROJECT_DIR``) to values; ``cd`` are the
    ``cd`` targets seen earlier on the line.  Any other run-time part -> None.
    """
    if cd_unknown and not (text.startswith("/") or text.startswith("~")):
        return None
    base = cwd
    for step in cd or []:
        nxt = resolve_path(step, base, home, False, None, False, known)
        if nxt is None:
            return None
        base = nxt
    if dynamic:
        m = re.match(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text)
        values = {"HOME": home, "PWD": base, **(known or {})}
        if not m or m.group(1) not in values:
            return None
        text = values[m.group(1)] + text[m.end() :]
        if "$" in text:
            return None
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    elif text.startswith("~"):
        return None
    if not text:
        return None
    return os.path.normpath(os.path.join(base, text))
