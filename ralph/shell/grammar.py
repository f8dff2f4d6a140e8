"""The bash grammar: tree-sitter with ``tree-sitter-bash``, loaded on first use.

Importing tree-sitter and building the parser costs a few milliseconds, so it
happens on the first :func:`parse` call, never when the guard modules are
imported: ``ralph --help`` does not pay for it, and the hook client (which only
forwards events) never loads it.  The loop's hook server and the per-user hook
helper load it once and keep it.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_parser: Any = None


def parser() -> Any:
    """The shared ``tree_sitter.Parser`` for bash (built once per process)."""
    global _parser
    if _parser is None:
        with _lock:
            if _parser is None:
                import tree_sitter
                import tree_sitter_bash

                _parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    return _parser


def parse(text: str) -> Any:
    """The syntax tree (``tree_sitter.Tree``) of ``text`` as bash reads it."""
    p = parser()
    with _lock:  # a Parser is not safe to share between threads; the hook server has several
        return p.parse(text.encode("utf-8", "surrogatepass"))
