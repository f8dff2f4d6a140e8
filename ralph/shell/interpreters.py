"""Shells, interpreters, database shells and editors: the code they run, and whether they read it from stdin."""

from __future__ import annotations

import re

from ralph.shell.progutil import Handler, emit, getopts, is_stdin_path, run_code
from ralph.shell.walker import Call, Walker, Word


INTERPRETER = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|php[0-9.]*|lua[0-9.]*|luajit|deno|bun|tsx|"
    r"ts-node|Rscript|R|tclsh[0-9.]*|wish[0-9.]*|osascript|jshell|groovy|julia|guile|racket|irb|jrunscript|qjs|dc|ed|ex|red|"
    r"ghci|gnuplot|octave|sqlite3|psql|mysql|mariadb|duckdb)$"
)


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
        if operands and not operands[0].dynamic:  # `sh -c CODE NAME ARGS...`: NAME is its $0, ARGS $1, $@ ...
            st = call.st.copy()
            st.positional = list(operands[2:])
            st.zero = operands[1] if len(operands) > 1 else None
            w.code(operands[0].text, st, call.flow, f"`{name} -c`")
        elif operands:
            run_code(w, call, operands[0], f"`{name} -c`")
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
    module = next((opts[o] for o in module_opts if opts.get(o) is not None), None)
    if module is not None and module.text in ("venv", "virtualenv"):  # `python -m venv DIR`: a tree in DIR
        from ralph.shell.writes import add_write

        for target in [x for x in call.words[i:] if not x.text.startswith("-")][:1]:
            add_write(w, call, target, into=True)
    if any(o in opts for o in code_opts) or any(o in opts for o in module_opts):
        return
    if family == "php" and opts.get("-f") is not None:
        script = opts["-f"]
    elif i < len(words):
        script = words[i]
    else:
        w.stdin_program(name, call.flow, call.st, shell=False)
        return
    assert script is not None
    if script.procsub:
        w.pipe(f"{name} {script.text}")
    elif not script.dynamic and is_stdin_path(script.text, w.cwd):
        w.stdin_program(name, call.flow, call.st, shell=False)
    else:
        w.result.scripts.append(script.text)


def _query_client(w: Walker, call: Call, family: str) -> None:
    """``sqlite3 db`` / ``psql`` / ``mysql``: SQL from stdin may hold shell escapes; SQL given inline is read."""
    code_opts, _, values = _INTERPRETER_CODE.get(family, (set(), set(), set()))
    if family == "sqlite3":
        opts, i, inline = _sqlite_opts(w, call.words)
    else:
        opts, i = getopts(call.words, 1, values | code_opts)
        inline = [v for o, v in opts.items() if o in code_opts and v is not None]
        for k, word in enumerate(call.words[1:i], 1):  # every `-c`, not only the last one getopts kept
            if word.text in code_opts and k + 1 < i and all(call.words[k + 1] is not v for v in inline):
                inline.append(call.words[k + 1])
    operands = call.words[i:]
    if family == "sqlite3" and len(operands) >= 2:
        inline.extend(operands[1:])
    elif family != "sqlite3" and opts.get("-f") is not None or opts.get("--file") is not None:
        return
    for word in inline:
        if word.dynamic or re.search(r"(^|\n|;)\s*(\.shell|\.system|\.load|\\!|system\b|pager\b|\\P|\\e)"
                                     r"|\\(o|out|g|gx|w|write)\s*\||\bprogram\b", word.text, re.IGNORECASE):
            w.opaque(f"`{call.name}` runs shell commands (or loads code) from its own command language",
                     "run the commands directly")
        else:
            _db_writes(w, call, word.text)
    if inline:
        return
    if call.flow.piped_files:  # `cat dump.sql | psql` is `psql -f dump.sql`: a script file run by name
        w.result.scripts.extend(call.flow.piped_files)
        return
    w.stdin_program(call.name, call.flow, call.st, shell=False)


_SQLITE_VALUES = frozenset({"cmd", "init", "separator", "newline", "nullvalue", "vfs", "maxsize", "mmap", "heap",
                            "lookaside", "pagecache", "A", "escape"})
_DB_WRITE = re.compile(
    r"(?:^|\n|;)\s*(?:\.(?:output|once|backup|save|log|trace|excel)|\\(?:o|out|w|write|g|gx|lo_export\s+\S+)"
    r"|\\copy\b[^\n]*?\bto|tee\b|\\T)[ \t]+((?:-\S+[ \t]+)*)(\"[^\"]*\"|'[^']*'|[^\s;]+)",
    re.IGNORECASE)
"""A database shell's commands that write a file named in them: sqlite's ``.output FILE``, ``.once FILE``,
``.backup [DB] FILE``, ``.save FILE``, ``.log FILE``; psql's ``\\o FILE``, ``\\w FILE``, ``\\g FILE``,
``\\copy ... to FILE``, ``\\lo_export OID FILE``; mysql's ``tee FILE``/``\\T FILE``."""


def _sqlite_opts(w: Walker, words: list[Word]) -> tuple[dict[str, Word | None], int, list[Word]]:
    """``sqlite3``'s options are single-dash words (``-cmd CMD``, ``-init FILE``): ({option: value}, the index of
    the first operand, the ``-cmd`` commands)."""
    opts: dict[str, Word | None] = {}
    commands: list[Word] = []
    i = 1
    while i < len(words) and words[i].text.startswith("-") and len(words[i].text) > 1 and not words[i].dynamic:
        name = words[i].text.lstrip("-")
        i += 1
        if name in _SQLITE_VALUES and i < len(words):
            opts["-" + name] = words[i]
            if name == "cmd":
                commands.append(words[i])
            elif name == "init":
                w.result.scripts.append(words[i].text)
            i += 1
        else:
            opts["-" + name] = None
    return opts, i, commands


def _db_writes(w: Walker, call: Call, text: str) -> None:
    """Files a database shell's inline commands write (``.output ~/.bashrc``, ``\\o /etc/x``)."""
    from ralph.shell.writes import add_write

    for m in _DB_WRITE.finditer(text):
        target = m.group(2)
        if target[:1] in "'\"":
            target = target[1:-1]
        if target.lower() not in ("stdout", "stderr", "off", "-", ""):
            add_write(w, call, Word(target, "$" in target or "`" in target), truncates=True)


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


_EDITOR_VALUES = frozenset({"-c", "--cmd", "-S", "-u", "-U", "-i", "-T", "-w", "-W", "-s", "-t", "-q", "-r", "-l",
                            "--load", "--eval", "-f", "--funcall", "-L", "--directory", "--script", "-x"})


def _editor(w: Walker, call: Call) -> None:
    """Editors run their own commands (``vim -c '!cmd'``, ``emacs --eval``) and read them from stdin in ex mode;
    the files they are given may be written (``vim -es FILE``, ``+wq``)."""
    from ralph.shell.writes import add_write

    emit(w, call)
    skip = False
    for word in call.words[1:]:
        if skip:
            skip = False
        elif word.text in _EDITOR_VALUES:
            skip = True
        elif word.dynamic or not word.text.startswith(("-", "+")):
            add_write(w, call, word)
    args = [x.text for x in call.words[1:]]
    if any(a in ("-c", "--cmd", "-S", "--eval", "-l", "--load", "-x", "--script") or a.startswith(("+", "--eval="))
           or (call.name != "emacs" and a.startswith("-") and not a.startswith("--") and ("c" in a or "S" in a))
           for a in args):
        w.opaque(f"`{call.name}` with startup commands can run shell commands",
                 "edit files with the Edit tool or sed, and run commands directly")
    if call.name != "emacs" and any(a in ("-e", "-E", "-es", "-Es", "-s") for a in args):
        w.stdin_program(call.name, call.flow, call.st, shell=False)


_ED_WRITE = re.compile(r"^[^A-Za-z!]*(?:wq?|W)\s+(?!!)(\S.*)$")


def _ed(w: Walker, call: Call) -> None:
    """``ed``/``red``/``ex FILE...``: the files are rewritten in place; their command language (stdin, ``ex -c``)
    runs shell commands after ``!`` and writes the files ``w NAME`` names."""
    from ralph.shell.writes import add_write

    if call.name == "ex":
        _editor(w, call)
    else:
        emit(w, call)
    opts, i = getopts(call.words, 1, {"-p"} if call.name != "ex" else {"-c", "-S", "--cmd", "-u", "-i", "-T", "-w",
                                                                          "-W", "-t", "-q", "-r"})
    for word in call.words[i:]:
        if not word.text.startswith(("-", "+")) or word.dynamic:
            add_write(w, call, word)
    stdin = call.flow.stdin
    if stdin is not None and stdin[0] == "text":
        for line in stdin[1].splitlines():
            if "!" in line:
                w.opaque(f"`{call.name}` runs a shell command (`!`) from its commands", "run the command directly")
                w.code(line.split("!", 1)[1], call.st.copy(), call.flow, f"`{call.name} !`")
            m = _ED_WRITE.match(line)
            if m:
                add_write(w, call, Word(m.group(1).strip()))
    elif stdin is not None and stdin[0] == "file":
        w.result.scripts.append(stdin[1])
    else:
        w.stdin_program(call.name, call.flow, call.st, shell=False)


INTERPRETER_HANDLERS: dict[str, Handler] = {
    "ed": _ed,
    "red": _ed,
    "ex": _ed,
    "vi": lambda w, call: _editor(w, call),
    "vim": lambda w, call: _editor(w, call),
    "nvim": lambda w, call: _editor(w, call),
    "view": lambda w, call: _editor(w, call),
    "emacs": lambda w, call: _editor(w, call),
}
