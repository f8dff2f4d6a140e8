"""Guard: files the agent must not change while a Ralph loop runs.

Only during a loop (``event.loop`` set).  Protected: ``event.loop.protected_paths``
(the ``.ralph-active`` marker, ``prd.md`` and ``prompt.md`` -- read-only during
the loop --, the hook configuration), ``.ralph-active`` in the project,
``prd.md``/``prompt.md`` in the ralph directory, every ``.claude/settings*``
file of the project, everything under the run directory, and in direct mode
everything under the loop's state directory (the run directory's grandparent,
the whole ``projects/`` tree in ralph's layout; the project and ``$TMPDIR`` excepted).

Denied: ``Write``/``Edit``/``MultiEdit``/``NotebookEdit`` of those paths, and Bash
commands that write them: output redirections and ``tee``, the destination of
``cp``/``mv``/``install``/``ln``/``rsync``, ``sed -i``/``perl -i`` files,
``truncate``, ``dd of=``, and every write the shell analysis records
(``Analysis.writes``: git's work-tree writes by pathspec, in-place editors,
programs that remove their input ...), and ``rm``/``mv``/``unlink``/``shred`` of
the path or a directory holding it.
Paths are compared resolved (relative to the call's cwd, symlinks followed);
glob patterns (``rm .ralph/*``) are matched against the protected paths.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from typing import Any

from ralph.api import Denial, HookEvent, hookimpl
from ralph.api.shell import (
    BudgetExceeded,
    Command,
    MAX_PATH,
    analyze_for,
    budget_scope,
    find_may_act,
    find_roots,
    real_path,
    resolve_path,
    through_links,
    unplaced,
)

RULE = "protected-file"
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
_REMOVERS = frozenset({"rm", "unlink", "shred", "srm", "rmdir"})
_COPIERS = frozenset({"cp", "install", "ln", "rsync", "scp"})


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Protected:
    def __init__(self, event: HookEvent) -> None:
        loop = event.loop
        assert loop is not None
        self.loop = loop
        self.project = project = os.path.normpath(str(event.project_dir))
        cwd = event.payload.get("cwd")
        self.cwd = os.path.normpath(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else project
        self.home = (event.environ or {}).get("HOME") or os.path.expanduser("~")
        self.known = {"CLAUDE_PROJECT_DIR": project}
        self._sets: tuple[set[str], set[str], set[str]] | None = None
        self._state: tuple[set[str], set[str]] | None = None
        tmp = (event.environ or {}).get("TMPDIR")
        self._scratch = [project, *([os.path.normpath(tmp)] if tmp and os.path.isabs(tmp) else [])]

    def protected(self) -> tuple[set[str], set[str], set[str]]:
        """(files, directories holding only protected files, ``.claude`` directories), each as given and
        resolved.  Resolved at the first path a call writes (symlinks as they are now): most commands
        write none, and the symlink lookups are most of this guard's time."""
        if self._sets is None:
            loop, project = self.loop, self.project
            files = {
                os.path.normpath(os.path.join(project, str(f)))
                for f in (
                    *loop.protected_paths,
                    os.path.join(project, ".ralph-active"),
                    os.path.join(str(loop.ralph_dir), "prd.md"),
                    os.path.join(str(loop.ralph_dir), "prompt.md"),
                )
            }
            run_dir = os.path.normpath(os.path.join(project, str(loop.run_dir)))
            claude = os.path.join(project, ".claude")
            self._sets = (
                files | {real_path(f) for f in files},
                {run_dir, real_path(run_dir)},
                {claude, real_path(claude)},
            )
        return self._sets

    def state(self) -> tuple[set[str], set[str]]:
        """In direct mode: (the loop's state directories, the directories inside them that are not the loop's:
        the project and the scratch directory, when they lie there).  The state directory is the run
        directory's grandparent (``<root>/projects/<key>/runs/<run>``: story states, the last run, the other
        runs), and in ralph's own layout the whole state root (every project's state; its ``projects/`` tree
        when the root is a shared directory such as ``/tmp`` or the home directory).  The loop reads what is there
        (a story's state decides what runs next), so the agent writes none of it, a new file included."""
        if self._state is None:
            roots: set[str] = set()
            if not self.loop.isolates:
                run_dir = os.path.normpath(os.path.join(self.project, str(self.loop.run_dir)))
                state = os.path.dirname(os.path.dirname(run_dir))
                if os.path.basename(os.path.dirname(state)) == "projects":  # ralph's layout: its state root
                    root = os.path.dirname(os.path.dirname(state))
                    shared = {"/", "/tmp", "/var/tmp", os.path.normpath(self.home), tempfile.gettempdir()}
                    state = root if root not in shared else os.path.dirname(state)
                if state != os.path.dirname(state):  # never the file system's root
                    roots = {state, real_path(state)}
            self._state = (roots, {d for c in self._scratch for d in (c, real_path(c))})
        return self._state

    def in_state(self, p: str, remove: bool) -> bool:
        roots, inside = self.state()
        if not roots:
            return False
        if remove and any(_under(r, p) for r in roots):
            return True
        return any(_under(p, r) for r in roots) and not any(_under(p, c) for c in inside)

    def hit(self, path: str, remove: bool = False, glob: bool = False) -> bool:
        """Does writing (or, with ``remove``, deleting/moving) ``path`` touch a protected file?"""
        files, dirs, claude_dirs = self.protected()
        for p in {path, real_path(path)}:
            if self.in_state(p, remove):
                return True
            if any(_under(p, d) or (remove and _under(d, p)) for d in dirs):
                return True
            if any(p == f or (remove and _under(f, p)) for f in files):
                return True
            if os.path.dirname(p) in claude_dirs and os.path.basename(p).startswith("settings"):
                return True
            if remove and any(_under(c, p) for c in claude_dirs):
                return True
            if glob:
                targets = [*files, *dirs, *(os.path.join(c, "settings.json") for c in claude_dirs)]
                if any(fnmatch.fnmatchcase(t, p) or (remove and fnmatch.fnmatchcase(t, p + "/*")) for t in targets):
                    return True
        return False

    def resolve(self, text: str, dynamic: bool, cd: list[str], cd_unknown: bool) -> str | None:
        return resolve_path(text, self.cwd, self.home, dynamic, cd, cd_unknown, self.known)

    def places(self, text: str, dynamic: bool, cd: list[str], cd_unknown: bool, links: dict[str, str]) -> list[str]:
        """Every place writing ``text`` may land: the path as written, where the kernel opens it (symlinks
        followed before ``..``: ``d/../prd.md`` with ``d -> ralph/sub``), and through links made earlier on the
        line (``ln -s ralph r && : > r/prd.md``)."""
        path = self.resolve(text, dynamic, cd, cd_unknown)
        if path is None:
            return []
        found = [path]
        if ".." in text:
            physical = resolve_path(text, self.cwd, self.home, dynamic, cd, cd_unknown, self.known, physical=True)
            if physical is not None:
                found.append(physical)
        if links:
            raw = path
            if ".." in text and not dynamic and not text.startswith("~"):
                base = self.resolve(".", False, cd, cd_unknown) or self.cwd
                raw = text if text.startswith("/") else base + "/" + text
            found.append(through_links(raw, links))
        return list(dict.fromkeys(found))

    def uncertain(self, text: str, dynamic: bool, cd: list[str], cd_unknown: bool) -> bool:
        """A path whose place the guard cannot know (``unplaced``): it may be a protected file."""
        return unplaced(text, dynamic, cd, cd_unknown) is not None


def _deny(shown: str) -> list[Denial]:
    return [
        Denial(
            RULE,
            f"{shown} is protected while the Ralph loop runs (the loop's marker, prd.md/prompt.md, the hook "
            "configuration, the run directory or the loop's state directory), or the command can reach it (a "
            "pathspec such as `.`, `:/` or a pattern, or none, counts as the whole tree): leave it unchanged, name "
            "only the files you mean (`git restore -- src/app.py`); put notes and questions for the user in "
            "progress.txt instead.",
        )
    ]


@hookimpl
def ralph_pre_tool_use(event: HookEvent) -> list[Denial]:
    if event.loop is None:
        return []
    tool = event.tool_name
    if tool in EDIT_TOOLS:
        raw = event.tool_input.get(EDIT_TOOLS[tool])
        if not isinstance(raw, str) or not raw or len(raw) > MAX_PATH:
            return []  # a longer path names no file the tool could write
        with budget_scope(CHECK_STEPS):
            prot = _Protected(event)
            path = prot.resolve(raw, False, [], False)
            return _deny(raw) if path is not None and prot.hit(path) else []
    if tool != "Bash":
        return []
    command = event.tool_input.get("command")
    if not isinstance(command, str) or not command.strip():
        return []
    with budget_scope(CHECK_STEPS):
        try:
            return _check_bash(event, command)
        except BudgetExceeded:
            if event.loop is not None and event.loop.isolates:
                return []
            return [Denial(RULE, "Checking which files this command writes needs more work than the guard does for "
                                 f"one call ({CHECK_STEPS} steps): split it into smaller commands.")]


CHECK_STEPS = 1_500_000
"""Work units one call's checks may spend (paths resolved and looked up); past them the call is denied in direct
mode."""


def _check_bash(event: HookEvent, command: str) -> list[Denial]:
    """The protected files a Bash command writes, moves or deletes."""
    prot = _Protected(event)
    analysis = analyze_for(event, command, prot.cwd, os.path.normpath(str(event.project_dir)), prot.home)
    links = _links(prot, analysis.links)
    for write in analysis.writes:
        # an `into` write (an archive extracted, a tree copied) may write any name under its directory
        if write.input or write.anywhere or prot.uncertain(write.path, write.dynamic, write.cd, write.cd_unknown):
            return _deny_uncertain(write.path, analysis.cwd_lost)
        if any(prot.hit(p, remove=write.into, glob=write.glob)
               for p in prot.places(write.path, write.dynamic, write.cd, write.cd_unknown, links)):
            return _deny(write.path)
    for cmd in analysis.simple:
        if any(w.startswith("find ") for w in cmd.wrappers):
            continue  # `find -exec rm {}`: the find command itself says which files it acts on (below)
        if cmd.name == "find" and _find_acts_on_protected(prot, cmd):
            return _deny(" ".join(cmd.argv[:8]))
        for text, dynamic, glob, remove in _targets(cmd):
            if prot.uncertain(text, dynamic, cmd.cd, cmd.cd_unknown):
                return _deny_uncertain(text, analysis.cwd_lost)
            if any(prot.hit(p, remove=remove, glob=glob) for p in prot.places(text, dynamic, cmd.cd, cmd.cd_unknown,
                                                                              links)):
                return _deny(text)
    return []


def _deny_uncertain(shown: str, lost: list[str]) -> list[Denial]:
    since = f" ({lost[0]})" if lost else ""
    return [
        Denial(
            RULE,
            f"The guard cannot tell which file {shown} is{since}, so it may be a file protected while the Ralph loop "
            "runs (the loop's marker, prd.md/prompt.md, the hook configuration): name files from the project root, "
            "or `cd DIR && ...` into a literal directory of the project.",
        )
    ]


_FIND_ACTIONS = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir"})
_READERS = frozenset({"grep", "egrep", "fgrep", "rg", "cat", "head", "tail", "wc", "ls", "stat", "file", "echo",
                      "printf", "md5sum", "sha1sum", "sha256sum", "sha512sum", "cksum", "diff", "cmp", "basename",
                      "dirname", "realpath", "readlink", "test", "[", "du", "less", "jq"})
"""Programs ``find -exec`` may run on a protected file: they only read it."""


def _find_acts_on_protected(prot: _Protected, cmd: Command) -> bool:
    """Might ``find ... -delete``/``-exec`` act on a protected file under one of its start paths (its expression
    evaluated for each: ``find . -name .ralph-active -delete`` does, ``find src -name '*.pyc' -delete`` not)?"""
    acting = [k for k, a in enumerate(cmd.args) if a == "-delete" or (
        a in _FIND_ACTIONS and os.path.basename(cmd.args[k + 1] if k + 1 < len(cmd.args) else "") not in _READERS)]
    if not acting:
        return False  # no action, or only programs that read (`-exec grep -l TODO {} +`)
    roots, _ = find_roots(cmd.argv)
    expression = cmd.argv[(roots[-1] + 1) if roots else 1 :]
    files, dirs, claude_dirs = prot.protected()
    targets = [(f, "f") for f in files] + [(d, "d") for d in dirs] + [(os.path.join(c, "settings.json"), "f")
                                                                       for c in claude_dirs]
    starts: list[int | None] = list(roots) or [None]  # no start path: find searches "."
    for k in starts:
        text = cmd.argv[k] if k is not None else "."
        if k is not None and cmd.dynamic[k]:
            return True  # a start path only known at run time may be any of them
        root = prot.resolve(text, False, cmd.cd, cmd.cd_unknown)
        if root is None:
            return True
        for target, kind in targets:
            if target == root or target.startswith(root.rstrip("/") + "/"):
                if find_may_act(expression, text, os.path.relpath(target, root), kind):
                    return True
    return False


def _links(prot: _Protected, made: list[Any]) -> dict[str, str]:
    """Links made earlier on the line (they do not exist yet when the guard looks): link path -> target."""
    links: dict[str, str] = {}
    for link in made:
        at = prot.resolve(link.path, link.dynamic, link.cd, link.cd_unknown)
        if at is None or link.source is None:
            continue
        base = os.path.dirname(at) if link.symbolic else prot.cwd
        target = resolve_path(link.source, base, prot.home, False, [] if link.symbolic else link.cd,
                              link.cd_unknown and not link.symbolic, prot.known)
        if target is not None:
            links[at] = target
    return links


def _operands(cmd: Command, value_options: frozenset[str] = frozenset()) -> list[int]:
    out: list[int] = []
    end = skip = False
    for i in range(1, len(cmd.argv)):
        a = cmd.argv[i]
        if skip:
            skip = False
        elif not end and a == "--":
            end = True
        elif not end and a.startswith("-") and len(a) > 1:
            skip = a in value_options
        else:
            out.append(i)
    return out


def _targets(cmd: Command) -> list[tuple[str, bool, bool, bool]]:
    """(path text, dynamic, glob, is-a-removal) of the paths ``cmd`` writes, moves or deletes."""
    name = cmd.name
    argv = cmd.argv

    def at(indices: list[int], remove: bool) -> list[tuple[str, bool, bool, bool]]:
        return [(argv[i], cmd.dynamic[i], cmd.glob[i], remove) for i in indices]

    if name in _REMOVERS:
        return at(_operands(cmd), True)
    if name == "truncate":
        return at(_operands(cmd, frozenset({"-s", "--size", "-r", "--reference"})), False)
    if name == "dd":
        return [(a[3:], False, False, False) for a in cmd.args if a.startswith("of=")]
    if name in _COPIERS or name == "mv":
        target_dir = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-t", "--target-directory")), None)
        ops = _operands(cmd, frozenset({"-t", "--target-directory", "-S", "--suffix", "-m", "--mode", "-o", "-g", "-e"}))
        dest: int | None = None
        sources = ops
        if target_dir is None and len(ops) >= 2:
            dest, sources = ops[-1], ops[:-1]
        out = at([dest], False) if dest is not None else []
        if name == "mv":
            out += at(sources, True)
        where = target_dir if target_dir is not None else (argv[dest] if dest is not None else None)
        for i in sources:  # a copy into a directory: the file it creates there
            base = os.path.basename(argv[i].rstrip("/"))
            if where is not None and base:
                dynamic = cmd.dynamic[i] or (dest is not None and cmd.dynamic[dest])
                out.append((os.path.join(where, base), dynamic, cmd.glob[i], False))
        return out
    return []
