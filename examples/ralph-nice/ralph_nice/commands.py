"""``ralph nice``: the priority ``--runner nice`` gives the agent in a project.

Declared in pyproject.toml (``ralph.commands`` entry-point group).  ``ralph --help``
imports this module for the command's help line, so it imports only click; ralph's
API is imported inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("nice")
@click.option("-d", "--project-dir", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default="current directory", help="Project root.")
def nice(project_dir: Path) -> None:
    """Show the niceness `ralph run --runner nice` gives the agent here."""
    from ralph.api import RalphError
    from ralph.api.project import open_session

    try:
        settings = open_session(project_dir.resolve()).settings
    except RalphError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"nice -n {settings.section('nice').niceness}  ([tool.ralph.nice] niceness, 1-19)")
