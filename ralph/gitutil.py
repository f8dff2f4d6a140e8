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
