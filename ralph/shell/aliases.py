"""Aliases and functions defined on the line: followed where they are used, as bash would run them.

An alias is expanded wherever its name is a command (every definition on the line is tried: where one
is defined decides nothing here, and bash may have ``expand_aliases`` on in the agent's shell); a
function's body is walked where it is defined (arguments unknown) and again at each call with that
call's words as ``$1``, ``$@``, ``$#``.
"""

from __future__ import annotations

from typing import Any

from ralph.shell.walker import Flow, State, Val, Walker, Word, _text


def plain_name(node: Any) -> str | None:
    """The command name a ``command_name`` node spells as one plain word (no quotes, escapes or
    expansions: only such a word is looked up as an alias), else None."""
    if node is None:
        return None
    kids = node.named_children
    if len(kids) != 1 or kids[0].type != "word":
        return None
    text = _text(kids[0])
    return None if any(ch in text for ch in "\\'\"$`") else text


def expand_alias(w: Walker, name: str, words: list[Word], env: dict[str, Val], st: State, flow: Flow,
                 pairs: list[tuple[str, str]], around: tuple[bytes, bytes] | None) -> None:
    """Run ``words`` whose first word is the alias ``name``, as bash would after replacing it by its text.

    Every definition of ``name`` on the line is tried (where one is defined decides nothing here).  A
    value that is one simple command replaces the word; any other value is read as code with the rest
    of the command after it (``around``: the command's text before and after the name).
    """
    rest = words[1:]
    for value in w.aliases[name]:
        if value is None:
            w.opaque(f"the alias `{name}` is set to text only known at run time",
                        "call the command itself, not an alias")
            continue
        w.expanding.add(name)
        try:
            simple = _alias_command(w, value, st, flow)
            if simple is not None:
                a_env, a_words, a_name = simple
                merged = {**env, **a_env}
                for more in _after_blank(w, name, value, rest, st, flow):
                    if a_name is not None and a_name in w.aliases and a_name not in w.expanding:
                        expand_alias(w, a_name, a_words + more, merged, st, flow, pairs, None)
                    else:
                        w.run(a_words + more, merged, st, flow, [], pairs)
            elif around is not None:
                text = (around[0] + value.encode("utf-8", "surrogatepass") + b" " + around[1])
                w.code(text.decode("utf-8", "surrogatepass"), st, flow, f"the alias `{name}`")
            else:
                w.opaque(f"the alias `{name}` expands to more than one simple command inside another alias",
                            "call the commands themselves, not aliases")
        finally:
            w.expanding.discard(name)

def _after_blank(w: Walker, name: str, value: str, rest: list[Word], st: State, flow: Flow) -> list[list[Word]]:
    """The words after an alias: an alias value ending in a blank makes bash expand the next word too."""
    after = rest[0].text if rest and not rest[0].dynamic else None
    if value[-1:] not in (" ", "\t") or after not in w.aliases or after in w.expanding:
        return [rest]
    variants = []
    for next_value in w.aliases[after]:
        simple = None if next_value is None else _alias_command(w, next_value, st, flow)
        if simple is None or simple[0]:
            w.opaque(f"the alias `{name}` ends in a blank, so the alias `{after}` after it expands too",
                        "call the commands themselves, not aliases")
            continue
        variants.append(simple[1] + rest[1:])
    return variants or [rest]

def _alias_command(w: Walker, value: str, st: State, flow: Flow) -> tuple[dict[str, Val], list[Word], str | None] | None:
    """(assignments, words, plain command name) of an alias value that is one simple command, else None."""
    tree = w.parse(value)
    if tree is None:
        return None
    root = tree.root_node
    kids = [c for c in root.named_children if c.type != "comment"]
    if root.has_error or len(kids) != 1 or kids[0].type != "command":
        return None
    env, words, inline, name_node = w.command_parts(kids[0], st, flow)
    if inline or name_node is None or not words:
        return None
    return env, words, plain_name(name_node)


def call_function(w: Walker, name: str, args: list[Word], st: State, flow: Flow) -> None:
    """A call of a function defined on the line: its body again, with these arguments as ``$1``, ``$@`` ..."""
    from ralph.shell.cwd import lose, put, settle, where

    w.calling.add(name)
    bodies = w.bodies[name]
    try:
        if len(bodies) == 1 and name in st.functions:
            # the function runs in this shell: its `cd` (and what it sets) stays after the call
            saved = st.positional
            st.positional = list(args)
            try:
                w.statement(bodies[0], st, flow)
            finally:
                st.positional = saved
            return
        start = where(st)
        ends = []
        for body in bodies:  # several definitions, or one made elsewhere (a subshell): which one runs is not known
            here = st.copy()
            here.positional = list(args)
            w.statement(body, here, flow)
            ends.append(where(here))
        if any(end != start for end in ends):
            if name in st.functions:
                settle(w, st, start, ends, f"`{name}` is defined more than once and changes the directory")
            else:
                put(st, start)
                lose(w, st, f"`{name}` changes the directory, and may not be defined where it is called")
    finally:
        w.calling.discard(name)
