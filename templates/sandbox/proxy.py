"""The sandbox's only way out under `network = "allowlist"`: an HTTP/CONNECT proxy.

Runs in its own container attached to the sandbox's internal network and to a
normal bridge network.  The agent's container is on the internal network only,
so unsetting HTTPS_PROXY gets the agent nowhere.  Stdlib only.

    python3 proxy.py --port 3128 --allow api.anthropic.com:443 --allow 172.17.0.1:8080

An entry is ``host`` (any port), ``host:port`` or ``*.domain[:port]``.
Every decision is logged to stderr (``docker logs`` of the proxy container).
"""

from __future__ import annotations

import argparse
import select
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ALLOW: list[tuple[str, int | None]] = []


def parse_entry(entry: str) -> tuple[str, int | None]:
    entry = entry.strip().lower()
    if entry.startswith("[") and "]" in entry:  # [v6]:port
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        return host, int(port)
    return entry, None


def allowed(host: str, port: int) -> bool:
    host = host.lower().strip("[]")
    for pattern, want_port in ALLOW:
        if want_port is not None and want_port != port:
            continue
        if pattern == host or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def deny(self, host: str, port: int) -> None:
        log(f"DENY {host}:{port}")
        body = f"ralph sandbox proxy: {host}:{port} is not in the network allowlist\n".encode()
        self.send_response(403)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_CONNECT(self) -> None:  # noqa: N802
        host, _, port_text = self.path.rpartition(":")
        port = int(port_text) if port_text.isdigit() else 443
        if not allowed(host, port):
            return self.deny(host, port)
        try:
            upstream = socket.create_connection((host.strip("[]"), port), timeout=15)
        except OSError as exc:
            log(f"FAIL {host}:{port} {exc}")
            self.send_error(502, f"cannot reach {host}:{port}")
            return
        log(f"ALLOW CONNECT {host}:{port}")
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        pipe(self.connection, upstream)

    def forward(self) -> None:
        url = urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self.send_error(400, "absolute http:// URL required (use CONNECT for https)")
            return
        port = url.port or 80
        if not allowed(url.hostname, port):
            return self.deny(url.hostname, port)
        try:
            upstream = socket.create_connection((url.hostname, port), timeout=15)
        except OSError as exc:
            log(f"FAIL {url.hostname}:{port} {exc}")
            self.send_error(502, f"cannot reach {url.hostname}:{port}")
            return
        log(f"ALLOW {self.command} {url.hostname}:{port}")
        target = url.path or "/"
        if url.query:
            target += "?" + url.query
        head = [f"{self.command} {target} HTTP/1.1"]
        for name, value in self.headers.items():
            if name.lower() in ("proxy-connection", "proxy-authorization", "connection"):
                continue
            head.append(f"{name}: {value}")
        head.append("Connection: close")
        upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            upstream.sendall(self.rfile.read(length))
        self.close_connection = True
        pipe(self.connection, upstream)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = forward


def pipe(a: socket.socket, b: socket.socket) -> None:
    sockets = [a, b]
    try:
        while True:
            readable, _, broken = select.select(sockets, [], sockets, 600)
            if broken or not readable:
                return
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                (b if sock is a else a).sendall(data)
    except OSError:
        return
    finally:
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=3128)
    parser.add_argument("--allow", action="append", default=[])
    args = parser.parse_args()
    ALLOW.extend(parse_entry(e) for part in args.allow for e in part.split(",") if e.strip())
    server = ThreadingHTTPServer(("0.0.0.0", args.port), Proxy)
    server.daemon_threads = True
    log(f"ralph proxy on :{args.port}, allow: {', '.join(args.allow) or '(nothing)'}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
