"""Everyday tools with a way to run or destroy things: ``sed e``, ``awk system()``, ``find -exec``, ``at``, ``make -f -``, links."""

from __future__ import annotations

import os
import re

from ralph.shell.progutil import SED_LONGS, Handler, emit, expand_long, getopts, is_stdin_path
from ralph.shell.paths import is_dir
from ralph.shell.sedscript import read_sed
from ralph.shell import basename, resolve_path
from ralph.shell.walker import Call, Flow, Walker, Word


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


def sed_executes(script: str) -> bool:
    """Does this sed script run shell commands (the ``e`` command or the ``s///e`` flag), or is it not
    sed the guard can read?"""
    read = read_sed(script)
    return read.executes or not read.readable


def sed_scripts(words: list[Word]) -> tuple[list[Word], list[Word], bool]:
    """(scripts given inline, script files, ``--sandbox``) of a sed command line."""
    scripts: list[Word] = []
    files: list[Word] = []
    operands: list[Word] = []
    sandbox = False
    i = 1
    while i < len(words):
        word = words[i]
        t = word.text
        if t.startswith("--") and not word.dynamic:
            key, eq, val = t.partition("=")
            t = expand_long(key, SED_LONGS) + eq + val
        nxt = words[i + 1] if i + 1 < len(words) else None
        if t in ("-e", "--expression", "-f", "--file", "-l", "--line-length") and nxt is not None:
            (scripts if t in ("-e", "--expression") else files if t in ("-f", "--file") else []).append(nxt)
            i += 2
            continue
        if t.startswith(("--expression=", "--file=")):
            (scripts if t.startswith("--e") else files).append(Word(t.split("=", 1)[1]))
        elif t == "--sandbox":
            sandbox = True
        elif t.startswith("-") and not t.startswith("--") and len(t) > 1 and not word.dynamic:
            i += _sed_cluster(t, nxt, scripts, files)
        elif not t.startswith("-") or word.dynamic:
            operands.append(word)
        i += 1
    if not scripts and not files and operands:
        scripts.append(operands[0])
    return scripts, files, sandbox


def _sed_cluster(t: str, nxt: Word | None, scripts: list[Word], files: list[Word]) -> int:
    """A short-option cluster (``-ne``, ``-i.bak``): 1 when it took the next word as its value."""
    for j, ch in enumerate(t[1:], 1):
        if ch in "il":
            return 0  # -i[SUFFIX], -l N: the rest is their value
        if ch in "ef":
            value = Word(t[j + 1 :]) if t[j + 1 :] else nxt
            if value is not None:
                (scripts if ch == "e" else files).append(value)
            return 0 if t[j + 1 :] else 1
    return 0


def _sed(w: Walker, call: Call) -> None:
    emit(w, call)
    scripts, files, sandbox = sed_scripts(call.words)
    if sandbox:
        return
    for f in files:
        if f.procsub:
            w.pipe(f"sed -f {f.text}")
        elif not f.dynamic and is_stdin_path(f.text, w.cwd):
            w.stdin_program("sed", call.flow, call.st, shell=False)
    from ralph.shell import WriteTarget

    for script in scripts:
        read = None if script.dynamic else read_sed(script.text)
        if read is None or read.executes or not read.readable:
            what = ("a script only known at run time" if read is None else "the `e` command or the `s///e` flag"
                    if read.executes else "a script the guard cannot read")
            w.opaque(f"`sed` with {what} can run text as shell commands", "use sed without `e`, or run the command directly")
            if call.flow.piped_in:
                w.pipe(f"{call.flow.stdin[1] if call.flow.stdin else ''} | sed (e)")
        for target in read.writes if read is not None else []:
            w.result.writes.append(WriteTarget(target, False, False, list(call.st.cd), call.st.cd_unknown, "sed w",
                                               truncates=True))


_AWK_RUNS = re.compile(r"\bsystem\s*\(|\|\s*&?\s*getline|\|&")
_AWK_PRINT = re.compile(r"\bprintf?\b")


def awk_runs(program: str) -> bool:
    """Does this awk program run commands: ``system()``, ``cmd | getline``, ``|&``, ``print ... | "cmd"``?
    (Linear: a pipe after ``print`` is looked for within one statement.)"""
    if _AWK_RUNS.search(program):
        return True
    for statement in re.split(r"[;{}\n]", program):
        m = _AWK_PRINT.search(statement)
        if m and "|" in statement[m.end() :]:
            return True
    return False


def awk_outputs(program: str) -> list[str | None]:
    """The files an awk program's ``print``/``printf`` redirect into (``print > "FILE"``, ``printf ... >> FILE``):
    a string literal's text, or None for a target only known at run time (``print > $1``).  A ``>`` inside
    parentheses or a string is a comparison or text, not a redirection.  (Linear: one pass per statement.)"""
    targets: list[str | None] = []
    for statement in re.split(r"[;{}\n]", program):
        m = _AWK_PRINT.search(statement)
        if not m:
            continue
        depth, quoted, k, rest = 0, False, m.end(), statement
        while k < len(rest):
            ch = rest[k]
            if quoted:
                if ch == "\\":
                    k += 1
                elif ch == '"':
                    quoted = False
            elif ch == '"':
                quoted = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth = max(0, depth - 1)
            elif ch == ">" and depth == 0:
                target = rest[k + 1 :].lstrip(">").strip()
                literal = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', target)
                targets.append(literal.group(1) if literal else None)
                break
            k += 1
    return targets


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
    if program.dynamic or awk_runs(program.text):
        w.opaque(f"`{call.name}` program that runs shell commands (system(), pipes to commands) or is only known at "
                 "run time", "use awk only to process text, and run commands directly")
        if call.flow.piped_in:
            w.pipe(f"{call.flow.stdin[1] if call.flow.stdin else ''} | {call.name} (system)")
    if not program.dynamic:
        from ralph.shell.writes import add_write
        from ralph.shell.walker import Word

        for target in awk_outputs(program.text):  # a name built at run time is data: it can be any file
            add_write(w, call, Word(target) if target is not None else Word("$awk_output", True, input=True),
                      via=f"{call.name} print >")


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


def found_word(root: Word, template: Word, anything: bool) -> list[Word]:
    """``template`` (a word holding ``{}``) for the paths find or ``xargs -I`` put there: a path under ``root``
    (``root/[!.]*``: not its ``.git``; with ``anything``, ``root/**``: any path, ``.git`` included) -- and ``root``
    itself where ``{}`` is only part of the word (``{}/../x`` climbs from the start path too)."""
    base = root.text.rstrip("/") if root.text != "/" else ""
    under = Word(template.text.replace("{}", base + ("/**" if anything else "/[!.]*")),
                 root.dynamic or template.dynamic, True, input=root.input)
    if template.text == "{}":
        return [under]
    itself = Word(template.text.replace("{}", root.text), root.dynamic or template.dynamic, root.glob or template.glob,
                  input=root.input)
    return [under, itself]


def _find(w: Walker, call: Call) -> None:
    from itertools import product

    from ralph.shell.findexpr import may_reach_git

    emit(w, call)
    words = call.words
    texts = [x.text for x in words]
    roots, _ = find_roots(texts)
    root_words = [words[r] for r in roots] or [Word(".")]
    expression = texts[(roots[-1] + 1) if roots else 1 :]
    i = 1
    while i < len(words):
        t = words[i].text
        if t in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j].text not in (";", "+"):
                j += 1
            has_slot = any("{}" in x.text for x in words[i + 1 : j])
            for root in root_words[:4]:  # `{}` is a path found under each start path
                anything = has_slot and (root.dynamic or may_reach_git(expression, root.text))
                variants = [found_word(root, x, anything) if "{}" in x.text else [x] for x in words[i + 1 : j]]
                st = call.st.copy()
                if t in ("-execdir", "-okdir"):  # the command runs in the found file's directory
                    if root.dynamic:
                        st.cd_unknown = True
                    else:
                        st.cd.append(root.text)
                for cmd in list(product(*variants))[:8]:
                    if cmd:
                        w.run(list(cmd), dict(call.env), st.copy(), Flow(depth=call.flow.depth),
                              [*call.wrappers, "find " + t], [])
            i = j + 1
            continue
        if t in ("-fprint", "-fprint0", "-fprintf", "-fls") and i + 1 < len(words):
            target = words[i + 1]
            from ralph.shell import WriteTarget

            w.result.writes.append(WriteTarget(target.text, target.dynamic, target.glob, list(call.st.cd),
                                               call.st.cd_unknown, "find " + t))
        i += 1


def _tee(w: Walker, call: Call) -> None:
    from ralph.shell import WriteTarget

    emit(w, call)
    opts, i = getopts(call.words, 1, {"--output-error"})
    append = "-a" in opts or "--append" in opts
    for word in call.words[i:]:
        if word.procsub:
            continue
        w.result.writes.append(WriteTarget(word.text, word.dynamic, word.glob, list(call.st.cd), call.st.cd_unknown,
                                           "tee", truncates=not append, input=word.input))


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
    into_dir = target_dir is not None or len(ops) != 2 or dest.endswith("/") or dest in (".", "..") or (
        dest_path is not None and is_dir(dest_path)
    )
    if into_dir:
        made.update(basename(s) for s in sources)
    call.st.made.update(m for m in made if m)
    flags = "".join(x.text[1:] for x in call.words[1:] if x.text.startswith("-") and not x.text.startswith("--"))
    longs = [x.text for x in call.words[1:] if x.text.startswith("--")]
    symbolic = "s" in flags or any(t.startswith("--sym") for t in longs)
    if call.name in ("ln", "link") or (call.name == "cp" and (symbolic or "l" in flags or "--link" in longs)):
        from ralph.shell import WriteTarget

        dynamic = any(x.dynamic for x in call.words[i:])
        for source in sources:  # the link: a write through it later on the line writes `source`
            path = os.path.join(dest, basename(source)) if into_dir else dest
            w.result.links.append(WriteTarget(path, dynamic, False, list(call.st.cd), call.st.cd_unknown, call.name,
                                              truncates=False, source=source, symbolic=symbolic))


_SERVICE_READS = frozenset({"status", "show", "cat", "list-units", "list-unit-files", "list-timers", "list-sockets",
                            "list-jobs", "list-dependencies", "is-active", "is-enabled", "is-failed", "is-system-running",
                            "help", "--version", "-h", "--help", "get-default", "show-environment", "list-machines",
                            "list-paths", "list-automounts"})


def _service_manager(w: Walker, call: Call) -> None:
    """``systemctl``/``service``/``launchctl``/``loginctl`` ...: starting, linking or configuring a service runs
    its command outside the loop, in the service manager's environment (the push block is not there)."""
    emit(w, call)
    operands = [x for x in call.words[1:] if x.dynamic or not x.text.startswith("-")]
    if call.name in ("systemctl", "service") and operands and not operands[0].dynamic and (
            operands[0].text in _SERVICE_READS or (call.name == "service" and operands[-1].text == "status")):
        return
    if call.name in ("systemctl",) and not operands:
        return  # `systemctl` alone lists units
    w.opaque(f"`{call.name}` starts or configures services, which run outside the loop and its environment",
             "run the program directly, or leave the service to the user")


def _message_bus(w: Walker, call: Call) -> None:
    """``dbus-send``/``busctl``/``gdbus``: a method call can ask the service manager to start anything."""
    emit(w, call)
    if any(x.text in ("call", "emit", "--print-reply", "set-property") or x.text.startswith("--dest") for x in
           call.words[1:]) or call.name == "dbus-send":
        w.opaque(f"`{call.name}` sends messages that can start programs outside the loop (systemd, portals)",
                 "run the program directly")


def _git(w: Walker, call: Call) -> None:
    from ralph.shell.git import inspect

    emit(w, call)
    inspect(w, call)


TOOLS: dict[str, Handler] = {
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
    "systemctl": _service_manager,
    "service": _service_manager,
    "launchctl": _service_manager,
    "loginctl": _service_manager,
    "machinectl": _service_manager,
    "initctl": _service_manager,
    "rc-service": _service_manager,
    "sv": _service_manager,
    "supervisorctl": _service_manager,
    "dbus-send": _message_bus,
    "busctl": _message_bus,
    "gdbus": _message_bus,
    "qdbus": _message_bus,
}
