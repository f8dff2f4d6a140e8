"""``ralph worktrees``: list and clean the worktrees of ``ralph run --parallel``.

Only click is imported here; the command imports :mod:`ralph.lifecycle.parallel` when it runs.
Register it on the main group with ``cli.add_command(worktrees)``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ralph.cli.common import echo, handles_errors, project_dir_option

__all__ = ["worktrees"]


@click.command()
@project_dir_option
@click.option("--clean", is_flag=True, help="Remove finished worktrees (all, or the UNITs named).")
@click.option("--force", is_flag=True, help="With --clean: also remove dirty or git-locked worktrees (discards their changes).")
@click.option(
    "--delete-branches",
    is_flag=True,
    help="With --clean: also delete each ralph/parallel/<unit> branch, if it is merged into the branch it came from.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.argument("units", nargs=-1)
@handles_errors
def worktrees(project_dir: Path, clean: bool, force: bool, delete_branches: bool, as_json: bool, units: tuple[str, ...]) -> None:
    """List the worktrees of `ralph run --parallel`, or remove finished ones.

    \b
    Each row: unit, branch, commits ahead/behind the branch it came from,
    whether a run holds its lock, clean or dirty, the last run's outcome, path.
    --clean never removes a worktree whose loop is running, removes dirty
    ones only with --force, and deletes a branch only with --delete-branches
    when it is merged.  ralph never merges or pushes these branches.
    """
    from ralph.errors import UsageError
    from ralph.lifecycle.parallel import clean_worktrees, format_worktrees, list_worktrees

    if not clean:
        if force or delete_branches:
            raise UsageError("--force and --delete-branches only go with --clean")
        infos = list_worktrees(project_dir.resolve())
        if units:
            infos = [info for info in infos if info.unit in units]
        if as_json:
            echo(json.dumps([info.as_json() for info in infos], indent=2))
        else:
            echo(format_worktrees(infos))
        return
    sys.exit(clean_worktrees(project_dir.resolve(), units, force=force, delete_branches=delete_branches, echo=echo))
