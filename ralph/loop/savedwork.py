"""Copies of the work the loop stashes or rolls back, kept in the run directory (outside the agent's reach).

Each copy is a binary patch (``git apply --3way`` brings it back) listed in
``saved-work.json``; ``ralph status`` shows them and ``ralph restore`` applies
one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

INDEX_NAME = "saved-work.json"


def record_saved_work(run_dir: Path, kind: str, patch: bytes, what: str) -> str:
    """Write ``patch`` to ``run_dir/saved-work/`` and list it; returns a sentence saying where and how."""
    entries = saved_work(run_dir)
    folder = run_dir / "saved-work"
    folder.mkdir(exist_ok=True)
    path = folder / f"{len(entries) + 1:02d}-{kind}.patch"
    path.write_bytes(patch)
    entries.append({"number": len(entries) + 1, "kind": kind, "what": what, "patch": str(path),
                    "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    from ralph.fsutil import atomic_write_text

    atomic_write_text(run_dir / INDEX_NAME, json.dumps(entries, indent=2) + "\n")
    return f"a copy is in {path} (restore with `ralph restore {run_dir.name} {len(entries)}`)"


def saved_work(run_dir: Path) -> list[dict[str, Any]]:
    """The copies listed in ``run_dir`` (oldest first)."""
    try:
        data = json.loads((run_dir / INDEX_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def restore_command(entry: dict[str, Any]) -> str:
    """The plain git line that restores ``entry`` (what ``ralph restore`` runs)."""
    return f"git apply --3way {entry['patch']}"


def restore(project_dir: Path, run_dir: Path, number: int | None) -> str:
    """Apply saved copy ``number`` (default: the first, i.e. the work from before the run)."""
    from ralph.errors import UsageError
    from ralph.gitutil import git

    entries = saved_work(run_dir)
    if not entries:
        raise UsageError(f"run {run_dir.name} saved no work (nothing was stashed or rolled back)")
    chosen = entries[0] if number is None else next((e for e in entries if e.get("number") == number), None)
    if chosen is None:
        raise UsageError(f"run {run_dir.name} has no saved copy {number}: it has 1..{len(entries)}")
    result = git(project_dir, "apply", "--3way", chosen["patch"], check=False)
    if result.returncode != 0:
        raise UsageError(
            f"could not apply {chosen['patch']} cleanly: {(result.stderr or result.stdout).strip().splitlines()[-1]} "
            "(commit or stash your current changes, then run `ralph restore` again)"
        )
    return f"restored {chosen['what']} from {chosen['patch']}"
