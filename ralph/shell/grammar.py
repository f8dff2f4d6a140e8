"""The bash grammar: tree-sitter with ``tree-sitter-bash``, loaded on first use.

Importing tree-sitter and building the parser costs a few milliseconds, so it
happens on the first :func:`parse` call, never when the guard modules are
imported: ``ralph --help`` does not pay for it, and the hook client (which only
forwards events) never loads it.  The loop's hook server and the per-user hook
helper load it once per thread and keep it.

tree-sitter holds the GIL while it parses, and its error recovery is quadratic in the
length of a pipeline that is still open where the error is (``x|x|...|x && '`` with
8,000 pipes: seconds).  So :func:`parse` ends every text with a newline (no recovery at
the end of input) and refuses a text with more than :data:`MAX_PIPES` pipeline
operators in its code before tree-sitter sees it: :class:`TooManyPipes`.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

MAX_PIPES = 512
"""Pipeline operators (``|``, ``|&``) one command line may hold (quoted text, heredocs and comments aside)."""

_language: Any = None
_local = threading.local()
_lock = threading.Lock()
_TEXT_NODES = frozenset({"raw_string", "ansi_c_string", "string_content", "heredoc_content", "comment"})


class TooManyPipes(Exception):
    """The text holds more than :data:`MAX_PIPES` pipeline operators."""


def parser() -> Any:
    """This thread's ``tree_sitter.Parser`` for bash (a Parser is not safe to share between threads)."""
    global _language
    p = getattr(_local, "parser", None)
    if p is None:
        import tree_sitter

        with _lock:
            if _language is None:
                import tree_sitter_bash

                _language = tree_sitter.Language(tree_sitter_bash.language())
        p = _local.parser = tree_sitter.Parser(_language)
    return p


def parse(text: str) -> Any:
    """The syntax tree (``tree_sitter.Tree``) of ``text`` as bash reads it (a newline added at its end)."""
    data = text.encode("utf-8", "surrogatepass")
    if not data.endswith(b"\n"):
        data += b"\n"
    if data.count(b"|") > MAX_PIPES:
        _check_pipes(data)
    return parser().parse(data)


def _check_pipes(data: bytes) -> None:
    """Raise :class:`TooManyPipes` when more than :data:`MAX_PIPES` of the ``|`` in ``data`` are operators.

    The count comes from a probe parse of the same bytes with every ``|`` written as ``;`` (a list,
    which tree-sitter parses in linear time): a ``|`` in quoted text, a heredoc body or a comment is
    not an operator, ``||`` neither.  When the probe does not parse cleanly (a ``case`` pattern
    ``a|b)`` becomes ``a;b)``), every ``|`` counts.
    """
    probe = data.replace(b"||", b"&&").replace(b"|&", b"; ").replace(b"|", b";")
    tree = parser().parse(probe)
    starts: list[int] = []
    ends: list[int] = []
    cursor = tree.walk()
    while not tree.root_node.has_error:  # the byte ranges of text nodes, in order, not descending into them
        node = cursor.node
        if node.type in _TEXT_NODES or (node.type == "heredoc_body" and node.child_count == 0):
            starts.append(node.start_byte)
            ends.append(node.end_byte)
        elif cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                break
        else:
            continue
        break
    count = 0
    at = data.find(b"|")
    while at >= 0:
        if data[at + 1 : at + 2] == b"|":
            at = data.find(b"|", at + 2)
            continue
        k = bisect.bisect_right(starts, at) - 1
        if k < 0 or at >= ends[k]:
            count += 1
            if count > MAX_PIPES:
                raise TooManyPipes(MAX_PIPES)
        at = data.find(b"|", at + 1)
