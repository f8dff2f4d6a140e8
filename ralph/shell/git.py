"""How the guards read a git command line: global options, aliases, configuration that runs code.

:func:`parse_git` splits ``git [global options] SUB ARGS`` and resolves aliases
given on the command line (``-c alias.p=push``, ``--config-env=alias.p=VAR``)
the way git does: alias names are case-insensitive, builtins win over aliases,
an alias may name another alias (a loop is opaque), and an alias starting with
``!`` is shell code (analysed like ``bash -c``).

:func:`inspect` (called by the shell walker for every ``git``) records as opaque
what makes git run other programs the guard cannot follow: configuration keys
such as ``core.pager``, ``core.sshCommand``, ``core.fsmonitor``, ``--config-env``,
``rebase --exec``, ``grep -O``, ``submodule foreach``, ``bisect run``, ``filter-branch``,
``--upload-pack``, a subcommand that is not a git command it knows (an alias
from a config file, a ``git-*`` program on PATH), and ``git config`` writes of
such keys or of aliases.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

BUILTINS = frozenset(
    """add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr check-ignore
    check-mailmap check-ref-format checkout checkout-index cherry cherry-pick citool clean clone column commit
    commit-graph commit-tree config count-objects credential credential-cache credential-store describe diagnose
    diff diff-files diff-index diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch
    fmt-merge-msg for-each-ref for-each-repo format-patch fsck fsck-objects fsmonitor--daemon gc get-tar-commit-id
    grep gui hash-object help hook http-backend http-fetch http-push imap-send index-pack init init-db instaweb
    interpret-trailers log ls-files ls-remote ls-tree mailinfo mailsplit maintenance merge merge-base merge-file
    merge-index merge-octopus merge-one-file merge-ours merge-recursive merge-resolve merge-subtree merge-tree
    mergetool mktag mktree multi-pack-index mv name-rev notes p4 pack-objects pack-redundant pack-refs patch-id
    prune prune-packed pull push quiltimport range-diff read-tree rebase receive-pack reflog refs remote repack
    replace replay request-pull rerere reset restore rev-list rev-parse revert rm send-email send-pack shortlog show
    show-branch show-index show-ref sparse-checkout stage stash status stripspace submodule subtree svn switch
    symbolic-ref tag unpack-file unpack-objects update-index update-ref update-server-info upload-archive
    upload-pack var verify-commit verify-pack verify-tag version whatchanged worktree write-tree lfs""".split()
)
"""git's own commands (and git-lfs): any other subcommand is an alias or a program the guard cannot see."""
PUSHES = frozenset({"push", "send-pack", "http-push"})
RUNS_CODE = frozenset({"filter-branch", "hook", "instaweb", "send-email", "for-each-repo", "fast-import", "receive-pack",
                       "http-backend", "citool", "gui", "quiltimport", "fsmonitor--daemon", "imap-send"})
"""Subcommands that run configured programs or write refs wholesale: opaque in direct mode."""
_VALUE_OPTS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix",
                         "--attr-source", "--list-cmds"})
_FLAGS = frozenset({"-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects", "--literal-pathspecs",
                    "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks",
                    "--no-advice", "-v", "--version", "-h", "--help", "--html-path", "--man-path", "--info-path",
                    "--exec-path"})
_CODE_KEYS = re.compile(
    r"^(core\.(sshcommand|pager|editor|askpass|fsmonitor|gitproxy|alternaterefscommand)|sequence\.editor"
    r"|diff\.external|credential(\..+)?\.helper|gpg(\..+)?\.program|uploadpack\.packobjectshook"
    r"|interactive\.difffilter|web\.browser|include\.path|includeif\..+\.path|init\.templatedir|protocol(\..+)?\.allow"
    r"|pager\..+|diff\..+\.(command|textconv)|merge\..+\.driver|filter\..+\.(clean|smudge|process)"
    r"|(difftool|mergetool|browser|man)\..+\.(cmd|path)|remote\..+\.(uploadpack|receivepack|vcs)"
    r"|url\..+\.(insteadof|pushinsteadof)|sendemail\..+|core\.hookspath|receive\.procreceiverefs"
    r"|(diff|merge)\.tool|guitool\..+\.cmd|ssh\.variant|http\.proxy|core\.worktree)$"
)
"""Configuration keys whose value git runs (or that point git at code elsewhere)."""
_READS_OUTPUT = re.compile(r"^(core\.pager|pager\..+|interactive\.difffilter)$")
PUSH_URL_KEYS = re.compile(r"^(url\..+\.(insteadof|pushinsteadof)|remote\..+\.pushurl)$")
"""Configuration that decides where a push goes: setting it overrides direct mode's push block."""


@dataclass
class GitView:
    """A git command line as git will run it."""

    sub: str
    """The subcommand after aliases were expanded (``!`` for a shell alias)."""
    args: list[str]
    configs: dict[str, str | None] = field(default_factory=dict)
    """``-c`` / ``--config-env`` settings (keys normalised; None: value only known at run time)."""
    dirs: list[str] = field(default_factory=list)
    """``-C`` directories in order."""
    config_env: bool = False
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(construct, advice) pairs the walker records as opaque."""
    shell_aliases: list[str] = field(default_factory=list)
    """Shell code of ``!`` aliases, with the arguments git appends."""
    unknown_global: str | None = None
    work_tree: str | None = None
    """``--work-tree`` (the last one given)."""
    git_dir: str | None = None
    """``--git-dir`` (the last one given)."""


def normalise_key(key: str) -> str:
    """git config keys: section and name are case-insensitive, a subsection is not."""
    parts = key.split(".")
    if len(parts) < 2:
        return key.lower()
    parts[0] = parts[0].lower()
    parts[-1] = parts[-1].lower()
    return ".".join(parts)


def view(argv: list[str], env: dict[str, Any] | None = None) -> GitView:
    """Parse ``git ...`` (argv[0] is git); ``env`` holds variables known on the line (for ``--config-env``)."""
    env = env or {}
    configs: dict[str, str | None] = {}
    dirs: list[str] = []
    config_env = False
    unknown: str | None = None
    work_tree: str | None = None
    git_dir: str | None = None
    i = 1
    while i < len(argv):
        a = argv[i]
        key, eq, inline = a.partition("=")
        if a in _VALUE_OPTS or (a.startswith("--") and eq and key in _VALUE_OPTS):
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            opt = key if eq else a
            i += 1 if eq else 2
            if opt == "-c":
                k, has, v = value.partition("=")
                configs[normalise_key(k)] = v if has else "true"
            elif opt == "--config-env":
                config_env = True
                k, _, var = value.partition("=")
                known = env.get(var)
                configs[normalise_key(k)] = known if isinstance(known, str) else None
            elif opt == "-C":
                dirs.append(value)
            elif opt == "--work-tree":
                work_tree = value
            elif opt == "--git-dir":
                git_dir = value
            continue
        if a.startswith("--exec-path="):
            unknown = a
            i += 1
            continue
        if a in _FLAGS:
            i += 1
            continue
        if a.startswith("-"):
            unknown = unknown or a
            i += 1
            continue
        break
    sub = argv[i] if i < len(argv) else ""
    args = argv[i + 1 :]
    result = GitView(sub, args, configs, dirs, config_env, unknown_global=unknown, work_tree=work_tree,
                     git_dir=git_dir)
    _expand_aliases(result)
    return result


def _expand_aliases(v: GitView) -> None:
    aliases = {k[6:]: val for k, val in v.configs.items() if k.startswith("alias.")}
    seen: list[str] = []
    while v.sub and v.sub not in BUILTINS and v.sub.lower() in aliases:
        name = v.sub.lower()
        if name in seen or len(seen) > 10:
            v.problems.append((f"the git aliases {' -> '.join(seen + [name])} form a loop", "use git commands directly"))
            return
        seen.append(name)
        value = aliases[name]
        if value is None:
            v.problems.append((f"the git alias `{name}` is set from a variable only known at run time",
                               "use the git command itself"))
            v.sub = ""
            return
        if value.startswith("!"):
            v.shell_aliases.append(value[1:] + "".join(" " + shlex.quote(a) for a in v.args))
            v.sub, v.args = "!", []
            return
        try:
            words = shlex.split(value)
        except ValueError:
            v.problems.append((f"the git alias `{name}` cannot be read", "use the git command itself"))
            return
        if not words:
            return
        v.sub, v.args = words[0], words[1:] + v.args


def parse_git(argv: list[str]) -> tuple[str, list[str], list[str], list[str]]:
    """(subcommand, its args, ``-c`` configs as ``key=value``, ``-C`` dirs) of a git argv (argv[0] is git)."""
    v = view(argv)
    return v.sub, v.args, [f"{k}={val}" for k, val in v.configs.items()], v.dirs


def short_flag(args: list[str], letters: str, stop: str = "") -> str | None:
    """The first short-option cluster in ``args`` holding one of ``letters`` (before a value-taking letter)."""
    for a in args:
        if a == "--":
            return None
        if a.startswith("-") and not a.startswith("--") and len(a) > 1:
            for ch in a[1:]:
                if ch in letters:
                    return a
                if ch in stop:
                    break
    return None


_CONFIG_READS = frozenset({"--get", "--get-all", "--get-regexp", "--list", "-l", "--get-urlmatch", "--get-color",
                           "--get-colorbool", "--show-origin", "--name-only", "--show-scope"})
_CONFIG_ACTIONS = frozenset({"set", "unset", "get", "list", "edit", "rename-section", "remove-section"})


@dataclass
class ConfigCall:
    """A ``git config`` command line, read: what it does, to which file, with which key."""

    action: str
    """``set`` (also ``--add``/``--replace-all``), ``unset``, ``edit``, ``rename-section``, ``remove-section``,
    ``get`` (every read)."""
    file: str | None
    """``-f``/``--file`` (None: the repository's, or ``--global``/``--system``)."""
    key: str | None
    value: str | None
    scope: str | None = None
    """``global``, ``system``, ``local``, ``worktree`` when given."""


def config_call(args: list[str]) -> ConfigCall:
    """Read ``git config ARGS`` the way git does (options with values and abbreviated, the classic and the
    subcommand forms)."""
    from ralph.shell import gitopts

    action: str = ""
    file: str | None = None
    scope: str | None = None
    opts, ops = gitopts.parse("config", args)
    for name, value in opts:
        if name in ("-f", "--file"):
            file = value if value is not None else ""
        elif name in _CONFIG_READS:
            action = action or "get"
        elif name in ("--unset", "--unset-all"):
            action = "unset"
        elif name in ("-e", "--edit"):
            action = "edit"
        elif name in ("--rename-section", "--remove-section"):
            action = name[2:]
        elif name in ("--add", "--replace-all"):
            action = action or "set"
        elif name in ("--global", "--system", "--local", "--worktree"):
            scope = name[2:]
    if not action and ops and ops[0] in _CONFIG_ACTIONS:
        action, ops = ops[0], ops[1:]
    if not action:
        action = "set" if len(ops) >= 2 else "get"
    key = normalise_key(ops[0]) if ops else None
    given = ops[1] if len(ops) > 1 else None
    return ConfigCall(action, file, key, given, scope)


def inspect(w: Any, call: Any) -> None:
    """Record what the git command in ``call`` runs besides git itself (used by the shell walker)."""
    v = view(call.cmd.argv, {**call.st.vars, **call.env})
    call.cmd.git = v
    for name in ("HUSKY", "HUSKY_SKIP_HOOKS", "SKIP"):  # exported earlier on the line
        if name in call.st.vars and name not in call.cmd.assignments:
            value = call.st.vars[name]
            call.cmd.assignments[name] = value if isinstance(value, str) else "$?"
    _global_options(w, call, v)
    sub = v.sub
    if not sub or sub == "!":
        return
    if sub not in BUILTINS:
        w.opaque(
            f"`git {sub}` is not a git command the guard knows (aliases from config files and git-{sub} programs "
            "are not read)",
            "use the git command it stands for",
        )
        return
    if sub in RUNS_CODE:
        w.opaque(f"`git {sub}` runs configured programs or rewrites refs in ways the guard does not follow",
                 "use ordinary git commands (commit, branch, log ...)")
    handler = _SUBCOMMANDS.get(sub)
    if handler is not None:
        handler(w, call, v.args)
    _transport_programs(w, sub, v.args)
    _tree_writes(w, call, v)


def _word(call: Any, text: str) -> Any:
    """The word of ``call`` spelled ``text`` (its run-time flags), or a plain word."""
    from ralph.shell.walker import Word

    for word in call.words:
        if word.text == text or word.text.endswith("=" + text):
            return word if word.text == text else Word(text, word.dynamic, word.glob, input=word.input)
    return Word(text)


_WRITES_TREE = frozenset({"checkout", "restore", "switch", "merge", "pull", "rebase", "cherry-pick", "revert", "stash",
                          "am", "apply", "read-tree", "checkout-index", "sparse-checkout", "bisect", "lfs", "reset",
                          "submodule", "mv", "rm", "clean"})
"""Subcommands that write (or delete) files of the work tree."""


def _tree_writes(w: Any, call: Any, v: GitView) -> None:
    """Files git writes outside ``.git``: a work tree given with ``--work-tree``/``GIT_WORK_TREE``/``-C``, the
    directory of ``clone``/``init``/``worktree add``, ``-o``/``--output`` files."""
    import os

    from ralph.shell.writes import add_write

    sub, args = v.sub, v.args
    base = ""
    for d in v.dirs:
        base = d if d.startswith(("/", "~", "$")) else os.path.join(base, d) if base else d
    env = {**call.st.vars, **call.env}
    tree = v.work_tree or (env.get("GIT_WORK_TREE") if "GIT_WORK_TREE" in env else None)
    if "GIT_WORK_TREE" in env and not isinstance(env.get("GIT_WORK_TREE"), str) and not v.work_tree:
        w.opaque("`GIT_WORK_TREE` is only known at run time: git writes files there",
                 "run git in the project's own work tree")
    if sub in _WRITES_TREE and not (sub == "apply" and any(a in ("--cached", "--check", "--stat", "--numstat",
                                                                 "--summary") for a in args)):
        where = None
        if isinstance(tree, str):
            where = tree if tree.startswith(("/", "~", "$")) or not base else os.path.join(base, tree)
        elif base:
            where = base
        if where is not None:
            add_write(w, call, _word(call, where), into=True, skips_git=True, via=f"git {sub}")
    if not isinstance(tree, str):  # with --work-tree/GIT_WORK_TREE the whole tree counts already (above)
        _pathspec_writes(w, call, v, base)
    from ralph.shell import gitopts

    gitopts.record(w, call, sub, args, lambda text: _word(call, _join_base(base, text)))
    operands = gitopts.parse(sub, args)[1] if sub in ("clone", "init") else []
    if sub == "clone" and len(operands) >= 2:
        add_write(w, call, _word(call, operands[1]), into=True, skips_git=True, via="git clone")
    elif sub == "init":  # DIR/.git, or .git where git runs
        from ralph.shell.walker import Word

        where = operands[0] if operands else (base or ".")
        given = _word(call, where)  # its run-time flags kept: `git init "$HOME/x"` is not a path in the project
        if not v.git_dir:
            given = Word(given.text.rstrip("/") + "/.git", given.dynamic, given.glob, input=given.input)
        add_write(w, call, given, into=True, skips_git=True, via="git init")
    if sub == "apply":
        for k, a in enumerate(args):
            directory = a.split("=", 1)[1] if a.startswith("--directory=") else (
                args[k + 1] if a == "--directory" and k + 1 < len(args) else None)
            if directory is not None:
                add_write(w, call, _word(call, directory), into=True, via="git apply --directory")


def _flow(call: Any, reads_output: bool = False) -> Any:
    from ralph.shell.walker import Flow

    return Flow(stdin=("pipe", "git's output") if reads_output else None, depth=call.flow.depth)


def _global_options(w: Any, call: Any, v: GitView) -> None:
    for construct, advice in v.problems:
        w.opaque(construct, advice)
    if v.unknown_global:
        w.opaque(f"`git {v.unknown_global}` is a git option the guard does not model", "run git without it")
    if v.config_env:
        w.opaque("`git --config-env` sets git configuration from a variable", "use plain git commands and options")
        w.push_block("`git --config-env` sets git configuration from a variable")
    for key, value in v.configs.items():
        if PUSH_URL_KEYS.match(key):
            w.push_block(f"`git -c {key}=...` decides where pushes go")
        if key.startswith("alias.") or key == "core.hookspath" or not _CODE_KEYS.match(key):
            continue
        w.opaque(f"`git -c {key}=...` makes git run another program", "drop the option and run git plainly")
        if isinstance(value, str) and value and value not in ("true", "false"):
            w.code(value, call.st.copy(), _flow(call, bool(_READS_OUTPUT.match(key))), f"`git -c {key}`")
    for code in v.shell_aliases:
        w.code(code, call.st.copy(), call.flow, "a `!` git alias")


def _exec_values(args: list[str]) -> list[str]:
    """The commands given to ``git rebase --exec``/``-x`` (abbreviations included)."""
    from ralph.shell.progutil import has_long

    found = []
    for k, a in enumerate(args):
        if a.startswith("--") and has_long([a], "--exec", 4):
            if "=" in a:
                found.append(a.split("=", 1)[1])
            elif k + 1 < len(args):
                found.append(args[k + 1])
        elif a == "-x" and k + 1 < len(args):
            found.append(args[k + 1])
        elif a.startswith("-x") and len(a) > 2:
            found.append(a[2:])
    return found


def _rebase(w: Any, call: Any, args: list[str]) -> None:
    for code in _exec_values(args):
        w.opaque("`git rebase --exec` runs a command after each commit", "rebase, then run the command yourself")
        w.code(code, call.st.copy(), _flow(call), "`git rebase --exec`")


def _submodule(w: Any, call: Any, args: list[str]) -> None:
    if "foreach" not in args:
        return
    w.opaque("`git submodule foreach` runs a command in every submodule", "run the command in each submodule yourself")
    rest = [a for a in args[args.index("foreach") + 1 :] if a not in ("--recursive", "-q", "--quiet")]
    if rest:
        w.code(" ".join(rest), call.st.copy(), _flow(call), "`git submodule foreach`")


def _bisect(w: Any, call: Any, args: list[str]) -> None:
    from ralph.shell.walker import Word

    if args[:1] != ["run"]:
        return
    w.opaque("`git bisect run` runs a command for every step", "bisect by hand: `git bisect good/bad`")
    if len(args) > 1:
        w.run([Word(a) for a in args[1:]], {}, call.st.copy(), _flow(call), [*call.wrappers, "git bisect run"], [])


def _difftool(w: Any, call: Any, args: list[str]) -> None:
    from ralph.shell.progutil import has_long

    if any(a == "-x" or has_long([a], "--extcmd", 5) for a in args):
        w.opaque("`git difftool --extcmd` runs a command", "use `git diff`")


def _grep(w: Any, call: Any, args: list[str]) -> None:
    """``git grep -O[CMD]``/``--open-files-in-pager[=CMD]`` (any abbreviation) runs CMD (or the pager) through
    ``sh -c`` with the matching files as its arguments."""
    from ralph.shell.progutil import has_long

    codes: list[str] = []
    found = False
    for a in args:
        if a == "--":
            break
        if a.startswith("--") and has_long([a], "--open-files-in-pager", 4):
            found = True
            codes.append(a.partition("=")[2])
        elif a.startswith("-") and not a.startswith("--") and short_flag([a], "O", stop="efABCm"):
            found = True
            codes.append(a[a.index("O") + 1 :])
    if not found:
        return
    w.opaque("`git grep --open-files-in-pager` runs a command (through the shell) on the matching files",
             "use `git grep` without -O and open the files yourself")
    for code in codes:
        if code:
            w.code(code, call.st.copy(), _flow(call), "`git grep --open-files-in-pager`")


def _transport_programs(w: Any, sub: str, args: list[str]) -> None:
    from ralph.shell.progutil import has_long

    if sub not in ("fetch", "pull", "clone", "ls-remote", "archive", "push", "init", "remote"):
        return
    names = ("--upload-pack", "--receive-pack", "--exec", "--template")
    if any(has_long([a], n, 5) for a in args for n in names) or ("-u" in args and sub == "clone"):
        w.opaque(f"`git {sub}` with --upload-pack/--receive-pack/--exec/--template runs a program", "drop the option")


def _clone_configs(args: list[str]) -> list[str]:
    """The ``key=value`` of every ``-c``/``--config`` of ``git clone``, as git's option parser reads them:
    ``-c K=V``, ``-cK=V``, ``-qc K=V``, ``--config K=V``, ``--config=K=V``, ``--conf=K=V``."""
    values: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        k += 1
        if a == "--":
            break
        if a.startswith("--"):
            key, eq, value = a.partition("=")
            if len(key) >= 5 and "--config".startswith(key):
                if eq:
                    values.append(value)
                elif k < len(args):
                    values.append(args[k])
                    k += 1
            continue
        if a.startswith("-") and len(a) > 1:
            at = a.find("c", 1)
            if at > 0 and all(ch in "vqnls" for ch in a[1:at]):  # flags before `c` in a cluster
                if a[at + 1 :]:
                    values.append(a[at + 1 :])
                elif k < len(args):
                    values.append(args[k])
                    k += 1
    return values


def _clone(w: Any, call: Any, args: list[str]) -> None:
    for given in _clone_configs(args):
        key = normalise_key(given.partition("=")[0])
        if _CODE_KEYS.match(key) or key.startswith("alias."):
            w.opaque(f"`git clone -c {key}=...` configures a program git runs", "clone without it")
        if PUSH_URL_KEYS.match(key):
            w.push_block(f"`git clone -c {key}=...` decides where the clone's pushes go")


def _config(w: Any, call: Any, args: list[str]) -> None:
    from ralph.shell.walker import Word

    read = config_call(args)
    if read.action == "edit":
        w.opaque("`git config --edit` lets an editor rewrite git's configuration (push URLs and programs "
                 "included)", "set single keys with `git config KEY VALUE`")
        w.push_block("`git config --edit` can give a remote a push URL")
    if read.action != "get" and (read.file is not None or read.scope in ("global", "system")):
        from ralph.shell.writes import add_write

        where = _word(call, read.file) if read.file is not None else Word(
            "~/.gitconfig" if read.scope == "global" else "/etc/gitconfig")
        add_write(w, call, where, truncates=False, via=f"git config --{read.scope or 'file'}")
    if read.action != "set" or read.key is None:
        return
    key, value = read.key, read.value
    if PUSH_URL_KEYS.match(key):
        w.push_block(f"`git config {key}` decides where later pushes go")
    if _CODE_KEYS.match(key) and key != "core.hookspath":
        w.opaque(f"`git config {key}` makes later git commands run a program", "leave git's configuration alone")
    if not key.startswith("alias."):
        return
    w.opaque(f"`git config {key}` defines a git alias the guard would not see later", "use the git command itself")
    if value and value.startswith("!"):
        w.code(value[1:], call.st.copy(), _flow(call), f"the git alias `{key[6:]}`")
        return
    try:
        words = shlex.split(value or "")
    except ValueError:
        words = []
    if words:  # what the alias would run, checked now: `git config alias.p push` is a push
        w.run([Word("git"), *(Word(x) for x in words)], {}, call.st.copy(), _flow(call),
              [*call.wrappers, f"git alias {key[6:]}"], [])


def _remote(w: Any, call: Any, args: list[str]) -> None:
    """``git remote set-url --push``: an explicit push URL is not rewritten by ``pushInsteadOf``."""
    if args[:1] == ["set-url"] and "--push" in args:
        w.push_block("`git remote set-url --push` gives a remote a push URL of its own")


_SUBCOMMANDS = {
    "remote": _remote,
    "rebase": _rebase,
    "submodule": _submodule,
    "bisect": _bisect,
    "difftool": _difftool,
    "mergetool": _difftool,
    "clone": _clone,
    "config": _config,
    "grep": _grep,
}


# -- what git writes in the work tree, by pathspec ---------------------------------------------------------

_MAGIC = re.compile(r"[*?\[\\]")
_SUB_LONGS: dict[str, frozenset[str]] = {
    "rm": frozenset({"--force", "--dry-run", "--cached", "--ignore-unmatch", "--quiet", "--sparse",
                     "--pathspec-from-file", "--pathspec-file-nul", "--recursive"}),
    "mv": frozenset({"--force", "--dry-run", "--verbose", "--sparse"}),
    "checkout": frozenset({"--quiet", "--progress", "--no-progress", "--force", "--ours", "--theirs", "--track",
                           "--no-track", "--guess", "--no-guess", "--detach", "--orphan", "--ignore-skip-worktree-bits",
                           "--merge", "--conflict", "--patch", "--ignore-other-worktrees", "--overwrite-ignore",
                           "--no-overwrite-ignore", "--recurse-submodules", "--no-recurse-submodules",
                           "--overlay", "--no-overlay", "--pathspec-from-file", "--pathspec-file-nul"}),
    "restore": frozenset({"--source", "--patch", "--worktree", "--staged", "--quiet", "--progress", "--no-progress",
                          "--ours", "--theirs", "--merge", "--conflict", "--ignore-unmerged", "--ignore-skip-worktree-bits",
                          "--recurse-submodules", "--no-recurse-submodules", "--overlay", "--no-overlay",
                          "--pathspec-from-file", "--pathspec-file-nul"}),
    "checkout-index": frozenset({"--index", "--quiet", "--force", "--all", "--no-create", "--prefix", "--stage",
                                 "--temp", "--ignore-skip-worktree-bits", "--stdin", "-z"}),
    "read-tree": frozenset({"--index-output", "--trivial", "--aggressive", "--reset", "--prefix", "--exclude-per-directory",
                            "--dry-run", "--verbose", "--no-sparse-checkout", "--sparse-checkout", "--empty",
                            "--quiet", "--recurse-submodules", "--no-recurse-submodules"}),
    "stash": frozenset({"--patch", "--staged", "--keep-index", "--no-keep-index", "--include-untracked",
                        "--no-include-untracked", "--only-untracked", "--all", "--quiet", "--message",
                        "--pathspec-from-file", "--pathspec-file-nul", "--index"}),
    "merge-file": frozenset({"--stdout", "--object-id", "--diff3", "--zdiff3", "--diff-algorithm", "--ours", "--theirs",
                             "--union", "--marker-size", "--quiet", "--no-diff3"}),
    "apply": frozenset({"--stat", "--numstat", "--summary", "--check", "--index", "--intent-to-add", "--cached",
                        "--3way", "--ours", "--theirs", "--union", "--build-fake-ancestor", "--reverse", "--reject",
                        "--unidiff-zero", "--apply", "--no-add", "--allow-binary-replacement", "--binary",
                        "--exclude", "--include", "--ignore-space-change", "--ignore-whitespace", "--whitespace",
                        "--inaccurate-eof", "--verbose", "--quiet", "--recount", "--directory",
                        "--allow-empty", "--allow-overlap"}),
    "clean": frozenset({"--dry-run", "--force", "--interactive", "--quiet", "--exclude"}),
    "sparse-checkout": frozenset(),
}
"""Every long option of the subcommands whose pathspecs name the files they write (git's parse-options takes
any unambiguous prefix of them: ``--cach`` is ``--cached``)."""
_SUB_VALUES: dict[str, str] = {"checkout": "bB", "restore": "s", "stash": "m", "merge-file": "L", "apply": "pC",
                               "read-tree": "", "checkout-index": "", "clean": "e", "rm": "", "mv": ""}
"""Short options that take a value (attached or the next word)."""
_LONG_VALUES = frozenset({"--orphan", "--conflict", "--pathspec-from-file", "--source", "--message", "--prefix",
                          "--stage", "--index-output", "--exclude-per-directory", "--diff-algorithm", "--marker-size",
                          "--exclude", "--include", "--whitespace", "--directory", "--track"})


def _sub_options(sub: str, args: list[str]) -> tuple[set[str], list[str], list[str] | None]:
    """(options given, spelled out; operands before ``--``; operands after it, or None without ``--``)."""
    table = _SUB_LONGS.get(sub, frozenset())
    values = _SUB_VALUES.get(sub, "")
    from ralph.shell.progutil import long_option

    given: set[str] = set()
    operands: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        k += 1
        if a == "--":
            return given, operands, args[k:]
        if a.startswith("--"):
            name = long_option(a, table) or a.partition("=")[0]
            given.add(name)
            if name in _LONG_VALUES and "=" not in a and name != "--track":
                k += 1
            continue
        if a.startswith("-") and len(a) > 1:
            for j, letter in enumerate(a[1:], 1):
                given.add("-" + letter)
                if letter in values:
                    k += 0 if a[j + 1 :] else 1
                    break
            continue
        operands.append(a)
    return given, operands, None


def _top(w: Any, call: Any, base: str) -> Any:
    """The top of the work tree git runs in (``base``: the ``-C`` directories), as a word: where a pathspec such as
    ``:/``, ``.`` at the top, or none at all reaches."""
    import os

    from ralph.shell import resolve_path
    from ralph.shell.walker import Word

    start = resolve_path(base or ".", w.cwd, w.home, False, call.st.cd, call.st.cd_unknown)
    if start is None:
        return _word(call, base or ".")
    d = start
    for _ in range(64):
        w.budget.spend(32)
        if os.path.lexists(os.path.join(d, ".git")):
            return Word(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return Word(start)


def _pathspec_writes(w: Any, call: Any, v: GitView, base: str) -> None:
    """Files git writes (or removes) in the work tree by pathspec: ``rm``, ``mv``, ``checkout [REV] [--] PATHS``,
    ``restore``, ``checkout-index``, ``read-tree -u``, ``stash -u``/``-a``, ``merge-file``, ``apply``, ``clean``,
    ``sparse-checkout``.  Built by construction: a pathspec the guard cannot pin down to literal names (magic
    ``:/``/``:(glob)``..., wildcards, ``--pathspec-from-file``, none where none means everything) counts as
    writing all it can reach: under its literal directory, or the whole work tree."""
    import os

    from ralph.shell.writes import add_write

    sub = v.sub
    if sub not in _SUB_LONGS:
        return
    given, before, after = _sub_options(sub, v.args)
    via = f"git {sub}"
    whole = False
    specs: list[str] = []
    truncates_only = False  # merge-file: one named file, written (not a tree)
    if "--dry-run" in given or ("-n" in given and sub in ("rm", "mv", "clean", "read-tree")):
        return
    if sub == "rm":
        if "--cached" in given:
            return  # the index only
        specs = before + (after or [])
    elif sub == "mv":
        specs = before + (after or [])  # the sources go, the destination is written
    elif sub == "checkout":
        if after is not None:
            specs = after
        else:  # `git checkout X Y...`: Y... are pathspecs; X too when it names a path or is a pattern (git refuses
            # a name that is both a revision and a path), else it is the revision
            first = before[:1]
            specs = [a for a in first if a.startswith(":") or _MAGIC.search(a) or os.path.lexists(
                _in_dir(w, call, base, a))] + before[1:]
    elif sub == "restore":
        if ("--staged" in given or "-S" in given) and not ({"--worktree", "-W"} & given):
            return
        specs = before + (after or [])
        whole = not specs
    elif sub == "checkout-index":
        if "--prefix" in given or "--temp" in given:
            return  # files under the prefix (recorded above), or temporary files
        specs = before + (after or [])
        whole = bool({"-a", "--all", "--stdin"} & given) or not specs
    elif sub == "read-tree":
        if "-u" not in given:
            return  # the index only
        whole = True
    elif sub == "stash":
        action = before[0] if before and before[0] in _STASH_ACTIONS else "push"
        if not ({"-u", "--include-untracked", "-a", "--all", "--only-untracked"} & given):
            return  # tracked changes only, given back by `stash pop` (see docs/guards.md)
        if action in ("push", "save"):
            specs = (before[1:] if before and before[0] == "push" else []) + (after or []) if action == "push" else []
            whole = not specs
    elif sub == "merge-file":
        if {"-p", "--stdout", "--object-id"} & given:
            return
        specs = (before + (after or []))[:1]
        truncates_only = True
    elif sub == "apply":
        if {"--stat", "--numstat", "--summary", "--check", "--cached"} & given:
            return
        _apply_writes(w, call, v, base, given, before + (after or []))
        return
    elif sub == "clean":
        specs = before + (after or [])
        whole = not specs
    elif sub == "sparse-checkout":
        if before[:1] and before[0] in ("set", "add", "reapply", "init", "disable"):
            whole = True
    if "--pathspec-from-file" in given:
        whole = True
    for spec in specs:
        if spec.startswith(":") or spec in ("", "."):
            whole = whole or spec.startswith(":")
            if spec.startswith(":"):
                continue
        if truncates_only and not spec.startswith(":"):
            add_write(w, call, _word(call, _join_base(base, spec)), via=via)
            continue
        literal = spec
        if _MAGIC.search(spec):  # git matches wildcards across `/`: anything under the literal directory
            parts = spec.split("/")
            magic_at = next(k for k, part in enumerate(parts) if _MAGIC.search(part))
            literal = "/".join(parts[:magic_at]) or "."
        add_write(w, call, _word(call, _join_base(base, literal)), into=True, follow=False, skips_git=True, via=via)
    if whole:
        add_write(w, call, _top(w, call, base), into=True, follow=False, skips_git=True, via=f"{via} (the whole tree)")


_STASH_ACTIONS = frozenset({"push", "save", "pop", "apply", "drop", "list", "show", "branch", "clear", "create",
                            "store"})


def _join_base(base: str, path: str) -> str:
    import os

    return path if not base or path.startswith(("/", "~", "$")) else os.path.join(base, path)


def _in_dir(w: Any, call: Any, base: str, path: str) -> str:
    from ralph.shell import resolve_path

    return resolve_path(_join_base(base, path), w.cwd, w.home, False, call.st.cd, call.st.cd_unknown) or ""


def _apply_writes(w: Any, call: Any, v: GitView, base: str, given: set[str], patches: list[str]) -> None:
    """``git apply PATCH...``: every name the diffs hold, under the work tree's top (and ``--directory``); a diff
    the guard cannot read (a pipe, a FIFO, one written on this line) writes anything in the tree."""
    import os

    from ralph.shell.walker import Word
    from ralph.shell.writes import _patch_names, add_write

    directory = ""
    for k, a in enumerate(v.args):
        if a.startswith("--directory="):
            directory = a.split("=", 1)[1]
        elif a == "--directory" and k + 1 < len(v.args):
            directory = v.args[k + 1]
    top = _top(w, call, base)
    root = Word(os.path.join(top.text, directory) if directory else top.text, top.dynamic)
    inputs = [_word(call, _join_base(base, p)) for p in patches if p != "-"]
    names: list[str] = []
    unreadable = False
    for source in inputs or [None]:
        found = _patch_names(w, call, [source] if source is not None else [])
        if found is None:
            unreadable = True
            break
        names.extend(found)
    if unreadable:
        add_write(w, call, root, into=True, follow=False, skips_git=True, via="git apply (names the guard cannot read)")
        return
    for name in dict.fromkeys(names):
        add_write(w, call, Word(os.path.join(root.text, name), root.dynamic), via="git apply")
