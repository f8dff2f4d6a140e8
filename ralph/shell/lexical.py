"""What bash does to a command's text before it reads words, so that the grammar sees the same words.

- **Line continuations.**  Bash removes a backslash-newline wherever it reads code — inside a word
  too: ``g\\<newline>it push`` is ``git push`` — but not inside single quotes, ``$'...'``, a heredoc
  body with a quoted delimiter or a comment (inside backticks it is removed even there: the
  backtick text is read once before it is parsed).  tree-sitter-bash instead skips a
  backslash-newline as white space, which splits the word.  :func:`join_continuations` removes the
  ones bash removes, found on a first parse, and the caller parses again.
- **Backticks.**  Bash ends ```...``` at the first backtick without a backslash (quotes inside do not
  count), removes the backslashes before ``$``, a backtick and a backslash (and ``"`` inside double
  quotes) and parses the rest as a command; tree-sitter-bash pairs backticks differently (``echo `a`
  `b``` is one substitution to it).  :func:`backticks_to_dollar` writes each as ``$(...)`` first.
- **Carriage returns.**  To bash a ``\\r`` is an ordinary character of a word; tree-sitter-bash reads
  it as white space, and a backslash before ``\\r\\n`` as a line continuation, so
  ``echo x \\<CR><LF>git push`` looked like one harmless ``echo``.  :func:`mask_returns` replaces every
  ``\\r`` with a private-use character tree-sitter reads as part of a word, as bash does.
"""

from __future__ import annotations

import re
import threading
from typing import Any

RETURN = "\ue00d"
"""Stands for ``\\r`` in the text the grammar parses (a private-use character: a word character to tree-sitter)."""

_KEEP = frozenset({"raw_string", "ansi_c_string", "comment"})
_CONTINUATION = re.compile(rb"(\\+)\n")


def mask_returns(text: str) -> str:
    """``text`` with every ``\\r`` written as :data:`RETURN` (unchanged when it has none)."""
    return text.replace("\r", RETURN) if "\r" in text else text


def join_continuations(text: str, root: Any) -> str | None:
    """``text`` without the backslash-newlines bash removes (``root``: its syntax tree), or None if there
    are none."""
    data = text.encode("utf-8", "surrogatepass")
    cut: list[int] = []
    for m in _CONTINUATION.finditer(data):
        if len(m.group(1)) % 2 == 0:  # `\\` then a newline: an escaped backslash
            continue
        at = m.end(1) - 1
        if _removed(root.descendant_for_byte_range(at, at + 1)):
            cut.append(at)
    if not cut:
        return None
    parts: list[bytes] = []
    start = 0
    for at in cut:
        parts.append(data[start:at])
        start = at + 2
    parts.append(data[start:])
    return b"".join(parts).decode("utf-8", "surrogatepass")


def _removed(node: Any) -> bool:
    """Does bash remove a backslash-newline at ``node`` (the smallest node holding the backslash)?"""
    from ralph.shell.budget import NODE_COST, active

    budget = active()
    keep = False
    while node is not None:
        budget.spend(NODE_COST)
        kind = node.type
        if kind == "command_substitution" and node.children and node.children[0].type == "`":
            return True
        if kind in _KEEP or (kind == "heredoc_body" and _quoted_heredoc(node)):
            keep = True
        node = node.parent
    return not keep


def _quoted_heredoc(body: Any) -> bool:
    redirect = body.parent
    if redirect is None:
        return False
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    return start is not None and any(ch in start.text for ch in (b"'", b'"', b"\\"))


class BackticksUnpaired(Exception):
    """A backtick substitution whose end (or the quoting around it) the lexer cannot find."""


def backticks_to_dollar(text: str) -> str:
    """``text`` with every backtick substitution written as ``$(...)``, as bash reads it (unchanged when it has
    no backtick).

    tree-sitter-bash does not read backticks the way bash does: ``echo `a` `b``` becomes one substitution
    (its token for an empty ``````` also matches a backtick, blanks and a backtick), and the backslashes
    bash removes inside backticks before it parses their text (``\\$``, ``\\````, ``\\\\``, and ``\\"`` within
    double quotes) stay.  Bash ends a backtick substitution at the first backtick without a backslash,
    whatever quotes are inside, removes those backslashes and parses the rest as a command: exactly what
    ``$(...)`` with that text does.  Raises :class:`BackticksUnpaired` when the quoting around a backtick
    cannot be followed to its end."""
    if "`" not in text and not _EMPTY_SUBSTITUTION.search(text):
        return text
    from ralph.shell.budget import active

    active().spend(4 * len(text))
    out, end = _scan(text, 0, "top")
    if end != len(text):
        raise BackticksUnpaired(end)
    return out


_WORD_START = frozenset(" \t\n;&|()<>")
_EMPTY_SUBSTITUTION = re.compile(r"\$\(\s*\)")
"""``$()``: bash substitutes nothing (``gi$()t`` is ``git``); tree-sitter-bash rejects it."""


def _scan(text: str, i: int, mode: str, top_level: bool = False) -> Any:
    """Copy ``text`` from ``i`` in context ``mode`` (``top``, ``dq``, ``paren``, ``brace``) up to where that
    context ends (the closing ``"``, ``)``, ``}``; the end of the text for ``top``), converting backticks."""
    out: list[str] = []
    n = len(text)
    depth = 0  # `(` opened inside a `paren` context (a subshell, `$((`, a case pattern's `(`)
    heredocs: list[tuple[str, bool, bool]] = []
    while i < n:
        ch = text[i]
        if ch == "\\":
            out.append(text[i : i + 2])
            i += 2
            continue
        if ch == "`":
            inner, i = _backtick(text, i + 1, mode == "dq")
            if inner.strip():  # an empty substitution is nothing at all: `gi``t` is `git`
                out.append("$(" + inner + ("\n)" if "#" in inner or "<<" in inner else ")"))
            continue
        if mode == "dq":
            if ch == '"':
                return "".join(out) + '"', i + 1
            if text.startswith("$((", i) or text.startswith("$[", i):
                i = _arithmetic(text, i, out)
                continue
            if text.startswith(("$(", "${"), i):
                opened = "paren" if text[i + 1] == "(" else "brace"
                body, i = _scan(text, i + 2, opened)
                if opened == "brace" or body[:-1].strip():
                    out.append("$" + ("(" if opened == "paren" else "{") + body)
                continue
            out.append(ch)
            i += 1
            continue
        # unquoted contexts: top, paren, brace
        if ch == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise BackticksUnpaired(i)
            out.append(text[i : close + 1])
            i = close + 1
            continue
        if ch == "$" and text.startswith("$'", i):
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise BackticksUnpaired(i)
            out.append(text[i : j + 1])
            i = j + 1
            continue
        if ch == '"':
            body, i = _scan(text, i + 1, "dq")
            out.append('"' + body)
            continue
        if text.startswith("((", i) or text.startswith("$((", i) or text.startswith("$[", i):
            i = _arithmetic(text, i, out)  # `<<` there is a shift, not a heredoc
            continue
        if ch == "$" and text.startswith(("$(", "${"), i):
            opened = "paren" if text[i + 1] == "(" else "brace"
            body, i = _scan(text, i + 2, opened)
            if opened == "brace" or body[:-1].strip():
                out.append("$" + ("(" if opened == "paren" else "{") + body)
            continue
        if ch == "#" and (i == 0 or text[i - 1] in _WORD_START) and mode != "brace":
            close = text.find("\n", i)
            close = n if close < 0 else close
            out.append(text[i:close])
            i = close
            continue
        if ch == "<" and text.startswith("<<<", i):
            out.append("<<<")
            i += 3
            continue
        if ch == "<" and text.startswith("<<", i):
            if mode == "brace":  # bash reads `${x:-$(cat <<EOF ...)}` in its own way: where does the body end?
                _unparsed.odd_heredoc = True
            i = _heredoc_start(text, i, out, heredocs)
            continue
        if ch == "\n" and heredocs:
            if len(heredocs) > 1:  # bash gives the bodies out in order; tree-sitter-bash does not
                _unparsed.several_heredocs = True
            out.append("\n")
            i = _heredoc_bodies(text, i + 1, out, heredocs, mode == "paren")
            continue
        if mode == "paren" and ch == "(":
            depth += 1
        elif mode == "paren" and ch == ")":
            if depth == 0:
                return "".join(out) + ")", i + 1
            depth -= 1
        elif mode == "brace" and ch == "}":
            return "".join(out) + "}", i + 1
        out.append(ch)
        i += 1
    if mode != "top":
        raise BackticksUnpaired(i)
    if top_level:
        return "".join(out), i, heredocs
    return "".join(out), i


def _arithmetic(text: str, i: int, out: list[str]) -> int:
    """Copy ``((...))``, ``$((...))`` or ``$[...]`` from ``i`` (backticks in it converted); the index after it."""
    opener = "[" if text.startswith("$[", i) else "("
    closer = "]" if opener == "[" else ")"
    start = i + (2 if opener == "[" else 3 if text[i] == "$" else 2)
    out.append(text[i:start])
    depth = 0
    j = start
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            out.append(text[j : j + 2])
            j += 2
            continue
        if ch == "`":
            inner, j = _backtick(text, j + 1, False)
            out.append("$(" + inner + ")" if inner.strip() else "")
            continue
        if ch == "$" and text.startswith("$(", j) and not text.startswith("$((", j):
            body, j = _scan(text, j + 2, "paren")
            out.append("$(" + body)
            continue
        if ch == opener:
            depth += 1
        elif ch == closer:
            if depth == 0:
                tail = 1 if opener == "[" else 2
                if opener == "(" and not text.startswith("))", j):
                    raise BackticksUnpaired(j)
                out.append(text[j : j + tail])
                return j + tail
            depth -= 1
        out.append(ch)
        j += 1
    raise BackticksUnpaired(j)


def _backtick(text: str, i: int, in_dquotes: bool) -> tuple[str, int]:
    """The command of a backtick substitution starting at ``i`` (after the opening backtick), with the
    backslashes bash removes removed and its own backticks converted; and the index after the closing one."""
    raw: list[str] = []
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            raw.append(nxt if nxt in "$`\\" or (in_dquotes and nxt == '"') else ch + nxt)
            i += 2
            continue
        if ch == "`":
            command = "".join(raw)
            try:
                return _closed(backticks_to_dollar(command) if "`" in command else command), i + 1
            except BackticksUnpaired:
                # bash parses this text on its own, fails, and substitutes nothing; as `$(...)` its open quote
                # would run on into the rest of the line
                _unparsed.count = getattr(_unparsed, "count", 0) + 1
                return "", i + 1
        raw.append(ch)
        i += 1
    raise BackticksUnpaired(i)


_unparsed = threading.local()


def several_heredocs(text: str) -> bool:
    """Does one line of ``text`` start more than one heredoc (``cat <<A && bash <<'B'``)?  tree-sitter-bash
    gives their bodies out in another order than bash, so the analysis cannot say which body goes where."""
    if not any(line.count("<<") - 2 * line.count("<<<") >= 2 for line in text.split("\n") if "<<" in line):
        return False  # one heredoc per line (the common case): nothing to scan
    _unparsed.several_heredocs = False
    try:
        _scan(text, 0, "top")
    except BackticksUnpaired:
        return False
    return bool(getattr(_unparsed, "several_heredocs", False))


def odd_heredocs() -> bool:
    """Did the last conversion meet a heredoc whose end bash and the grammar may see in different places (one
    inside ``${...}``, a delimiter followed by more than the ``)`` closing a substitution)?  Read and reset."""
    found = bool(getattr(_unparsed, "odd_heredoc", False))
    _unparsed.odd_heredoc = False
    return found


def unparsed_backticks() -> int:
    """How many backtick substitutions (so far, in this thread) had text bash cannot parse: they run nothing
    and were left out; read and reset by the caller of :func:`backticks_to_dollar`."""
    count = getattr(_unparsed, "count", 0)
    _unparsed.count = 0
    return count


def _closed(command: str) -> str:
    """``command`` with a heredoc it leaves open closed at its end (bash parses a backtick's text on its own,
    so a heredoc there ends with it); :class:`BackticksUnpaired` if its quotes do not close within it."""
    if any(ch in command for ch in "'\"$<"):
        _, _, pending = _scan(command, 0, "top", top_level=True)
        for delimiter, _, _ in pending:
            command += "\n" + delimiter
    return command


def _heredoc_start(text: str, i: int, out: list[str], heredocs: list[tuple[str, bool, bool]]) -> int:
    """Copy ``<<[-] WORD`` and queue its body (delimiter, quoted, tabs stripped)."""
    j = i + 2
    strip = text.startswith("-", j)
    j += 1 if strip else 0
    while j < len(text) and text[j] in " \t":
        j += 1
    k = j
    while k < len(text) and text[k] not in " \t\n;&|()<>":
        if text[k] in "'\"":
            close = text.find(text[k], k + 1)
            k = len(text) if close < 0 else close + 1
            continue
        k += 2 if text[k] == "\\" else 1
    word = text[j:k]
    quoted = any(c in word for c in "'\"\\")
    delimiter = word.replace("'", "").replace('"', "").replace("\\", "")
    if delimiter:
        heredocs.append((delimiter, quoted, strip))
    out.append(text[i:k])
    return k


def _heredoc_bodies(text: str, i: int, out: list[str], heredocs: list[tuple[str, bool, bool]],
                    in_paren: bool = False) -> int:
    """Copy the bodies of the queued heredocs from ``i`` (backticks converted in unquoted ones).  Inside
    ``$(...)`` bash also ends a body at a line holding the delimiter and then the ``)``."""
    while heredocs:
        delimiter, quoted, strip = heredocs[0]
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[i:end]
            bare = line.lstrip("\t") if strip else line
            if bare == delimiter:
                out.append(text[i : end + 1])
                i = end + 1
                heredocs.pop(0)
                break
            if in_paren and bare.startswith(delimiter + ")"):
                if bare != delimiter + ")":  # `EOF)` and more on the line: bash may not end the body there
                    _unparsed.odd_heredoc = True
                cut = i + (len(line) - len(bare)) + len(delimiter)
                out.append(text[i:cut])
                heredocs.pop(0)
                return cut  # the `)` closes the substitution
            out.append(line if quoted or "`" not in line else _scan_heredoc_line(line))
            out.append(text[end : end + 1])
            i = end + 1
        else:
            return i  # the text ends inside this body: it stays open (the caller may close it)
    return i


def _scan_heredoc_line(line: str) -> str:
    """A line of an unquoted heredoc: backticks are substitutions there (quotes are plain text)."""
    out: list[str] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            out.append(line[i : i + 2])
            i += 2
        elif ch == "`":
            inner, i = _backtick(line, i + 1, False)
            out.append("$(" + inner + ")" if inner.strip() else "")
        else:
            out.append(ch)
            i += 1
    return "".join(out)
