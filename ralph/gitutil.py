"""The few git operations the loop itself performs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ralph.errors import UsageError

LOOP_IDENTITY = ("Ralph Loop", "ralph@localhost")


def git(project_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=project_dir, capture_output=True, text=True, check=check)


def git_dir(project_dir: Path) -> Path:
    """The repository's git directory; UsageError when ``project_dir`` is not in one."""
    if not project_dir.is_dir():
        raise UsageError(f"project directory {project_dir} does not exist")
    result = git(project_dir, "rev-parse", "--absolute-git-dir", check=False)
    if result.returncode != 0:
        raise UsageError(f"{project_dir} is not a git repository: run `git init` there first (ralph commits its work)")
    return Path(result.stdout.strip())


def head(project_dir: Path) -> str | None:
    result = git(project_dir, "rev-parse", "--verify", "-q", "HEAD", check=False)
    return result.stdout.strip() or None


def commit_paths(project_dir: Path, paths: list[Path], message: str) -> str | None:
    """Commit exactly ``paths`` (the loop's own repairs); returns an error text or None."""
    rel = [str(p.relative_to(project_dir)) if p.is_absolute() else str(p) for p in paths if p.exists()]
    added = git(project_dir, "add", "--", *rel, check=False)
    if added.returncode != 0:
        return added.stderr.strip()
    identity: list[str] = []
    if not git(project_dir, "config", "user.email", check=False).stdout.strip():
        identity = ["-c", f"user.name={LOOP_IDENTITY[0]}", "-c", f"user.email={LOOP_IDENTITY[1]}"]
    result = subprocess.run(
        ["git", *identity, "commit", "-q", "--no-verify", "-m", message, "--", *rel],
        cwd=project_dir,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 and "nothing" not in (result.stdout + result.stderr):
        return (result.stderr or result.stdout).strip()
    return None


def identity_args(project_dir: Path) -> list[str]:
    """``-c user.name=... -c user.email=...`` when the repository has no identity configured."""
    if git(project_dir, "config", "user.email", check=False).stdout.strip():
        return []
    return ["-c", f"user.name={LOOP_IDENTITY[0]}", "-c", f"user.email={LOOP_IDENTITY[1]}"]


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


def stash_user_work(project_dir: Path, name: str) -> str | None:
    """Stash tracked and untracked changes under ``name``; returns the stash ref or None."""
    result = subprocess.run(
        ["git", *identity_args(project_dir), "stash", "push", "--include-untracked", "-m", name],
        cwd=project_dir,
        capture_output=True,
        text=True,
    )
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
    subprocess.run(
        ["git", *identity_args(project_dir), "commit", "-q", "--no-verify", "--allow-empty", "-m", message],
        cwd=project_dir,
        check=True,
        capture_output=True,
        text=True,
    )
    tip = head(project_dir) or ""
    git(project_dir, "checkout", "-q", str(working))
    return tip


def show_file(project_dir: Path, commit: str, path: Path) -> str | None:
    rel = path.relative_to(project_dir) if path.is_absolute() else path
    result = git(project_dir, "show", f"{commit}:{rel.as_posix()}", check=False)
    return result.stdout if result.returncode == 0 else None
