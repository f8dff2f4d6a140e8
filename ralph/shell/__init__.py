"""What would this Bash command line run?  The shell analysis behind the PreToolUse guards.

The command line is parsed with a real bash grammar (tree-sitter with
``tree-sitter-bash``, see :mod:`ralph.shell.grammar`) and the syntax
tree is walked by :mod:`ralph.shell.walker`, which models an explicit
set of constructs.  Anything outside that set -- a syntax node, an expansion, a
builtin, a wrapper or a git option that can run code the walker does not
follow -- is not guessed at: it is reported in :attr:`Analysis.opaque`, and in
direct mode (no sandbox) the guards deny it.

Public API (re-exported for third-party guards; keep these signatures stable)::

    analyze(command: str, cwd: str | None = None, project_dir: str | None = None,
            home: str | None = None) -> Analysis
    analyze_for(event: object, command, cwd, project_dir, home) -> Analysis   # once per hook event
    resolve_path(text, cwd, home, dynamic=False, cd=None, cd_unknown=False, known=None, physical=False) -> str | None
    basename(word: str) -> str
    unplaced(text, dynamic=False, cd=None, cd_unknown=False) -> str | None   # why a path cannot be placed

:func:`analyze` never raises.  ``cwd`` (default: ``project_dir``, else the
process's cwd) is where relative paths and ``./program`` start; it is used to
see through symlinks to programs that already exist.  ``home`` expands ``~``.

:class:`Analysis` holds:

- ``simple``: every :class:`Command` that would run (wrappers such as ``env``,
  ``timeout``, ``xargs`` or ``find -exec`` stripped; code run by ``bash -c``,
  ``eval``, ``$(...)``, functions, git aliases ... included); ``commands`` is
  the same as argv lists;
- ``writes``: files written (redirections, ``tee``, copies, downloads, extractions: :class:`WriteTarget`);
- ``opaque``: :class:`Opaque` findings (what cannot be checked, and how to
  write it plainly);
- ``unparseable``: a syntax error (bash would reject it, or the grammar does);
- ``pipes_into_shell`` / ``pipe_detail``: a program reading its code from a
  pipe or a process substitution (``curl ... | sh``, ``| python3 /dev/stdin``);
- ``scripts``: script files run by name (their content is not read);
- ``push_block``: what clears or overrides the git push block (``env -u GIT_CONFIG_COUNT`` ...);
- ``fork_bomb``.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Analysis",
    "Command",
    "Opaque",
    "ShellAnalysis",
    "WriteTarget",
    "analyze",
    "basename",
    "resolve_path",
    "unplaced",
    "PRIVILEGE_WRAPPERS",
    "SHELLS",
]

CD_DATA = "\x00data"
"""A ``cd`` step (in ``Command.cd``, ``WriteTarget.cd``) into a directory read at run time (``cd "$(cat d)"``,
``cd -`` or ``popd`` to a directory from before the line): a relative path after it is data, as a path read at
run time is."""
MAX_DEPTH = 6
"""Nesting of ``bash -c`` / ``eval`` / git aliases followed before giving up (unparseable)."""
MAX_CHARS = 100_000
"""A command line longer than this is not analysed (unparseable)."""

SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "ksh93", "mksh", "ash", "yash", "posh", "fish", "csh", "tcsh", "rbash", "lksh",
     "oksh", "loksh", "pdksh", "elvish", "nu", "xonsh", "ion"}
)
"""Shell programs: one that reads its code from a pipe or runs ``-c`` code is followed or reported."""
PRIVILEGE_WRAPPERS = frozenset({"sudo", "doas", "pkexec", "runuser", "sudoedit", "su", "gosu", "su-exec", "sg",
                                "newgrp", "run0"})
"""Programs that run another command with other privileges (``sudo``, ``doas`` ...)."""


@dataclass
class Command:
    """One simple command after wrappers were stripped: what actually runs."""

    argv: list[str]
    dynamic: list[bool]
    """Per word: part of it is only known at run time (unknown variable, substitution)."""
    glob: list[bool]
    """Per word: it holds unquoted ``*``, ``?`` or ``[`` (a pattern, not a name)."""
    input: list[bool] = field(default_factory=list)
    """Per word: its run-time part is data read at run time (stdin through ``xargs`` or ``read``, a file, a
    command's output) -- anything at all, not even a name the line chose."""
    assignments: dict[str, str] = field(default_factory=dict)
    """``NAME=value`` given to this command (prefix assignments and ``env NAME=value``)."""
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
    real_name: str | None = None
    """The program a ``./name`` symlink points at, when that differs from the typed name."""
    git: Any = None
    """For ``git``: its :class:`~ralph.shell.git.GitView` (subcommand after aliases, ``-c`` settings)."""

    @property
    def name(self) -> str:
        """The program's name: ``/usr/bin/git`` -> ``git`` (through an existing symlink, its target's name)."""
        if self.real_name:
            return self.real_name
        return basename(self.argv[0]) if self.argv else ""

    @property
    def dynamic_name(self) -> bool:
        """The command name itself is computed at run time (``$cmd``, ``/???/r?``)."""
        return bool(self.argv) and (self.dynamic[0] or self.glob[0])

    @property
    def args(self) -> list[str]:
        """The arguments after the program's name."""
        return self.argv[1:]


@dataclass
class WriteTarget:
    """A file a command line writes: a redirection, ``tee``, the destination of ``cp``/``mv``/``rsync``, an
    archive's extraction directory, a download's ``-o`` file ..."""

    path: str
    dynamic: bool
    glob: bool
    cd: list[str]
    cd_unknown: bool
    via: str
    truncates: bool = True
    """``>``/``>|``/``&>``/``tee`` replace the content; ``>>``/``tee -a`` append."""
    source: str | None = None
    """For a link made on the line (:attr:`Analysis.links`): the path it points to, as typed."""
    symbolic: bool = False
    """For a link: a symbolic one (its ``source`` is relative to the link's directory)."""
    input: bool = False
    """The path is data read at run time (a ``read`` variable, ``$(...)`` output): it can be any file."""
    into: bool = False
    """The path is a directory and the command writes files of any name under it, at any depth (an archive
    extracted there, a directory's contents copied there, ``find DIR -exec sed -i``): which ones is decided by
    data the guard does not read."""
    follow: bool = True
    """The write goes through a symlink at ``path`` (``cp``, ``>``); False when the command replaces the name
    itself (``mv``, ``ln -f``)."""
    skips_git: bool = False
    """With ``into``: the program never writes a ``.git`` under ``path`` (git's own work-tree writes)."""
    anywhere: bool = False
    """A program writes files the guard cannot place (an option it does not model): in a loop, any file."""


@dataclass(frozen=True)
class Opaque:
    """Something the analysis cannot check, and how to write it so that it can."""

    construct: str
    """What was found, e.g. "the command name `$c` is only known at run time"."""
    advice: str
    """How to write it plainly, e.g. "write the program's name itself"."""


@dataclass
class Analysis:
    """Everything :func:`analyze` found in one command line (nested code included)."""

    command: str
    simple: list[Command] = field(default_factory=list)
    writes: list[WriteTarget] = field(default_factory=list)
    pipes_into_shell: bool = False
    pipe_detail: str = ""
    unparseable: str | None = None
    opaque: list[Opaque] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    """Script files run by a shell or interpreter (``bash x.sh``, ``source x``): their content is not checked."""
    fork_bomb: bool = False
    links: list[WriteTarget] = field(default_factory=list)
    """Links made on the line (``ln``, ``cp -s``/``-l``): a later write through one writes what it points to."""
    push_block: list[str] = field(default_factory=list)
    """How the line clears or overrides the git push block of direct mode (``GIT_CONFIG_*`` variables set,
    unset or dropped with ``env -i``/``env -u``; ``url.*.insteadOf``/``remote.*.pushurl`` configured;
    ``--config-env``): each is as good as a push."""
    cwd_lost: list[str] = field(default_factory=list)
    """Why the walk lost track of the shell's directory (:mod:`ralph.shell.cwd`): relative paths after that are
    :func:`unplaced`."""
    steps: int = 0
    """Work units the analysis spent (:mod:`ralph.shell.budget`): at most ``MAX_STEPS``, past which it stopped
    and reported the command as opaque."""

    @property
    def commands(self) -> list[list[str]]:
        """The argv of every simple command, in order."""
        return [c.argv for c in self.simple]

    @property
    def redirect_targets(self) -> list[str]:
        """The paths of :attr:`writes` (redirections and ``tee``)."""
        return [w.path for w in self.writes]

    def add_opaque(self, construct: str, advice: str) -> None:
        """Record something that cannot be checked (once)."""
        item = Opaque(construct, advice)
        if item not in self.opaque:
            self.opaque.append(item)


ShellAnalysis = Analysis
"""The name this class had before the tree-sitter rewrite."""


def basename(word: str) -> str:
    """The command name of an argv[0] (``/usr/bin/git`` -> ``git``)."""
    return word.rstrip("/").rsplit("/", 1)[-1] if "/" in word else word


def analyze(command: str, cwd: str | None = None, project_dir: str | None = None, home: str | None = None) -> Analysis:
    """Parse ``command`` with the bash grammar and report what it would run (never raises)."""
    from ralph.shell.budget import Budget, BudgetExceeded
    from ralph.shell.walker import walk

    result = Analysis(command)
    if len(command) > MAX_CHARS:
        result.unparseable = f"longer than {MAX_CHARS} characters"
        return result
    base = cwd or project_dir or os.getcwd()
    budget = Budget()
    try:
        walk(command, result, os.path.normpath(base), home or os.path.expanduser("~"), budget)
    except BudgetExceeded:
        result.add_opaque(
            f"the command expands to more than the guard follows ({budget.limit} steps of analysis: long values, "
            "big brace expansions, nested loops, aliases or eval)",
            "split it into smaller commands, or put the work in a script file",
        )
    except RecursionError:
        result.unparseable = "nested too deeply"
    except Exception as exc:  # the analysis must never break a hook; say what happened instead
        result.unparseable = f"the guard's analysis failed ({type(exc).__name__}: {exc})"
    result.steps = budget.steps
    return result


_last = threading.local()


def analyze_for(event: object, command: str, cwd: str | None, project_dir: str | None, home: str | None) -> Analysis:
    """:func:`analyze`, done once per hook event: every guard looking at the same call shares the result.

    Only the same event object (and the same arguments) reuses it, so a later call never sees an
    analysis made before the file system changed.
    """
    key = (command, cwd, project_dir, home)
    cached = getattr(_last, "entry", None)
    if cached is not None and cached[0] is event and cached[1] == key:
        return cached[2]
    result = analyze(command, cwd, project_dir, home)
    _last.entry = (event, key, result)
    return result


_TILDE_PWD = re.compile(r"~\+?0?(?=/|$)")
"""``~+``, ``~0``, ``~+0``: bash's tilde forms for ``$PWD`` (``dirs +0``)."""
_TILDE_STACK = re.compile(r"~(-|[+-]?[0-9]+)(?=/|$)")
"""``~-`` (``$OLDPWD``), ``~N``, ``~+N``, ``~-N`` (``dirs`` entries): places the line's directory stack holds."""
TOPLEVEL = "\x00toplevel"
"""A ``cd`` step to the root of the git repository the shell is in (``cd "$(git rev-parse --show-toplevel)"``):
the nearest directory holding ``.git``, looked up when the path is resolved."""
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
"""``$NAME`` or ``${NAME}`` -- not ``${NAME/a/b}``, ``${NAME%x}``, ``${NAME:-x}``: an operator changes the value."""
_DEFAULTED = re.compile(r"^\$\{(HOME|PWD|TMPDIR|TMP|TEMP|CLAUDE_PROJECT_DIR):?[-=?][^}$`]*\}")
"""``${HOME:-x}``, ``${PWD-x}``, ``${TMPDIR:=x}``: the variable is set, so its own value."""
DERIVED = re.compile(r"^\$\{(HOME|PWD|TMPDIR|TMP|TEMP|CLAUDE_PROJECT_DIR|OLDPWD)(?![A-Za-z0-9_}])(?!:?[-=?])")
"""``${PWD/proj/other}``, ``${HOME%/*}``, ``${PWD:0:5}``, ``${HOME:+/etc}``: a path built at run time out of a
value the guard knows, by an operator -- any path the agent chooses, so data."""


def resolve_path(
    text: str,
    cwd: str,
    home: str,
    dynamic: bool = False,
    cd: list[str] | None = None,
    cd_unknown: bool = False,
    known: dict[str, str] | None = None,
    physical: bool = False,
) -> str | None:
    """The absolute, normalised path a shell word names, or None if it cannot be known here.

    With ``physical``, the path the kernel opens: symlinks followed before each ``..`` (``link/../x`` is
    beside the link's target, not beside the link); ``cd`` steps stay logical, as bash's ``cd`` is.

    ``~`` and ``$HOME`` expand to ``home`` and ``~user`` to that user's home (a user that does not exist leaves
    the word as it is: a relative path, as in bash);
    ``known`` maps other variables (``PWD``, ``TMPDIR``, ``CLAUDE_PROJECT_DIR``)
    to values; ``cd`` are the ``cd`` targets seen earlier on the line.  Any
    other run-time part -> None.
    """
    from ralph.shell.budget import active

    if cd_unknown and not (text.startswith("/") or text.startswith("~") and not _literal_tilde(text)):
        return None
    base = cwd
    if cd:
        memo = active().memo  # every path after the same `cd` steps starts in the same place: found once
        key = ("cd", cwd, home, tuple(cd), tuple(sorted(known.items())) if known else ())
        if key in memo:
            base = memo[key]
        else:
            for step in cd:
                if step == TOPLEVEL:
                    nxt = _toplevel(base)
                else:
                    nxt = resolve_path(step, base, home, step.startswith("$"), None, False, known)  # logical, like `cd`
                if nxt is None:
                    break
                base = nxt
            else:
                nxt = base
            memo[key] = base if nxt is not None else None
            base = memo[key]
        if base is None:
            return None
    if dynamic:
        text = _DEFAULTED.sub(r"${\1}", text, count=1) if text.startswith("${") else text
        m = _VAR.match(text)
        values = {"HOME": home, "PWD": base, **(known or {})}
        name = (m.group(1) or m.group(2)) if m else None
        if name is None or name not in values:
            return None
        text = values[name] + text[m.end() :]  # type: ignore[union-attr]
        if "$" in text:
            return None
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    elif _TILDE_PWD.match(text):  # `~+`, `~0`, `~+0`: $PWD, the directory the path is read in
        text = "." + text[_TILDE_PWD.match(text).end() :]  # type: ignore[union-attr]
    elif _TILDE_STACK.match(text):  # `~-`, `~1`, `~-2`: $OLDPWD and the directory stack
        return None
    elif text.startswith("~"):
        user, _, rest = text[1:].partition("/")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", user):
            return None
        user_home = _user_home(user)
        if user_home is not None:
            text = os.path.join(user_home, rest)
        # else bash finds no such user and leaves the word as it is: `~zz/x` is a relative path
    if not text:
        return None
    active().spend(len(text) + len(base))
    if physical:
        from ralph.shell.paths import real_path

        return real_path(os.path.join(base, text))
    return os.path.normpath(os.path.join(base, text))


def _user_home(user: str) -> str | None:
    """``~user``'s directory, as bash expands it (the password database); None: no such user, the word stays."""
    import pwd

    from ralph.shell.budget import active
    from ralph.shell.paths import SYSCALL_COST

    budget = active()
    key = ("user", user)
    if key not in budget.memo:
        budget.spend(SYSCALL_COST + len(user))
        try:
            budget.memo[key] = pwd.getpwnam(user).pw_dir or "/"
        except (KeyError, OSError, ValueError):
            budget.memo[key] = None
    return budget.memo[key]


def _literal_tilde(text: str) -> bool:
    """``~NAME...`` for a user that does not exist: bash leaves it as it is, a path relative to the shell."""
    user = text[1:].partition("/")[0] if text.startswith("~") else ""
    return bool(re.fullmatch(r"[A-Za-z0-9._-]+", user)) and not _TILDE_STACK.match(text) and _user_home(user) is None


def _toplevel(start: str) -> str | None:
    """The directory ``git rev-parse --show-toplevel`` prints in ``start``: the nearest one up holding ``.git``."""
    from ralph.shell.paths import exists

    here = start
    while True:
        if exists(os.path.join(here, ".git")):
            return here
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


_CWD_VARS = re.compile(r"\$\{?(PWD|OLDPWD|DIRSTACK)\b")


def unplaced(text: str, dynamic: bool = False, cd: list[str] | None = None, cd_unknown: bool = False) -> str | None:
    """Why the file a path names cannot be placed although it depends on where the shell is (None: it can be,
    or it is an ordinary run-time value such as ``$OUT``).  A write there may be a write anywhere.

    The one test both guards use: a relative path (or ``$PWD``, ``~+``) after a ``cd`` the guard could not follow
    (:data:`CD_DATA`, ``cd_unknown``), a step of the line's directory stack (``~-``, ``~1``, ``$OLDPWD``), or a path
    built by an operator out of a value the guard knows (``${PWD/a/b}``, ``${HOME%/*}``)."""
    bare = text.lstrip('"')
    if DERIVED.match(bare):
        return f"`{text[:60]}` is built at run time out of a known directory"
    if (_TILDE_STACK.match(bare) and not _TILDE_PWD.match(bare)) or (dynamic and _CWD_VARS.match(bare) and not bare.startswith(("$PWD", "${PWD}"))):
        return f"`{text[:60]}` names a directory of the shell's stack (`$OLDPWD`, `~-`, `~N`), which the guard does not follow"
    here = not bare.startswith(("/", "~", "$")) or bool(_TILDE_PWD.match(bare)) or _literal_tilde(bare) or (
        dynamic and bare.startswith(("$PWD", "${PWD}")))
    if here and (cd_unknown or CD_DATA in (cd or [])):
        return f"`{text[:60]}` is relative to a directory only known at run time (an earlier `cd` the guard could not follow)"
    return None
