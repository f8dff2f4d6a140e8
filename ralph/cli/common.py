"""What several commands share: the ``-d/--project-dir`` option and how an error ends a command —
always one line and an exit code, never a traceback (click only: ``ralph --help`` imports this module)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

import click

__all__ = ["echo", "fail", "handles_errors", "os_error_line", "path_problem", "project_dir_option", "report_crash"]


def path_problem(path: Path, want: str = "directory") -> str | None:
    """Why ``path`` is not an existing ``want`` ("directory" or "file") in plain words, or None when it is."""
    import os

    if os.path.islink(path) and not os.path.exists(path):
        return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist"
    if not os.path.exists(path):
        parent = next((p for p in Path(os.path.abspath(path)).parents if os.path.lexists(p)), None)
        if parent is not None and not os.path.isdir(parent):
            return f"{path} cannot exist: {parent} is a file, not a directory"
        return f"{path} does not exist"
    if want == "directory" and not os.path.isdir(path):
        return f"{path} is a file, not a directory"
    if want == "file" and os.path.isdir(path):
        return f"{path} is a directory, not a file"
    return None


def _project_around_cwd(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    """``-d`` as given (an existing directory); without it the project around the current directory
    (found like git finds its repository)."""
    if value is not None:
        problem = path_problem(value)
        if problem is not None:
            raise click.BadParameter(problem)
        return value
    from ralph.ralphfiles import find_project

    return find_project(Path.cwd())


project_dir_option = click.option(
    "-d",
    "--project-dir",
    type=click.Path(path_type=Path),
    default=None,
    callback=_project_around_cwd,
    show_default="the project around the current directory",
    help="Project root (a git repository).  Without it, ralph looks from the current directory up to the "
    "repository's top level for the nearest folder holding a Ralph loop (ralph/, scripts/ralph/, .ralph/), "
    "else takes that top level, as git finds its repository.",
)
"""``-d/--project-dir``: the project's root; by default found from the current directory upwards
(:func:`ralph.ralphfiles.find_project`), so ralph runs from anywhere in the project."""


def echo(message: Any = "", err: bool = False, nl: bool = True) -> None:
    """``click.echo`` for everything a command prints: escape sequences and control characters removed
    (task lists, run records and errors may quote what an agent wrote; newlines and tabs stay)."""
    from ralph.agenttext import strip_controls

    click.echo(strip_controls("" if message is None else message), err=err, nl=nl)


def fail(error: Exception | str, code: int = 2) -> NoReturn:
    """``ralph: error: ERROR`` on stderr, then exit with ``code``."""
    echo(f"ralph: error: {error}", err=True)
    sys.exit(code)


def os_error_line(exc: OSError) -> str:
    """An ``OSError`` in one line a person can act on: what failed, on which path."""
    what = exc.strerror or type(exc).__name__
    names = [name for name in (exc.filename, exc.filename2) if name is not None]
    where = " -> ".join(str(name) for name in names)
    return f"{where}: {what}" if where else f"{what}: {exc}"


def handles_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """A command whose ``RalphError`` becomes a one-line message and the error's exit code, and an
    ``OSError`` (a path that cannot be read or written) one line and exit 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ralph.errors import RalphError

        try:
            return func(*args, **kwargs)
        except RalphError as exc:
            fail(exc, exc.exit_code)
        except BrokenPipeError:
            raise  # the reader went away (`ralph init | head`): the command line ends quietly, as click does
        except OSError as exc:
            fail(os_error_line(exc), 2)

    return wrapper


def report_crash(exc: BaseException) -> NoReturn:
    """An error no command expected (a bug): one line naming the file that keeps the traceback, exit 2."""
    import os
    import tempfile
    import time
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    where = "(the traceback could not be saved)"
    try:
        from ralph.loop.rundir import state_root

        folder = state_root()
        folder.mkdir(parents=True, exist_ok=True)
    except Exception:  # noqa: BLE001 - no state directory: the temporary directory will do
        folder = Path(tempfile.gettempdir())
    try:
        fd, name = tempfile.mkstemp(prefix=time.strftime("crash-%Y%m%d-%H%M%S-"), suffix=".txt", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        where = f"(an error ralph did not expect: the traceback is in {name}; please report it)"
    except OSError:
        pass
    fail(f"{type(exc).__name__}: {exc} {where}", 2)
