"""Programs that run another program: ``env``, ``timeout``, ``xargs``, ``sudo``, ``script -c``, ``uv run`` ..."""

from __future__ import annotations

import re

from ralph.shell.environment import check_env
from ralph.shell.progutil import Handler, emit, expand_long, getopts, inner, quote, run_code
from ralph.shell.walker import Call, Flow, Val, Walker, Word


def _wrapper(values: frozenset[str] | set[str], operands_before: int = 0, no_command: tuple[str, ...] = ()) -> Handler:
    """A wrapper whose options end at its command (after ``operands_before`` operands such as a duration)."""

    def handle(w: Walker, call: Call) -> None:
        opts, i = getopts(call.words, 1, values)
        if any(o in opts for o in no_command):
            emit(w, call)
            return
        inner(w, call, i + operands_before)

    return handle


_ENV_VALUES = frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string", "-P", "--default-signal",
                         "--ignore-signal", "--block-signal"})
_ENV_LONGS = frozenset({"--unset", "--chdir", "--split-string", "--ignore-environment", "--null", "--debug",
                        "--default-signal", "--ignore-signal", "--block-signal", "--list-signal-handling"})


def _env(w: Walker, call: Call) -> None:
    words = call.words
    unset: list[Word] = []
    values: dict[str, Word] = {}
    i = 1
    while i < len(words):  # options by hand: every -u counts, and `-` alone is -i
        word = words[i]
        t = word.text
        if word.dynamic or t == "--" or not t.startswith("-"):
            i += 1 if t == "--" and not word.dynamic else 0
            break
        if t == "-":
            w.push_block("`env -` starts the program with an empty environment")
            i += 1
            break
        if t.startswith("--"):
            key, eq, attached = t.partition("=")
            key = expand_long(key, _ENV_LONGS)
            given = Word(attached) if eq else (words[i + 1] if i + 1 < len(words) and key in _ENV_VALUES else None)
            i += 1 if eq or key not in _ENV_VALUES else 2
            if key == "--ignore-environment":
                w.push_block("`env --ignore-environment` starts the program with an empty environment")
            elif key == "--unset" and given is not None:
                unset.append(given)
            elif given is not None:
                values[key] = given
            continue
        i += 1
        for j, ch in enumerate(t[1:], 1):
            opt = "-" + ch
            if opt == "-i":
                w.push_block("`env -i` starts the program with an empty environment")
            elif opt in _ENV_VALUES:
                given = Word(t[j + 1 :]) if t[j + 1 :] else (words[i] if i < len(words) else None)
                if not t[j + 1 :]:
                    i += 1
                if given is not None:
                    if opt == "-u":
                        unset.append(given)
                    else:
                        values[opt] = given
                break
    for gone in unset:
        w.sets(None if gone.dynamic else gone.text, f"env -u {gone.text}")
    env: dict[str, Val] = {}
    while i < len(words) and re.match(r"[^=]+=", words[i].text) and not words[i].split:  # env takes any NAME
        key, _, value = words[i].text.partition("=")
        env[key] = None if words[i].dynamic else value
        i += 1
    for key in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            w.opaque(f"`env {key}=...` passes a variable bash could not set (`BASH_FUNC_f%%` exports a function)",
                     "set ordinary variables, or none")
    st = call.st
    chdir = values.get("-C") or values.get("--chdir")
    if chdir is not None:
        st = st.copy()
        if chdir.dynamic:
            st.cd_unknown = True
        else:
            st.cd.append(chdir.text)
    split = values.get("-S") or values.get("--split-string")
    if split is not None:  # `env -S 'ARGS'`: ARGS are split into words and read as env's own arguments
        for var, val in env.items():
            check_env(w, var, val, st, call.flow, persistent=False)
        rest = " ".join(quote(x.text) for x in words[i:])
        run_code(w, call, Word("env " + split.text + (" " + rest if rest else ""), split.dynamic), "`env -S`")
        return
    if i >= len(words):
        call.cmd.assignments.update({k: v if isinstance(v, str) else "$?" for k, v in env.items()})
        for var, val in env.items():
            check_env(w, var, val, st, call.flow, persistent=False)
        emit(w, call)
        return
    inner(w, call, i, env=env, st=st)


def _command(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, set())
    if "-v" in opts or "-V" in opts:
        emit(w, call)
        return
    inner(w, call, i)


def _exec(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-a"})
    if "-c" in opts:
        w.push_block("`exec -c` runs the program with an empty environment")
    if i >= len(call.words):
        emit(w, call)
        return
    inner(w, call, i)


_XARGS_REQUIRED = frozenset("IinLPdaEs")  # -i/-e/-l take an optional value, attached only (below)
_XARGS_LONG_REQUIRED = frozenset({"--max-args", "--max-procs", "--delimiter", "--arg-file", "--max-chars",
                                  "--process-slot-var"})
_XARGS_LONG_OPTIONAL = frozenset({"--replace", "--eof", "--max-lines"})
_XARGS_LONGS = _XARGS_LONG_REQUIRED | _XARGS_LONG_OPTIONAL | frozenset(
    {"--null", "--interactive", "--verbose", "--exit", "--no-run-if-empty", "--open-tty", "--show-limits",
     "--help", "--version"})


def xargs_options(words: list[Word]) -> tuple[dict[str, Word | None], int]:
    """``xargs`` options as GNU xargs reads them, and where its command starts: ``-i[R]``, ``-e[E]``,
    ``-l[N]``, ``--replace[=R]``, ``--eof[=E]``, ``--max-lines[=N]`` take a value only when it is attached
    (``xargs -l rm`` runs ``rm``); the others take the next word too."""
    opts: dict[str, Word | None] = {}
    i = 1
    while i < len(words):
        word = words[i]
        t = word.text
        if word.dynamic or not t.startswith("-") or t == "-":
            break
        i += 1
        if t == "--":
            break
        if t.startswith("--"):
            key, eq, val = t.partition("=")
            key = expand_long(key, _XARGS_LONGS)
            if eq:
                opts[key] = Word(val)
            elif key in _XARGS_LONG_REQUIRED and i < len(words):
                opts[key] = words[i]
                i += 1
            else:
                opts[key] = None
            continue
        for j in range(1, len(t)):
            letter, rest = t[j], t[j + 1 :]
            if letter in "iel":  # optional value: attached or none
                opts["-" + letter] = Word(rest) if rest else None
                break
            if letter in _XARGS_REQUIRED and letter not in "iel":
                if rest:
                    opts["-" + letter] = Word(rest)
                elif i < len(words):
                    opts["-" + letter] = words[i]
                    i += 1
                break
            opts["-" + letter] = None
    return opts, i


def _xargs(w: Walker, call: Call) -> None:
    opts, i = xargs_options(call.words)
    replace = opts.get("-I") or opts.get("--replace") or opts.get("-i")
    if ("-i" in opts or "--replace" in opts) and replace is None:
        replace = Word("{}")
    rest = call.words[i:] or [Word("echo")]
    flow = Flow(stdin=None, depth=call.flow.depth)
    delimiter = opts.get("-d") or opts.get("--delimiter")
    nul = "-0" in opts or "--null" in opts or (delimiter is not None and delimiter.text in ("\0", "\x00", "\000"))
    found = call.flow.piped_paths if nul and "-a" not in opts and "--arg-file" not in opts else None
    # Arguments read from stdin can be anything (a crafted file name too), unless they are NUL-separated
    # paths from `find DIR -print0`: then each is a path under DIR, as with `find -exec`.
    from itertools import product

    from ralph.shell.tools import found_word

    for pattern in found or [None]:
        if replace is not None and pattern is not None:  # NUL-separated paths under a start path, one per `{}`
            anything = pattern.endswith("/**")
            root = Word(pattern.rsplit("/", 1)[0] or "/")  # `DIR/**` or `DIR/[!.]*`
            variants = [found_word(root, Word(x.text.replace(replace.text, "{}"), x.dynamic), anything)
                        if replace.text in x.text else [x] for x in rest]
            for combination in list(product(*variants))[:8]:
                inner(w, call, 0, words=list(combination), flow=flow)
            continue
        if replace is not None:
            words = [Word(x.text, True, x.glob, False, x.positional, input=True) if replace.text in x.text else x
                     for x in rest]
        elif pattern is not None:
            words = [*rest, Word(pattern, glob=True)]
        else:
            words = [*rest, Word("<arguments from stdin>", dynamic=True, split=True, input=True)]
        inner(w, call, 0, words=words, flow=flow)


def _timeout(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-s", "--signal", "-k", "--kill-after"})
    inner(w, call, i + 1)


def _chrt(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"})
    if "-p" in opts or "--pid" in opts:
        emit(w, call)
        return
    inner(w, call, i + 1)


def _taskset(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, set())
    if "-p" in opts or "--pid" in opts:
        emit(w, call)
        return
    inner(w, call, i + 1)


def _setarch(w: Walker, call: Call) -> None:
    start = 1 if call.name in ("linux32", "linux64", "i386", "x86_64") else 2
    opts, i = getopts(call.words, start, set())
    if i >= len(call.words):
        emit(w, call)
        w.stdin_program(call.name, call.flow, call.st, shell=True)
        return
    inner(w, call, i)


def _flock(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-w", "--wait", "--timeout", "-E", "--conflict-exit-code", "-c", "--command"})
    code = opts.get("-c") or opts.get("--command")
    rest = call.words[i + 1 :]
    if code is None and len(rest) >= 2 and rest[0].text in ("-c", "--command"):
        code = rest[1]
    if code is not None:
        run_code(w, call, code, "`flock -c`")
        return
    inner(w, call, i + 1)


def _watch(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-n", "--interval", "-q", "--equexit"})
    if "-x" in opts or "--exec" in opts:
        inner(w, call, i)
        return
    rest = call.words[i:]
    if rest:
        run_code(w, call, Word(" ".join(x.text for x in rest), any(x.dynamic for x in rest)), "`watch`")


def _script(w: Walker, call: Call) -> None:
    values = {"-c", "--command", "-E", "--echo", "-I", "--log-in", "-O", "--log-out", "-B", "--log-io", "-T",
              "--log-timing", "-m", "--logging-format"}
    opts, i = getopts(call.words, 1, values)
    code = opts.get("-c") or opts.get("--command")
    if code is not None:
        run_code(w, call, code, "`script -c`")
        return
    emit(w, call)
    w.stdin_program("script", call.flow, call.st, shell=True)


def _privileged(values: set[str], code: tuple[str, ...] = (), shell_flags: tuple[str, ...] = (),
                user_operand: bool = False, no_command: tuple[str, ...] = ()) -> Handler:
    def handle(w: Walker, call: Call) -> None:
        emit(w, call)
        opts, i = getopts(call.words, 1, values | set(code))
        if any(o in opts for o in no_command):
            return
        for c in code:
            if opts.get(c) is not None:
                run_code(w, call, opts[c], f"`{call.name} {c}`")
                return
        if user_operand and i < len(call.words):
            i += 1
        if i < len(call.words):
            inner(w, call, i)
        elif not shell_flags or any(f in opts for f in shell_flags) or call.name in ("su", "newgrp", "sg"):
            w.stdin_program(call.name, call.flow, call.st, shell=True)

    return handle


def _sg(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, {"-c"})
    if opts.get("-c") is not None:
        run_code(w, call, opts["-c"], "`sg -c`")
    elif i + 1 < len(call.words):
        run_code(w, call, Word(" ".join(x.text for x in call.words[i + 1 :])), "`sg`")


def _gosu(w: Walker, call: Call) -> None:
    emit(w, call)
    inner(w, call, 2)


def _busybox(w: Walker, call: Call) -> None:
    if len(call.words) > 1:
        inner(w, call, 1)
    else:
        emit(w, call)


def _coproc(w: Walker, call: Call) -> None:
    """``coproc CMD``, ``coproc NAME { CMD; }``, ``coproc { CMD; }`` (the grammar reads the braces as words)."""
    words = call.words
    start = 1
    if len(words) > 2 and words[2].text in ("{", "(") and not words[1].dynamic:
        w.sets(words[1].text, f"coproc {words[1].text}")  # NAME becomes an array of file descriptors
        start = 3
    elif len(words) > 1 and words[1].text in ("{", "("):
        start = 2
    if len(words) > start:
        inner(w, call, start)
    else:
        emit(w, call)


def _run_subcommand(subs: dict[str, frozenset[str]]) -> Handler:
    """``uv run CMD``, ``poetry run CMD``, ``npx CMD``...: the rest is a command (``{"": ...}``: no subcommand)."""

    def handle(w: Walker, call: Call) -> None:
        emit(w, call)
        words = call.words
        if "" in subs:
            start, values = 1, subs[""]
        elif len(words) > 1 and words[1].text in subs:
            start, values = 2, subs[words[1].text]
        else:
            return
        opts, i = getopts(words, start, values | {"-c", "--call"})
        code = opts.get("-c") or opts.get("--call")
        if code is not None and call.name in ("npx", "npm", "pnpm"):
            run_code(w, call, code, f"`{call.name} -c`")
            return
        if i < len(words):
            w.run(words[i:], dict(call.env), call.st, call.flow, [*call.wrappers, call.name], call.redirects)

    return handle


def _time(w: Walker, call: Call) -> None:
    """``time [-p] [NAME=value...] CMD``: bash's reserved word (assignments before the command are assignments, as
    without it); ``/usr/bin/time -o FILE -f FORMAT CMD`` when it is the program."""
    opts, i = getopts(call.words, 1, {"-o", "--output", "-f", "--format"})
    env: dict[str, Val] = {}
    while i < len(call.words) and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", call.words[i].text) and \
            not call.words[i].split:
        key, _, value = call.words[i].text.partition("=")
        env[key] = None if call.words[i].dynamic else value
        i += 1
    inner(w, call, i, env=env)


def _ifne(w: Walker, call: Call) -> None:
    """``ifne [-n] CMD`` (moreutils): CMD runs when stdin is (not) empty."""
    inner(w, call, 2 if len(call.words) > 1 and call.words[1].text == "-n" else 1)


def _each_arg_is_code(skip_options: bool = True) -> Handler:
    """``pee CMD...``, ``mispipe CMD1 CMD2``, ``hyperfine CMD...``: every operand is shell code (run with sh -c)."""

    def handle(w: Walker, call: Call) -> None:
        emit(w, call)
        values = {"-p", "--prepare", "-c", "--cleanup", "-s", "--setup", "-w", "--warmup", "-r", "--runs", "-m",
                  "--min-runs", "-M", "--max-runs", "-S", "--shell", "-u", "--time-unit", "--export-json",
                  "--export-csv", "--export-markdown", "-n", "--command-name", "-L", "--parameter-list", "-P",
                  "--parameter-scan"}
        i = 1
        while i < len(call.words):
            word = call.words[i]
            if skip_options and word.text in values and not word.dynamic and i + 1 < len(call.words):
                if word.text in ("-p", "--prepare", "-c", "--cleanup", "-s", "--setup"):
                    run_code(w, call, call.words[i + 1], f"`{call.name} {word.text}`")
                i += 2
                continue
            if skip_options and word.text.startswith("-") and not word.dynamic:
                i += 1
                continue
            run_code(w, call, word, f"`{call.name}`")
            i += 1

    return handle


def _runcon(w: Walker, call: Call) -> None:
    """``runcon CONTEXT CMD`` / ``runcon -t TYPE ... CMD``: CMD runs."""
    opts, i = getopts(call.words, 1, {"-u", "-r", "-t", "-l", "--user", "--role", "--type", "--range"})
    inner(w, call, i if opts else i + 1)


def _envdir(w: Walker, call: Call) -> None:
    """``envdir DIR CMD`` (daemontools): CMD runs with variables read from the files in DIR."""
    emit(w, call)
    w.push_block("`envdir` sets variables (the push block's too) from files")
    w.opaque("`envdir` sets variables from files the guard does not read", "set the variables on the command line")
    inner(w, call, 2)


def _netcat(w: Walker, call: Call) -> None:
    """``nc -e PROG``/``-c CMD``, ``ncat --exec/--sh-exec/--lua-exec``: runs a program for each connection."""
    emit(w, call)
    for k, word in enumerate(call.words[1:], 1):
        t = word.text
        if t in ("-e", "--exec", "--lua-exec") or t.startswith(("--exec=", "--lua-exec=")) or (
                t.startswith("-") and not t.startswith("--") and "e" in t[1:]):
            w.opaque(f"`{call.name} {t}` runs a program for each connection", "run the program directly")
        elif t in ("-c", "--sh-exec") and k + 1 < len(call.words):
            w.opaque(f"`{call.name} {t}` runs shell code for each connection", "run the commands directly")
            run_code(w, call, call.words[k + 1], f"`{call.name} {t}`")


def _socat(w: Walker, call: Call) -> None:
    """``socat ... EXEC:cmd`` / ``SYSTEM:cmd``: an address that runs a program."""
    emit(w, call)
    for word in call.words[1:]:
        kind = word.text.split(":", 1)[0].lower()
        if word.dynamic or kind in ("exec", "system"):
            w.opaque("`socat` with an EXEC/SYSTEM address runs a program", "run the program directly")
            if kind == "system" and not word.dynamic:
                w.code(word.text.split(":", 1)[1].split(",", 1)[0], call.st.copy(), call.flow, "`socat SYSTEM:`")
            elif kind == "exec" and not word.dynamic:
                w.code(word.text.split(":", 1)[1].split(",", 1)[0], call.st.copy(), call.flow, "`socat EXEC:`")


def _man(w: Walker, call: Call) -> None:
    """``man -P PAGER``/``-H BROWSER``/``--pager=``: a program man runs."""
    emit(w, call)
    opts, _ = getopts(call.words, 1, {"-P", "--pager", "-H", "--html", "-C", "--config-file", "-M", "--manpath",
                                      "-L", "--locale", "-m", "--systems", "-S", "-s", "--sections", "-e",
                                      "--extension", "-p", "--preprocessor", "-R", "--recode"})
    for key in ("-P", "--pager", "-H", "--html", "-p", "--preprocessor"):
        if opts.get(key) is not None:
            w.opaque(f"`man {key}` runs the program it is given", "read the page with plain `man`")
            run_code(w, call, opts[key], f"`man {key}`")


def _run_parts(w: Walker, call: Call) -> None:
    """``run-parts DIR``: runs every script in DIR (their content is not read)."""
    emit(w, call)
    if not any(x.text in ("--test", "--list") for x in call.words[1:]):
        for word in call.words[1:]:
            if not word.text.startswith("-"):
                w.result.scripts.append(word.text.rstrip("/") + "/*")


_SUDO_VALUES = {"-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C", "--close-from", "-r",
                "--role", "-t", "--type", "-U", "--other-user", "-D", "--chdir", "-R", "--chroot", "-T",
                "--command-timeout"}


WRAPPERS: dict[str, Handler] = {
    "ifne": _ifne,
    "pee": _each_arg_is_code(False),
    "mispipe": _each_arg_is_code(False),
    "hyperfine": _each_arg_is_code(),
    "runcon": _runcon,
    "envdir": _envdir,
    "nc": _netcat,
    "ncat": _netcat,
    "netcat": _netcat,
    "socat": _socat,
    "man": _man,
    "run-parts": _run_parts,
    "env": _env,
    "command": _command,
    "builtin": _wrapper(set()),
    "exec": _exec,
    "nohup": _wrapper(set()),
    "setsid": _wrapper(set()),
    "unbuffer": _wrapper(set()),
    "chronic": _wrapper(set()),
    "time": _time,
    "nice": _wrapper({"-n", "--adjustment"}),
    "ionice": _wrapper({"-c", "--class", "-n", "--classdata"}, no_command=("-p", "-P", "-u", "--pid", "--pgid",
                                                                          "--uid")),
    "stdbuf": _wrapper({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "timeout": _timeout,
    "chrt": _chrt,
    "taskset": _taskset,
    "setarch": _setarch,
    "linux32": _setarch,
    "linux64": _setarch,
    "i386": _setarch,
    "x86_64": _setarch,
    "flock": _flock,
    "watch": _watch,
    "script": _script,
    "xargs": _xargs,
    "busybox": _busybox,
    "coproc": _coproc,
    "sudo": _privileged(_SUDO_VALUES, shell_flags=("-s", "-i", "--shell", "--login"),
                        no_command=("-l", "--list", "-v", "--validate", "-k", "-K", "--reset-timestamp",
                                    "--remove-timestamp", "-V", "--version", "-e", "--edit")),
    "doas": _privileged({"-u", "-C"}, shell_flags=("-s",)),
    "pkexec": _privileged({"--user"}),
    "run0": _privileged({"-u", "--user", "-g", "--group", "-D", "--chdir", "--setenv", "--unit", "--property",
                         "--description", "--slice", "--nice"}),
    "runuser": _privileged({"-u", "--user", "-g", "--group", "-G", "--supp-group", "-s", "--shell", "-w",
                            "--whitelist-environment"}, code=("-c", "--command", "--session-command"),
                           user_operand=True),
    "su": _privileged({"-s", "--shell", "-g", "--group", "-G", "--supp-group", "-w", "--whitelist-environment"},
                      code=("-c", "--command", "--session-command"), user_operand=True),
    "sg": _sg,
    "newgrp": _privileged(set(), user_operand=True),
    "gosu": _gosu,
    "su-exec": _gosu,
    "chroot": _privileged({"--userspec", "--groups"}, user_operand=True),
    "uv": _run_subcommand({"run": frozenset({"--with", "--with-editable", "--with-requirements", "--python", "-p",
                                             "--project", "--directory", "--env-file", "--group", "--extra",
                                             "--index", "--package", "--only-group", "--no-group", "--index-url",
                                             "--extra-index-url", "--find-links", "-f", "--cache-dir",
                                             "--config-file", "-w"}),
                           "tool": frozenset()}),
    "uvx": _run_subcommand({"": frozenset({"--with", "--from", "--python", "-p", "--index", "--index-url"})}),
    "poetry": _run_subcommand({"run": frozenset({"-C", "--directory", "-P", "--project"})}),
    "pipenv": _run_subcommand({"run": frozenset()}),
    "pdm": _run_subcommand({"run": frozenset({"-p", "--project"})}),
    "hatch": _run_subcommand({"run": frozenset({"-e", "--env"})}),
    "rye": _run_subcommand({"run": frozenset()}),
    "conda": _run_subcommand({"run": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})}),
    "mamba": _run_subcommand({"run": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})}),
    "micromamba": _run_subcommand({"run": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"})}),
    "npx": _run_subcommand({"": frozenset({"-p", "--package"})}),
    "bunx": _run_subcommand({"": frozenset({"-p", "--package"})}),
    "pnpm": _run_subcommand({"exec": frozenset({"-C", "--dir", "--filter", "-F"}), "dlx": frozenset()}),
    "yarn": _run_subcommand({"exec": frozenset(), "dlx": frozenset({"-p", "--package"})}),
    "npm": _run_subcommand({"exec": frozenset({"-p", "--package", "-w", "--workspace"}),
                            "x": frozenset({"-p", "--package"})}),
}
