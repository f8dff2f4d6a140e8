"""Click options several commands share (click only: ``ralph --help`` imports this module)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["project_dir_option"]

project_dir_option = click.option(
    "-d",
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default="current directory",
    help="Project root (a git repository).",
)
"""``-d/--project-dir``: the project's root, the current directory by default."""
