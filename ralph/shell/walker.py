"""Walk a bash syntax tree (tree-sitter-bash) into an :class:`~ralph.shell.Analysis`.

The walker knows an explicit set of node types (lists, pipelines, groups,
``if``/``while``/``for``/``case``, functions, assignments, redirections,
heredocs, quoting, ``$x``/``${x...}``, ``$(...)``, ``<(...)``, arithmetic) and
tracks what bash tracks along one line: variables assigned earlier, ``cd``,
files linked or copied.  A node type it does not know, and every expansion
whose effect it cannot know (``${x@P}``, ``${!x}``, arithmetic on a value that
is not a plain number, a run-time command name ...), is recorded as opaque
instead of being guessed.  What each program does with its arguments (wrappers,
shells, ``eval``, ``git`` ...) is in :mod:`ralph.shell.programs`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any, Union

from ralph.shell.budget import MAX_VALUE, NODE_COST, Budget, activate, active
from ralph.shell.grammar import MAX_PIPES, TooManyPipes, parse
from ralph.shell.lexical import (BackticksUnpaired, backticks_to_dollar, join_continuations, mask_returns,
                                 odd_heredocs, several_heredocs, unparsed_backticks)
from ralph.shell import MAX_DEPTH, Analysis, Command, WriteTarget, basename, resolve_path

Val = Union[str, list, None]
"""A variable's value on this line: text, an array, or None (only known at run time)."""

MAYBE_FUNCTION = "\x00maybe:"
"""In ``State.functions``: ``MAYBE_FUNCTION + NAME``, a function that may or may not still be defined (``unset
NAME``); ``MAYBE_FUNCTION`` alone, any name (``unset "$x"``)."""
PUSH_BLOCK_VARS = re.compile(r"GIT_CONFIG_(COUNT|KEY_[0-9]+|VALUE_[0-9]+|PARAMETERS)$")
"""The variables that carry direct mode's git push block (and git's ``-c`` settings) to every git."""
_NUMBER = re.compile(r"-?[0-9]+|0[xX][0-9a-fA-F]+|[0-9]+#[0-9A-Za-z@_]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARITH_NAME = re.compile(r"(?<![0-9A-Za-z_#@])[A-Za-z_][A-Za-z0-9_]*")
"""A variable name in arithmetic text (not the digits of ``0x1F`` or ``16#ff``)."""
_OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "&>|"})
_C_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
              "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_MAX_WORDS = 256
_STDIN_FILE = re.compile(r"/dev/+(\./+)*(stdin|fd/+0)|/proc/+(self|thread-self|[0-9]+)/+fd/+0")
# kinds of characters in a word being assembled
_LIT, _QUOTED, _EXP, _DYNQ, _DYNU = range(5)
_RUNTIME = frozenset({_DYNQ, _DYNU})
_UNQUOTED_RUNTIME = frozenset({_EXP, _DYNU})


@dataclass
class Word:
    """One shell word after expansion (as far as it can be known before running)."""

    text: str
    dynamic: bool = False
    glob: bool = False
    split: bool = False
    """An unquoted run-time part: it may become several words, or none."""
    positional: bool = False
    procsub: bool = False
    output: bool = False
    """Part of it is the output of a command substitution (``"$(curl ...)"``)."""
    input: bool = False
    """Part of it is data read at run time: a command's output, stdin (``xargs``, ``read``), a file."""


@dataclass
class State:
    """What bash knows at this point of the line."""

    vars: dict[str, Val] = field(default_factory=dict)
    cd: list[str] = field(default_factory=list)
    cd_unknown: bool = False
    made: set[str] = field(default_factory=set)
    """Names of files linked, copied or moved on this line (running one is opaque)."""
    functions: set[str] = field(default_factory=set)
    stdin: tuple[str, str] | None = None
    """Set by ``exec < file``: the shell's own stdin from then on."""
    budget: Budget | None = None
    """The analysis's work budget (a copy costs as much as what it copies)."""
    inputs: set[str] = field(default_factory=set)
    """Variables holding data read at run time (``read``, ``mapfile``, ``for x in $(...)``)."""
    positional: list[Word] | None = None
    """The arguments of the function call being followed (None: not known, e.g. where a function is defined)."""
    zero: Word | None = None
    """``$0`` where it is a known word (``sh -c CODE NAME``); None: the shell's own name."""
    globs: set[str] = field(default_factory=set)
    """Variables holding a glob pattern's match (``for f in ~/*``): any file the pattern matches."""
    oldcd: tuple[tuple[str, ...], bool] | None = None
    """Where ``cd -`` goes (``OLDPWD``): the ``cd`` steps and ``cd_unknown`` before the last change; None: not
    changed on this line (the value comes from before it)."""
    dirstack: tuple[tuple[tuple[str, ...], bool], ...] = ()
    """``pushd``'s stack below the current directory, as ``oldcd``; what was there before the line is not known."""
    physical: bool = False
    """``set -P``/``set -o physical``: ``cd`` follows symlinks before ``..``."""
    cd_fail: Any = None
    """Set by a ``cd`` until its statement ends (:mod:`ralph.shell.cwd`): where the shell is if it failed, or
    ``CANNOT_FAIL``; None: the last command was no ``cd``."""
    lastpipe: bool = False
    """``shopt -s lastpipe``: the last command of a pipeline runs in this shell (its ``cd`` stays)."""

    def copy(self) -> "State":
        if self.budget is not None:
            self.budget.spend(1 + len(self.vars) + len(self.cd) + len(self.made) + len(self.functions) + len(self.inputs)
                              + len(self.globs) + len(self.dirstack))
        return State(dict(self.vars), list(self.cd), self.cd_unknown, set(self.made), set(self.functions), self.stdin,
                     self.budget, set(self.inputs), self.positional, self.zero, set(self.globs), self.oldcd,
                     self.dirstack, self.physical, None, self.lastpipe)


@dataclass(frozen=True)
class Flow:
    """Where a statement's stdin comes from and where its stdout goes."""

    stdin: tuple[str, str] | None = None
    """("pipe", detail), ("procsub", detail), ("text", static text), ("dyn", ""), ("file", path) or None."""
    piped_out: bool = False
    depth: int = 0
    piped_text: str | None = None
    """What a pipe carries, when the command writing it is static (``cat <<EOF``, ``echo 'x'``)."""
    piped_paths: tuple[str, ...] | None = None
    """The pipe carries NUL-separated paths under these start paths (``find DIR -print0``), as ``DIR/*``."""
    piped_files: tuple[str, ...] | None = None
    """The pipe carries the content of these files, as typed (``cat dump.sql | psql``)."""

    @property
    def piped_in(self) -> bool:
        return self.stdin is not None and self.stdin[0] in ("pipe", "procsub")


@dataclass
class Call:
    """One simple command being dispatched: its words and context."""

    words: list[Word]
    env: dict[str, Val]
    st: State
    flow: Flow
    wrappers: list[str]
    redirects: list[tuple[str, str]]
    cmd: Command

    @property
    def name(self) -> str:
        return self.cmd.name

    @property
    def texts(self) -> list[str]:
        return [w.text for w in self.words]


class Walker:
    """Fills ``result`` from the syntax tree of one command line (and the code it runs)."""

    def __init__(self, result: Analysis, cwd: str, home: str, budget: Budget | None = None) -> None:
        self.result = result
        self.cwd = cwd
        self.home = home
        self.broken = False
        self.budget = budget or Budget()
        self.bodies: dict[str, list[Any]] = {}
        """Function bodies defined on the line, by name: a call walks them again with its arguments."""
        self.calling: set[str] = set()
        self.aliases: dict[str, list[str | None]] = {}
        """Aliases defined anywhere on the line (None: a run-time value), expanded wherever their name is a
        command: bash expands them once ``expand_aliases`` is on, which the agent's shell may have."""
        self.expanding: set[str] = set()
        self.called: set[str] = set()
        """Functions the line calls (with the arguments of each call)."""
        self.uncalled: list[tuple[str, Analysis]] = []
        """What the walk of each function body found where it was defined, arguments unknown."""
        self.exit_traps: list[tuple[Any, State, Flow]] = []
        """``trap CODE EXIT``: the code, and the state of the shell that set it (it changes until that shell ends)."""

    def finish(self) -> None:
        """Walk the exit traps with the state their shell ends in; add what the bodies of functions the line
        never calls hold (they may still run: a trap, a later line in the same shell ...)."""
        for word, st, flow in self.exit_traps:
            self.code(word.text, st.copy(), flow, "`trap ... EXIT` (when the shell exits)")
        self.exit_traps = []
        result = self.result
        for name, found in self.uncalled:
            if name in self.called:
                continue
            result.simple.extend(found.simple)
            result.writes.extend(found.writes)
            result.links.extend(found.links)
            result.scripts.extend(found.scripts)
            for item in found.opaque:
                result.add_opaque(item.construct, item.advice)
            for how in found.push_block:
                self.push_block(how)
            if found.pipes_into_shell and not result.pipes_into_shell:
                result.pipes_into_shell, result.pipe_detail = True, found.pipe_detail
            if result.unparseable is None:
                result.unparseable = found.unparseable
        self.uncalled = []

    # -- entry points -------------------------------------------------------------------------

    def code(self, text: str, st: State, flow: Flow, what: str) -> None:
        """Analyse ``text`` as bash code run by ``what`` (one nesting level deeper)."""
        if flow.depth >= MAX_DEPTH:
            if self.result.unparseable is None:
                self.result.unparseable = f"code nested deeper than {MAX_DEPTH} levels ({what})"
            return
        tree = self.parse(text)
        if tree is None:
            if self.result.unparseable is None:
                self.result.unparseable = f"more than {MAX_PIPES} pipes (`|`) in one command"
            return
        root = tree.root_node
        if root.has_error:
            self.broken = True
            if self.result.unparseable is None:
                where = "" if flow.depth == 0 and what == "the command" else f" in the code {what} runs"
                self.result.unparseable = _describe_error(root, text) + where
        self.statements(root.children, st, replace(flow, depth=flow.depth + (0 if what == "the command" else 1)))

    def parse(self, text: str) -> Any:
        """The syntax tree of ``text`` read as bash reads it (carriage returns kept in words, line continuations
        removed), or None for a text with too many pipes to parse in bounded time."""
        self.budget.spend(len(text) + NODE_COST)
        text = mask_returns(text)
        try:
            tree = parse(text)
            for _ in range(MAX_DEPTH):  # continuations, then backticks (whose text may hold more of both)
                joined = join_continuations(text, tree.root_node) if "\\\n" in text else None
                if joined is not None:
                    self.budget.spend(len(joined))
                    text = joined
                    tree = parse(text)
                if "`" not in text and "$(" not in text:
                    break
                try:
                    unparsed_backticks()
                    odd_heredocs()
                    converted = backticks_to_dollar(text)
                    if odd_heredocs():
                        self.opaque("a heredoc inside `${...}`, or ended on a line with more after its `)`: where "
                                    "its body ends is not certain", "give the heredoc lines of its own")
                    if unparsed_backticks():
                        self.opaque("a backtick substitution whose text bash cannot parse (bash runs nothing for "
                                    "it, and reads the rest of the line differently than it looks)",
                                    "use $(...) with balanced quotes instead of backticks")
                except BackticksUnpaired:
                    if "`" in text:
                        self.opaque("backticks (or the quoting around them) the guard cannot pair the way bash does",
                                    "use $(...) instead of backticks")
                    break
                if converted == text:
                    break
                text = converted
                tree = parse(text)
            if "<<" in text and several_heredocs(text):
                self.opaque("several heredocs started on one line (the grammar gives their bodies out in another "
                            "order than bash)", "start one heredoc per line, or write the input to a file first")
            if _KEYWORD_PREFIX.search(text):
                blanked = _blank_keyword_prefixes(text, tree.root_node)
                if blanked is not None:
                    self.budget.spend(len(blanked))
                    text = blanked
                    tree = parse(text)
        except TooManyPipes:
            return None
        return tree

    def opaque(self, construct: str, advice: str) -> None:
        self.result.add_opaque(construct, advice)

    def sets(self, name: str | None, how: str) -> None:
        """A variable is set, unset or exported differently (``None``: one named only at run time): the
        git push block lives in ``GIT_CONFIG_*`` variables."""
        if name is None or PUSH_BLOCK_VARS.match(name):
            self.push_block(f"`{how}` " + ("sets a variable named only at run time" if name is None else
                                           f"changes `{name}`"))

    def push_block(self, how: str) -> None:
        """Record a way the line clears or overrides the git push block (once)."""
        if how not in self.result.push_block:
            self.result.push_block.append(how)

    def pipe(self, detail: str) -> None:
        """A program reads its code from a pipe or a process substitution."""
        if not self.result.pipes_into_shell:
            self.result.pipes_into_shell = True
            self.result.pipe_detail = detail

    def stdin_program(self, name: str, flow: Flow, st: State, shell: bool, here: bool = False) -> None:
        """``name`` reads its program from stdin: check where that comes from (``here``: it runs in this shell,
        ``source /dev/stdin``, so a ``cd`` or a variable in it stays)."""
        kind, value = flow.stdin or ("", "")
        if kind == "pipe":
            self.pipe(f"{value} | {name}")
            if shell and flow.piped_text is not None:
                self.code(flow.piped_text, st if here else st.copy(), Flow(depth=flow.depth), f"`{name}` (its stdin)")
        elif kind == "procsub":
            self.pipe(f"{name} < {value}")
        elif kind == "text" and shell:
            self.code(value, st if here else st.copy(), Flow(depth=flow.depth), f"`{name}` (its stdin)")
        elif kind == "dyn" and shell:
            self.opaque(
                f"`{name}` runs a heredoc or here-string with parts only known at run time",
                "quote the heredoc delimiter (<<'EOF') or run the commands directly",
            )
        elif kind == "file":
            self.result.scripts.append(value)

    # -- statements ---------------------------------------------------------------------------

    def statements(self, nodes: list[Any], st: State, flow: Flow) -> None:
        from ralph.shell.cwd import after_statement

        for k, node in enumerate(nodes):
            if node.is_named:
                nxt = nodes[k + 1] if k + 1 < len(nodes) else None
                if nxt is not None and nxt.type == "&":  # in the background: a subshell of its own
                    self.statement(node, st.copy(), flow)
                    continue
                self.statement(node, st, flow)
                after_statement(self, st)

    def statement(self, node: Any, st: State, flow: Flow) -> None:
        self.budget.spend(NODE_COST)
        kind = node.type
        handler = _STATEMENTS.get(kind)
        if handler is not None:
            handler(self, node, st, flow)
        elif kind == "ERROR":
            self.broken = True
            self.statements(node.children, st, flow)
        elif kind in ("comment", "heredoc_body", "heredoc_start", "heredoc_end", "file_descriptor"):
            return
        else:
            self.unmodelled(node)

    def unmodelled(self, node: Any) -> None:
        if self.broken or node.is_missing:
            return
        snippet = _text(node)[:40]
        self.opaque(
            f"`{snippet}` ({node.type.replace('_', ' ')}) is shell syntax the guard does not model",
            "write it as plain commands with quoted arguments, pipes and && / ||",
        )

    def _list(self, node: Any, st: State, flow: Flow) -> None:
        if node.type == "list":
            self._and_or(node, st, flow)
        else:
            self.statements(node.children, st, flow)

    def _and_or(self, node: Any, st: State, flow: Flow, redirects: list[Any] | None = None) -> None:
        """``a && b || c``: which commands ran is known only at run time; the directory after each is followed
        both ways (a ``cd`` that succeeds, one that fails) and lost where the ways part."""
        from ralph.shell.cwd import CANNOT_FAIL, join, put, settle, where

        items: list[tuple[str, Any]] = []
        stack = [("", node)]
        while stack:  # the grammar nests `a && b || c` to the left: ((a && b) || c)
            op, item = stack.pop()
            if item.type == "list":
                kids = [c for c in item.children if c.type != "comment"]
                named = [c for c in kids if c.is_named]
                ops = [c.type for c in kids if not c.is_named]
                if len(named) == 2 and len(ops) == 1 and ops[0] in ("&&", "||"):
                    stack.append((ops[0], named[1]))
                    stack.append((op, named[0]))
                    continue
            items.append((op, item))
        before = where(st)
        ok: Any = before
        fail: Any = None
        for k, (op, item) in enumerate(items):
            tail = redirects if redirects is not None and k == len(items) - 1 else None  # `a && b > f`: b's
            if op == "&&":
                start, other = ok, fail
            elif op == "||":
                start, other = fail, ok
            else:
                start, other = ok, None
            if start is None:  # it cannot run (`cd DIR || x` with DIR a directory): checked, its changes dropped
                here = st.copy()
                put(here, other if other is not None else before)
                self._item(item, here, flow, tail)
                continue
            put(st, start)
            st.cd_fail = None
            self._item(item, st, flow, tail)
            done = where(st)
            failed = None if st.cd_fail == CANNOT_FAIL else st.cd_fail if st.cd_fail is not None else done
            st.cd_fail = None
            if op == "||":
                ok, fail = join(other, done), failed
            else:
                ok, fail = done, join(other, failed)
        settle(self, st, before, [ok, fail], "a `cd` in `a && b || c` may or may not have run (write each `cd` on "
                                             "its own, `cd DIR && ...`)")

    def _item(self, node: Any, st: State, flow: Flow, redirects: list[Any] | None) -> None:
        if redirects is None:
            self.statement(node, st, flow)
        else:
            self._with_redirects(node, redirects, st, flow)

    def _compound(self, node: Any, st: State, flow: Flow) -> None:
        if node.children and node.children[0].type == "((":
            for child in node.named_children:
                self.arith(child, st)
            return
        self.statements(node.children, st, flow)

    def _subshell(self, node: Any, st: State, flow: Flow) -> None:
        self.statements(node.children, st.copy(), flow)

    def _pipeline(self, node: Any, st: State, flow: Flow) -> None:
        parts = [c for c in node.children if c.is_named and c.type != "comment"]
        self._run_pipeline(parts, st, flow)

    def _run_pipeline(self, parts: list[Any], st: State, flow: Flow, first_stdin: tuple[str, str] | None = None,
                      last_redirects: list[Any] | None = None, first_text: str | None = None) -> None:
        heads: list[Any] = []
        first_redirects: list[Any] | None = None
        if parts and parts[0].type == "redirected_statement":
            body = parts[0].child_by_field_name("body")
            if body is not None and body.type == "list":
                # `a && b > f | c` comes out of the grammar as `(a && b > f) | c`; bash runs `a && (b > f | c)`
                kids = [c for c in body.children if c.is_named]
                heads, parts = kids[:-1], [kids[-1], *parts[1:]]
                first_redirects = body.parent.children_by_field_name("redirect")
        for head in heads:
            self.statement(head, st, flow)
        found: tuple[str, ...] | None = None
        files: tuple[str, ...] | None = None
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            stdin = (first_stdin or flow.stdin) if i == 0 else ("pipe", _lead(parts[i - 1]))
            text = first_text if i == 0 else _static_output(parts[i - 1])
            here = Flow(stdin=stdin, piped_out=i < len(parts) - 1 or flow.piped_out, depth=flow.depth,
                        piped_text=text, piped_paths=found if i else None, piped_files=files if i else None)
            mark = len(self.result.simple)
            # each element runs in a subshell of its own; with `shopt -s lastpipe`, the last one may run in this
            # shell (when job control is off): its `cd` then stays, or not
            shared = len(parts) > 1 and last and st.lastpipe
            st_here = st.copy() if len(parts) > 1 and not shared else st
            if shared:
                from ralph.shell.cwd import where

                before = where(st)
            redirects = (first_redirects or []) if i == 0 else []
            if last_redirects and i == len(parts) - 1:
                redirects = [*redirects, *last_redirects]
            if redirects:
                self._with_redirects(part, redirects, st_here, here)
            else:
                self.statement(part, st_here, here)
            if shared:
                from ralph.shell.cwd import settle, where

                settle(self, st, before, [before, where(st)], "`shopt -s lastpipe`: a `cd` at the end of a pipeline "
                                                              "stays or not (job control decides)")
            if i < len(parts) - 1:  # what this element writes into the pipe, for the next one
                written = self.result.simple[mark:]
                found = _found_paths(written, flow.depth)
                files = _cat_files(written, flow.depth)

    def _negated(self, node: Any, st: State, flow: Flow) -> None:
        self.statements(node.children, st, flow)

    def _if(self, node: Any, st: State, flow: Flow) -> None:
        """``if``: the conditions, then each branch from where they left the shell; the directory after it is
        the branches' one, or lost."""
        from ralph.shell.cwd import put, settle, where

        branches: list[Any] = []
        body: list[Any] = []
        conditions: list[Any] = []
        for i, child in enumerate(node.children):
            if node.field_name_for_child(i) == "condition":
                conditions.append(child)
            elif child.type in ("elif_clause", "else_clause"):
                branches.append(child)
            elif child.is_named:
                body.append(child)
        self.statements(conditions, st, flow)
        start = where(st)
        ends = []
        for branch in [body, *branches]:
            put(st, start)
            if isinstance(branch, list):
                self.statements(branch, st, flow)
            else:
                self.statement(branch, st, flow)
            ends.append(where(st))
        if not any(b.type == "else_clause" for b in branches):
            ends.append(start)
        settle(self, st, start, ends, "a `cd` in one branch of `if` (which branch runs is known only at run time)")

    def _while(self, node: Any, st: State, flow: Flow) -> None:
        from ralph.shell.cwd import lose, where

        body = node.child_by_field_name("body")
        self.statements([c for c in node.children if c is not body], st, flow)
        start = where(st)
        if body is not None:
            self.statement(body, st, flow)
            if where(st) != start:  # the body runs any number of times: the next time from elsewhere
                lose(self, st, "a `cd` in a loop body (it runs any number of times)")
                self.statement(body, st, flow)

    def _do_group(self, node: Any, st: State, flow: Flow) -> None:
        self.statements(node.children, st, flow)

    def _for(self, node: Any, st: State, flow: Flow) -> None:
        var = node.child_by_field_name("variable")
        values: list[Word] = []
        for value in node.children_by_field_name("value"):
            values.extend(self.words(value, st, flow))
        if not any(c.type == "in" for c in node.children):  # `for f; do`: over "$@"
            values = list(st.positional) if st.positional is not None else [
                Word("$@", dynamic=True, positional=True)]
        body = node.child_by_field_name("body")
        name = _text(var) if var is not None else ""
        known = values and all(not w.dynamic for w in values) and len(values) <= 8
        is_select = any(c.type == "select" for c in node.children)
        if name:
            self.sets(name, f"for {name} in")
            if any(w.input for w in values) or is_select:
                st.inputs.add(name)
        from ralph.shell.cwd import lose, where

        start = where(st)
        for item in (values if known and not is_select else [None]):
            if name:
                st.vars[name] = item.text if item is not None else None
                if item is not None and item.glob:  # a pattern: the variable holds one of its matches
                    st.globs.add(name)
                else:
                    st.globs.discard(name)
            if body is not None:
                self.statement(body, st, flow)
        if body is not None and not (known and not is_select) and where(st) != start:
            lose(self, st, "a `cd` in a loop body (it runs any number of times)")  # none, once, or many times
            self.statement(body, st, flow)

    def _c_for(self, node: Any, st: State, flow: Flow) -> None:
        for child in node.named_children:
            if child.type == "variable_assignment":
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                if value is not None:
                    self.arith(value, st)
                if name is not None and name.type == "variable_name":
                    self.sets(_text(name), f"for (({_text(name)}=...))")
                    st.vars[_text(name)] = "0"
            elif child.type == "do_group" or child.type == "compound_statement":
                from ralph.shell.cwd import lose, where

                start = where(st)
                self.statement(child, st, flow)
                if where(st) != start:  # none, once, or many times
                    lose(self, st, "a `cd` in a loop body (it runs any number of times)")
                    self.statement(child, st, flow)
            else:
                self.arith(child, st)

    def _case(self, node: Any, st: State, flow: Flow) -> None:
        value = node.child_by_field_name("value")
        if value is not None:
            self.words(value, st, flow)
        from ralph.shell.cwd import put, settle, where

        start = where(st)
        ends = [start]  # no pattern may match
        for item in node.named_children:
            if item.type != "case_item":
                continue
            put(st, start)
            for i, child in enumerate(item.children):
                if item.field_name_for_child(i) == "value":
                    self.words(child, st, flow)
                elif child.is_named:
                    self.statement(child, st, flow)
            ends.append(where(st))
        settle(self, st, start, ends, "a `cd` in one branch of `case` (which one runs is known only at run time)")

    def _function(self, node: Any, st: State, flow: Flow) -> None:
        name_node = node.child_by_field_name("name")
        name = _text(name_node) if name_node is not None else ""
        body = node.child_by_field_name("body")
        if name == "command_not_found_handle":
            self.opaque("a `command_not_found_handle` function runs for every unknown command",
                        "define ordinary functions, or none")
        st.functions.add(name)
        if body is None:
            return
        self.bodies.setdefault(name, []).append(body)
        if name and _calls_itself_in_a_pipe(body, name):
            self.result.fork_bomb = True
        # The body runs when the function is called: check it as if it ran here, arguments unknown.  What this
        # finds counts only if the line never calls the function (a call walks the body with its arguments).
        real, self.result = self.result, Analysis(self.result.command)
        try:
            self.statement(body, st.copy(), flow)
        finally:
            self.uncalled.append((name, self.result))
            self.result = real

    def _redirected(self, node: Any, st: State, flow: Flow) -> None:
        self._with_redirects(node.child_by_field_name("body"), node.children_by_field_name("redirect"), st, flow)

    def _with_redirects(self, body: Any, redirects: list[Any], st: State, flow: Flow) -> None:
        # The grammar hangs `a && b > f` and `a | b > f` on the whole list or pipeline; bash binds the
        # redirection to the last command only.
        if body is not None and body.type == "list":
            self._and_or(body, st, flow, redirects)
            return
        if body is not None and body.type == "pipeline":
            parts = [c for c in body.children if c.is_named and c.type != "comment"]
            self._run_pipeline(parts, st, flow, last_redirects=redirects)
            return
        flow2, pairs, tails, extra = self.redirects(redirects, st, flow)
        if tails:
            self._with_tails(body, pairs, tails, st, flow, flow2)
            return
        if body is None:
            return
        if body.type == "command":
            self.command(body, st, flow2, pairs, extra)
        elif body.type == "declaration_command":
            from ralph.shell.environment import _declared_words, declaration

            declaration(self, body, st, flow2, pairs)
            if extra:  # `export >/dev/null NAME=value`: words after a redirection are arguments too
                _declared_words(self, _text(body.children[0]) if body.children else "declare", extra, st, flow2, [])
        else:
            if extra:
                self.opaque(f"words after a redirection of a compound command (`{extra[0].text[:40]}`)",
                            "write the redirection last")
            self._redirected_compound(body, st, flow2, pairs)

    def _redirected_compound(self, body: Any, st: State, flow: Flow, pairs: list[tuple[str, str]]) -> None:
        """A compound command with redirections: one that may fail runs none of it (a ``cd`` in it may not run)."""
        from ralph.shell.cwd import redirects_may_fail, settle, where

        if not redirects_may_fail(pairs):
            self.statement(body, st, flow)
            return
        before = where(st)
        self.statement(body, st, flow)
        settle(self, st, before, [before, where(st)], "a redirection of a compound command may fail, and then none "
                                                      "of it runs (write the `cd` outside it)")

    def _with_tails(self, body: Any, pairs: list, tails: list[Any], st: State, flow: Flow, flow2: Flow) -> None:
        """``cat <<EOF | sh`` and ``cat <<EOF && x``: the grammar hangs the rest of the line on the heredoc."""
        pipe = [t for t in tails if t.type == "pipeline"]
        rest = [t for t in tails if t.type != "pipeline"]
        if body is not None:
            out = replace(flow2, piped_out=bool(pipe) or flow2.piped_out)
            if body.type == "command":
                self.command(body, st, out, pairs)
            else:
                self._redirected_compound(body, st, out, pairs)
        for p in pipe:
            parts = [c for c in p.children if c.is_named]
            static = None
            if body is not None and body.type == "command" and _text(body).strip() == "cat" and flow2.stdin and \
                    flow2.stdin[0] == "text":
                static = flow2.stdin[1]
            self._run_pipeline(parts, st, flow, first_stdin=("pipe", _lead(body) if body is not None else "heredoc"),
                               first_text=static)
        for r in rest:
            self.statement(r, st, flow)

    def _assignment(self, node: Any, st: State, flow: Flow) -> None:
        name, value = self.assignment(node, st, flow)
        if name is not None:
            from ralph.shell.environment import check_env

            check_env(self, name, value, st, flow)
            st.vars[name] = value

    def _assignments(self, node: Any, st: State, flow: Flow) -> None:
        for child in node.named_children:
            self.statement(child, st, flow)

    def _declaration(self, node: Any, st: State, flow: Flow) -> None:
        from ralph.shell.environment import declaration

        declaration(self, node, st, flow)

    def _unset(self, node: Any, st: State, flow: Flow) -> None:
        words = [w for group in adjacent(node.named_children) for w in self.joined_words(group, st, flow)]
        unset_vars(self, words, st)

    def joined_words(self, nodes: list[Any], st: State, flow: Flow) -> list[Word]:
        """The words of syntax nodes with nothing between them: one shell word to bash (the grammar reads
        ``unset GIT_CONFIG_COUN''T`` as a name and a separate string)."""
        if len(nodes) == 1:
            return self.words(nodes[0], st, flow)
        chars: list[tuple[str, int]] = []
        flags = {"positional": False, "procsub": False, "output": False}
        for node in nodes:
            if node.type in ("variable_name", "word"):
                _unquote_word(_text(node), chars)
            else:
                self._parts(node, st, flow, chars, False, flags)
        return _assemble(chars, flags, True, self.budget)

    def _test(self, node: Any, st: State, flow: Flow) -> None:
        double = bool(node.children) and node.children[0].type == "[["
        self._test_expr(node, st, flow, double)

    def _test_expr(self, node: Any, st: State, flow: Flow, double: bool) -> None:
        for child in node.named_children:
            if child.type == "unary_expression" and child.named_children and \
                    _text(child.named_children[0]) == "-v" and len(child.named_children) > 1:
                from ralph.shell.environment import check_name

                for word in self.words(child.named_children[1], st, flow):  # `-v 'a[$(cmd)]'` evaluates it
                    check_name(self, word.text, "test -v")
            if child.type in ("binary_expression", "unary_expression", "parenthesized_expression"):
                op = child.child_by_field_name("operator")
                if double and op is not None and _text(op) in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
                    for side in child.named_children:
                        if side is not op:
                            self.arith(side, st)
                self._test_expr(child, st, flow, double)
            elif child.type not in ("test_operator", "regex", "extglob_pattern"):
                self.words(child, st, flow)

    # -- simple commands ----------------------------------------------------------------------

    def command_parts(self, node: Any, st: State, flow: Flow) -> tuple[dict[str, Val], list[Word], list[Any], Any]:
        """(prefix assignments, words, inline redirection nodes, the name node or None) of a command node."""
        env: dict[str, Val] = {}
        words: list[Word] = []
        inline: list[Any] = []
        name_node = None
        for i, child in enumerate(node.children):
            fname = node.field_name_for_child(i)
            if child.type == "variable_assignment" and name_node is None:
                name, value = self.assignment(child, st, flow)
                if name is not None:
                    env[name] = value
            elif fname == "name":
                name_node = child
                for part in child.named_children or [child]:
                    words.extend(self.words(part, st, flow))
            elif fname == "redirect" or child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                inline.append(child)
            elif fname == "argument" and _fd_variable(child):
                # `exec {NAME}>file`: bash puts the new descriptor's number in NAME
                name = _text(child)[1:-1]
                self.sets(name, f"{{{name}}}>")
                st.vars[name] = None
            elif fname == "argument":
                if not child.is_named:
                    self.opaque(
                        f"`{_text(child)}` where a word belongs (e.g. a $\"...\" translated string)",
                        "use a plain quoted string",
                    )
                    continue
                words.extend(self.words(child, st, flow))
            elif child.is_named and child.type != "comment":
                self.unmodelled(child)
        return env, words, inline, name_node

    def command(self, node: Any, st: State, flow: Flow, outer: list[tuple[str, str]] | None = None,
                outer_words: list[Word] | None = None) -> None:
        env, words, inline, name_node = self.command_parts(node, st, flow)
        has_name = name_node is not None
        flow2, pairs, _, extra = self.redirects(inline, st, flow)
        pairs = (outer or []) + pairs
        # `rm -rf >/dev/null ~`: bash reads the words after a redirection as more arguments (tree-sitter-bash
        # hangs them on the redirection)
        words = [*words, *extra, *(outer_words or [])]
        if flow2.stdin is None and st.stdin is not None:
            flow2 = replace(flow2, stdin=st.stdin)
        if len(words) == 1 and words[0].text == "exec" and flow2.stdin is not None and flow2.stdin[0] != "pipe":
            st.stdin = flow2.stdin  # `exec < <(curl ...)`: every later command reads that
        if not has_name:
            from ralph.shell.environment import check_env

            for name, value in env.items():
                check_env(self, name, value, st, flow)
                st.vars[name] = value
            return
        if _plain_reserved(name_node):
            self.opaque(f"the reserved word `{_text(name_node)}` read as a command (a compound command the grammar did "
                        "not read the way bash does)", "write the compound command plainly, on its own")
        alias = None
        if self.aliases:
            from ralph.shell.aliases import expand_alias, plain_name

            alias = plain_name(name_node)
        if alias is not None and alias in self.aliases and alias not in self.expanding:
            source = node.text
            start, end = name_node.start_byte - node.start_byte, name_node.end_byte - node.start_byte
            expand_alias(self, alias, words, env, st, flow2, pairs, (source[:start], source[end:]))
            return
        self.run(words, env, st, flow2, [], pairs)

    def run(self, words: list[Word], env: dict[str, Val], st: State, flow: Flow, wrappers: list[str],
            redirects: list[tuple[str, str]]) -> None:
        """Dispatch one simple command (after its words were expanded)."""
        from ralph.shell.environment import check_env
        from ralph.shell.programs import dispatch

        # a Command, its dispatch, and the guards' look at each word of it (paths resolved, secrets matched)
        self.budget.spend(4 * NODE_COST + 8 * len(words) + len(st.cd))
        words = [w for w in words if w.text or not w.split]
        if not words:
            return
        for name, value in env.items():
            check_env(self, name, value, st, flow, persistent=False)
        stdin_text = flow.stdin[1] if flow.stdin and flow.stdin[0] == "text" else None
        cmd = Command(
            argv=[w.text for w in words],
            dynamic=[w.dynamic for w in words],
            glob=[w.glob for w in words],
            input=[w.input for w in words],
            assignments={k: (v if isinstance(v, str) else "$?") for k, v in env.items()},
            redirects=list(redirects),
            piped_in=flow.piped_in,
            piped_out=flow.piped_out,
            wrappers=list(wrappers),
            cd=list(st.cd),
            cd_unknown=st.cd_unknown,
            depth=flow.depth,
            stdin=stdin_text,
        )
        call = Call(words, env, st, flow, wrappers, redirects, cmd)
        first = words[0]
        conventional = _conventional_program(first.text, st) if first.dynamic else None
        if conventional is not None:
            # `$PYTHON -m pytest`, `${CC:-gcc} -c x.c`: set outside the line (a Makefile's or CI's convention,
            # the user's environment), read as the program it conventionally names
            first = words[0] = Word(conventional, input=False)
            cmd.argv[0], cmd.dynamic[0] = conventional, False
            call = Call(words, env, st, flow, wrappers, redirects, cmd)
        if first.positional or first.dynamic or first.glob:
            self.result.simple.append(cmd)
            if first.positional:
                self.opaque(
                    f"positional parameters (`{first.text}`) run as a command",
                    "write the command itself instead of passing it through `set --`, a function or `bash -c`",
                )
            elif first.dynamic:
                self.opaque(
                    f"the command name `{first.text}` is only known at run time",
                    "write the program's name itself (e.g. `git status`, not `$cmd status`)",
                )
            else:
                self.opaque(f"the command name `{first.text}` is a glob pattern", "write the program's name itself")
            if flow.piped_in:
                self.pipe(f"{flow.stdin[1] if flow.stdin else ''} | {first.text}")
            return
        typed = basename(first.text)
        if typed in st.made and typed not in st.functions:
            self.opaque(
                f"`{first.text}` runs a file linked, copied or moved on the same line",
                "call the program by its own name, in a separate command",
            )
        if "/" in first.text and not typed.startswith("git-"):
            real = self._link_target(first.text, st)
            if real not in ("busybox", "toybox"):  # multi-call programs act on the name they were called by
                cmd.real_name = real
        if wrappers and wrappers[-1] in ("time", "coproc") and first.text in self.aliases and (
                first.text not in self.expanding):  # reserved words: the next word is a command, alias-expanded
            from ralph.shell.aliases import expand_alias

            expand_alias(self, first.text, words, env, st, flow, redirects, None)
            return
        dispatch(self, call)
        if first.text in self.bodies:
            self.called.add(first.text)
        if first.text in self.bodies and first.text not in self.calling:
            from ralph.shell.aliases import call_function

            call_function(self, first.text, words[1:], st, flow)

    def _link_target(self, text: str, st: State) -> str | None:
        from ralph.shell.paths import is_link, real_path

        path = resolve_path(text, self.cwd, self.home, False, st.cd, st.cd_unknown)
        if path is None or not is_link(path):
            return None
        real = basename(real_path(path))
        return real if real != basename(text) else None

    # -- assignments and redirections ------------------------------------------------------------

    def assignment(self, node: Any, st: State, flow: Flow) -> tuple[str | None, Val]:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return None, None
        if name_node.type == "subscript":
            index = name_node.child_by_field_name("index")
            if index is not None:
                self.arith(index, st)
            base = name_node.child_by_field_name("name")
            return (_text(base) if base is not None else None), None
        name = _text(name_node)
        append = any(c.type == "+=" for c in node.children)
        if value_node is None:
            return name, ""
        if value_node.type == "array":
            items: list[str] = []
            dynamic = False
            for child in value_node.named_children:
                for w in self.words(child, st, flow):
                    items.append(w.text)
                    dynamic = dynamic or w.dynamic
            return name, None if dynamic else self.bounded(name, items)
        words = self.words(value_node, st, flow, split=False)
        if any(w.input for w in words):
            st.inputs.add(name)
        else:
            st.inputs.discard(name)
        if len(words) != 1 or words[0].dynamic:
            return name, None
        value = words[0].text
        if append:
            old = st.vars.get(name, None)
            return name, self.bounded(name, (old + value) if isinstance(old, str) else None)
        return name, self.bounded(name, value)

    def bounded(self, name: str, value: Val) -> Val:
        """``value``, or None (run time) past :data:`MAX_VALUE` characters: an opaque finding."""
        size = len(value) if isinstance(value, str) else sum(len(v) for v in value) if isinstance(value, list) else 0
        if size <= MAX_VALUE:
            return value
        self.opaque(
            f"the value of `{name}` grows past {MAX_VALUE} characters on this line (the guard stops following it)",
            "build long values in a file, or split the command",
        )
        return None

    def redirects(self, nodes: list[Any], st: State, flow: Flow) -> tuple[Flow, list[tuple[str, str]], list[Any],
                                                                          list[Word]]:
        """(the flow with the stdin they give, (operator, target) pairs, what the grammar hangs on a heredoc, the
        words written after a redirection's target, which bash reads as arguments)."""
        if not nodes:  # most commands: nothing to read, the flow as it is
            return flow, [], [], []
        stdin = flow.stdin
        pairs: list[tuple[str, str]] = []
        tails: list[Any] = []
        extra: list[Word] = []
        queue = list(nodes)
        while queue:
            node = queue.pop(0)
            self.budget.spend(2 * NODE_COST)
            if node.type == "file_redirect":
                stdin = self._file_redirect(node, st, flow, pairs, stdin, extra)
            elif node.type == "herestring_redirect":
                words = [w for c in node.named_children for w in self.words(c, st, flow, split=False)]
                text = " ".join(w.text for w in words)
                if any(w.output for w in words):
                    stdin = ("procsub", f"<<< {text[:40]}")  # a command's output
                else:
                    stdin = ("dyn", "") if any(w.dynamic for w in words) else ("text", text + "\n")
                pairs.append(("<<<", text))
            elif node.type == "heredoc_redirect":
                stdin = self._heredoc(node, st, flow, pairs, queue, tails, extra) or stdin
            elif node.is_named:
                self.unmodelled(node)
        return (flow if stdin is flow.stdin else replace(flow, stdin=stdin)), pairs, tails, extra

    def _file_redirect(self, node: Any, st: State, flow: Flow, pairs: list, stdin: Any, extra: list[Word]) -> Any:
        op = "".join(_text(c) for c in node.children if not c.is_named)
        fd_node = node.child_by_field_name("descriptor")
        fd = _text(fd_node) if fd_node is not None else ""
        dests = node.children_by_field_name("destination")
        words = [w for w in self.words(dests[0], st, flow, split=False)] if dests else []
        for more in dests[1:]:
            extra.extend(self.words(more, st, flow))
        if not words:
            return stdin
        target = words[0]
        pairs.append((fd + op, target.text))
        if op == "<&" and fd in ("", "0") and re.fullmatch(r"[0-9]+-?", target.text) and target.text.rstrip("-") != "0":
            return ("dyn", "")  # `<&3`: stdin is what descriptor 3 holds (a here-string, a file) -- not known here
        if op in (">&", "<&") and (re.fullmatch(r"[0-9]+-?|-", target.text) or target.dynamic and not target.split):
            return stdin
        if op in _OUTPUT_OPS:
            if not target.procsub:
                self.budget.spend(4 * NODE_COST)  # the guards resolve and stat every written path
                self.result.writes.append(
                    WriteTarget(target.text, target.dynamic, target.glob, list(st.cd), st.cd_unknown, fd + op,
                                truncates=op not in (">>", "&>>"), input=target.input)
                )
            return stdin
        if op in ("<", "<>") and fd in ("", "0"):
            if target.procsub:
                return ("procsub", target.text)
            if not target.dynamic and target.text.startswith("/") and _STDIN_FILE.fullmatch(target.text):
                return stdin  # `< /dev/stdin`: the same stdin
            if target.dynamic:
                return ("dyn", "")
            return ("file", target.text)
        return stdin

    def _heredoc(self, node: Any, st: State, flow: Flow, pairs: list, queue: list, tails: list,
                 extra: list[Word]) -> Any:
        start = ""
        body = None
        stdin = None
        strip_tabs = any(c.type == "<<-" for c in node.children)
        for i, child in enumerate(node.children):
            fname = node.field_name_for_child(i)
            if child.type == "heredoc_start":
                start = _text(child)
            elif child.type == "heredoc_body":
                body = child
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                queue.append(child)
            elif child.type == "pipeline" or fname == "right":
                tails.append(child)
            elif child.type in _WORD_PARTS and child.type not in ("$",):  # `cat <<EOF file`: an argument
                extra.extend(self.words(child, st, flow))
        quoted = any(ch in start for ch in "'\"\\")
        if body is None:
            stdin = ("text", "")
        else:
            text = _heredoc_text(node, body)
            if strip_tabs:
                text = "\n".join(line.lstrip("\t") for line in text.split("\n"))
            stdin = ("text", text)
            if not quoted and any(mark in text for mark in ("$", "`")):
                # tree-sitter-bash leaves `\t$(cmd)` in a body as plain text: read the body as bash does, like a
                # double-quoted string whose `"` are plain characters
                words = self._expanded_text(text, st, flow)
                if any(w.output for w in words):
                    stdin = ("procsub", "a heredoc with $(...)")
                elif any(w.dynamic for w in words):
                    stdin = ("dyn", "")
        pairs.append(("<<", "<heredoc>"))
        return stdin

    def _expanded_text(self, text: str, st: State, flow: Flow) -> list[Word]:
        """The expansions in ``text`` (an unquoted heredoc body) walked as bash runs them; its word."""
        out: list[str] = []
        i = 0
        while i < len(text):  # `\` escapes only `$`, a backtick, `\` and a newline here; `"` is plain
            ch = text[i]
            if ch == "\\" and i + 1 < len(text) and text[i + 1] in "$`\\\n":
                out.append(text[i : i + 2])
                i += 2
                continue
            out.append("\\\\" if ch == "\\" else '\\"' if ch == '"' else ch)
            i += 1
        tree = self.parse(': "' + "".join(out) + '"')
        if tree is None:
            return [Word(text, dynamic=True, output=True)]
        root = tree.root_node
        command = root.named_children[0] if root.named_children else None
        strings = [c for c in command.named_children if c.type == "string"] if command is not None else []
        if root.has_error or len(strings) != 1:
            self.opaque("a heredoc body the guard cannot read as bash does", "quote the delimiter (<<'EOF')")
            return [Word(text, dynamic=True, output=True)]
        return self.words(strings[0], st, flow, split=False)

    # -- words ----------------------------------------------------------------------------------

    def words(self, node: Any, st: State, flow: Flow, split: bool = True) -> list[Word]:
        """The words ``node`` expands to (brace expansion and word splitting of known values applied)."""
        self.budget.spend(NODE_COST)  # the characters are spent where they are decoded (_text)
        kind = node.type
        if kind == "word" or kind == "number":  # the common cases, without the per-character model
            text = _text(node)
            if "\\" not in text and "{" not in text:
                return [Word(text, glob=_glob_text(text))]
        elif kind == "raw_string":
            return [Word(_text(node)[1:-1])]
        elif kind == "string" and all(c.type in ('"', "string_content") for c in node.children):
            return [Word(_dq_unescape("".join(_text(c) for c in node.children if c.type == "string_content")))]
        chars: list[tuple[str, int]] = []
        flags = {"positional": False, "procsub": False, "output": False}
        self._parts(node, st, flow, chars, False, flags)
        words = _assemble(chars, flags, split, self.budget)
        if flags.get("truncated"):
            self.opaque(f"`{_text(node)[:40]}` expands to more than {_MAX_WORDS} words (the guard reads the first "
                        f"{_MAX_WORDS})", "write the words out, or loop over a shorter list")
        return words

    def _parts(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        """Append the characters of one word part to ``out``, each with its kind (quoted, literal, run-time)."""
        self.budget.spend(NODE_COST // 2)
        handler = _WORD_PARTS.get(node.type)
        if handler is not None:
            handler(self, node, st, flow, out, quoted, flags)
        else:
            self.unmodelled(node)
            _push(out, _text(node), _DYNQ)

    def _part_word(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        if quoted:
            _push(out, _text(node), _QUOTED)
        else:
            _unquote_word(_text(node), out)

    def _part_literal(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        _push(out, _text(node), _QUOTED if quoted else _LIT)

    def _part_raw_string(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        _push(out, _text(node)[1:-1], _QUOTED)

    def _part_ansi_c(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        _push(out, _ansi_c(_text(node)[2:-1]), _QUOTED)

    def _part_string(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        for child in node.children:
            if child.type == "string_content":
                _push(out, _dq_unescape(_text(child)), _QUOTED)
            elif child.is_named:
                self._parts(child, st, flow, out, True, flags)

    def _part_concatenation(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        for child in node.children:
            if child.is_named or child.type == "$":
                self._parts(child, st, flow, out, quoted, flags)
            else:
                _push(out, _text(child), _QUOTED if quoted else _LIT)

    def _part_variable(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        inner = node.named_children[0] if node.named_children else None
        self._var(_text(inner) if inner is not None else "", _text(node), st, out, quoted, flags)

    def _part_substitution(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        self.substitution(node, st, flow)
        if self._prints_cwd(node, st):  # `$(pwd)` is `$PWD` (resolve_path knows it)
            _push(out, "${PWD}", _DYNQ if quoted else _DYNU)
            return
        flags["output"] = True
        flags["input"] = True
        _push(out, _text(node), _DYNQ if quoted else _DYNU)

    def _prints_cwd(self, node: Any, st: State) -> bool:
        """Is this substitution a plain ``pwd`` (not a function or alias of that name)?"""
        kids = [c for c in node.named_children if c.type != "comment"]
        if len(kids) != 1 or kids[0].type != "command" or "pwd" in st.functions or "pwd" in self.aliases:
            return False
        return _text(kids[0]).strip() in ("pwd", "pwd -L", "pwd -P")

    def _part_process(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        writes_into = bool(node.children) and node.children[0].type == ">("
        inner = Flow(stdin=("pipe", "process substitution") if writes_into else None, piped_out=not writes_into,
                     depth=flow.depth)
        self.statements(node.children, st.copy(), inner)
        flags["procsub"] = True
        _push(out, _text(node), _DYNQ)

    def _part_arithmetic(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        for child in node.named_children:
            self.arith(child, st)
        _push(out, _text(node), _DYNQ if quoted else _DYNU)

    def _part_lone_dollar(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        text = _text(node)
        if text == "$$":  # `x.$$` at the end of a word: the shell's process id
            _push(out, "$$", _DYNQ if quoted else _DYNU)
            return
        self.opaque("a `$` the grammar reads apart from its word (e.g. $\"...\")", "use a plain quoted string")
        _push(out, "$", _DYNQ)

    def substitution(self, node: Any, st: State, flow: Flow) -> None:
        """``$(...)`` / backticks: the commands inside run (in a subshell)."""
        self.statements(node.children, st.copy(), Flow(stdin=flow.stdin, piped_out=True, depth=flow.depth))

    def _var(self, name: str, shown: str, st: State, out: list, quoted: bool, flags: dict) -> None:
        if name == "0" and st.zero is not None:
            self._argument(st.zero, shown, out, quoted, flags)
            return
        if name in ("@", "*", "#") or name.isdigit() and name != "0":
            if st.positional is not None:
                self._positional(name, shown, st, out, quoted, flags)
                return
            if name != "#":
                flags["positional"] = True
            _push(out, shown, _DYNQ if quoted else _DYNU)
            return
        if name in st.inputs:
            flags["input"] = True
        if name == "DIRSTACK" and name not in st.vars:  # `$DIRSTACK` is `${DIRSTACK[0]}`: the current directory
            _push(out, "${PWD}", _DYNQ if quoted else _DYNU)
            return
        if name in st.vars:
            value = st.vars[name]
            if isinstance(value, list):
                value = value[0] if value else ""
            if isinstance(value, str) and name in st.globs:
                self._argument(Word(value, glob=True), shown, out, quoted, flags)
                return
            if isinstance(value, str):
                self.push_value(out, value, shown, quoted)
                return
        _push(out, shown, _DYNQ if quoted else _DYNU)

    def _positional(self, name: str, shown: str, st: State, out: list, quoted: bool, flags: dict) -> None:
        """``$1``, ``$@``, ``$*``, ``$#`` inside a function call whose arguments are known words."""
        args = st.positional or []
        if name == "#":
            _push(out, str(len(args)), _QUOTED if quoted else _EXP)
            return
        chosen = args if name in ("@", "*") else args[int(name) - 1 : int(name)]
        for k, arg in enumerate(chosen):
            if k:  # "$@" stays one word per argument; "$*" joins them; unquoted, both split
                _push(out, " ", _QUOTED if quoted and name == "*" else _EXP)
            self._argument(arg, shown, out, quoted, flags)

    def _argument(self, arg: Word, shown: str, out: list, quoted: bool, flags: dict) -> None:
        """One argument of a call followed with known arguments, expanded where ``$1``/``$@``/``$0`` stand."""
        if arg.dynamic:
            flags["positional"] = True
            flags["input"] = flags.get("input") or arg.input
            _push(out, arg.text or shown, _DYNQ if quoted else _DYNU)
        elif arg.glob:  # the call's caller expanded a pattern (or find put a found path there): still any match
            self.budget.spend(len(arg.text))
            _push(out, arg.text, _EXP)
        else:
            self.push_value(out, arg.text, shown, quoted)

    def push_value(self, out: list, value: str, shown: str, quoted: bool) -> None:
        """A known value expanded into the word being built; past :data:`MAX_VALUE` characters of word the
        rest is a run-time part (opaque): the word is not built in memory."""
        if len(out) + len(value) > 4 * MAX_VALUE:
            self.opaque(f"a word grows past {4 * MAX_VALUE} characters (the guard stops following it)",
                        "build long values in a file, or split the command")
            _push(out, shown, _DYNQ if quoted else _DYNU)
            return
        self.budget.spend(len(value))
        _push(out, value, _QUOTED if quoted else _EXP)

    def _expansion(self, node: Any, st: State, flow: Flow, out: list, quoted: bool, flags: dict) -> None:
        """``${...}``: the value when it is known, else a run-time part; opaque forms are recorded."""
        ops = [_text(c) for c in node.children if not c.is_named and c.type not in ("${", "}")]
        named = [c for c in node.named_children]
        run_time = _DYNQ if quoted else _DYNU
        if ops and ops[0] == "!":
            self.opaque(f"indirect expansion `{_text(node)}` reads a variable named at run time", "use the variable itself")
            _push(out, _text(node), run_time)
            return
        if "@" in ops and ops[ops.index("@") + 1 : ops.index("@") + 2] == ["P"]:
            self.opaque(f"prompt expansion `{_text(node)}` can run commands", "print the variable plainly")
        target = named[0] if named else None
        name = self._expansion_target(target, st)
        self._expansion_operands(named[1:], st, flow)
        if ops and ops[0] in (":=", "="):  # `${X:=value}` assigns X
            self.sets(name or None, f"${{{name}{ops[0]}...}}")
        if name == "0" and st.zero is not None and not ops:
            self._argument(st.zero, _text(node), out, quoted, flags)
            return
        known_args = st.positional is not None and (name.isdigit() and name != "0" or name in ("@", "*"))
        if (name in ("@", "*") or name.isdigit() and name != "0") and not known_args:
            flags["positional"] = True
        if name in st.inputs:
            flags["input"] = True
        if ops and ops[0] == "#" and len(named) <= 1:  # ${#x}: a length
            _push(out, _text(node), run_time)
            return
        if known_args and not ops:
            self._positional(name, _text(node), st, out, quoted, flags)
            return
        if name == "DIRSTACK" and name not in st.vars and not ops and (target is None or target.type != "subscript" or
                                                                     _text(target.child_by_field_name("index")) == "0"):
            _push(out, "${PWD}", run_time)  # `${DIRSTACK[0]}`: the current directory (other entries: unplaced)
            return
        value = st.vars.get(name) if name in st.vars else None
        if known_args and name.isdigit():
            chosen = (st.positional or [])[int(name) - 1 : int(name)]
            value = "" if not chosen else None if chosen[0].dynamic else chosen[0].text
        if isinstance(value, list):
            value = value[0] if value else ""
        plain = not ops and target is not None and target.type != "subscript"
        default = bool(ops) and ops[0] in (":-", "-") and (bool(value) or ops[0] == "-")
        if isinstance(value, str) and (plain or default):
            self.push_value(out, value, _text(node), quoted)
        else:
            _push(out, _text(node), run_time)

    def _expansion_target(self, target: Any, st: State) -> str:
        if target is None:
            return ""
        if target.type in ("variable_name", "special_variable_name"):
            return _text(target)
        if target.type == "subscript":
            base = target.child_by_field_name("name")
            index = target.child_by_field_name("index")
            if index is not None and _text(index) not in ("@", "*"):
                self.arith(index, st)  # an indexed array's subscript is arithmetic
            return _text(base) if base is not None else ""
        return ""

    def _expansion_operands(self, operands: list[Any], st: State, flow: Flow) -> None:
        """Operands of ``${x:-word}``, ``${x/a/b}``...: substitutions in them run; ``${x:off:len}`` is arithmetic."""
        for child in operands:
            if child.prev_sibling is not None and _text(child.prev_sibling) == ":":
                self.arith(child, st)
            else:
                self._parts(child, st, flow, [], True, {"positional": False, "procsub": False, "output": False})

    # -- arithmetic -----------------------------------------------------------------------------

    def arith(self, node: Any, st: State) -> None:
        """Arithmetic evaluates variable values as expressions (``a[$(cmd)]`` runs cmd): only numbers are safe."""
        shown = ""
        for name in dict.fromkeys(_arith_names(node, self)):
            shown = shown or _text(node)[:40]
            self.sets(name, f"(( {shown} ))")  # arithmetic may assign any name it mentions
            self.arith_name(name, st, shown)

    def arith_name(self, name: str, st: State, shown: str) -> None:
        value = st.vars.get(name, None)
        if isinstance(value, str) and (value == "" or _NUMBER.fullmatch(value.strip())):
            return
        self.opaque(
            f"arithmetic `{shown[:40]}` evaluates `{name}`, whose value is not known to be a plain number "
            "(a value like `a[$(cmd)]` runs cmd)",
            "use literal numbers, or variables set to numbers on the same line",
        )


_STATEMENTS = {
    "program": Walker._list,
    "list": Walker._list,
    "compound_statement": Walker._compound,
    "subshell": Walker._subshell,
    "pipeline": Walker._pipeline,
    "negated_command": Walker._negated,
    "if_statement": Walker._if,
    "elif_clause": Walker._if,
    "else_clause": Walker._if,
    "while_statement": Walker._while,
    "do_group": Walker._do_group,
    "for_statement": Walker._for,
    "c_style_for_statement": Walker._c_for,
    "case_statement": Walker._case,
    "function_definition": Walker._function,
    "redirected_statement": Walker._redirected,
    "command": lambda w, n, st, flow: w.command(n, st, flow),
    "variable_assignment": Walker._assignment,
    "variable_assignments": Walker._assignments,
    "declaration_command": Walker._declaration,
    "unset_command": Walker._unset,
    "test_command": Walker._test,
}


_WORD_PARTS = {
    "word": Walker._part_word,
    "number": Walker._part_word,
    "brace_expression": Walker._part_word,
    "extglob_pattern": Walker._part_literal,
    "regex": Walker._part_literal,
    "test_operator": Walker._part_literal,
    "variable_name": Walker._part_literal,
    "raw_string": Walker._part_raw_string,
    "ansi_c_string": Walker._part_ansi_c,
    "string": Walker._part_string,
    "translated_string": Walker._part_string,
    "concatenation": Walker._part_concatenation,
    "simple_expansion": Walker._part_variable,
    "expansion": Walker._expansion,
    "command_substitution": Walker._part_substitution,
    "process_substitution": Walker._part_process,
    "arithmetic_expansion": Walker._part_arithmetic,
    "$": Walker._part_lone_dollar,
}
"""The word parts the walker models; any other node inside a word is opaque."""


def walk(command: str, result: Analysis, cwd: str, home: str, budget: Budget | None = None) -> None:
    """Analyse ``command`` into ``result`` (see :func:`ralph.shell.analyze`), spending from ``budget``."""
    walker = Walker(result, cwd, home, budget)
    previous = activate(walker.budget)
    try:
        try:
            walker.code(command, State(budget=walker.budget), Flow(), "the command")
        finally:
            walker.finish()
    finally:
        activate(previous)


# -- helpers ----------------------------------------------------------------------------------------


_CONVENTIONAL = {"PYTHON": ("python",), "PYTHON3": ("python3", "python"), "CC": ("cc", "gcc", "clang"),
                 "CXX": ("c++", "g++", "clang++"), "MAKE": ("make", "gmake"), "EDITOR": ("vi", "vim", "nvim", "nano"),
                 "VISUAL": ("vi", "vim", "nvim", "nano"), "PAGER": ("less", "more"), "GIT": ("git",)}
"""Variables that conventionally name a program (Makefiles, CI scripts, the user's environment): the program
they are read as, and the programs a default (``${CC:-gcc}``) may name."""
_CONVENTIONAL_WORD = re.compile(r"\$\{?([A-Z0-9_]+)\}?|\$\{([A-Z0-9_]+):?-([A-Za-z0-9_.+/-]+)\}")


def _conventional_program(text: str, st: State) -> str | None:
    """The program a command name such as ``$PYTHON`` or ``${CC:-gcc}`` stands for, when the line did not set
    the variable (None: it is a run-time name)."""
    m = _CONVENTIONAL_WORD.fullmatch(text)
    if m is None:
        return None
    name = m.group(1) or m.group(2)
    if name not in _CONVENTIONAL or name in st.vars:
        return None
    default = m.group(3)
    if default is None:
        return _CONVENTIONAL[name][0]
    programs = "|".join(re.escape(p) for p in _CONVENTIONAL[name])
    return default if re.fullmatch(rf"({programs})[0-9.]*", basename(default)) else None
_FIND_PRINTS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-print", "-printf", "-fprint", "-fprint0", "-fprintf",
                          "-ls", "-fls", "-files0-from"})


def _found_paths(cmds: list[Command], depth: int) -> tuple[str, ...] | None:
    """``DIR/*`` for each start path, when what a pipeline element writes is only ``find DIR ... -print0``."""
    top = [c for c in cmds if c.depth == depth and not any(w.startswith("find ") for w in c.wrappers)]
    if not top:
        return None
    patterns: list[str] = []
    for cmd in top:
        if cmd.name != "find" or "-print0" not in cmd.argv or any(a in _FIND_PRINTS for a in cmd.argv):
            return None
        if "-L" in cmd.argv or "-follow" in cmd.argv or any("&" in op for op, _ in cmd.redirects):
            return None  # paths through symlinks; error messages mixed into the pipe
        from ralph.shell.tools import find_roots

        from ralph.shell.findexpr import PRINTS, may_reach_git

        roots, _ = find_roots(cmd.argv)
        if any(cmd.dynamic[r] or cmd.glob[r] for r in roots):
            return None
        expression = cmd.argv[(roots[-1] + 1) if roots else 1 :]
        for root in [cmd.argv[r] for r in roots] or ["."]:
            tail = "/**" if may_reach_git(expression, root, PRINTS) else "/[!.]*"  # `.git` among the paths?
            patterns.append(root.rstrip("/") + tail if root != "/" else tail)
    return tuple(patterns)


def _cat_files(cmds: list[Command], depth: int) -> tuple[str, ...] | None:
    """The files a pipeline element writes when it is only ``cat FILE...`` of literal project-style names."""
    if len(cmds) != 1 or cmds[0].depth != depth or cmds[0].name != "cat" or len(cmds[0].argv) < 2:
        return None
    cmd = cmds[0]
    if any(cmd.dynamic) or any(cmd.glob) or any(a.startswith("-") or a.startswith("/dev/") for a in cmd.args):
        return None
    return tuple(cmd.args)


def _heredoc_text(redirect: Any, body: Any) -> str:
    """The text of a heredoc body from the start of its first line (tree-sitter's node may begin after the
    line's leading blanks)."""
    data = redirect.text
    start = body.start_byte - redirect.start_byte
    line = data.rfind(b"\n", 0, start) + 1
    active().spend(body.end_byte - body.start_byte)
    return data[line : body.end_byte - redirect.start_byte].decode("utf-8", "surrogatepass")


_COMPOUND_START = frozenset({"if", "while", "until", "for", "case", "select", "{", "[[", "((", "function", "coproc"})
_KEYWORD_PREFIX = re.compile(r"(?:^|[\s;&|(){}])(?:time|!)\s+(?:-p\s+)?(?:--\s+)?(?:if|while|until|for|case|select|"
                             r"\{|\[\[|\(\(|function|coproc|!|time)(?:\s|$)")
_RESERVED_TAILS = frozenset({"then", "else", "elif", "fi", "do", "done", "esac", "}", "]]", "in"})


def _blank_keyword_prefixes(text: str, root: Any) -> str | None:
    """``text`` with the ``time [-p]`` and ``!`` before a compound command blanked out, or None if there are none.

    bash reads ``time`` and ``!`` as reserved words in front of any pipeline, ``if``/``while``/``{``... included;
    tree-sitter-bash reads ``time if git push; then ...`` as a command named ``time`` and ``then``/``fi`` as
    commands of their own.  Neither word changes what runs (only the reported time or exit status), so the
    analysis reads the compound command without them."""
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    cuts: list[tuple[int, int]] = []
    stack = [root]
    budget = active()
    while stack:
        budget.spend(NODE_COST)
        node = stack.pop()
        if node.type == "command":
            name = node.child_by_field_name("name")
            args = node.children_by_field_name("argument")
            if name is not None and _text(name) == "time":
                k = 0
                while k < len(args) and _text(args[k]) in ("-p", "--"):
                    k += 1
                if k < len(args) and _text(args[k]) in _COMPOUND_START:
                    cuts.append((name.start_byte, args[k].start_byte))
        elif node.type == "negated_command" and node.children and node.children[0].type == "!":
            inner = node.named_children[0] if node.named_children else None
            name = inner.child_by_field_name("name") if inner is not None and inner.type == "command" else None
            if name is not None and (_text(name) in _COMPOUND_START or _text(name) in ("!", "time")):
                cuts.append((node.children[0].start_byte, node.children[0].end_byte))
        stack.extend(node.children)
    if not cuts:
        return None
    for start, end in cuts:
        data[start:end] = b" " * (end - start)
    return data.decode("utf-8", "surrogatepass")


def _fd_variable(node: Any) -> bool:
    """Is this argument ``{NAME}`` written right before a redirection (``{NAME}>file``: a descriptor variable)?"""
    if node.type != "concatenation" or node.end_byte - node.start_byte > 130 or not _FD_VAR.fullmatch(_text(node)):
        return False
    nxt = node.next_sibling
    if nxt is None and node.parent is not None and node.parent.parent is not None and \
            node.parent.parent.type == "redirected_statement":
        nxt = node.parent.next_sibling
    return nxt is not None and nxt.start_byte == node.end_byte and nxt.type in ("file_redirect", "heredoc_redirect",
                                                                               "herestring_redirect")


_FD_VAR = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def _plain_reserved(name_node: Any) -> bool:
    """Is this command name an unquoted reserved word that can only end or continue a compound command?"""
    if name_node is None:
        return False
    kids = name_node.named_children
    return len(kids) == 1 and kids[0].type == "word" and _text(kids[0]) in _RESERVED_TAILS


def adjacent(nodes: list[Any]) -> list[list[Any]]:
    """``nodes`` in runs that touch (each run is one shell word), comments left out."""
    runs: list[list[Any]] = []
    for node in nodes:
        if node.type == "comment":
            continue
        if runs and runs[-1][-1].end_byte == node.start_byte:
            runs[-1].append(node)
        else:
            runs.append([node])
    return runs


def unset_vars(w: Walker, words: list[Word], st: State) -> None:
    """``unset [-v|-f|-n] NAME...``: the variables are gone (a run-time name may be any of them)."""
    functions = False
    for word in words:
        if not word.dynamic and word.text.startswith("-") and len(word.text) > 1:
            functions = functions or "f" in word.text
            continue
        if word.dynamic:  # it may name a function too (`cd` shadowed or not)
            st.functions.add(MAYBE_FUNCTION)
        elif word.text in st.functions:
            st.functions.discard(word.text)
            if not functions:  # `unset NAME` removes the function only when no variable has that name
                st.functions.add(MAYBE_FUNCTION + word.text)
        if not functions:
            w.sets(None if word.dynamic else word.text, "unset")
            from ralph.shell.environment import check_name

            check_name(w, word.text, "unset")
        st.vars.pop(word.text, None)


def _text(node: Any) -> str:
    if node is None:
        return ""
    size = node.end_byte - node.start_byte
    if size > 256:  # small decodes are paid for by the node visits that make them
        active().spend(size)
    return node.text.decode("utf-8", "surrogatepass")


def _lead(node: Any) -> str:
    text = _text(node).strip().split("\n", 1)[0]
    return text if len(text) <= 40 else text[:37] + "..."


def _describe_error(root: Any, text: str) -> str:
    from collections import deque

    stack = deque([root])
    budget = active()
    while stack:
        budget.spend(NODE_COST)
        node = stack.popleft()
        if node.is_error or node.is_missing:
            line, col = node.start_point
            near = _text(node)[:20] or text[node.start_byte : node.start_byte + 20]
            what = f"missing `{node.type}`" if node.is_missing else f"syntax error near `{near.strip()}`"
            return f"{what} (line {line + 1}, column {col + 1})"
        stack.extend(node.children)
    return "syntax error"


def _static_output(node: Any) -> str | None:
    """The text a pipeline element writes, if it is ``cat <<'EOF'``/``cat <<< 'x'`` or ``echo`` of plain words."""
    redirects = []
    if node.type == "redirected_statement":
        redirects = node.children_by_field_name("redirect")
        node = node.child_by_field_name("body")
    if node is None or node.type != "command":
        return None
    name = node.child_by_field_name("name")
    args = node.children_by_field_name("argument")
    inline = [c for c in node.children if c.type in ("herestring_redirect", "heredoc_redirect")]
    program = _text(name)
    if program == "echo" and all(a.type in ("word", "raw_string") for a in args):
        return " ".join(_text(a) if a.type == "word" else _text(a)[1:-1] for a in args) + "\n"
    if program == "cat" and not args:
        for r in [*redirects, *inline]:
            if r.type == "herestring_redirect" and r.named_children and r.named_children[0].type in ("word",
                                                                                                  "raw_string"):
                value = _text(r.named_children[0])
                return (value[1:-1] if value.startswith("'") else value) + "\n"
            if r.type == "heredoc_redirect":
                body = next((c for c in r.children if c.type == "heredoc_body"), None)
                if body is not None and all(c.type == "heredoc_content" for c in body.named_children):
                    return _text(body)
    return None


def _calls_itself_in_a_pipe(node: Any, name: str) -> bool:
    stack = [node]
    budget = active()
    while stack:
        budget.spend(NODE_COST)
        n = stack.pop()
        if n.type == "pipeline":
            names = [_text(c.child_by_field_name("name")) for c in n.named_children if c.type == "command"]
            if name in names:
                return True
        stack.extend(n.children)
    return False


def _arith_names(node: Any, walker: Walker) -> list[str]:
    names: list[str] = []
    stack = [node]
    while stack:
        walker.budget.spend(NODE_COST)
        n = stack.pop()
        t = n.type
        if t in ("variable_name", "word"):  # a word may hold more than a name (`a[X=0]` reads `X=0` as one word)
            names.extend(m.group() for m in _ARITH_NAME.finditer(_text(n)))
        elif t == "simple_expansion" and n.named_children:
            inner = _text(n.named_children[0])
            if inner not in ("?", "#", "$", "!", "-") and not (inner.isdigit() and inner != "0"):
                names.append(inner)
            elif inner.isdigit():
                names.append(inner)
        elif t == "expansion":
            walker._parts(n, State(budget=walker.budget), Flow(), [], True, {"positional": False, "procsub": False, "output": False})
            for c in n.named_children:
                if c.type == "variable_name":
                    names.append(_text(c))
        elif t in ("command_substitution",):
            walker.substitution(n, State(budget=walker.budget), Flow())
        else:
            stack.extend(n.children)
    return names


def _glob_text(text: str) -> bool:
    """Does a plain word hold ``*``, ``?`` or a ``[`` closed on its line? (Linear: no regex backtracking.)"""
    if "*" in text or "?" in text:
        return True
    i = text.find("[")
    while i >= 0:
        line_end = text.find("\n", i)
        if text.find("]", i + 1, len(text) if line_end < 0 else line_end) >= 0:
            return True
        if line_end < 0:
            return False
        i = text.find("[", line_end)
    return False


def _push(out: list, text: str, kind: int) -> None:
    out.extend(zip(text, repeat(kind, len(text))))


def _unquote_word(text: str, out: list) -> None:
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            if text[i + 1] != "\n":
                out.append((text[i + 1], _QUOTED))
            i += 2
            continue
        out.append((ch, _LIT))
        i += 1


def _dq_unescape(text: str) -> str:
    return re.sub(r"\\([\\$`\"\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(s: str) -> str:
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch != "\\" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif nxt == "x":
            m = re.match(r"[0-9a-fA-F]{1,2}", s[i + 2 :])
            out.append(chr(int(m.group(), 16)) if m else "\\x")
            i += 2 + (len(m.group()) if m else 0)
        elif nxt in "uU":
            m = re.match(r"[0-9a-fA-F]{1,%d}" % (4 if nxt == "u" else 8), s[i + 2 :])
            try:
                out.append(chr(int(m.group(), 16)) if m else "\\" + nxt)
            except ValueError:
                out.append("?")
            i += 2 + (len(m.group()) if m else 0)
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", s[i + 1 :])
            assert m is not None
            out.append(chr(int(m.group(), 8) & 0xFF))
            i += 1 + len(m.group())
        elif nxt == "c" and i + 2 < n:
            out.append(chr(ord(s[i + 2]) & 0x1F))
            i += 3
        else:
            out.append("\\" + nxt)
            i += 2
    return "".join(out)


def _assemble(chars: list[tuple[str, int]], flags: dict, split: bool, budget: Budget) -> list[Word]:
    budget.spend(4 * len(chars))  # several passes over the characters below
    cut: list[bool] = []
    variants = _brace_expand(chars, budget, _MAX_WORDS, cut) if ("{", _LIT) in chars else [chars]
    if cut:
        flags["truncated"] = True
    words: list[Word] = []
    for variant in variants:
        budget.spend(4 * len(variant))
        pieces = _split(variant) if split else [variant]
        for piece in pieces:
            text = "".join([ch for ch, _ in piece])
            kinds = {k for _, k in piece}
            if not text and piece and kinds <= _UNQUOTED_RUNTIME:
                continue
            dynamic = not kinds.isdisjoint(_RUNTIME)
            words.append(
                Word(
                    text=text,
                    dynamic=dynamic,
                    glob=_is_glob(piece) if ("*" in text or "?" in text or "[" in text) else False,
                    split=_DYNU in kinds,
                    positional=flags["positional"],
                    procsub=flags["procsub"],
                    output=flags.get("output", False),
                    input=bool(flags.get("input")) and dynamic,
                )
            )
    if not words and chars and not any(k in (_EXP, _DYNU) for _, k in chars):
        words.append(Word(""))
    if len(words) > _MAX_WORDS:
        flags["truncated"] = True
    return words[:_MAX_WORDS]


def _split(chars: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    if (" ", _EXP) not in chars and ("\t", _EXP) not in chars and ("\n", _EXP) not in chars:
        return [chars]
    out: list[list[tuple[str, int]]] = [[]]
    for ch, k in chars:
        if k == _EXP and ch in " \t\n":
            if out[-1]:
                out.append([])
        else:
            out[-1].append((ch, k))
    return [p for p in out if p]


def _is_glob(chars: list[tuple[str, int]]) -> bool:
    for i, (ch, k) in enumerate(chars):
        if k not in (_LIT, _EXP):
            continue
        if ch in "*?":
            return True
        if ch == "[" and any(c == "]" and kk in (_LIT, _EXP) for c, kk in chars[i + 2 :]):
            return True
    return False


def _brace_expand(chars: list[tuple[str, int]], budget: Budget, most: int,
                  cut: list[bool]) -> list[list[tuple[str, int]]]:
    """Bash brace expansion over the unquoted literal characters: ``a{b,c}`` -> ``ab ac``, ``{1..3}``
    (at most ``most`` words, else ``cut`` gets an item; every character scanned or copied is spent from
    ``budget``)."""
    n = len(chars)
    budget.spend(n)
    opens: list[int] = []
    commas_of: dict[int, list[int]] = {}
    pairs: list[tuple[int, int, list[int]]] = []
    for j, (ch, k) in enumerate(chars):  # one pass: matching braces and the commas at their own level
        if k != _LIT:
            continue
        if ch == "{":
            opens.append(j)
            commas_of[j] = []
        elif ch == "}" and opens:
            start = opens.pop()
            pairs.append((start, j, commas_of.pop(start)))
        elif ch == "," and opens:
            commas_of[opens[-1]].append(j)
    for start, end, commas in sorted(pairs):
        prefix, suffix = chars[:start], chars[end + 1 :]
        if commas:
            bounds = [start, *commas, end]
            alternatives = [chars[bounds[i] + 1 : bounds[i + 1]] for i in range(len(bounds) - 1)]
        else:
            if end - start > 60:  # longer than any {a..b..step}
                continue
            inner = "".join(ch for ch, _ in chars[start + 1 : end])
            seq = _sequence(inner, cut)
            if seq is None:
                continue
            alternatives = [[(ch, _LIT) for ch in item] for item in seq]
        out: list[list[tuple[str, int]]] = []
        for n_alt, alt in enumerate(alternatives):
            for tail in _brace_expand(alt + suffix, budget, most - len(out), cut):
                budget.spend(len(prefix) + len(tail))
                out.append(prefix + tail)
                if len(out) >= most:
                    if n_alt < len(alternatives) - 1:
                        cut.append(True)
                    return out
        return out
    return [chars]


def _sequence(inner: str, cut: list[bool]) -> list[str] | None:
    """The words of ``{a..b[..step]}`` (at most ``_MAX_WORDS``, else ``cut`` gets an item: never the whole range)."""
    m = re.fullmatch(r"(-?\d{1,18})\.\.(-?\d{1,18})(?:\.\.(-?\d{1,18}))?", inner)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        rng = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        if len(rng) > _MAX_WORDS:
            cut.append(True)
        return [str(x) for x in rng[:_MAX_WORDS]]
    m = re.fullmatch(r"([A-Za-z])\.\.([A-Za-z])", inner)
    if m:
        a, b = ord(m.group(1)), ord(m.group(2))
        return [chr(x) for x in (range(a, b + 1) if a <= b else range(a, b - 1, -1))]
    return None
