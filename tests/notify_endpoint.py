"""A real HTTP endpoint on 127.0.0.1 that Apprise's ``json://`` notifications are sent to, for the tests.

``mode``: ``ok`` answers 200 and keeps each notification (Apprise's JSON: version, title, message,
type); ``fail`` answers 500; ``hang`` reads the request and answers only when the test ends.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class NotifyEndpoint:
    """A local listener; ``url`` is the Apprise URL that reaches it (``json://127.0.0.1:PORT/notify``)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.received: list[dict[str, Any]] = []
        self.requests = 0
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with owner.lock:
                    owner.requests += 1
                if owner.mode == "hang":
                    owner.release.wait(600)
                    return
                if owner.mode == "fail":
                    self.send_response(500)
                    self.end_headers()
                    return
                try:
                    data = json.loads(body)
                except ValueError:
                    data = {"raw": body.decode("utf-8", "replace")}
                with owner.lock:
                    owner.received.append({"path": self.path, **data})
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/notify"

    def titles(self) -> list[str]:
        with self.lock:
            return [str(item.get("title")) for item in self.received]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
