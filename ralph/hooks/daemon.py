"""A per-user hook helper for hooks that run without a loop (the plugin used interactively).

Starting Python, pluggy and every plugin for each tool call costs ~65 ms; a
Claude Code session makes hundreds of calls.  The first call outside a loop
answers in-process and starts this helper; later calls reach it over a Unix
socket in a private directory (~20 ms, as inside a loop).  It answers exactly
as the in-process path does, exits after a quiet spell, and exits as soon as
ralph's installed files change (so an upgrade is never served by old code).

Run as ``python -P -m ralph.hooks.daemon SOCKET``.  ``RALPH_HOOK_DAEMON=0``
disables it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

IDLE_ENV = "RALPH_HOOK_DAEMON_IDLE"
DEFAULT_IDLE_SECONDS = 600.0


def _code_stamp() -> float:
    """The newest modification time among ralph's and its default plugins' source files."""
    from ralph.hooks.wiring import hook_packages

    newest = 0.0
    for root in hook_packages().values():
        for path in root.rglob("*.py"):
            try:
                newest = max(newest, path.stat().st_mtime)
            except OSError:
                continue
    return newest


def serve(socket_path: Path, idle_seconds: float) -> None:
    """Answer hook requests on ``socket_path`` until idle for ``idle_seconds`` or the code changes."""
    from ralph.hooks.answers import handle_without_loop
    from ralph.hooks.server import HookServer

    stamp = _code_stamp()
    last = [time.monotonic()]
    stop = threading.Event()

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        last[0] = time.monotonic()
        output = handle_without_loop(request.get("payload") or {}, dict(request.get("env") or {}))
        if _code_stamp() != stamp:
            stop.set()  # ralph changed on disk: let a fresh helper take over
        return output

    server = HookServer(respond, path=socket_path)
    server.start()
    try:
        while not stop.wait(1.0):
            if time.monotonic() - last[0] > idle_seconds:
                break
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -P -m ralph.hooks.daemon SOCKET\n")
        return 2
    try:
        idle = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_SECONDS)
    except ValueError:
        idle = DEFAULT_IDLE_SECONDS
    try:
        serve(Path(args[0]), idle)
    except OSError as exc:  # another helper won the race for the socket
        sys.stderr.write(f"ralph hook helper: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
