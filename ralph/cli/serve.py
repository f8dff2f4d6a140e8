"""``ralph serve``: the live dashboard (click only at import; the web stack loads when it starts)."""

from __future__ import annotations

import sys

import click

from ralph.cli.common import echo, handles_errors

__all__ = ["serve"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (a loopback address unless --allow-remote).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True, help="Port to listen on (0: a free one).")
@click.option("--token", metavar="TEXT", help="The token every request must carry (at least 16 characters).  [default: a new random one]")
@click.option("--allow-remote", is_flag=True, help="Allow a --host that other machines can reach (plain HTTP: only on a network you trust).")
@click.option("--state-dir", metavar="DIR", help="ralph's state directory to show.  [default: $RALPH_STATE_DIR, else $XDG_STATE_HOME/ralph]")
@click.option("--check", is_flag=True, help="Check everything (address, token, state directory, web stack, the port) and exit without serving.")
@handles_errors
def serve(host: str, port: int, token: str | None, allow_remote: bool, state_dir: str | None, check: bool) -> None:
    """A live dashboard of every loop on this machine, in your browser.

    Shows every run under ralph's state directory: the iteration stream as it
    happens, stories and their gates with the gates' output, cost and tokens,
    the questions the agent asked you with an answer form (the same as
    `ralph answer`), and each run's HTML report.

    It listens on 127.0.0.1 and prints its address once, with a token that
    every request must carry; keep that address to yourself.  Needs the serve
    extra: pip install 'ralph-trustloop[serve]'.
    """
    from ralph.dashboard.server import serve as run_server
    from ralph.dashboard.server import state_root_of

    sys.exit(run_server(state_root_of(state_dir), host, port, token, allow_remote, echo=_echo, check_only=check))


def _echo(line: str) -> None:
    echo(line)
    sys.stdout.flush()
