"""What programs do with their arguments: wrappers, shells, interpreters, code-running builtins.

Each handler gets the :class:`~ralph_plugins.guards.walker.Call` of one simple
command and records what it runs: the command itself, the command it wraps
(``env``, ``timeout``, ``sudo``, ``xargs``, ``find -exec``, ``uv run`` ...),
code it runs (``bash -c``, ``eval``, ``su -c``, ``watch``, ``script -c``), or
an opaque finding for what cannot be followed (``trap``, ``hash -p``, ``eval
"$x"``, wrappers this module does not know, ``sed e``, ``awk`` with
``system()``).  A program without a handler is an ordinary command.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from ralph_plugins.guards.shell import PRIVILEGE_WRAPPERS, SHELLS, basename, resolve_path
from ralph_plugins.guards.walker import Call, Flow, State, Val, Walker, Word

Handler = Callable[[Walker, Call], None]

INTERPRETER = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|php[0-9.]*|lua[0-9.]*|luajit|deno|bun|tsx|"
    r"ts-node|Rscript|R|tclsh[0-9.]*|wish[0-9.]*|osascript|jshell|groovy|julia|guile|racket|irb|jrunscript|qjs|dc|ed|ex|red|"
    r"ghci|gnuplot|octave|sqlite3|psql|mysql|mariadb|duckdb)$"
)
OPAQUE_WRAPPERS = frozenset(
    {"parallel", "strace", "ltrace", "gdb", "lldb", "valgrind", "perf", "firejail", "bwrap", "unshare", "nsenter",
     "fakeroot", "proot", "systemd-run", "tmux", "screen", "dtach", "expect", "rlwrap", "faketime", "torsocks",
     "proxychains", "proxychains4", "xvfb-run", "dbus-run-session", "dbus-launch", "ssh-agent", "entr", "catchsegv",
     "cgexec", "trickle", "numactl", "nix-shell", "direnv", "devbox", "watchexec", "nodemon", "concurrently",
     "npm-run-all", "run-p", "run-s", "sem", "daemonize", "start-stop-daemon", "chpst", "ionice-wrapper", "prlimit",
     "cpulimit", "sshpass", "vipe", "pexec", "rush", "dumb-init", "tini", "catatonit", "setpriv", "capsh", "bindfs",
     "flatpak-spawn", "toolbox", "distrobox-enter", "eatmydata", "nocache", "timelimit", "with-lock-ex", "lckdo",
     "ssh", "mosh", "kubectl-exec", "vagrant", "nsjail", "minijail0", "firecracker", "qemu-user", "box64", "wine"}
)
_FETCHERS = frozenset({"curl", "wget", "fetch", "nc", "ncat", "aria2c", "http", "https", "xh"})
_STDIN_PATHS = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/thread-self/fd/0", "-"})


# -- helpers ------------------------------------------------------------------------------------


def emit(w: Walker, call: Call) -> None:
    w.result.simple.append(call.cmd)


def inner(w: Walker, call: Call, start: int, *, env: dict[str, Val] | None = None, st: State | None = None,
          flow: Flow | None = None, words: list[Word] | None = None) -> None:
    """Run ``call.words[start:]`` (or ``words``) as the command ``call`` wraps."""
    rest = words if words is not None else call.words[start:]
    if not rest:
        return
    w.run(rest, {**call.env, **(env or {})}, st or call.st, flow or call.flow, [*call.wrappers, call.name],
          call.redirects)


_KNOWN_LONGS = frozenset(
    {"--pid", "--pgid", "--uid", "--list", "--validate", "--reset-timestamp", "--remove-timestamp", "--version",
     "--edit", "--shell", "--login", "--replace", "--command", "--exec", "--file", "--makefile", "--eval", "--append",
     "--ignore-environment", "--null", "--preserve-status", "--foreground", "--verbose", "--interval"}
)


def expand_long(key: str, names: frozenset[str] | set[str]) -> str:
    """GNU getopt_long accepts any unambiguous prefix of a long option (``--comm`` is ``--command``)."""
    if key in names or not key.startswith("--"):
        return key
    found = [n for n in names if n.startswith(key)]
    return found[0] if len(found) == 1 else key


def has_long(args: list[str], name: str, shortest: int = 4) -> str | None:
    """The argument that is ``name`` or an abbreviation of it (at least ``shortest`` characters)."""
    for a in args:
        key = a.partition("=")[0]
        if key.startswith("--") and len(key) >= shortest and name.startswith(key):
            return a
    return None


def getopts(words: list[Word], start: int, values: frozenset[str] | set[str]) -> tuple[dict[str, Word | None], int]:
    """Options from ``start`` up to the first operand: ({option: value or None}, index of that operand)."""
    longs = frozenset(v for v in values if v.startswith("--")) | _KNOWN_LONGS
    opts: dict[str, Word | None] = {}
    i = start
    while i < len(words):
        word = words[i]
        t = word.text
        if word.dynamic:
            break
        if t == "--":
            return opts, i + 1
        if t.startswith("--") and len(t) > 2:
            key, eq, val = t.partition("=")
            key = expand_long(key, longs)
            if not eq and key in values and i + 1 < len(words):
                opts[key] = words[i + 1]
                i += 2
                continue
            opts[key] = Word(val) if eq else None
            i += 1
            continue
        if t.startswith("-") and len(t) > 1:
            skip = 1
            for j in range(1, len(t)):
                opt = "-" + t[j]
                if opt in values:
                    if t[j + 1 :]:
                        opts[opt] = Word(t[j + 1 :])
                    elif i + 1 < len(words):
                        opts[opt] = words[i + 1]
                        skip = 2
                    break
                opts[opt] = None
            i += skip
            continue
        break
    return opts, i


def is_stdin_path(text: str, cwd: str = "/") -> bool:
    """Does ``text`` name the program's own stdin (``/dev/stdin``, ``/dev/fd//0``, ``/dev/./stdin``, ``-`` ...)?"""
    if text == "-":
        return True
    path = os.path.normpath(os.path.join(cwd, text))
    return (
        path in _STDIN_PATHS
        or path.startswith("/dev/fd/")
        or bool(re.fullmatch(r"/proc/(self|thread-self|[0-9]+)/fd/[0-9]+", path))
    )


def _code(w: Walker, call: Call, word: Word | None, what: str, flow: Flow | None = None, shared: bool = False) -> None:
    """Analyse the code in ``word`` (run by ``what``); a run-time word is opaque."""
    if word is None:
        return
    if word.dynamic:
        w.opaque(f"{what} runs code only known at run time (`{word.text}`)", "run the commands themselves")
        if word.output:
            w.pipe(f"{what} of a command's output")
        return
    w.code(word.text, call.st if shared else call.st.copy(), flow or call.flow, what)


# -- environment variables that make programs run code ------------------------------------------------

_CODE_VARS = {
    "GIT_EDITOR": False, "GIT_SEQUENCE_EDITOR": False, "EDITOR": False, "VISUAL": False, "GIT_SSH_COMMAND": False,
    "GIT_SSH": False, "GIT_EXTERNAL_DIFF": False, "GIT_ASKPASS": False, "SSH_ASKPASS": False,
    "GIT_PROXY_COMMAND": False, "PROMPT_COMMAND": False, "GIT_PAGER": True, "PAGER": True, "MANPAGER": True,
}
"""Variables whose value programs run as a command (True: the command reads the program's output)."""
_OPAQUE_VARS = frozenset(
    {"PS0", "PS1", "PS2", "PS3", "PS4", "BASH_ENV", "ENV", "CDPATH", "SHELLOPTS", "BASHOPTS", "LD_PRELOAD", "LD_AUDIT",
     "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
     "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "BASH_LOADABLES_PATH", "LESSOPEN", "LESSCLOSE", "BASH_XTRACEFD",
     "EXECIGNORE", "HISTCONTROL", "PROMPT_DIRTRIM", "ZDOTDIR", "INPUTRC"}
)


def check_env(w: Walker, name: str, value: Val, st: State, flow: Flow, persistent: bool = True) -> None:
    """An assignment to ``name``: variables that make programs run code are followed or opaque."""
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
    from ralph_plugins.guards.walker import _text

    keyword = _text(node.children[0]) if node.children else "declare"
    argv = [keyword]
    integer = False
    for child in node.children[1:]:
        if not child.is_named:
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
        else:
            for word in w.words(child, st, flow):
                argv.append(word.text)
                if word.dynamic:
                    w.opaque(f"`{keyword}` of `{word.text}`, only known at run time, can set any variable",
                             "name the variable and its value literally")
                elif word.text.startswith(("-", "+")):
                    if "n" in word.text[1:]:
                        w.opaque(f"`{keyword} -n` makes a name refer to another variable", "use the variable directly")
                    integer = integer or "i" in word.text[1:]
    from ralph_plugins.guards.shell import Command

    w.result.simple.append(Command(argv, [False] * len(argv), [False] * len(argv), redirects=list(redirects or []),
                                   piped_in=flow.piped_in,
                                   piped_out=flow.piped_out, cd=list(st.cd), cd_unknown=st.cd_unknown, depth=flow.depth))


# -- dispatch -------------------------------------------------------------------------------------


def dispatch(w: Walker, call: Call) -> None:
    """Record ``call`` and whatever it runs."""
    name = call.name
    handler = _HANDLERS.get(name)
    if handler is not None:
        handler(w, call)
    elif name in SHELLS:
        _shell(w, call)
    elif INTERPRETER.match(name):
        _interpreter(w, call)
    elif name.startswith("git-") or "/git-core/" in call.words[0].text:
        emit(w, call)
        sub = name[4:] if name.startswith("git-") else name
        w.opaque(f"`{call.words[0].text}` runs a git program directly", f"use `git {sub}`")
    elif name in OPAQUE_WRAPPERS:
        emit(w, call)
        w.opaque(f"`{name}` runs other programs in ways the guard does not follow",
                 f"run the program directly, without `{name}`")
    else:
        emit(w, call)


def _wrapper(values: frozenset[str] | set[str], operands_before: int = 0, no_command: tuple[str, ...] = ()) -> Handler:
    """A wrapper whose options end at its command (after ``operands_before`` operands such as a duration)."""

    def handle(w: Walker, call: Call) -> None:
        opts, i = getopts(call.words, 1, values)
        if any(o in opts for o in no_command):
            emit(w, call)
            return
        inner(w, call, i + operands_before)

    return handle


def _env(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-u", "--unset", "-C", "--chdir", "-S", "--split-string", "-P"})
    env: dict[str, Val] = {}
    words = call.words
    while i < len(words) and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[i].text) and not words[i].split:
        key, _, value = words[i].text.partition("=")
        env[key] = None if words[i].dynamic else value
        i += 1
    if i < len(words) and words[i].text == "-":
        i += 1
    st = call.st
    chdir = opts.get("-C") or opts.get("--chdir")
    if chdir is not None:
        st = st.copy()
        if chdir.dynamic:
            st.cd_unknown = True
        else:
            st.cd.append(chdir.text)
    split = opts.get("-S") or opts.get("--split-string")
    if split is not None:
        for key, value in env.items():
            check_env(w, key, value, st, call.flow, persistent=False)
        rest = " ".join(_quote(x.text) for x in words[i:])
        _code(w, call, Word(split.text + (" " + rest if rest else ""), split.dynamic), "`env -S`")
        return
    if i >= len(words):
        call.cmd.assignments.update({k: v if isinstance(v, str) else "$?" for k, v in env.items()})
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
    if i >= len(call.words):
        emit(w, call)
        return
    inner(w, call, i)


def _xargs(w: Walker, call: Call) -> None:
    values = {"-I", "-n", "-L", "-l", "-P", "-d", "-a", "-E", "-e", "-s", "--max-args", "--max-lines", "--max-procs",
              "--delimiter", "--arg-file", "--eof", "--max-chars", "--replace", "--process-slot-var"}
    opts, i = getopts(call.words, 1, values)
    replace = opts.get("-I") or opts.get("--replace")
    if "-i" in opts and replace is None:
        replace = Word("{}")
    rest = call.words[i:] or [Word("echo")]
    flow = Flow(stdin=None, depth=call.flow.depth)
    if replace is not None:
        words = [Word(x.text, True, x.glob, False, x.positional) if replace.text in x.text else x for x in rest]
    else:
        words = [*rest, Word("<arguments from stdin>", dynamic=True, split=True)]
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
        _code(w, call, code, "`flock -c`")
        return
    inner(w, call, i + 1)


def _watch(w: Walker, call: Call) -> None:
    opts, i = getopts(call.words, 1, {"-n", "--interval", "-q", "--equexit"})
    if "-x" in opts or "--exec" in opts:
        inner(w, call, i)
        return
    rest = call.words[i:]
    if rest:
        _code(w, call, Word(" ".join(x.text for x in rest), any(x.dynamic for x in rest)), "`watch`")


def _script(w: Walker, call: Call) -> None:
    values = {"-c", "--command", "-E", "--echo", "-I", "--log-in", "-O", "--log-out", "-B", "--log-io", "-T",
              "--log-timing", "-m", "--logging-format"}
    opts, i = getopts(call.words, 1, values)
    code = opts.get("-c") or opts.get("--command")
    if code is not None:
        _code(w, call, code, "`script -c`")
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
                _code(w, call, opts[c], f"`{call.name} {c}`")
                return
        if user_operand and i < len(call.words):
            i += 1
        if i < len(call.words):
            inner(w, call, i)
        elif not shell_flags or any(f in opts for f in shell_flags) or call.name in ("su", "newgrp", "sg"):
            w.stdin_program(call.name, call.flow, call.st, shell=True)

    return handle


def _editor(w: Walker, call: Call) -> None:
    """Editors run their own commands (``vim -c '!cmd'``, ``emacs --eval``) and read them from stdin in ex mode."""
    emit(w, call)
    args = [x.text for x in call.words[1:]]
    if any(a in ("-c", "--cmd", "-S", "--eval", "-l", "--load", "-x", "--script") or a.startswith(("+", "--eval="))
           for a in args):
        w.opaque(f"`{call.name}` with startup commands can run shell commands",
                 "edit files with the Edit tool or sed, and run commands directly")
    if call.name != "emacs" and any(a in ("-e", "-E", "-es", "-Es", "-s") for a in args):
        w.stdin_program(call.name, call.flow, call.st, shell=False)


def _sg(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, {"-c"})
    if opts.get("-c") is not None:
        _code(w, call, opts["-c"], "`sg -c`")
    elif i + 1 < len(call.words):
        _code(w, call, Word(" ".join(x.text for x in call.words[i + 1 :])), "`sg`")


def _gosu(w: Walker, call: Call) -> None:
    emit(w, call)
    inner(w, call, 2)


def _busybox(w: Walker, call: Call) -> None:
    if len(call.words) > 1:
        inner(w, call, 1)
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
            _code(w, call, code, f"`{call.name} -c`")
            return
        if i < len(words):
            w.run(words[i:], dict(call.env), call.st, call.flow, [*call.wrappers, call.name], call.redirects)

    return handle


# -- shells and interpreters ------------------------------------------------------------------------


def _shell(w: Walker, call: Call) -> None:
    emit(w, call)
    words = call.words
    name = call.name
    i, code_mode, stdin_mode = 1, False, False
    while i < len(words):
        word = words[i]
        t = word.text
        if word.dynamic:
            break
        if t in ("--", "-"):
            i += 1
            break
        if t.startswith("--"):
            if t in ("--rcfile", "--init-file") and i + 1 < len(words):
                w.result.scripts.append(words[i + 1].text)
                i += 2
                continue
            i += 1
            continue
        if t[:1] in "-+" and len(t) > 1:
            skip = 1
            for ch in t[1:]:
                if ch == "c":
                    code_mode = True
                elif ch == "s":
                    stdin_mode = True
                elif ch in "oO":
                    skip += 1
            i += skip
            continue
        break
    operands = words[i:]
    if code_mode:
        if operands:
            _code(w, call, operands[0], f"`{name} -c`")
        return
    if operands and not stdin_mode:
        script = operands[0]
        if script.procsub:
            w.pipe(f"{name} {script.text}")
        elif script.dynamic:
            w.opaque(f"`{name}` runs a script named only at run time (`{script.text}`)", "name the script literally")
        elif is_stdin_path(script.text, w.cwd):
            w.stdin_program(name, call.flow, call.st, shell=True)
        else:
            w.result.scripts.append(script.text)
        return
    w.stdin_program(name, call.flow, call.st, shell=True)


_INTERPRETER_CODE = {
    "python": ({"-c"}, {"-m"}, {"-W", "-X", "-Q"}),
    "pypy": ({"-c"}, {"-m"}, {"-W", "-X"}),
    "perl": ({"-e", "-E"}, set(), {"-I", "-M", "-m"}),
    "ruby": ({"-e"}, set(), {"-I", "-r", "-C", "-E"}),
    "node": ({"-e", "--eval", "-p", "--print"}, set(), {"-r", "--require", "--import", "--loader"}),
    "php": ({"-r"}, set(), {"-c", "-d", "-z", "-f"}),
    "lua": ({"-e"}, set(), {"-l"}),
    "Rscript": ({"-e"}, set(), set()),
    "dc": ({"-e", "--expression"}, set(), {"-f", "--file"}),
    "sqlite3": ({"-cmd"}, set(), {"-init", "-separator", "-newline", "-nullvalue"}),
    "psql": ({"-c", "--command"}, set(), {"-d", "--dbname", "-h", "--host", "-p", "--port", "-U", "--username",
                                          "-f", "--file", "-v", "--set", "-o", "--output"}),
    "mysql": ({"-e", "--execute"}, set(), {"-u", "--user", "-h", "--host", "-P", "--port", "-D", "--database"}),
}
_QUERY_CLIENTS = frozenset({"sqlite3", "psql", "mysql", "mariadb", "duckdb"})
"""Database shells: their own command language can run shell commands (``.shell``, ``\\!``)."""


def _interpreter(w: Walker, call: Call) -> None:
    emit(w, call)
    name = call.name
    family = next((k for k in _INTERPRETER_CODE if name.startswith(k)), "")
    if name in ("nodejs", "deno", "bun", "tsx", "ts-node", "qjs"):
        family = "node"
    if name in ("mariadb",):
        family = "mysql"
    if name in _QUERY_CLIENTS:
        _query_client(w, call, family)
        return
    code_opts, module_opts, values = _INTERPRETER_CODE.get(family, ({"-e", "-c"}, set(), set()))
    words = call.words
    start = 2 if name in ("deno", "bun") and len(words) > 1 and words[1].text in ("run", "x") else 1
    if family == "perl":
        opts, i = _perl_opts(words, start)
    else:
        opts, i = getopts(words, start, values | code_opts | module_opts)
    if any(o in opts for o in code_opts) or any(o in opts for o in module_opts):
        return
    if family == "php" and opts.get("-f") is not None:
        script = opts["-f"]
    elif i < len(words):
        script = words[i]
    else:
        w.stdin_program(name, call.flow, call.st, shell=False)
        return
    if script.procsub:
        w.pipe(f"{name} {script.text}")
    elif not script.dynamic and is_stdin_path(script.text, w.cwd):
        w.stdin_program(name, call.flow, call.st, shell=False)
    else:
        w.result.scripts.append(script.text)


def _query_client(w: Walker, call: Call, family: str) -> None:
    """``sqlite3 db`` / ``psql`` / ``mysql``: SQL from stdin may hold shell escapes; SQL given inline is read."""
    code_opts, _, values = _INTERPRETER_CODE.get(family, (set(), set(), set()))
    opts, i = getopts(call.words, 1, values | code_opts)
    inline = [v for o, v in opts.items() if o in code_opts and v is not None]
    operands = call.words[i:]
    if family == "sqlite3" and len(operands) >= 2:
        inline.extend(operands[1:])
    elif family != "sqlite3" and opts.get("-f") is not None or opts.get("--file") is not None:
        return
    for word in inline:
        if word.dynamic or re.search(r"(^|\n|;)\s*(\.shell|\.system|\\!|system\b)", word.text):
            w.opaque(f"`{call.name}` runs shell commands from its own command language", "run the commands directly")
    if not inline:
        w.stdin_program(call.name, call.flow, call.st, shell=False)


def _perl_opts(words: list[Word], start: int) -> tuple[dict[str, Word | None], int]:
    opts: dict[str, Word | None] = {}
    i = start
    while i < len(words) and words[i].text.startswith("-") and len(words[i].text) > 1 and not words[i].dynamic:
        t = words[i].text
        if t == "--":
            return opts, i + 1
        i += 1
        for j, ch in enumerate(t[1:], 1):
            if ch in "eE":
                opts["-" + ch] = Word(t[j + 1 :]) if t[j + 1 :] else (words[i] if i < len(words) else None)
                if not t[j + 1 :]:
                    i += 1
                break
            if ch in "IMmixl0C":
                if ch in "IMm" and not t[j + 1 :]:
                    i += 1
                break
    return opts, i


# -- builtins that run or hide code ---------------------------------------------------------------


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
        w.stdin_program(call.name, call.flow, call.st, shell=True)
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
    w.opaque("`trap` runs code later (on a signal or at exit), where the guard cannot follow it",
             "run the commands directly instead of from a trap")
    _code(w, call, args[0], "`trap`")


def _alias(w: Walker, call: Call) -> None:
    emit(w, call)
    for word in call.words[1:]:
        if "=" in word.text and not word.text.startswith("-"):
            key, _, value = word.text.partition("=")
            _code(w, call, Word(value, word.dynamic), f"the alias `{key}`")


def _hash(w: Walker, call: Call) -> None:
    emit(w, call)
    if any(x.text.startswith("-") and "p" in x.text for x in call.words[1:]):
        w.opaque("`hash -p` makes a name run another program", "call the program by its own name")


def _enable(w: Walker, call: Call) -> None:
    emit(w, call)
    if any(x.text.startswith("-") and "f" in x.text for x in call.words[1:]):
        w.opaque("`enable -f` loads a builtin from a shared library", "use the program it provides directly")


def _read(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, {"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"})
    names = [x.text for x in call.words[i:]] or ["REPLY"]
    if opts.get("-a") is not None:
        names.append(opts["-a"].text)  # type: ignore[union-attr]
    for name in names:
        call.st.vars[name] = None


def _mapfile(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, {"-d", "-n", "-O", "-s", "-u", "-C", "-c"})
    if "-C" in opts:
        w.opaque(f"`{call.name} -C` runs a callback for the lines it reads", "read the lines, then run commands plainly")
    for word in call.words[i:] or [Word("MAPFILE")]:
        call.st.vars[word.text] = None


def _printf(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, _ = getopts(call.words, 1, {"-v"})
    if opts.get("-v") is not None:
        call.st.vars[opts["-v"].text] = None  # type: ignore[union-attr]


def _let(w: Walker, call: Call) -> None:
    emit(w, call)
    for word in call.words[1:]:
        if word.dynamic:
            w.opaque(f"`let` of `{word.text}`, only known at run time", "use literal arithmetic")
            continue
        for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*(?!\s*=[^=])", word.text):
            w.arith_name(m.group(), call.st, word.text)


def _getopts_builtin(w: Walker, call: Call) -> None:
    emit(w, call)
    if len(call.words) > 2:
        call.st.vars[call.words[2].text] = None


def _cd(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, i = getopts(call.words, 1, set())
    st = call.st
    if call.name == "popd":
        st.cd_unknown = True
        return
    if i >= len(call.words):
        st.cd.append(w.home) if call.name == "cd" else None
        return
    target = call.words[i]
    if target.text == "-" or target.dynamic and not re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?(/[^$`]*)?",
                                                                  target.text):
        st.cd_unknown = True
    else:  # a literal, or one variable resolve_path may know (`cd "$CLAUDE_PROJECT_DIR"`)
        st.cd.append(target.text)


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


def _at(w: Walker, call: Call) -> None:
    emit(w, call)
    w.opaque(f"`{call.name}` schedules commands to run later, outside the loop's view", "run the commands now")
    opts, _ = getopts(call.words, 1, {"-f", "-q", "-t"})
    if "-f" not in opts and not any(o in opts for o in ("-l", "-r", "-d", "-c")):
        w.stdin_program(call.name, call.flow, call.st, shell=True)


def _crontab(w: Walker, call: Call) -> None:
    emit(w, call)
    if not any(x.text in ("-l", "-r", "-e") for x in call.words[1:]):
        w.opaque("`crontab` installs commands that run later, outside the loop", "run the commands now")
        if len(call.words) == 1 or call.words[-1].text == "-":
            w.stdin_program("crontab", call.flow, call.st, shell=True)


def _make(w: Walker, call: Call) -> None:
    emit(w, call)
    opts, _ = getopts(call.words, 1, {"-f", "--file", "--makefile", "-C", "--directory", "-j", "--jobs", "-l",
                                      "-o", "-W", "-I", "-E", "--eval"})
    for key in ("-f", "--file", "--makefile"):
        value = opts.get(key)
        if value is None:
            continue
        if value.procsub:
            w.pipe(f"{call.name} -f {value.text}")
        elif not value.dynamic and is_stdin_path(value.text, w.cwd):
            w.stdin_program(call.name, call.flow, call.st, shell=False)
    if "-E" in opts or "--eval" in opts:
        w.opaque("`make --eval` adds rules from the command line", "put the rule in the Makefile")


_SED_S = re.compile(r"s(?P<d>[^\\\n])(?:\\.|(?!(?P=d)).)*(?P=d)(?:\\.|(?!(?P=d)).)*(?P=d)(?P<flags>[a-zA-Z0-9]*)", re.S)
_SED_ADDR = r"(?:[0-9]+(?:~[0-9]+)?|\$|/(?:\\.|[^/\n])*/[IM]*|\\(.)(?:\\.|.)*?\1)"
_SED_E = re.compile(r"(?:^|[;\n{}])\s*(?:" + _SED_ADDR + r"(?:\s*,\s*" + _SED_ADDR + r")?)?\s*!?\s*e(?:\s|;|}|$)")


def sed_executes(script: str) -> bool:
    """Does this sed script run shell commands (the ``e`` command or the ``s///e`` flag)?"""
    if any("e" in m.group("flags") for m in _SED_S.finditer(script)):
        return True
    return bool(_SED_E.search(_SED_S.sub("", script)))


def _sed(w: Walker, call: Call) -> None:
    emit(w, call)
    words = call.words
    scripts: list[Word] = []
    files: list[Word] = []
    operands: list[Word] = []
    sandbox = False
    i = 1
    sed_longs = frozenset({"--expression", "--file", "--line-length", "--in-place", "--sandbox", "--quiet", "--silent",
                           "--regexp-extended", "--separate", "--null-data", "--unbuffered", "--posix", "--debug",
                           "--follow-symlinks", "--zero-terminated", "--binary", "--help", "--version"})
    while i < len(words):
        t = words[i].text
        if t.startswith("--") and not words[i].dynamic:
            key, eq, val = t.partition("=")
            t = expand_long(key, sed_longs) + eq + val
        if t in ("-e", "--expression", "-f", "--file", "-l", "--line-length") and i + 1 < len(words):
            (scripts if t in ("-e", "--expression") else files if t in ("-f", "--file") else []).append(words[i + 1])
            i += 2
            continue
        if t.startswith(("--expression=", "--file=")):
            (scripts if t.startswith("--e") else files).append(Word(t.split("=", 1)[1]))
        elif t == "--sandbox":
            sandbox = True
        elif t.startswith("-") and not t.startswith("--") and len(t) > 1 and not words[i].dynamic:
            for j, ch in enumerate(t[1:], 1):
                if ch == "i" or ch == "l":
                    break
                if ch in "ef":
                    value = Word(t[j + 1 :]) if t[j + 1 :] else (words[i + 1] if i + 1 < len(words) else None)
                    if value is not None:
                        (scripts if ch == "e" else files).append(value)
                    if not t[j + 1 :]:
                        i += 1
                    break
        elif not t.startswith("-") or words[i].dynamic:
            operands.append(words[i])
        i += 1
    if not scripts and not files and operands:
        scripts.append(operands[0])
    if sandbox:
        return
    for f in files:
        if f.procsub or (not f.dynamic and is_stdin_path(f.text, w.cwd)):
            if f.procsub:
                w.pipe(f"sed -f {f.text}")
            else:
                w.stdin_program("sed", call.flow, call.st, shell=False)
    for s in scripts:
        if s.dynamic or sed_executes(s.text):
            what = "a script only known at run time" if s.dynamic else "the `e` command or the `s///e` flag"
            w.opaque(f"`sed` with {what} can run text as shell commands", "use sed without `e`, or run the command directly")
            if call.flow.piped_in:
                w.pipe(f"{call.flow.stdin[1] if call.flow.stdin else ''} | sed (e)")


_AWK_RUNS = re.compile(r"\bsystem\s*\(|\|\s*&?\s*getline|\|&|\bprint[f]?\b[^;{}\n]*\|")


def _awk(w: Walker, call: Call) -> None:
    emit(w, call)
    values = {"-f", "--file", "-v", "--assign", "-F", "--field-separator", "-i", "--include", "-l", "--load", "-E",
              "--exec", "-W"}
    opts, i = getopts(call.words, 1, values)
    program_file = opts.get("-f") or opts.get("--file") or opts.get("-E") or opts.get("--exec")
    if program_file is not None:
        if program_file.procsub:
            w.pipe(f"{call.name} -f {program_file.text}")
        elif not program_file.dynamic and is_stdin_path(program_file.text, w.cwd):
            w.stdin_program(call.name, call.flow, call.st, shell=False)
        return
    if i >= len(call.words):
        return
    program = call.words[i]
    if program.dynamic or _AWK_RUNS.search(program.text):
        w.opaque(f"`{call.name}` program that runs shell commands (system(), pipes to commands) or is only known at "
                 "run time", "use awk only to process text, and run commands directly")
        if call.flow.piped_in:
            w.pipe(f"{call.flow.stdin[1] if call.flow.stdin else ''} | {call.name} (system)")


# -- find, tee, links -----------------------------------------------------------------------------


def find_roots(argv: list[str]) -> tuple[list[int], bool]:
    """Indices of ``find``'s start paths, and whether it follows symlinks (-L / -follow)."""
    i, follow = 1, False
    while i < len(argv):
        a = argv[i]
        if a in ("-H", "-P"):
            i += 1
        elif a == "-L":
            follow = True
            i += 1
        elif a == "-D":
            i += 2
        elif re.fullmatch(r"-O[0-9]*", a):
            i += 1
        else:
            break
    roots = []
    while i < len(argv) and not argv[i].startswith("-") and argv[i] not in ("(", "!", ")", ","):
        roots.append(i)
        i += 1
    return roots, follow or "-follow" in argv[i:]


def _find(w: Walker, call: Call) -> None:
    emit(w, call)
    words = call.words
    roots, _ = find_roots([x.text for x in words])
    root_words = [words[r] for r in roots] or [Word(".")]
    i = 1
    while i < len(words):
        t = words[i].text
        if t in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j].text not in (";", "+"):
                j += 1
            for root in root_words[:4]:  # `{}` is a path found under each start path
                found = Word(root.text.rstrip("/") + "/*" if root.text != "/" else "/*", root.dynamic, True)
                cmd = [Word(x.text.replace("{}", found.text), found.dynamic or x.dynamic, True) if "{}" in x.text
                       else x for x in words[i + 1 : j]]
                if cmd:
                    w.run(cmd, dict(call.env), call.st.copy(), Flow(depth=call.flow.depth),
                          [*call.wrappers, "find " + t], [])
            i = j + 1
            continue
        if t in ("-fprint", "-fprint0", "-fprintf", "-fls") and i + 1 < len(words):
            target = words[i + 1]
            from ralph_plugins.guards.shell import WriteTarget

            w.result.writes.append(WriteTarget(target.text, target.dynamic, target.glob, list(call.st.cd),
                                               call.st.cd_unknown, "find " + t))
        i += 1


def _tee(w: Walker, call: Call) -> None:
    from ralph_plugins.guards.shell import WriteTarget

    emit(w, call)
    opts, i = getopts(call.words, 1, {"--output-error"})
    append = "-a" in opts or "--append" in opts
    for word in call.words[i:]:
        if word.procsub:
            continue
        w.result.writes.append(WriteTarget(word.text, word.dynamic, word.glob, list(call.st.cd), call.st.cd_unknown,
                                           "tee", truncates=not append))


def _links(w: Walker, call: Call) -> None:
    emit(w, call)
    values = {"-t", "--target-directory", "-S", "--suffix", "-m", "--mode", "-o", "--owner", "-g", "--group"}
    opts, i = getopts(call.words, 1, values)
    ops = [x.text for x in call.words[i:] if not x.text.startswith("-")]
    target_dir = opts.get("-t") or opts.get("--target-directory")
    if not ops:
        return
    made = {basename(ops[-1])} if target_dir is None and len(ops) > 1 else set()
    dest = target_dir.text if target_dir is not None else (ops[-1] if len(ops) > 1 else ".")
    sources = ops if target_dir is not None or len(ops) == 1 else ops[:-1]
    dest_path = resolve_path(dest, w.cwd, w.home, False, call.st.cd, call.st.cd_unknown)
    if target_dir is not None or len(ops) != 2 or dest.endswith("/") or dest in (".", "..") or (
        dest_path is not None and os.path.isdir(dest_path)
    ):
        made.update(basename(s) for s in sources)
    call.st.made.update(m for m in made if m)


def _git(w: Walker, call: Call) -> None:
    from ralph_plugins.guards.git import inspect

    emit(w, call)
    inspect(w, call)


_SUDO_VALUES = {"-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C", "--close-from", "-r",
                "--role", "-t", "--type", "-U", "--other-user", "-D", "--chdir", "-R", "--chroot", "-T",
                "--command-timeout"}

_HANDLERS: dict[str, Handler] = {
    "env": _env,
    "command": _command,
    "builtin": _wrapper(set()),
    "exec": _exec,
    "nohup": _wrapper(set()),
    "setsid": _wrapper(set()),
    "unbuffer": _wrapper(set()),
    "chronic": _wrapper(set()),
    "time": _wrapper({"-o", "--output", "-f", "--format"}),
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
    "vi": lambda w, call: _editor(w, call),
    "vim": lambda w, call: _editor(w, call),
    "nvim": lambda w, call: _editor(w, call),
    "view": lambda w, call: _editor(w, call),
    "emacs": lambda w, call: _editor(w, call),
    "flock": _flock,
    "watch": _watch,
    "script": _script,
    "xargs": _xargs,
    "busybox": _busybox,
    "coproc": _busybox,
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
    "at": _at,
    "batch": _at,
    "crontab": _crontab,
    "make": _make,
    "gmake": _make,
    "sed": _sed,
    "gsed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "find": _find,
    "tee": _tee,
    "ln": _links,
    "cp": _links,
    "mv": _links,
    "install": _links,
    "link": _links,
    "git": _git,
}
assert PRIVILEGE_WRAPPERS  # the privilege rule lists the same names


def fetches(names: list[str]) -> bool:
    """Does any of these programs download (for the pipe-to-shell reason)?"""
    return any(n in _FETCHERS for n in names)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'" if text and not re.fullmatch(r"[A-Za-z0-9_./=:@%+,-]+", text) else (
        text or "''")
