"""The loop's hook server: answers agent-side hook calls over a Unix socket.

The socket lives in a short private temp directory (mode 0700, the socket 0600;
Unix socket paths are limited to ~108 bytes) whose path the loop passes to the
agent as ``RALPH_HOOK_SOCKET``, with a per-run token (``RALPH_HOOK_TOKEN``)
that every request must carry; a sandbox runner mounts the directory read-only.  Every answer
echoes the request's ``nonce``; the hook client also checks, before it sends anything, that the
process answering is the loop (the kernel's word: ``ralph.hooks.client.peer_refusal``).
"""

from __future__ import annotations

import hmac
import itertools
import json
import os
import shutil
import socket
import socketserver
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, Callable

SOCKET_ENV = "RALPH_HOOK_SOCKET"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""The largest request line the server reads (a tool call's input or output, JSON-encoded): a longer
one is answered with an error (PreToolUse denies, Stop blocks) without being read into memory."""


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: HookServer = self.server.owner  # type: ignore[attr-defined]
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
            if len(line) > MAX_REQUEST_BYTES:
                self._reply({"output": {}, "error": f"the hook request is larger than {MAX_REQUEST_BYTES} bytes"})
                return
            request = json.loads(line.decode("utf-8") or "{}")
            if isinstance(request, dict) and isinstance(request.get("nonce"), str):
                self.nonce = request["nonce"]
            refusal = server.admission(self.connection) if server.admit is not None else None
            if refusal is None:
                refusal = server.refusal(request)
            if refusal is not None:
                self._reply({"refused": refusal})
                return
            reply: dict[str, Any] = {"output": server.respond(request)}
        except Declined as exc:  # the server does not answer this one: the caller answers it itself
            reply = {"declined": str(exc)}
        except Exception as exc:  # fail-open for the agent, recorded for the user
            server.errors.append(traceback.format_exc())
            reply = {"output": {}, "error": f"{type(exc).__name__}: {exc}"}
        self._reply(reply)

    nonce: str | None = None
    """The request's ``nonce``, echoed in the answer: the hook client takes only an answer to its own call."""

    def _reply(self, reply: dict[str, Any]) -> None:
        if self.nonce is not None:
            reply["nonce"] = self.nonce
        try:
            self.wfile.write(json.dumps(reply).encode("utf-8") + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller is gone (the loop stopped the agent while its hook client waited)


class Declined(Exception):
    """Raised by ``respond``: this server does not answer the request (it is answered ``{"declined": why}``,
    not recorded as an error); the hook helper's word for "answer it in your own process"."""


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class HookServer:
    """Serve ``respond(request) -> output`` on a Unix socket in a background thread."""

    def __init__(
        self,
        respond: Callable[[dict[str, Any]], dict[str, Any]],
        path: Path | None = None,
        token: str | None = None,
        on_refused: Callable[[str], None] | None = None,
        admit: Callable[[socket.socket], str | None] | None = None,
    ) -> None:
        """Serve in a fresh private temp directory (0700, socket 0600), or at ``path`` (whose
        directory the caller owns).  With ``token``, a request without that token is refused
        and reported to ``on_refused``.  With ``admit``, a connection it names a reason for (the
        kernel's word on who connected) is refused before its request is looked at."""
        self.respond = respond
        self.admit = admit
        self.token = token
        self.on_refused = on_refused
        self.refused: list[str] = []
        self.errors: list[str] = []
        self._own_directory = path is None
        if path is None:
            self.directory = Path(tempfile.mkdtemp(prefix="ralph-hook-"))  # mode 0700
            self.path = self.directory / "hook.sock"
        else:
            self.directory, self.path = path.parent, path
            _remove_stale_socket(path)
        # At a caller's path the socket is made under a private name and linked into place once it listens:
        # a client that sees the path can connect (bind makes the file before listen would accept).
        staging = self.path if path is None else self.directory / f".{os.getpid():x}-{next(_SERIAL):x}"
        old_umask = os.umask(0o177)  # the socket is created 0600: no window where others may connect
        try:
            self._server = _UnixServer(str(staging), _Handler)
        finally:
            os.umask(old_umask)
        if staging != self.path:
            _move_into_place(self._server, staging, self.path)
        self._server.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, name="ralph-hook-server", daemon=True)

    def admission(self, connection: socket.socket) -> str | None:
        """Why the process that opened ``connection`` is refused (``admit``'s answer; an error is a refusal)."""
        assert self.admit is not None
        try:
            return self.admit(connection)
        except Exception as exc:  # noqa: BLE001 - who connected is unknown: refused
            return f"who connected cannot be told ({type(exc).__name__}: {exc})"

    def refusal(self, request: dict[str, Any]) -> str | None:
        """Why ``request`` is refused (no or wrong per-run token), or None."""
        if self.token is None:
            return None
        given = request.get("token")
        if isinstance(given, str) and hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        raw_payload = request.get("payload")
        payload: dict[str, Any] = raw_payload if isinstance(raw_payload, dict) else {}
        reason = (
            f"{'no' if not given else 'a wrong'} run token on a {payload.get('hook_event_name') or 'hook'} request "
            f"(tool {payload.get('tool_name') or '-'}): refused"
        )
        self.refused.append(reason)
        if self.on_refused is not None:
            try:
                self.on_refused(reason)
            except Exception:  # noqa: BLE001 - reporting must not break the server
                pass
        return reason

    def share_with(self, uid: int, gid: int) -> bool:
        """Let another uid (a sandbox user other than ours) reach the socket: chown when allowed,
        else open the directory for traversal and the socket for connecting (the token still
        authenticates).  Returns True when the directory stays private."""
        if uid == os.getuid():
            return True
        try:
            os.chown(self.directory, uid, gid)
            os.chown(self.path, uid, gid)
            return True
        except PermissionError:
            os.chmod(self.directory, 0o711)
            os.chmod(self.path, 0o666)
            return False

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


_SERIAL = itertools.count()


def _move_into_place(server: _UnixServer, staging: Path, path: Path) -> None:
    """Give the listening socket at ``staging`` its name ``path`` (a hard link: a server that took
    ``path`` meanwhile keeps it, and this one gives up with an OSError)."""
    try:
        try:
            os.link(staging, path)
        except FileExistsError:
            raise OSError(f"a server already answers on {path}") from None
        except OSError:  # a file system without hard links to sockets: the last one to come answers
            os.replace(staging, path)
    except OSError:
        server.server_close()
        raise
    finally:
        try:
            os.unlink(staging)
        except FileNotFoundError:
            pass


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket file nobody answers on (left by a killed server); keep a live one."""
    if not path.exists():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()
            return
    raise OSError(f"a server already answers on {path}")
