"""``ralph doctor``: the checks ``ralph run`` makes before iteration 1, all printed (click only at import)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ralph.cli.common import echo, handles_errors, project_dir_option

__all__ = ["doctor"]


@click.command()
@project_dir_option
@click.option("--runner", help="Check this runner instead of the configured one (e.g. docker-sandbox).")
@click.option("--agent", help="Check this agent instead of the configured one.")
@handles_errors
def doctor(project_dir: Path, runner: str | None, agent: str | None) -> None:
    """Run the checks `ralph run` makes before iteration 1, and print them all.

    First every plugin that did not load (`ralph run` does not start without
    it), then the runner's and agent's availability and their pre-flight checks: the agent
    binary runs, credentials are visible where the agent runs (or the model
    endpoint answers), the sandbox image and its network policy, files the agent
    needs.  Exit 1 when a check fails.
    """
    from ralph.lifecycle.doctor import diagnose

    bad = 0
    for check in diagnose(project_dir.resolve(), runner, agent):
        mark = "ok  " if check.ok else ("warn" if check.ok is None else "FAIL")
        bad += check.ok is False
        echo(f"[{mark}] {check.what}" + (f"\n       fix: {check.fix}" if check.fix else ""))
    sys.exit(1 if bad else 0)
