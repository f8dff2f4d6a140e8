"""Every git command the loop itself runs, hardened: one helper, :func:`git`.

The agent can write the project's files and (outside a sandbox's read-only
mounts) its ``.git`` directory, and several git settings run programs named in
repository files.  :func:`git` therefore

- turns off everything that can run such a program: fsmonitor, hooks, the
  pager, external diff drivers and textconv, credential helpers, ssh and
  askpass programs, the editor, automatic gc/maintenance, signing, submodule
  recursion, replace objects (``-c`` settings reach child git processes too);
- reads no system and no global config (``GIT_CONFIG_GLOBAL=/dev/null``); the user's
  identity (read once from their real global config) travels in this process's own
  ``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` environment entries, never in a file, which
  the agent (the same user, in direct mode) could add a filter or fsmonitor to;
- drops every inherited ``GIT_*`` variable except author/committer identity;
- first checks, for every repository protected with :func:`protect`, that the
  git metadata the agent must not touch is what it was at run start
  (:mod:`ralph.gitmeta`); on a change it restores the copy and raises
  :class:`GitMetadataChanged` (exit 2) naming the file.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ralph.errors import UsageError

LOOP_IDENTITY = ("Ralph Loop", "ralph@localhost")

HARDENING: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("core.untrackedCache", "false"),
)
"""``-c`` settings on every call: they override repository config and propagate to child gits."""

KEPT_GIT_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
                "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE")
DROPPED_ENV = ("PAGER", "SSH_ASKPASS", "EDITOR", "VISUAL", "LESS", "LV")
DIFF_COMMANDS = {"diff", "show", "log"}
"""Commands that take ``--no-ext-diff --no-textconv``."""


class GitMetadataChanged(UsageError):
    """Protected git metadata changed during a run: it was restored and the run stops."""


_guards: dict[Path, object] = {}
_lock = threading.RLock()
_tampered: list[str] = []
_identity: tuple[str, str] | None = None
_layouts: dict[tuple[Path, ...], object] = {}
_git_programs: dict[tuple[str, str], str] = {}


# -- the hardened invocation -----------------------------------------------------------------


def _global_identity() -> tuple[str, str]:
    """The user's name and email from their real global config (read once), or the loop's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k == "GIT_CONFIG_GLOBAL"}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    values = []
    for key in ("user.name", "user.email"):
        try:
            out = subprocess.run([git_program(), "config", "--global", "--get", key], cwd="/", env=env,
                                 capture_output=True, text=True, timeout=10)
            values.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            values.append("")
    if not (values[0] and values[1]):
        return LOOP_IDENTITY
    return values[0], values[1]


CONTENT_SETTINGS = r"^(filter\..*|core\.(autocrlf|eol))$"
"""The settings of the user's global config that decide what a file's content is to git (a Git LFS or
other clean filter, line-ending conversion): without them a file git filters hashes to another blob."""


def person_content_config() -> list[tuple[str, str]]:
    """The :data:`CONTENT_SETTINGS` of the user's real global config, read now (one git call)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k == "GIT_CONFIG_GLOBAL"}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    try:
        out = subprocess.run([git_program(), "config", "--global", "-z", "--get-regexp", CONTENT_SETTINGS], cwd="/",
                             env=env, capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for record in os.fsdecode(out).split("\0"):
        key, _, value = record.partition("\n")
        if key:
            found.append((key, value))
    return found


def loop_identity() -> tuple[str, str]:
    """The name and email the loop's own commits carry (the user's, read once from their global config)."""
    global _identity
    with _lock:
        if _identity is None:
            _identity = _global_identity()
        return _identity


def add_config(env: dict[str, str], settings: list[tuple[str, str]]) -> None:
    """Add ``settings`` to ``env``'s command-line config (``GIT_CONFIG_COUNT`` entries already there kept)."""
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0
    for key, value in settings:
        env[f"GIT_CONFIG_KEY_{count}"], env[f"GIT_CONFIG_VALUE_{count}"] = key, value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)


READ_ONLY_COMMANDS = frozenset(
    {"rev-parse", "rev-list", "ls-files", "ls-tree", "cat-file", "for-each-ref", "show-ref", "merge-base"}
)
"""Commands that write nothing a name or email goes into: their global config is empty (``/dev/null``)
without the identity, whose first use asks ``git config --global`` twice (read-only commands such as
``ralph status`` start faster)."""


TREE_READERS = READ_ONLY_COMMANDS | {"status", "diff"}
"""Commands that change neither a work tree nor an index nor a ref (``status`` takes no optional lock:
``GIT_OPTIONAL_LOCKS=0``); every other one counts as a change for :class:`StatusShare`."""


def hardened_env(extra: dict[str, str] | None = None, identity: bool = True) -> dict[str, str]:
    """The environment of every loop git call (see the module docstring); ``identity=False``: a
    command that records no name or email (its global config is empty)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in KEPT_GIT_ENV}
    for name in DROPPED_ENV:
        env.pop(name, None)
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "GIT_EDITOR": "true",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
        }
    )
    env.update(extra or {})
    if identity:
        name, email = loop_identity()
        add_config(env, [("user.name", name), ("user.email", email)])
    return env


def git_program(project_dir: Path | str | None = None) -> str:
    """The git executable, found on PATH without its relative entries or entries inside ``project_dir``
    (an agent-written ``git`` in ``node_modules/.bin`` or a project venv never runs); ``FileNotFoundError``
    when there is none."""
    import shutil

    from ralph.claude_cli import path_outside

    tree = os.path.abspath(project_dir) if project_dir is not None else "/nonexistent-ralph-tree"
    search = os.environ.get("PATH", os.defpath)
    key = (search, tree)
    found = _git_programs.get(key)
    if found is None:
        found = shutil.which("git", path=path_outside(search, tree))
        if found is None:
            raise FileNotFoundError(2, "git was not found on PATH (ralph skips entries inside the project and relative ones)")
        _git_programs[key] = found
    return found


def git_argv(*args: str, program: str = "git") -> list[str]:
    """``git --no-pager -c ... ARGS`` (diff-family commands also get --no-ext-diff --no-textconv)."""
    argv = [program, "--no-pager"]
    for key, value in HARDENING:
        argv += ["-c", f"{key}={value}"]
    args_list = list(args)
    if args_list and args_list[0] in DIFF_COMMANDS:
        args_list[1:1] = ["--no-ext-diff", "--no-textconv"]
    elif args_list[:2] == ["stash", "show"]:
        args_list[2:2] = ["--no-ext-diff", "--no-textconv"]
    return argv + args_list


def git(
    project_dir: Path,
    *args: str,
    check: bool = True,
    env: dict[str, str] | None = None,
    binary: bool = False,
    input: bytes | str | None = None,  # noqa: A002 - subprocess's name
    tree_unchanged: bool = False,
) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    """Run one hardened git command in ``project_dir`` after the metadata check.

    ``env`` adds variables (e.g. ``GIT_INDEX_FILE``); ``binary`` returns bytes; ``input`` is stdin;
    ``tree_unchanged``: the command writes only an index of the loop's own (``GIT_INDEX_FILE``), so it is no
    change for :class:`StatusShare` whatever the command.
    """
    check_metadata()
    check_layout(project_dir)
    from ralph.safeio import note_change

    writes = not tree_unchanged and (not args or args[0] not in TREE_READERS)
    if writes:
        note_change()
    try:
        return subprocess.run(
            git_argv(*args, program=git_program(project_dir)),
            cwd=project_dir,
            capture_output=True,
            text=not binary,
            check=check,
            env=hardened_env(env, identity=not args or args[0] not in READ_ONLY_COMMANDS),
            **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}),
        )
    finally:
        if writes:
            note_change()


# -- the metadata check --------------------------------------------------------------------------


def protect(project_dir: Path) -> object:
    """Fingerprint ``project_dir``'s protected git metadata; checked before every :func:`git` call."""
    from ralph.gitmeta import GitMetadata

    project_dir = Path(project_dir).resolve()
    with _lock:
        _tampered.clear()
        gdir = git_dir(project_dir)
        guard = GitMetadata(project_dir, gdir, common_dir(project_dir))
        _guards[project_dir] = guard
        return guard


def unprotect(project_dir: Path) -> None:
    """Stop checking ``project_dir`` (the run ended)."""
    with _lock:
        _guards.pop(Path(project_dir).resolve(), None)
        if not _guards:
            _tampered.clear()


def check_metadata() -> None:
    """Raise GitMetadataChanged (after restoring) when protected metadata changed since protect()."""
    with _lock:
        if _tampered:
            raise GitMetadataChanged(_tampered[0])
        for guard in list(_guards.values()):
            changed = guard.changes()  # type: ignore[attr-defined]
            if not changed:
                continue
            failed = guard.restore(changed)  # type: ignore[attr-defined]
            names = ", ".join(guard.name(p) for p in changed[:3]) + (" ..." if len(changed) > 3 else "")  # type: ignore[attr-defined]
            how = "restored from the copy taken at run start" if not failed else (
                f"could not restore {', '.join(guard.name(p) for p in failed)}: restore it by hand"  # type: ignore[attr-defined]
            )
            _tampered.append(
                f"git metadata changed during the run: {names} ({how}); the run stopped because the loop "
                "runs git on this repository and that file decides what git executes"
            )
            raise GitMetadataChanged(_tampered[0])


@contextmanager
def after_stop() -> Iterator[None]:
    """Git calls on the way out of a run the metadata or layout check stopped (the loop puts the person's refs
    back): allowed only once a new check finds the metadata as at the run's start and the layout clean (the
    stop undid the change), else :class:`GitMetadataChanged` is raised at once.  The stop holds after."""
    with _lock:
        stopped = list(_tampered)
        _tampered.clear()
    try:
        check_metadata()
        yield
    finally:
        with _lock:
            if stopped and not _tampered:
                _tampered.extend(stopped)


def check_layout(project_dir: Path) -> None:
    """Raise GitMetadataChanged when the git directory of ``project_dir`` holds a symlink, a fifo, a device or
    a hard-linked file (outside ``hooks/`` and the object store): git would write a reflog or ``COMMIT_EDITMSG``
    through it to a file outside the repository.  In a protected repository (a run) the entries are removed
    (the link itself, never its target) and every later call stops too; otherwise nothing is changed."""
    from ralph.gitmeta import GitLayout, discover

    roots = discover(project_dir)
    if not roots:
        return
    with _lock:
        layout = _layouts.get(tuple(roots))
        if layout is None:
            layout = _layouts[tuple(roots)] = GitLayout(roots)
        problems = layout.problems()  # type: ignore[attr-defined]
        if not problems:
            return
        protected = any(set(roots) & set(guard.bases) for guard in _guards.values())  # type: ignore[attr-defined]
        names = ", ".join(f"{_shown(path, project_dir)} is {what}" for path, what in problems[:3])
        names += " ..." if len(problems) > 3 else ""
        if not protected:
            first = _shown(problems[0][0], project_dir)
            raise GitMetadataChanged(
                f"{names}: git would write through it (a reflog, COMMIT_EDITMSG ...) to a file outside the "
                f"repository, so ralph runs no git command here; remove it (`rm {first}`; a ref: restore it with "
                "`git update-ref`) and run again"
            )
        failed = []
        for path, _ in problems:
            try:
                os.unlink(path)  # the link (or fifo, device, extra hard link) itself, never its target
            except OSError:
                failed.append(_shown(path, project_dir))
        how = "removed them" if not failed else f"could not remove {', '.join(failed)}: remove it by hand"
        hints = [hint for path, _ in problems if (hint := _ref_hint(path, roots))]
        if hints:
            how += "; put the branch back with " + ", ".join(f"`{hint}`" for hint in hints[:3])
        _tampered.append(
            f"git metadata changed during the run: {names} ({how}); the run stopped because git writes through "
            "such entries to files outside the repository"
        )
        raise GitMetadataChanged(_tampered[0])


def _ref_hint(path: Path, roots: list[Path]) -> str | None:
    """``git update-ref REF SHA`` for a removed ref, SHA from its reflog's last line (None: no reflog)."""
    from ralph import safeio

    for root in roots:
        try:
            ref = Path(path).relative_to(root).as_posix()
        except ValueError:
            continue
        if not ref.startswith("refs/"):
            return None
        try:
            lines = safeio.read_text(root / "logs" / ref, root).splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        fields = lines[-1].split() if lines else []
        if len(fields) > 1 and all(c in "0123456789abcdef" for c in fields[1]):
            return f"git update-ref {ref} {fields[1]}"
    return None


def _shown(path: Path, project_dir: Path) -> str:
    """``path`` relative to the project when inside it."""
    try:
        return str(Path(path).relative_to(Path(project_dir).resolve()))
    except ValueError:
        return str(path)


# -- repository facts ------------------------------------------------------------------------------


def git_dir(project_dir: Path) -> Path:
    """The repository's git directory; UsageError when ``project_dir`` is not in one."""
    if not Path(project_dir).is_dir():
        raise UsageError(f"project directory {project_dir} does not exist")
    result = git(project_dir, "rev-parse", "--absolute-git-dir", check=False)
    if result.returncode != 0:
        raise UsageError(f"{project_dir} is not a git repository: run `git init` there first (ralph commits its work)")
    return Path(result.stdout.strip())


def common_dir(project_dir: Path) -> Path:
    """The git directory shared by the main working tree and all its worktrees."""
    result = git(project_dir, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    return Path(result.stdout.strip()) if result.returncode == 0 else git_dir(project_dir)


def exclude_path(project_dir: Path) -> Path:
    """``info/exclude`` of the common dir (git ignores a worktree's own)."""
    return common_dir(project_dir) / "info" / "exclude"


def ensure_excluded(project_dir: Path, name: str) -> None:
    """Add ``/name`` to ``info/exclude`` once: never a second line, whatever form the first took."""
    from ralph import safeio

    root = common_dir(project_dir)
    exclude = root / "info" / "exclude"
    safeio.make_dirs(exclude.parent, root)
    try:
        existing = safeio.read_text(exclude, root)
    except FileNotFoundError:
        existing = ""
    forms = {name, f"/{name}"}
    if forms & {line.strip() for line in existing.splitlines()}:
        return
    safeio.append_text(exclude, root, ("" if existing.endswith("\n") or not existing else "\n") + f"/{name}\n")


def head(project_dir: Path) -> str | None:
    result = git(project_dir, "rev-parse", "--verify", "-q", "HEAD", check=False)
    return result.stdout.strip() or None


def identity_args(project_dir: Path) -> list[str]:
    """Kept for callers: identity now comes from the identity-only global config (always set)."""
    return []


def current_branch(project_dir: Path) -> str | None:
    result = git(project_dir, "symbolic-ref", "--short", "-q", "HEAD", check=False)
    return result.stdout.strip() or None


def dirty_paths(project_dir: Path) -> list[str]:
    """``git status --porcelain`` lines (tracked changes and untracked files)."""
    result = git(project_dir, "status", "--porcelain", check=False)
    return [line for line in result.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class TreeStatus:
    """The work tree as ``git status --porcelain=v2`` sees it: HEAD (``""`` before the first commit), the
    tracked paths that differ from it (in the index or the work tree), the untracked files (as ``git ls-files
    --others --exclude-standard`` lists them)."""

    head: str
    tracked: list[str]
    untracked: list[str]
    branch: str = ""
    """The branch checked out (``(detached)`` when none)."""
    codes: tuple[str, ...] = ()
    """The two-letter ``XY`` code of each of :attr:`tracked` (index, work tree; ``.``: unchanged)."""
    gitlinks: tuple[str, ...] = ()
    """Nested repositories committed into the project during the run (a gitlink that is new or points to
    another commit than at the run's start, :mod:`ralph.privateindex`): the loop cannot vouch for the work
    in them, so the tree is not clean while there is one."""

    def porcelain(self) -> list[str]:
        """The paths as ``git status --porcelain`` lines (``XY path``, ``?? path``; a path with a space, a control
        character, a quote, a backslash or a byte outside ASCII C-quoted as git does), untracked files one by one."""
        codes = self.codes if len(self.codes) == len(self.tracked) else ("??",) * len(self.tracked)
        lines = [f"{code.replace('.', ' ')} {_quoted(path)}" for code, path in zip(codes, self.tracked)]
        return lines + [f"?? {_quoted(path)}" for path in self.untracked]


_C_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 34: '\\"', 92: "\\\\"}


def _quoted(path: str) -> str:
    """``path`` as git's porcelain prints it (``core.quotePath``): as it is, or C-quoted in double quotes."""
    raw = os.fsencode(path)
    if all(32 < byte < 127 and byte not in (34, 92) for byte in raw):  # a space too makes git quote
        return path
    return '"' + "".join(_C_ESCAPES.get(b) or (chr(b) if 32 <= b < 127 else f"\\{b:03o}") for b in raw) + '"'


STATUS_ARGS = ("status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all", "--no-renames")


_private: dict[Path, object] = {}
"""The run's private indexes (:mod:`ralph.privateindex`), by project directory."""
_private_lock = threading.Lock()
"""One private status at a time (a Stop hook's check runs on the hook server's thread)."""


def use_private_index(project_dir: Path, directory: Path) -> object:
    """From now on :func:`tree_status` of ``project_dir`` is taken against the loop's own index in
    ``directory`` (loop-owned), not the repository's; the run-start facts are recorded now (before any agent)."""
    from ralph.privateindex import PrivateIndex

    private = PrivateIndex(project_dir, directory).start()
    with _lock:
        _private[Path(project_dir).resolve()] = private
    return private


def drop_private_index(project_dir: Path) -> None:
    """The run ended: :func:`tree_status` asks the repository's index again."""
    with _lock:
        private = _private.pop(Path(project_dir).resolve(), None)
    if private is not None:
        private.stop()  # type: ignore[attr-defined]


def tree_status(project_dir: Path, while_agent_runs: bool = False) -> TreeStatus:
    """HEAD, the tracked changes and the untracked files in one git call (where several would ask the same);
    during a run against the loop's own index (:func:`use_private_index`; a second call, ``read-tree``, when
    ``HEAD`` moved).  ``while_agent_runs``: the agent's processes may still run (a Stop hook's check)."""
    if _private:
        private = _private.get(Path(project_dir).resolve())
        if private is not None:
            with _private_lock:
                return private.status(while_agent_runs)  # type: ignore[attr-defined, no-any-return]
    return parse_status(git(project_dir, *STATUS_ARGS, binary=True).stdout)


def parse_status(out: bytes) -> TreeStatus:
    """A :class:`TreeStatus` from the output of ``git`` :data:`STATUS_ARGS`."""
    # bytes, decoded as the file system's names are: a name that is not UTF-8 must not stop the loop
    records = iter(os.fsdecode(out).split("\0"))
    head, branch, tracked, untracked, codes = "", "", [], [], []
    for record in records:
        kind = record[:2]
        if record.startswith("# branch.oid "):
            oid = record.removeprefix("# branch.oid ")
            head = "" if oid == "(initial)" else oid
        elif record.startswith("# branch.head "):
            branch = record.removeprefix("# branch.head ")
        elif kind == "? ":
            untracked.append(record[2:])
        elif kind in ("1 ", "u "):  # ordinary, unmerged: the path is the last field (it may hold spaces)
            tracked.append(record.split(" ", 8 if kind == "1 " else 10)[-1])
            codes.append(record[2:4])
        elif kind == "2 ":  # renamed or copied (not asked for): the path, then the original path's record
            tracked += [record.split(" ", 9)[-1], next(records, "")]
            codes += [record[2:4], record[2:4]]
    return TreeStatus(head, tracked, untracked, branch, tuple(codes))


class StatusShare:
    """One :func:`tree_status` for the readers of an iteration's end (the ``git-clean`` validator, the
    person's-changes look), taken by the first of them and reused while nothing was noted that could have
    changed the tree (:func:`ralph.safeio.note_change`: the loop's writes, a git command that writes, a
    process run, a gate's session or command).

    A reader that may see the agent's processes still running (a Stop hook) never asks; the loop calls
    :meth:`forget` before an agent's session starts, so nothing taken before it is ever handed out after."""

    def __init__(self, project_dir: Path) -> None:
        self.project_dir = project_dir
        self._taken: tuple[int, TreeStatus] | None = None

    def forget(self) -> None:
        """The next :meth:`get` takes a new status."""
        self._taken = None

    def get(self) -> TreeStatus:
        """The status taken last if nothing was noted since it was taken, else a new one."""
        from ralph.safeio import changes_noted

        noted = changes_noted()
        taken = self._taken
        if taken is not None and taken[0] == noted:
            return taken[1]
        status = tree_status(self.project_dir)
        self._taken = (noted, status)  # the count from before the call: a change noted during it spoils it
        return status


def untracked_files(project_dir: Path) -> set[str]:
    result = git(project_dir, "ls-files", "--others", "--exclude-standard", "-z", check=False)
    return {p for p in result.stdout.split("\0") if p}


# -- the loop's own changes ------------------------------------------------------------------------


def commit_paths(project_dir: Path, paths: list[Path], message: str) -> str | None:
    """Commit exactly ``paths`` (the loop's own repairs); returns an error text or None.

    The message is made one line without control characters (it may quote the agent, and ``git log``
    prints it to a terminal as it is).
    """
    from ralph.agenttext import one_line

    message = one_line(message)
    rel = [
        str(p.relative_to(project_dir)) if p.is_absolute() else str(p)
        for p in paths
        # a tracked file that is gone is committed as deleted
        if p.exists() or git(project_dir, "ls-files", "--error-unmatch", "--", str(p), check=False).returncode == 0
    ]
    added = git(project_dir, "add", "--", *rel, check=False)
    if added.returncode != 0:
        return added.stderr.strip()
    result = git(project_dir, "commit", "-q", "--no-verify", "-m", message, "--", *rel, check=False)
    if result.returncode != 0 and "nothing" not in (result.stdout + result.stderr):
        return (result.stderr or result.stdout).strip()
    return None


def work_patch(project_dir: Path, base: str) -> bytes:
    """Every change of the working tree against ``base`` (tracked and untracked, not ignored) as a
    binary patch; empty when there is nothing.

    Uses a temporary index, so the repository's own index and stash are untouched.  It is
    restored with ``git apply --3way PATCH`` (what ``ralph restore`` runs).
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ralph-save-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(project_dir, "read-tree", base, env=index)
        # what git cannot add (a fifo, a nested repository without a commit) is left out, not a reason for no copy
        git(project_dir, "add", "-A", "--ignore-errors", "--", ".", env=index, check=False)
        diff = git(project_dir, "diff", "--cached", "--binary", "--full-index", base, env=index, binary=True)
    return diff.stdout if diff.stdout.strip() else b""


def stash_user_work(project_dir: Path, name: str) -> str | None:
    """Stash tracked and untracked changes under ``name``; returns the stash ref or None."""
    result = git(project_dir, "stash", "push", "--include-untracked", "-m", name, check=False)
    if result.returncode != 0:
        raise UsageError(f"could not stash your uncommitted work: {result.stderr.strip()}")
    listing = git(project_dir, "stash", "list", "--format=%gd %s", check=False).stdout.splitlines()
    for line in listing:
        if name in line:
            return line.split()[0]
    return None


def rollback(project_dir: Path, commit: str, keep_untracked: set[str]) -> list[str]:
    """Reset the tree to ``commit`` and remove untracked files that were not there before.

    Ignored files are left alone; returns the removed paths.
    """
    git(project_dir, "reset", "-q", "--hard", commit)
    removed = []
    from ralph import safeio

    for path in sorted(untracked_files(project_dir) - keep_untracked):
        try:  # the name itself, never through a symlinked folder on the way
            if safeio.kind(project_dir / path, project_dir) not in ("absent", "dir", "unsafe"):
                safeio.remove(project_dir / path, project_dir)
                removed.append(path)
        except OSError:
            continue
    _prune_empty_dirs(project_dir, removed)
    return removed


def _prune_empty_dirs(project_dir: Path, removed: list[str]) -> None:
    from ralph import safeio

    for path in removed:
        parent = (project_dir / path).parent
        while parent != project_dir and safeio.remove_empty_dir(parent, project_dir):
            parent = parent.parent


def changed_files(project_dir: Path, since: str | None) -> list[str]:
    """Files changed since ``since`` (committed or not), for the state file."""
    args = ["diff", "--name-only", since] if since else ["diff", "--name-only", "HEAD"]
    names = set(git(project_dir, *args, check=False).stdout.split())
    names |= untracked_files(project_dir)
    return sorted(names)


def branch_failed_work(project_dir: Path, branch: str, message: str) -> str:
    """Commit everything (even uncommitted work) on a new ``branch``; come back; return its head.

    ``message`` may quote gate output: its lines stay, its control characters go.
    """
    from ralph.agenttext import strip_controls

    message = strip_controls(message)
    working = current_branch(project_dir) or head(project_dir)
    git(project_dir, "checkout", "-q", "-b", branch)
    git(project_dir, "add", "-A")
    git(project_dir, "commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    tip = head(project_dir) or ""
    git(project_dir, "checkout", "-q", str(working))
    return tip


def show_file(project_dir: Path, commit: str, path: Path) -> str | None:
    rel = path.relative_to(project_dir) if path.is_absolute() else path
    result = git(project_dir, "show", f"{commit}:{rel.as_posix()}", check=False)
    return result.stdout if result.returncode == 0 else None


def committed_file(project_dir: Path, commit: str | None, path: Path) -> bytes | None:
    """The bytes of ``path`` as a regular file in ``commit`` (None: absent there, or a symlink or submodule)."""
    if not commit:
        return None
    rel = (path.relative_to(project_dir) if path.is_absolute() else path).as_posix()
    listed = git(project_dir, "ls-tree", "-z", commit, "--", rel, check=False).stdout
    mode = listed.split(" ", 1)[0] if listed else ""
    if mode not in ("100644", "100755"):
        return None
    shown = git(project_dir, "cat-file", "blob", f"{commit}:./{rel}", check=False, binary=True)  # ./: from the cwd
    return shown.stdout if shown.returncode == 0 else None


def remote_urls(project_dir: Path) -> list[str]:
    """Every configured remote URL, push URL and insteadOf prefix (for the direct runner's push block)."""
    result = git(project_dir, "config", "--get-regexp", r"^(remote\..*\.(push)?url|url\..*\.(push)?insteadof)$", check=False)
    urls = []
    for line in result.stdout.splitlines():
        _, _, value = line.partition(" ")
        if value:
            urls.append(value)
    return urls
