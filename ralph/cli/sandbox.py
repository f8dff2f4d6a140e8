"""``ralph sandbox build|clean`` and ``ralph doctor`` (stdlib + click at import time).

Registered in ralph/cli/main.py (``cli.add_command(sandbox)``, ``cli.add_command(doctor)``);
also runnable alone: ``python -P -m ralph.cli.sandbox sandbox build --offline-base``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

__all__ = ["doctor", "sandbox"]


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
    from ralph_plugins.runners.docker import engine, image
    from ralph_plugins.runners.docker.naming import DEFAULT_IMAGE, OFFLINE_BASE_IMAGE

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
    from ralph_plugins.runners.docker import engine

    try:
        removed = engine.sweep(engine.connect(), project_dir.resolve() if project_dir else None)
    except engine.SandboxError as exc:
        click.echo(f"ralph: error: {exc}", err=True)
        sys.exit(2)
    click.echo("removed: " + (", ".join(removed) if removed else "nothing"))


@click.command()
@click.option("-d", "--project-dir", type=click.Path(file_okay=False, path_type=Path), default=".", show_default="current directory")
def doctor(project_dir: Path) -> None:
    """Check the docker-sandbox runner: engine, image, agent binary, credentials, network policy."""
    bad = 0
    for ok, what, fix in _diagnose(project_dir.resolve()):
        mark = "ok  " if ok else ("warn" if ok is None else "FAIL")
        bad += ok is False
        click.echo(f"[{mark}] {what}" + (f"\n       fix: {fix}" if fix else ""))
    sys.exit(1 if bad else 0)


def _diagnose(project_dir: Path) -> list[tuple[bool | None, str, str]]:
    from ralph.errors import RalphError
    from ralph.cli.session import open_session

    out: list[tuple[bool | None, str, str]] = []
    try:
        settings = open_session(project_dir).settings
    except RalphError as exc:
        return [(False, f"configuration: {exc}", "fix the file named above")]
    from ralph_plugins.runners.docker.config import SandboxConfig

    cfg = settings.plugin_config.get("docker-sandbox") or SandboxConfig()
    try:
        from ralph_plugins.runners.docker import engine
    except ImportError:
        return [(False, "docker Python package missing", "pip install 'ralph-trustloop[docker]'")]
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    client = None
    try:
        client = engine.connect()
        out.append((True, f"Docker engine answers ({where}, {client.version().get('Version', '?')})", ""))
    except engine.SandboxError as exc:
        out.append((False, f"Docker engine: {exc}", "start Docker (systemctl start docker) or set DOCKER_HOST"))
    if client is not None:
        if engine.image_present(client, cfg.image):
            out.append((True, f"sandbox image {cfg.image} present", ""))
        else:
            out.append((False, f"sandbox image {cfg.image} missing", "ralph sandbox build --offline-base  (or --base IMAGE)"))
    from ralph_plugins.agents.claude import ClaudeAgent

    agent = ClaudeAgent(settings)
    binary, source = agent.resolve_binary()
    if binary is not None:
        out.append((True, f"agent binary {binary} (from {source}; mounted read-only at /opt/ralph/bin/claude)", ""))
    else:
        out.append((False, f"agent binary: {agent.availability().reason}", "pip install claude-agent-sdk"))
    names = list(dict.fromkeys([*cfg.env_allowlist, *cfg.env]))
    visible = [n for n in names if os.environ.get(n)]
    if cfg.state_dir:
        state = Path(cfg.state_dir).expanduser()
        fix = "" if state.is_dir() else "created on the first run (.claude.json = {}); log in once inside, or set ANTHROPIC_API_KEY"
        out.append((True if state.is_dir() else None, f"credential state dir {state} mounted as the agent's ~/.claude", fix))
    if visible:
        out.append((True, f"credentials passed into the sandbox: {', '.join(visible)}", ""))
    elif not cfg.state_dir:
        out.append((
            False,
            "no credentials visible: none of " + ", ".join(cfg.env_allowlist) + " is set and no state_dir",
            'export ANTHROPIC_API_KEY=... (or CLAUDE_CODE_OAUTH_TOKEN), or set [tool.ralph.docker-sandbox] state_dir = "~/.dclaude_state"',
        ))
    if cfg.network == "allowlist":
        extra = ["$ANTHROPIC_BASE_URL host"] if os.environ.get("ANTHROPIC_BASE_URL") else []
        out.append((True, "network policy: allowlist through the proxy: " + ", ".join(cfg.allow_hosts + extra), ""))
    elif cfg.network == "none":
        out.append((None, "network policy: none (the agent cannot reach the model API)",
                    'set [tool.ralph.docker-sandbox] network = "allowlist" to let the model API through'))
    else:
        out.append((None, "network policy: open (no egress control)", 'set network = "allowlist" to restrict egress'))
    return out


@click.group()
def _main() -> None:
    """Standalone entry point (until these commands are registered in ralph.cli.main)."""


_main.add_command(sandbox)
_main.add_command(doctor)

if __name__ == "__main__":
    _main()
