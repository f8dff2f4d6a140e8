"""What bash does to a command's text before it reads words, so that the grammar sees the same words.

- **Line continuations.**  Bash removes a backslash-newline wherever it reads code — inside a word
  too: ``g\\<newline>it push`` is ``git push`` — but not inside single quotes, ``$'...'``, a heredoc
  body with a quoted delimiter or a comment (inside backticks it is removed even there: the
  backtick text is read once before it is parsed).  tree-sitter-bash instead skips a
  backslash-newline as white space, which splits the word.  :func:`join_continuations` removes the
  ones bash removes, found on a first parse, and the caller parses again.
- **Carriage returns.**  To bash a ``\\r`` is an ordinary character of a word; tree-sitter-bash reads
  it as white space, and a backslash before ``\\r\\n`` as a line continuation, so
  ``echo x \\<CR><LF>git push`` looked like one harmless ``echo``.  :func:`mask_returns` replaces every
  ``\\r`` with a private-use character tree-sitter reads as part of a word, as bash does.
"""

from __future__ import annotations

import re
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
