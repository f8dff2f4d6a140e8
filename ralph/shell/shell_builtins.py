"""Bash builtins that run, hide or redirect code: ``eval``, ``source``, ``trap``, ``hash -p``, ``read``, ``cd`` ..."""

from __future__ import annotations

import re

from ralph.shell import CD_DATA
from ralph.shell.environment import check_name
from ralph.shell.progutil import Handler, emit, getopts, is_stdin_path, run_code
from ralph.shell.walker import Call, Walker, Word

MAX_CDS = 32
"""``cd`` steps followed on one line; after more, later relative paths are only known at run time."""


def _eval(w: Walker, call: Call) -> None:
    emit(w, call)
    rest = call.words[1:]
    if any(x.dynamic for x in rest):
        w.opaque("`eval` of text only known at run time", "run the commands themselves instead of eval")
        if any(x.output for x in rest):
            w.pipe("eval of a command's output")
        return
    if rest:
        w.code(" ".join(x.text for x in rest), call.st, call.flow, "`eval`")


def _source(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, set())
    if i >= len(call.words):
        return
    script = call.words[i]
    if script.procsub:
        w.pipe(f"{call.name} {script.text}")
    elif script.dynamic:
        w.opaque(f"`{call.name}` of a file named only at run time (`{script.text}`)", "name the file literally")
    elif is_stdin_path(script.text, w.cwd):
        w.stdin_program(call.name, call.flow, call.st, shell=True, here=True)  # sourced: runs in this shell
    else:
        w.result.scripts.append(script.text)


def _trap(w: Walker, call: Call) -> None:
    emit(w, call)
    args = call.words[1:]
    if args and args[0].text == "--":
        args = args[1:]
    if not args or args[0].text in ("-l", "-p", "-P", "-") or (args[0].text == "" and not args[0].dynamic):
        return
    if len(args) == 1 and re.fullmatch(r"[0-9]+|(SIG)?[A-Z0-9+-]+", args[0].text) and not args[0].dynamic:
        return  # `trap SIG`: reset
    signals = [x.text.upper().removeprefix("SIG") for x in args[1:]]
    if not args[0].dynamic and signals and all(x in ("EXIT", "0") for x in signals) and not any(
            x.dynamic for x in args[1:]):
        # at exit: checked now, and again with the shell's state as it is when the line ends (a later `cd`
        # changes where its paths lead)
        run_code(w, call, args[0], "`trap ... EXIT`")
        w.exit_traps.append((args[0], call.st, call.flow))
        return
    w.opaque("`trap` runs code later (on a signal, before each command, on an error), where the guard cannot "
             "follow it", "run the commands directly instead of from a trap (`trap '...' EXIT` is followed)")
    run_code(w, call, args[0], "`trap`")


def _alias(w: Walker, call: Call) -> None:
    """``alias NAME=VALUE``: the value is checked now, and wherever ``NAME`` is used as a command."""
    emit(w, call)
    for word in call.words[1:]:
        if "=" in word.text and not word.text.startswith("-"):
            key, _, value = word.text.partition("=")
            if word.dynamic and ("$" in key or "`" in key):
                w.opaque(f"an alias whose name is only known at run time (`{key}`) may stand for any command",
                         "call the commands themselves, not aliases")
            run_code(w, call, Word(value, word.dynamic), f"the alias `{key}`")
            w.aliases.setdefault(key, []).append(None if word.dynamic else value)


def _hash(w: Walker, call: Call) -> None:
    emit(w, call)
    if any(x.text.startswith("-") and "p" in x.text for x in call.words[1:]):
        w.opaque("`hash -p` makes a name run another program", "call the program by its own name")


def _enable(w: Walker, call: Call) -> None:
    emit(w, call)
    flags = "".join(x.text[1:] for x in call.words[1:] if x.text.startswith("-"))
    if "f" in flags:
        w.opaque("`enable -f` loads a builtin from a shared library", "use the program it provides directly")
    elif "n" in flags or "d" in flags or any(x.dynamic for x in call.words[1:]):
        w.opaque("`enable -n` turns a builtin off: its name then runs a function or a program of that name",
                 "leave the shell's builtins as they are")


_SHOPT_OPAQUE = {"cdable_vars": "`cd NAME` then goes to the directory in $NAME",
                 "extdebug": "a DEBUG trap can then skip commands",
                 "xpg_echo": "echo then expands backslash escapes"}


def _shopt(w: Walker, call: Call) -> None:
    """``shopt -s OPTION``: options that change where ``cd`` goes or what runs are opaque."""
    emit(w, call)
    words = call.words[1:]
    if any(x.dynamic for x in words):
        w.opaque("`shopt` of options only known at run time", "give `shopt` literal option names")
        return
    setting = any(x.text.startswith("-") and "s" in x.text for x in words) or any(x.text == "-o" for x in words)
    if any(x.text == "lastpipe" for x in words):  # the last command of a pipeline then runs in this shell
        call.st.lastpipe = setting or call.st.lastpipe and not any(x.text.startswith("-") and "u" in x.text
                                                                   for x in words)
    for x in words:
        if setting and x.text in _SHOPT_OPAQUE:
            w.opaque(f"`shopt -s {x.text}`: {_SHOPT_OPAQUE[x.text]}", f"leave `{x.text}` off")
        if setting and x.text == "keyword":
            w.opaque("`set -o keyword` makes `NAME=value` arguments assignments", "leave it off")
            w.push_block("`shopt -o -s keyword` turns `NAME=value` arguments into assignments")


def _wait(w: Walker, call: Call) -> None:
    """``wait -p NAME``: NAME gets a process id."""
    emit(w, call)
    opts, _ = getopts(call.words, 1, {"-p"})
    target = opts.get("-p")
    if target is not None:
        w.sets(None if target.dynamic else target.text, "wait -p")
        check_name(w, target.text, "wait -p")
        call.st.vars[target.text] = None


def _test(w: Walker, call: Call) -> None:
    """``test``/``[``: ``-v NAME`` evaluates a subscript in NAME (``[ -v 'a[$(cmd)]' ]`` runs cmd)."""
    emit(w, call)
    words = call.words[1:]
    for k, word in enumerate(words[:-1]):
        if word.text == "-v" and not word.dynamic:
            check_name(w, words[k + 1].text, "test -v")


def _read(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, {"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"})
    targets = call.words[i:] or [Word("REPLY")]
    if opts.get("-a") is not None:
        targets.append(opts["-a"])  # type: ignore[arg-type]
    for word in targets:
        w.sets(None if word.dynamic else word.text, call.name)
        check_name(w, word.text, call.name)
        call.st.vars[word.text] = None
        call.st.inputs.add(word.text)


def _mapfile(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, {"-d", "-n", "-O", "-s", "-u", "-C", "-c"})
    if "-C" in opts:
        w.opaque(f"`{call.name} -C` runs a callback for the lines it reads", "read the lines, then run commands plainly")
    for word in call.words[i:] or [Word("MAPFILE")]:
        w.sets(None if word.dynamic else word.text, call.name)
        check_name(w, word.text, call.name)
        call.st.vars[word.text] = None
        call.st.inputs.add(word.text)


def _printf(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, _ = getopts(call.words, 1, {"-v"})
    target = opts.get("-v")
    if target is not None:
        w.sets(None if target.dynamic else target.text.partition("[")[0], "printf -v")
        check_name(w, target.text, "printf -v")
        call.st.vars[target.text] = None
        if any(x.dynamic for x in call.words[1:]):
            call.st.inputs.add(target.text)


def _let(w: Walker, call: Call) -> None:
    emit(w, call)
    for word in call.words[1:]:
        if word.dynamic:
            w.opaque(f"`let` of `{word.text}`, only known at run time", "use literal arithmetic")
            continue
        for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", word.text):
            w.sets(m.group(), "let")
        for m in re.finditer(r"\b[A-Za-z_][A-Za-z0-9_]*\b(?!\s*=[^=])", word.text):
            w.arith_name(m.group(), call.st, word.text)


def _getopts_builtin(w: Walker, call: Call) -> None:
    emit(w, call)
    if len(call.words) > 2:
        w.sets(None if call.words[2].dynamic else call.words[2].text, "getopts")
        check_name(w, call.words[2].text, "getopts")
        call.st.vars[call.words[2].text] = None


_IN_SHELL = frozenset({"builtin", "command", "time"})
"""Wrappers that run ``cd`` in this shell; any other (``env cd``, ``nice cd``, ``xargs cd``) runs a program
``cd`` in a child process, which changes nothing here."""


def _cd(w: Walker, call: Call) -> None:
    """``cd``/``pushd``/``popd``: where the shell goes, followed through :mod:`ralph.shell.cwd` (lost wherever the
    guard cannot be sure: a glob, a run-time value, the stack from before the line, a function shadowing it)."""
    from ralph.shell.cwd import CANNOT_FAIL, lose, where
    from ralph.shell.walker import MAYBE_FUNCTION

    emit(w, call)
    st = call.st
    if any(x not in _IN_SHELL for x in call.wrappers):
        return  # a child process: the shell stays where it is
    if not call.wrappers or call.wrappers[-1] == "time":
        if call.name in st.functions:
            return  # the function of that name runs, not the builtin (its body is followed at the call)
        if MAYBE_FUNCTION in st.functions or MAYBE_FUNCTION + call.name in st.functions:
            lose(w, st, f"`{call.name}` may run a function of that name or the builtin")
            return
    before = where(st)
    st.cd_fail = None
    opts, i = getopts(call.words, 1, set())
    here = (tuple(st.cd), st.cd_unknown)
    odd = _unmodelled(w, call, opts, i)
    if odd:  # bash may fail here (and stay) or do what the guard does not follow: the directory is lost
        st.oldcd = here
        lose(w, st, f"`{call.name}` {odd}")
        return
    if "-n" in opts and call.name in ("pushd", "popd"):  # the stack changes, the directory does not
        if call.name == "popd" or call.words[i:i + 1] and (call.words[i].dynamic or call.words[i].glob):
            st.dirstack = ()
        elif call.words[i:]:
            st.dirstack = (*st.dirstack, ((*st.cd, call.words[i].text), st.cd_unknown))
        return
    if call.name == "popd":
        if call.words[i:] or not st.dirstack:  # `popd +N`, or a stack from before the line
            _cd_data(st, here)
            return
        *rest, top = st.dirstack
        st.dirstack = tuple(rest)
        _cd_to(st, top, here)
        return
    if i >= len(call.words):
        if call.name == "cd":
            _cd_step(st, w.home, here)
        elif st.dirstack:  # `pushd` alone swaps the two top directories
            *rest, top = st.dirstack
            st.dirstack = (*rest, here)
            _cd_to(st, top, here)
        else:
            _cd_data(st, here)
        return
    target = call.words[i]
    if call.name == "pushd" and target.text.startswith(("+", "-")) and not target.dynamic:
        _cd_data(st, here)  # `pushd +N`: rotates a stack partly from before the line
        return
    if target.text == "" and not target.dynamic:
        return  # bash: `cd ''` stays where it is
    if call.name == "pushd":
        st.dirstack = (*st.dirstack, here)
    if (target.text == "-" and not target.dynamic) or _OLDPWD.fullmatch(target.text):
        if st.oldcd is None:
            _cd_data(st, here)
        else:
            _cd_to(st, st.oldcd, here)
        return
    if _REPO_ROOT.fullmatch(target.text):
        if any(name in st.vars for name in ("GIT_DIR", "GIT_WORK_TREE")):
            _cd_data(st, here)
        else:
            from ralph.shell import TOPLEVEL

            _cd_step(st, TOPLEVEL, here)
        return
    if target.input or target.output:
        _cd_data(st, here)
        return
    if target.glob or (target.dynamic and not re.fullmatch(r"\$\{?(HOME|PWD|CLAUDE_PROJECT_DIR|TMPDIR|TMP|TEMP)\}?"
                                                             r"(/[^$`*?\[]*)?", target.text)):
        st.oldcd = here
        lose(w, st, f"`{call.name} {target.text[:40]}` goes to a directory only known at run time")
        return
    step = target.text
    physical = "-P" in opts or (st.physical and "-L" not in opts)
    if not physical and not _logical_is_physical(w, st, target):
        st.oldcd = here
        lose(w, st, f"`{call.name} {target.text[:40]}` steps back (`..`) over a symlink or a name that may be one: "
                    "bash then goes where the kernel resolves it")
        return
    if physical:  # symlinks followed before `..`: `cd -P lod/..`
        from ralph.shell import resolve_path

        where_to = resolve_path(step, w.cwd, w.home, target.dynamic, st.cd, st.cd_unknown, physical=True)
        if where_to is None:
            st.oldcd = here
            lose(w, st, f"`{call.name} -P {target.text[:40]}` goes to a directory only known at run time")
            return
        step = where_to
    _cd_step(st, step, here)
    if not target.dynamic and step.rstrip("/") not in ("~", w.home.rstrip("/")):  # not there now: may fail
        from ralph.shell import resolve_path
        from ralph.shell.paths import is_dir

        path = resolve_path(step, w.cwd, w.home, False, list(before[0]), before[1])
        st.cd_fail = CANNOT_FAIL if path is not None and is_dir(path) else before


_CD_OPTIONS = {"cd": frozenset({"-L", "-P", "-e", "-@"}), "pushd": frozenset({"-n"}), "popd": frozenset({"-n"})}
"""The options the guard follows; bash's ``cd`` fails on any other (``cd -x src`` stays where it was)."""
_TILDE_OK = re.compile(r"~\+?(?=/|$)")
"""``~``, ``~/x``, ``~+``, ``~+/x``: the tilde forms a ``cd`` is followed through (``~-``, ``~1``, ``~+1`` ... are the
line's directory stack, ``~NAME`` a user's home)."""


def _unmodelled(w: Walker, call: Call, opts: dict, i: int) -> str | None:
    """Why this ``cd``/``pushd``/``popd`` is one the guard does not follow exactly (None: it does)."""
    from ralph.shell.cwd import redirects_may_fail

    bad = [o for o in opts if o not in _CD_OPTIONS[call.name]]
    if bad:
        return f"with the option `{bad[0][:20]}` (bash fails on an invalid one and stays)"
    operands = call.words[i:]
    if len(operands) > 1:
        return "with more than one operand (bash fails and stays)"
    if redirects_may_fail(call.redirects):
        return "with a redirection that may fail (bash then runs no `cd` and stays)"
    if operands and not operands[0].dynamic and operands[0].text.startswith("~"):
        text = operands[0].text
        if not _TILDE_OK.match(text):
            return f"to `{text[:40]}`, a tilde form the guard does not follow (write the directory itself)"
    return None


def _logical_is_physical(w: Walker, st, target: Word) -> bool:  # type: ignore[no-untyped-def]
    """Whether bash's logical ``cd target`` surely goes where the kernel would: every ``..`` steps back over a
    directory that is there now and is no symlink (else bash, finding no logical path, falls back to the physical
    one: ``cd lod/../proj`` with ``lod -> ../outside`` is the project), and no link was made on the line before."""
    from ralph.shell import resolve_path
    from ralph.shell.paths import is_dir, is_link

    parts = target.text.split("/")
    if ".." not in parts:
        return True
    if w.result.links or any(not x.follow or x.into for x in w.result.writes):
        return False  # a name may have become a link on the line (`ln -s`, `mv`, an archive extracted)
    for k, part in enumerate(parts):
        if part != "..":
            continue
        prefix = "/".join(parts[:k]) or ("/" if target.text.startswith("/") else ".")
        path = resolve_path(prefix, w.cwd, w.home, target.dynamic, st.cd, st.cd_unknown)
        if path is None or not is_dir(path) or is_link(path):
            return False
    return True


_OLDPWD = re.compile(r"\$\{?OLDPWD\}?")
_REPO_ROOT = re.compile(r"\$\(\s*git\s+rev-parse\s+--show-toplevel\s*\)")
"""``cd "$(git rev-parse --show-toplevel)"``: the repository's own root (the nearest directory up holding ``.git``),
not data."""


def _cd_step(st, step: str, here: tuple[tuple[str, ...], bool]) -> None:  # type: ignore[no-untyped-def]
    st.oldcd = here
    if len(st.cd) >= MAX_CDS:  # every path resolves through each step: keep that work bounded
        _cd_data(st, here)
    else:  # a literal, or one variable resolve_path may know (`cd "$CLAUDE_PROJECT_DIR"`)
        st.cd.append(step)


def _cd_to(st, where: tuple[tuple[str, ...], bool], here: tuple[tuple[str, ...], bool]) -> None:  # type: ignore[no-untyped-def]
    st.oldcd = here
    st.cd, st.cd_unknown = list(where[0]), where[1]


def _cd_data(st, here: tuple[tuple[str, ...], bool]) -> None:  # type: ignore[no-untyped-def]
    st.oldcd = here
    if CD_DATA not in st.cd:
        st.cd.append(CD_DATA)
    st.cd_unknown = True


def _compgen(w: Walker, call: Call) -> None:
    emit(w, call)
    if any(x.text in ("-C", "-F") for x in call.words[1:]):
        w.opaque(f"`{call.name} -C/-F` runs a command or function", "run the command directly")


def _fc(w: Walker, call: Call) -> None:
    emit(w, call)
    w.opaque("`fc` re-runs commands from the shell history", "write the commands out")


def _bind(w: Walker, call: Call) -> None:
    emit(w, call)
    if any(x.text.startswith("-") and "x" in x.text for x in call.words[1:]):
        w.opaque("`bind -x` binds a key to a command", "run the command directly")


def _set(w: Walker, call: Call) -> None:
    """``set -- ARGS`` / ``set ARGS``: new positional parameters (options alone change none).  ``set -k`` makes
    every ``NAME=value`` argument an assignment (``make GIT_CONFIG_COUNT=0``): opaque."""
    emit(w, call)
    args = call.words[1:]
    for k, word in enumerate(args):
        if word.dynamic:
            w.opaque(f"`set {word.text}`: options only known at run time change how the shell reads commands",
                     "give `set` literal options")
            break
        if word.text in ("--", "-") or not word.text.startswith(("-", "+")):
            break
        if (word.text.startswith("-") and "k" in word.text[1:] and not word.text.startswith("--")) or (
                word.text in ("-o", "+o") and k + 1 < len(args) and args[k + 1].text == "keyword"
                and word.text == "-o"):
            w.opaque("`set -k` makes `NAME=value` arguments anywhere on a command assignments (a way to set the push "
                     "block's variables)", "leave `set -k` off")
            w.push_block("`set -k` turns `NAME=value` arguments into assignments")
    for k, word in enumerate(args):
        if word.dynamic:
            call.st.positional = None  # the new parameters (or whether there are any) are not known
            return
        if word.text in ("--", "-"):
            call.st.positional = args[k + 1 :]
            return
        if not word.text.startswith(("-", "+")):
            call.st.positional = args[k:]
            return
        if word.text[:1] == "-" and word.text[1:2] != "-" and "P" in word.text[1:] or (
                word.text == "-o" and k + 1 < len(args) and args[k + 1].text == "physical"):
            call.st.physical = True
        if (word.text[:1] == "+" and "P" in word.text[1:]) or (
                word.text == "+o" and k + 1 < len(args) and args[k + 1].text == "physical"):
            call.st.physical = False
        if word.text[1:2] == "o" and k + 1 < len(args):  # `set -o name`: its value is no parameter
            args = args[:k + 1] + args[k + 2 :]


def _shift(w: Walker, call: Call) -> None:
    """``shift [N]``: the positional parameters move."""
    emit(w, call)
    if call.st.positional is None:
        return
    count = call.words[1] if len(call.words) > 1 else Word("1")
    if count.dynamic or not count.text.isdigit():
        call.st.positional = None
    else:
        call.st.positional = call.st.positional[int(count.text):]


def _unset(w: Walker, call: Call) -> None:
    """``unset`` run as a command (``builtin unset X``, ``command unset X``)."""
    from ralph.shell.walker import unset_vars

    emit(w, call)
    unset_vars(w, call.words[1:], call.st)


def _declare(w: Walker, call: Call) -> None:
    """``export``/``declare``/``local`` ... run as a command (``builtin export X=1``, ``command declare -n``)."""
    from ralph.shell.environment import _declared_words

    emit(w, call)
    _declared_words(w, call.name, call.words[1:], call.st, call.flow, [])


BUILTINS: dict[str, Handler] = {
    "set": _set,
    "shift": _shift,
    "unset": _unset,
    "export": _declare,
    "declare": _declare,
    "typeset": _declare,
    "local": _declare,
    "readonly": _declare,
    "eval": _eval,
    "source": _source,
    ".": _source,
    "trap": _trap,
    "alias": _alias,
    "hash": _hash,
    "enable": _enable,
    "read": _read,
    "mapfile": _mapfile,
    "readarray": _mapfile,
    "printf": _printf,
    "let": _let,
    "getopts": _getopts_builtin,
    "cd": _cd,
    "pushd": _cd,
    "popd": _cd,
    "compgen": _compgen,
    "complete": _compgen,
    "fc": _fc,
    "bind": _bind,
    "shopt": _shopt,
    "wait": _wait,
    "test": _test,
    "[": _test,
}
