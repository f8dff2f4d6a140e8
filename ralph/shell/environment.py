"""Assignments that change what later commands run: ``PS4``, ``BASH_ENV``, ``GIT_EDITOR`` ... and ``declare``."""

from __future__ import annotations

import re
from typing import Any

from ralph.shell.walker import Flow, State, Val, Walker


_CODE_VARS = {
    "GIT_EDITOR": False, "GIT_SEQUENCE_EDITOR": False, "EDITOR": False, "VISUAL": False, "GIT_SSH_COMMAND": False,
    "GIT_SSH": False, "GIT_EXTERNAL_DIFF": False, "GIT_ASKPASS": False, "SSH_ASKPASS": False,
    "GIT_PROXY_COMMAND": False, "PROMPT_COMMAND": False, "GIT_PAGER": True, "PAGER": True, "MANPAGER": True,
    "SYSTEMD_PAGER": True, "SYSTEMD_EDITOR": False, "SUDO_EDITOR": False, "FCEDIT": False, "BROWSER": False,
    "LESSEDIT": False, "DIFF_PAGER": True, "DELTA_PAGER": True, "BAT_PAGER": True,
}
"""Variables whose value programs run as a command (True: the command reads the program's output)."""


_OPAQUE_VARS = frozenset(
    {"PS0", "PS1", "PS2", "PS3", "PS4", "BASH_ENV", "ENV", "CDPATH", "SHELLOPTS", "BASHOPTS", "LD_PRELOAD", "LD_AUDIT",
     "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
     "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "BASH_LOADABLES_PATH", "LESSOPEN", "LESSCLOSE", "BASH_XTRACEFD",
     "EXECIGNORE", "HISTCONTROL", "PROMPT_DIRTRIM", "ZDOTDIR", "INPUTRC", "BASH_ALIASES", "BASH_CMDS"}
)


_GIT_CONFIG_SOURCES = frozenset({"HOME", "XDG_CONFIG_HOME", "GIT_DIR", "GIT_COMMON_DIR", "GIT_CONFIG_GLOBAL",
                                 "GIT_CONFIG_SYSTEM", "GIT_CONFIG", "GIT_CONFIG_NOSYSTEM"})
"""Variables that decide which configuration files git reads: a file the agent wrote can then give a remote
an explicit push URL, which the push block's ``pushInsteadOf`` does not rewrite."""


def check_env(w: Walker, name: str, value: Val, st: State, flow: Flow, persistent: bool = True) -> None:
    """An assignment to ``name``: variables that make programs run code are followed or opaque."""
    w.sets(name, f"{name}=")
    if name in _GIT_CONFIG_SOURCES:
        w.push_block(f"`{name}=` makes git read its configuration (push URLs included) from elsewhere")
    if name in _OPAQUE_VARS or name.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "BASH_FUNC_")) or (
        name == "IFS" and persistent
    ):
        w.opaque(
            f"setting `{name}` changes what later commands run or how the shell reads them",
            f"leave `{name}` alone and run the commands plainly",
        )
    elif name in _CODE_VARS:
        if isinstance(value, str):
            if value.strip():
                reads = _CODE_VARS[name]
                here = Flow(stdin=("pipe", f"the output given to ${name}") if reads else None, depth=flow.depth)
                w.code(value, st.copy(), here, f"`{name}`")
        else:
            w.opaque(f"`{name}` is set to a command only known at run time", f"set `{name}` to a literal command")


def declaration(w: Walker, node: Any, st: State, flow: Flow, redirects: list[tuple[str, str]] | None = None) -> None:
    """``declare``/``typeset``/``local``/``export``/``readonly`` (a declaration_command node)."""
    from ralph.shell.walker import _text

    from ralph.shell.walker import adjacent

    keyword = _text(node.children[0]) if node.children else "declare"
    argv = [keyword]
    integer = False
    for group in adjacent([c for c in node.children[1:] if c.is_named]):
        child = group[0]
        if len(group) > 1:  # `export GIT_CONFIG_COUN''T=0`: one word to bash, several nodes to the grammar
            words = w.joined_words(group, st, flow)
            integer = _declared_words(w, keyword, words, st, flow, argv) or integer
            continue
        if child.type == "variable_assignment":
            name, value = w.assignment(child, st, flow)
            argv.append(_text(child))
            if name is None:
                continue
            if integer:
                if isinstance(value, str):
                    w.arith_name(name, State(vars={name: value}), _text(child))
                value = None
            check_env(w, name, value, st, flow)
            st.vars[name] = value
        elif child.type == "variable_name":
            argv.append(_text(child))
            w.sets(_text(child), f"{keyword} {_text(child)}")  # local, export -n, declare +x: unset for children
        else:
            words = w.words(child, st, flow)
            integer = _declared_words(w, keyword, words, st, flow, argv) or integer
    from ralph.shell import Command

    w.result.simple.append(Command(argv, [False] * len(argv), [False] * len(argv), redirects=list(redirects or []),
                                   piped_in=flow.piped_in,
                                   piped_out=flow.piped_out, cd=list(st.cd), cd_unknown=st.cd_unknown, depth=flow.depth))


def _declared_words(w: Walker, keyword: str, words: list[Any], st: State, flow: Flow, argv: list[str]) -> bool:
    """Words given to ``declare``/``export``/``local``...: options, ``NAME``, ``NAME=value`` (returns whether
    ``-i`` was among them)."""
    integer = False
    for word in words:
        argv.append(word.text)
        if word.dynamic:
            w.sets(None, keyword)
            w.opaque(f"`{keyword}` of `{word.text}`, only known at run time, can set any variable",
                     "name the variable and its value literally")
        elif word.text.startswith(("-", "+")):
            if "n" in word.text[1:] and keyword != "export":  # `export -n` unexports (a change `sets` records)
                w.opaque(f"`{keyword} -n` makes a name refer to another variable", "use the variable directly")
            integer = integer or "i" in word.text[1:]
        else:  # a quoted `"NAME=value"` is an assignment too
            name, eq, text = word.text.partition("=")
            check_name(w, name, keyword)
            if eq:
                check_env(w, name, text, st, flow)
                st.vars[name] = text
            else:
                w.sets(name, f"{keyword} {name}")
    return integer


def check_name(w: Walker, name: str, what: str) -> None:
    """A variable name given as text (``read NAME``, ``printf -v NAME``, ``declare NAME``): a subscript in it is
    evaluated (``read 'a[$(cmd)]'`` runs cmd), so one that is not a plain number is opaque."""
    base, bracket, index = name.partition("[")
    if bracket and not re.fullmatch(r"\s*-?[0-9]+\s*\]", index):
        w.opaque(f"`{what} {name[:40]}`: the subscript is evaluated, and can run commands or set other variables",
                 "use a literal index, or a variable without one")
        w.sets(None, what)
