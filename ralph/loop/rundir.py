"""Run directories: where a run's events, prompts and raw agent output go.

They live outside the project (``$RALPH_STATE_DIR`` or
``$XDG_STATE_HOME/ralph``, default ``~/.local/state/ralph``) so the agent,
which can write anything in the project, cannot rewrite the loop's record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

STATE_DIR_ENV = "RALPH_STATE_DIR"


def state_root(configured: str | None = None) -> Path:
    """Where ralph keeps state: ``configured``, else ``RALPH_STATE_DIR``, else ``$XDG_STATE_HOME/ralph``."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ralph"


def repo_identity(project_dir: Path) -> str:
    """The repository's root commit (the first, when there are several), or ``""`` before the first commit.

    Part of the project key, so a new repository created at the path of an old one starts
    with no state of the old project.
    """
    from ralph.gitutil import git  # hardened, after the git metadata check

    try:
        result = git(project_dir, "rev-list", "--max-parents=0", "HEAD", check=False)
    except OSError:
        return ""
    roots = sorted(result.stdout.split()) if result.returncode == 0 else []
    return roots[0] if roots else ""


def project_key(project_dir: Path, with_repo: bool = True) -> str:
    """``<dir name>-<hash of the absolute path and the repository's root commit>``.

    ``with_repo=False`` keys by the path alone (state that is not about one repository's
    history, such as the hook sessions of an interactive Claude Code session).
    """
    resolved = str(project_dir.resolve())
    identity = resolved + ("\0" + repo_identity(project_dir) if with_repo else "")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", project_dir.resolve().name) or "root"
    return f"{name}-{hashlib.sha1(identity.encode()).hexdigest()[:10]}"


def project_state_dir(project_dir: Path, configured: str | None = None) -> Path:
    """Where this project's runs, story states and run marker live."""
    return state_root(configured) / "projects" / project_key(project_dir)


def runs_dir(project_dir: Path, configured: str | None = None) -> Path:
    """The directory holding ``project_dir``'s run directories."""
    return project_state_dir(project_dir, configured) / "runs"


def check_state_root(configured: str | None = None) -> Path:
    """Create the state directory (or prove it usable); ConfigError naming it and the fix."""
    from ralph.errors import ConfigError

    root = state_root(configured)
    from_env = os.environ.get(STATE_DIR_ENV)
    if from_env and (not configured or configured == from_env):
        where = f"${STATE_DIR_ENV}"
    else:
        where = "state_dir in [tool.ralph]" if configured else "the default state directory"
    try:
        (root / "projects").mkdir(parents=True, exist_ok=True)
        probe = root / "projects" / f".write-test-{os.getpid()}"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"cannot use {root} as ralph's state directory ({where}): {reason}; "
            f"set {STATE_DIR_ENV} (or state_dir in [tool.ralph]) to a directory you can write"
        ) from None
    return root


def new_run_dir(project_dir: Path, configured: str | None = None) -> Path:
    """Create this run's directory (``<timestamp>-<pid>``) under :func:`runs_dir`."""
    check_state_root(configured)
    parent = runs_dir(project_dir, configured)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = parent / f"{stamp}-{os.getpid()}"
    path.mkdir()
    return path


def latest_run(project_dir: Path, configured: str | None = None) -> Path | None:
    """The newest run directory of ``project_dir``, or None."""
    parent = runs_dir(project_dir, configured)
    if not parent.is_dir():
        return None
    runs = sorted((p for p in parent.iterdir() if p.is_dir()), key=lambda p: p.name)
    return runs[-1] if runs else None


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The events of ``run_dir``'s ``events.jsonl`` (unparseable lines skipped)."""
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash
    return events
