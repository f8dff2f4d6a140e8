"""``ralph sandbox build|clean``: the docker-sandbox runner's command (its pre-flight checks feed ``ralph doctor``).

The runner's plugin declares ``ralph sandbox`` in the ``ralph.commands`` entry-point
group (pyproject.toml); ``ralph --help`` imports this module for its help line, so it
imports only click (the docker SDK is imported inside the commands).  Also
runnable alone: ``python -P -m ralph_plugins.runners.docker.commands sandbox build --offline-base``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["sandbox"]


@click.group()
def sandbox() -> None:
    """Build the docker-sandbox runner's image; clean its leftovers."""


@sandbox.command()
@click.option("--base", help="Base image the recipe builds on (must be present locally; never pulled).")
@click.option("--offline-base", is_flag=True, help="Make the base from Debian packages with mmdebstrap/debootstrap (no registry needed).")
@click.option("--suite", default="bookworm", show_default=True, help="Debian suite for --offline-base.")
@click.option("--mirror", default="http://deb.debian.org/debian", show_default=True, help="Debian mirror for --offline-base.")
@click.option("--tag", default=None, help="Tag of the sandbox image.  [default: ralph-sandbox:latest]")
@click.option("--force", is_flag=True, help="Rebuild even when the image matches the recipe.")
def build(base: str | None, offline_base: bool, suite: str, mirror: str, tag: str | None, force: bool) -> None:
    """Build the sandbox image from templates/sandbox (git, python3, proxy, git identity).

    The agent CLI and ralph's code are mounted read-only at run time.  An image
    that already matches the recipe (label ralph.recipe) is reused.
    """
    from . import engine, image
    from .naming import DEFAULT_IMAGE, OFFLINE_BASE_IMAGE

    if base and offline_base:
        raise click.UsageError("--base and --offline-base exclude each other")
    if not base and not offline_base:
        raise click.UsageError("name a base image with --base IMAGE, or use --offline-base (no registry needed)")
    try:
        client = engine.connect()
        if offline_base:
            image.build_offline_base(client, OFFLINE_BASE_IMAGE, suite, mirror, force=force, echo=click.echo)
            base = OFFLINE_BASE_IMAGE
        assert base is not None
        image.build_image(client, base, tag or DEFAULT_IMAGE, force=force, echo=click.echo)
    except (engine.SandboxError, RuntimeError) as exc:
        click.echo(f"ralph: error: {exc}", err=True)
        sys.exit(2)


@sandbox.command()
@click.option("-d", "--project-dir", type=click.Path(file_okay=False, path_type=Path), help="Only this project's leftovers.")
def clean(project_dir: Path | None) -> None:
    """Remove ralph's sandbox containers and networks (found by the ralph.sandbox label)."""
    from . import engine

    try:
        removed = engine.sweep(engine.connect(), project_dir.resolve() if project_dir else None)
    except engine.SandboxError as exc:
        click.echo(f"ralph: error: {exc}", err=True)
        sys.exit(2)
    click.echo("removed: " + (", ".join(removed) if removed else "nothing"))


@click.group()
def _main() -> None:
    """Standalone entry point (``ralph`` registers these commands itself)."""



_main.add_command(sandbox)

if __name__ == "__main__":
    _main()
