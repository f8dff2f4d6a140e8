"""What several commands share: the ``-d/--project-dir`` option and how a ``RalphError`` ends a
command (click only: ``ralph --help`` imports this module)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

import click

__all__ = ["fail", "handles_errors", "project_dir_option"]

project_dir_option = click.option(
    "-d",
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default="current directory",
    help="Project root (a git repository).",
)
"""``-d/--project-dir``: the project's root, the current directory by default."""


def fail(error: Exception, code: int = 2) -> NoReturn:
    """``ralph: error: ERROR`` on stderr, then exit with ``code``."""
    click.echo(f"ralph: error: {error}", err=True)
    sys.exit(code)


def handles_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """A command whose ``RalphError`` becomes a one-line message and the error's exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ralph.errors import RalphError

        try:
            return func(*args, **kwargs)
        except RalphError as exc:
            fail(exc, exc.exit_code)

    return wrapper
