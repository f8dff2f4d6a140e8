"""The loop's hook server: answers agent-side hook calls over a Unix socket.

The socket lives in a short private temp directory (Unix socket paths are
limited to ~108 bytes) whose path the loop passes to the agent as
``RALPH_HOOK_SOCKET``; a sandbox runner mounts that directory.
"""

from __future__ import annotations

import json
import os
import shutil
import socketserver
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

SOCKET_ENV = "RALPH_HOOK_SOCKET"


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: HookServer = self.server.owner  # type: ignore[attr-defined]
        try:
            request = json.loads(self.rfile.readline().decode("utf-8") or "{}")
            reply: dict[str, Any] = {"output": server.respond(request)}
        except Exception as exc:  # fail-open for the agent, recorded for the user
            server.errors.append(traceback.format_exc())
            reply = {"output": {}, "error": f"{type(exc).__name__}: {exc}"}
        self.wfile.write(json.dumps(reply).encode("utf-8") + b"\n")


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class HookServer:
    """Serve ``respond(request) -> output`` on a Unix socket in a background thread."""

    def __init__(self, respond: Callable[[dict[str, Any]], dict[str, Any]], path: Path | None = None) -> None:
        """Serve in a fresh private temp directory, or at ``path`` (whose directory the caller owns)."""
        self.respond = respond
        self.errors: list[str] = []
        self._own_directory = path is None
        if path is None:
            self.directory = Path(tempfile.mkdtemp(prefix="ralph-hook-"))
            # Containers run the agent as the host user; the directory must be reachable
            # for it, and only the socket is inside.
            os.chmod(self.directory, 0o755)
            self.path = self.directory / "hook.sock"
        else:
            self.directory, self.path = path.parent, path
            _remove_stale_socket(path)
        self._server = _UnixServer(str(self.path), _Handler)
        self._server.owner = self  # type: ignore[attr-defined]
        if self._own_directory:
            os.chmod(self.path, 0o666)
        self._thread = threading.Thread(target=self._server.serve_forever, name="ralph-hook-server", daemon=True)

    def start(self) -> HookServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket file nobody answers on (left by a killed server); keep a live one."""
    import socket

    if not path.exists():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()
            return
    raise OSError(f"a server already answers on {path}")
