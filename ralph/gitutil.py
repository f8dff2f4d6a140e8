"""Every git command the loop itself runs, hardened: one helper, :func:`git`.

The agent can write the project's files and (outside a sandbox's read-only
mounts) its ``.git`` directory, and several git settings run programs named in
repository files.  :func:`git` therefore

- turns off everything that can run such a program: fsmonitor, hooks, the
  pager, external diff drivers and textconv, credential helpers, ssh and
  askpass programs, the editor, automatic gc/maintenance, signing, submodule
  recursion, replace objects (``-c`` settings reach child git processes too);
- reads no system config and, instead of the user's global config, a file with
  the user's identity only (``GIT_CONFIG_GLOBAL``);
- drops every inherited ``GIT_*`` variable except author/committer identity;
- first checks, for every repository protected with :func:`protect`, that the
  git metadata the agent must not touch is what it was at run start
  (:mod:`ralph.gitmeta`); on a change it restores the copy and raises
  :class:`GitMetadataChanged` (exit 2) naming the file.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
import threading
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
_identity_file: Path | None = None


# -- the hardened invocation -----------------------------------------------------------------


def _global_identity() -> tuple[str, str]:
    """The user's name and email from their real global config (read once), or the loop's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k == "GIT_CONFIG_GLOBAL"}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    values = []
    for key in ("user.name", "user.email"):
        try:
            out = subprocess.run(["git", "config", "--global", "--get", key], cwd="/", env=env,
                                 capture_output=True, text=True, timeout=10)
            values.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            values.append("")
    if not (values[0] and values[1]):
        return LOOP_IDENTITY
    return values[0], values[1]


def identity_file() -> Path:
    """A private gitconfig with identity only, used as ``GIT_CONFIG_GLOBAL`` (made once per process)."""
    global _identity_file
    with _lock:
        if _identity_file is None or not _identity_file.is_file():
            name, email = _global_identity()
            fd, path = tempfile.mkstemp(prefix="ralph-git-identity-", suffix=".gitconfig")
            quoted = [value.replace("\\", "\\\\").replace('"', '\\"') for value in (name, email)]
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f'[user]\n\tname = "{quoted[0]}"\n\temail = "{quoted[1]}"\n')
            _identity_file = Path(path)
            atexit.register(_remove_identity_file, _identity_file)
        return _identity_file


def _remove_identity_file(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def hardened_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every loop git call (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in KEPT_GIT_ENV}
    for name in DROPPED_ENV:
        env.pop(name, None)
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": str(identity_file()),
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "GIT_EDITOR": "true",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
        }
    )
    env.update(extra or {})
    return env


def git_argv(*args: str) -> list[str]:
    """``git --no-pager -c ... ARGS`` (diff-family commands also get --no-ext-diff --no-textconv)."""
    argv = ["git", "--no-pager"]
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
) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    """Run one hardened git command in ``project_dir`` after the metadata check.

    ``env`` adds variables (e.g. ``GIT_INDEX_FILE``); ``binary`` returns bytes; ``input`` is stdin.
    """
    check_metadata()
    return subprocess.run(
        git_argv(*args),
        cwd=project_dir,
        capture_output=True,
        text=not binary,
        check=check,
        env=hardened_env(env),
        **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}),
    )


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
    exclude = exclude_path(project_dir)
    exclude.parent.mkdir(parents=True, exist_ok=True)
    existing = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    forms = {name, f"/{name}"}
    if forms & {line.strip() for line in existing.splitlines()}:
        return
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write(("" if existing.endswith("\n") or not existing else "\n") + f"/{name}\n")


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


def untracked_files(project_dir: Path) -> set[str]:
    result = git(project_dir, "ls-files", "--others", "--exclude-standard", "-z", check=False)
    return {p for p in result.stdout.split("\0") if p}


# -- the loop's own changes ------------------------------------------------------------------------


def commit_paths(project_dir: Path, paths: list[Path], message: str) -> str | None:
    """Commit exactly ``paths`` (the loop's own repairs); returns an error text or None."""
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
    with tempfile.TemporaryDirectory(prefix="ralph-save-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(project_dir, "read-tree", base, env=index)
        git(project_dir, "add", "-A", "--", ".", env=index)
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
    for path in sorted(untracked_files(project_dir) - keep_untracked):
        target = project_dir / path
        try:
            target.unlink()
            removed.append(path)
        except OSError:
            continue
    _prune_empty_dirs(project_dir, removed)
    return removed


def _prune_empty_dirs(project_dir: Path, removed: list[str]) -> None:
    for path in removed:
        parent = (project_dir / path).parent
        while parent != project_dir and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def changed_files(project_dir: Path, since: str | None) -> list[str]:
    """Files changed since ``since`` (committed or not), for the state file."""
    args = ["diff", "--name-only", since] if since else ["diff", "--name-only", "HEAD"]
    names = set(git(project_dir, *args, check=False).stdout.split())
    names |= untracked_files(project_dir)
    return sorted(names)


def branch_failed_work(project_dir: Path, branch: str, message: str) -> str:
    """Commit everything (even uncommitted work) on a new ``branch``; come back; return its head."""
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


def remote_urls(project_dir: Path) -> list[str]:
    """Every configured remote URL, push URL and insteadOf prefix (for the direct runner's push block)."""
    result = git(project_dir, "config", "--get-regexp", r"^(remote\..*\.(push)?url|url\..*\.(push)?insteadof)$", check=False)
    urls = []
    for line in result.stdout.splitlines():
        _, _, value = line.partition(" ")
        if value:
            urls.append(value)
    return urls
