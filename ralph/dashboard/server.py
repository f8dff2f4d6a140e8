"""Starting the dashboard: the address checks, the token, the socket, uvicorn.

uvicorn serves (h11, one asyncio loop in this process); the socket is bound here first, so a port
in use is one clear line and ``--port 0`` picks a free one whose number is in the printed URL.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

from ralph.dashboard.access import MIN_TOKEN_CHARS, allowed_hosts, is_loopback
from ralph.errors import ConfigError, UsageError

__all__ = ["SERVE_EXTRA_HINT", "check_stack", "serve"]

SERVE_EXTRA_HINT = "pip install 'ralph-trustloop[serve]'"


def check_stack() -> None:
    """UsageError naming the extra when the web stack ``ralph serve`` needs is not installed."""
    import importlib.util

    missing = [name for name in ("jinja2", "sse_starlette", "starlette", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"`ralph serve` needs {', '.join(missing)}: {SERVE_EXTRA_HINT}")


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if port and exc.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
            raise UsageError(f"port {port} on {host} is in use: pass --port N (--port 0 picks a free one)") from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    return sock


def serve(
    root: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    allow_remote: bool = False,
    echo: Callable[[str], None] = print,
    check_only: bool = False,
) -> int:
    """Serve the dashboard of the runs under ``root`` until Ctrl-C; 0 then.

    ``check_only``: check everything and bind the port as serving would, print the address, then
    close it and return 0 without serving (``ralph serve --check``).

    A ``host`` that is not a loopback address is refused unless ``allow_remote``: the token is then
    the only thing between the network and the loops (and it travels unencrypted).
    """
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UsageError(f"--token must have at least {MIN_TOKEN_CHARS} characters (a short one can be guessed)")
    if not is_loopback(host) and not allow_remote:
        raise UsageError(
            f"--host {host} is not a loopback address: anyone who can reach it could try the dashboard "
            "(plain HTTP, the token in every address); pass --allow-remote as well if you mean it"
        )
    check_stack()
    import uvicorn

    from ralph.dashboard.app import Dashboard

    token = token or secrets.token_urlsafe(24)
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    answerer = _answerer(root)
    dashboard = Dashboard(root, token, allowed_hosts(host, bound_port), answerer)
    config = uvicorn.Config(
        dashboard.app(), lifespan="off", log_config=None, access_log=False, ws="none", loop="asyncio",
        timeout_graceful_shutdown=1, server_header=False, date_header=False,
    )
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    echo(f"ralph serve: http://{shown}:{bound_port}/?token={token}")
    echo(f"  every loop under {root}; this address (with its token) is the only way in; Ctrl-C stops it")
    if not is_loopback(host):
        echo("  warning: listening beyond this machine (--allow-remote): plain HTTP, the token travels in the clear")
    if check_only:
        sock.close()
        echo("  --check: everything is in place; not serving")
        return 0
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


def _answerer(root: Path) -> Callable[[Path, str, str], str]:
    """How the answer form records a person's answer: as ``ralph answer`` does (:func:`ralph.questions.answer`:
    to the running loop over its person channel, else into the question book under the project's lock)."""

    def record(project_dir: Path, story: str, text: str) -> str:
        from ralph.questions import answer

        return answer(project_dir, story, text, state_dir=str(root), by="ralph serve").message

    return record


def state_root_of(configured: str | None) -> Path:
    """The state root to show: ``configured`` (``--state-dir``), else ralph's default; ConfigError when absent."""
    from ralph.loop.rundir import state_root

    root = state_root(configured)
    if configured and not root.is_dir():
        raise ConfigError(f"--state-dir {configured}: no such directory (ralph's state directory holds projects/)")
    return root
