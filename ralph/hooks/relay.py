"""A hook relay: a private Unix socket that hands each hook request to a forwarder.

Where the agent cannot reach the loop's own socket (a cluster node, a pod), the
runner starts a relay next to the agent and names its socket as the channel's
``hook_socket`` (``Runner.agent_channel``).
Each request line from the hook client goes to ``forward(request)``, which
carries it to the loop (over Ray, HTTP, ...) and returns the loop's reply.  A
forwarder that returns None (the loop is gone) makes the relay close the
connection without an answer, so the hook client fails closed as it would with
an unreachable loop: PreToolUse denies, Stop blocks.

Standard library only: it runs wherever the agent runs.
"""

from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

Forwarder = Callable[[dict[str, Any]], "dict[str, Any] | None"]
"""Carries one hook request to the loop and returns its reply (None: no answer, the client fails closed)."""


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        relay: HookRelay = self.server.relay  # type: ignore[attr-defined]
        try:
            request = json.loads(self.rfile.readline().decode("utf-8") or "{}")
        except ValueError:
            return
        reply = relay.forward(request)
        if reply is not None:
            try:
                self.wfile.write(json.dumps(reply).encode("utf-8") + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller is gone (the agent was stopped while its hook client waited)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class HookRelay:
    """Serve hook requests on ``<private dir>/hook.sock`` and pass them to ``forward``."""

    def __init__(self, forward: Forwarder, directory: Path | None = None) -> None:
        self.forward = forward
        self.directory = directory or Path(tempfile.mkdtemp(prefix="ralph-relay-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        self.path = self.directory / "hook.sock"
        if self.path.exists():
            self.path.unlink()
        self._server = _Server(str(self.path), _Handler)
        self._server.relay = self  # type: ignore[attr-defined]
        os.chmod(self.path, 0o600)
        self._thread = threading.Thread(target=self._server.serve_forever, name="ralph-hook-relay", daemon=True)

    def start(self) -> HookRelay:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket."""
        self._server.shutdown()
        self._server.server_close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


__all__ = ["Forwarder", "HookRelay"]
