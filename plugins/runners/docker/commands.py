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
    """Build the docker-sandbox runner's images (ralph's and the project's); clean its leftovers."""


@sandbox.command()
@click.option("-d", "--project-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The project whose image to build.  [default: the project around the current directory]")
@click.option("--base", help="Build ralph's image on this base image (present locally; never pulled).")
@click.option("--offline-base", is_flag=True, help="Build ralph's image on a base made from Debian packages with mmdebstrap/debootstrap (no registry needed).")
@click.option("--suite", default="bookworm", show_default=True, help="Debian suite for --offline-base.")
@click.option("--mirror", default="http://deb.debian.org/debian", show_default=True, help="Debian mirror for --offline-base.")
@click.option("--tag", default=None, help="Tag of ralph's image (with --base/--offline-base).  [default: ralph-sandbox:latest]")
@click.option("--force", is_flag=True, help="Rebuild even when an image matches its recipe or toolchain.")
def build(project_dir: Path | None, base: str | None, offline_base: bool, suite: str, mirror: str, tag: str | None,
          force: bool) -> None:
    """Build the project's sandbox image from its toolchain (and ralph's image first, with --base/--offline-base).

    The project's toolchain is `packages`, `setup`, `setup_files`, `path` and
    `image_env` in [tool.ralph.docker-sandbox], and/or its
    .devcontainer/devcontainer.json (its image or Dockerfile, containerEnv and
    create commands).  Its image is built on ralph-sandbox:latest (or the
    devcontainer's image) and tagged ralph-sandbox-<project>-<path hash>:<hash of
    everything the build reads>; setup runs as root with network, with this
    machine's proxy variables and CA certificates (neither is kept in the image).
    A run whose image is older than the config says so.

    With --base or --offline-base it first builds ralph's own image
    (templates/sandbox: git, python3, the allowlist proxy, a git identity).  The
    agent CLI and ralph's code are mounted read-only at run time.  An image that
    already matches its recipe or toolchain is reused.
    """
    from ralph.api import RalphError, section_or_default
    from ralph.api.project import find_project, open_session
    from ralph.api.text import strip_controls

    from . import engine, image, projectimage, toolchain
    from .config import SandboxConfig
    from .naming import DEFAULT_IMAGE, OFFLINE_BASE_IMAGE

    if base and offline_base:
        raise click.UsageError("--base and --offline-base exclude each other")
    if tag and not (base or offline_base):
        raise click.UsageError("--tag names ralph's image: use it with --base or --offline-base")

    def echo(line: str) -> None:
        click.echo(strip_controls(line))  # a build's output quotes what the project's files say

    project = (project_dir or find_project(Path.cwd())).resolve()
    try:
        client = engine.connect()
        client.api.timeout = 600  # a commit or a quiet step may take longer than a run's engine calls
        if offline_base:
            image.build_offline_base(client, OFFLINE_BASE_IMAGE, suite, mirror, force=force, echo=echo)
            base = OFFLINE_BASE_IMAGE
        if base:
            image.build_image(client, base, tag or DEFAULT_IMAGE, force=force, echo=echo)
        try:
            settings = open_session(project, warn=False).settings
        except RalphError as exc:
            raise toolchain.ToolchainError(f"the project's config: {exc}") from None
        section = section_or_default(settings, "docker-sandbox", SandboxConfig)
        found = toolchain.toolchain_of(project, section)
        if found is None:
            if base:
                return
            if not engine.image_present(client, section.image):
                raise toolchain.ToolchainError(
                    f"{project} describes no toolchain of its own, and the sandbox image {section.image!r} does not "
                    f"exist: {engine.BUILD_HINT}"
                )
            echo(f"{project} describes no toolchain of its own (packages, setup ... in [tool.ralph.docker-sandbox], "
                 f"or a .devcontainer/devcontainer.json): the sandbox runs {section.image} as it is")
            return
        echo(f"building the sandbox image of {project} ...")
        projectimage.build(client, found, force=force, echo=echo)
    except (engine.SandboxError, RuntimeError, toolchain.ToolchainError) as exc:
        click.echo(f"ralph: error: {strip_controls(str(exc))}", err=True)
        sys.exit(2)


@sandbox.command()
@click.option("-d", "--project-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Only this project's containers, networks, volumes and images.")
def clean(project_dir: Path | None) -> None:
    """Remove what the docker-sandbox runner left on this machine: its containers, networks and
    checkout volumes (the ralph.sandbox label) and the project images `ralph sandbox build` made
    (ralph-sandbox-<project>-<hash>, the ralph.toolchain label), one line per kind.

    ralph's own image (ralph-sandbox:latest) stays, and so does an image a container still uses.
    """
    from ralph.api.text import strip_controls

    from . import engine, projectimage

    project = project_dir.resolve() if project_dir else None
    try:
        client = engine.connect()
        removed = engine.sweep(client, project)  # the containers first: an image they use could not go
        removed["project image"] = projectimage.remove_images(client, project, echo=lambda line: click.echo(
            strip_controls(line)))
    except engine.SandboxError as exc:
        click.echo(f"ralph: error: {exc}", err=True)
        sys.exit(2)
    lines = [f"removed {_count(len(names), kind)}: {', '.join(names)}" for kind, names in removed.items() if names]
    click.echo("\n".join(strip_controls(line) for line in lines) if lines else "removed: nothing")


def _count(number: int, kind: str) -> str:
    """``1 network``, ``2 project images``."""
    return f"{number} {kind}" + ("" if number == 1 else "s")


@click.group()
def _main() -> None:
    """Standalone entry point (``ralph`` registers these commands itself)."""



_main.add_command(sandbox)

if __name__ == "__main__":
    _main()
