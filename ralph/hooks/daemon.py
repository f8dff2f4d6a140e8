"""A per-user hook helper for hooks that run without a loop (the plugin used interactively).

Starting Python, pluggy and every plugin for each tool call costs ~65 ms; a
Claude Code session makes hundreds of calls.  The first call outside a loop
answers in-process and starts this helper; later calls reach it over a Unix
socket in a private directory (~20 ms, as inside a loop).  It answers exactly
as the in-process path does, with the plugins loaded once per set of installed
plugins and plugin switches (:class:`Hosts`), exits after a quiet spell, and
exits as soon as ralph's installed files change (looked at after each answer
has gone out, so an upgrade is served by old code at most until then).

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


class Hosts:
    """The plugins the helper answers with, loaded once per set of installed plugins and plugin switches.

    Loading them costs ~8 ms (pluggy inspects every attribute of every plugin module) and the
    helper answers every tool call of a session.  A host is kept for the switches that decide which
    plugins load (``RALPH_DISABLE_PLUGINS``, ``RALPH_DISABLE_PLUGIN_AUTOLOAD``, ``RALPH_TRACE_PLUGINS``)
    and the ``ralph`` entry points installed, read again for every call (~1 ms): a plugin installed
    or removed since is answered with by a host of its own.  A host where a plugin failed to load is
    not kept (the next call tries it again, as before).  The plugin modules themselves were imported
    once per process before this too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[Any, Any] = {}

    def get(self, environ: dict[str, str]) -> Any:
        """The plugins to answer a request with ``environ`` (the client's forwarded environment)."""
        from ralph.plugin.calls import TRACE_ENV
        from ralph.plugin.entrypoints import ENTRY_POINT_GROUP, disabled_plugins, entry_points, only_own_plugins
        from ralph.plugin.manager import PluginHost

        key = (frozenset(disabled_plugins(environ)), only_own_plugins(environ), environ.get(TRACE_ENV),
               tuple(entry_points(ENTRY_POINT_GROUP)))
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                host = PluginHost(environ=environ, sections=False)
                if not host.failures:
                    self._hosts[key] = host
            return host


def serve(socket_path: Path, idle_seconds: float) -> None:
    """Answer hook requests on ``socket_path`` until idle for ``idle_seconds`` or the code changes."""
    from ralph.hooks.answers import handle_without_loop
    from ralph.hooks.server import HookServer

    stamp = _code_stamp()
    last = [time.monotonic()]
    answered = threading.Event()
    hosts = Hosts()

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        last[0] = time.monotonic()
        environ = dict(request.get("env") or {})
        output = handle_without_loop(request.get("payload") or {}, environ, hosts.get(environ))
        answered.set()  # the look for changed code (~3 ms of stats) runs on the main thread, not before the answer
        return output

    server = HookServer(respond, path=socket_path)
    server.start()
    try:
        while True:
            if answered.wait(1.0):
                answered.clear()
                if _code_stamp() != stamp:
                    break  # ralph changed on disk: let a fresh helper take over
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
