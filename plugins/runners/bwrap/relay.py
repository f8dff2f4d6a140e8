"""The bwrap sandbox's only ways out, on this machine's side: Unix sockets the runner serves.

A sandbox with its own network namespace has a loopback interface and nothing else.  The runner
makes its way out explicit: a private directory (mode 0700, mounted read-only inside) holds Unix
sockets it serves from threads of the loop's process, and the sandbox's first process
(``inside.py``) carries connections to ``127.0.0.1:PORT`` inside to them.

- ``tcp-PORT.sock`` reaches ``127.0.0.1:PORT`` of this machine and nothing else: the loop's model
  meter (whose per-process session URL the agent is given), or a model endpoint on this machine's
  loopback when the agent is not metered.
- ``proxy.sock`` is an HTTP proxy (``CONNECT host:port``, or a plain request with an absolute URL)
  that connects only to the hosts of the allowlist (``*``: any host), from this machine, and answers
  403 to the rest, and to every name that resolves to a loopback, link-local or unspecified address
  (also spelled as an IPv4-mapped or -compatible IPv6 one): a listed name cannot be pointed at a
  service on this machine's loopback, and the addresses checked are the ones connected to.

What decides is here, outside the sandbox: nothing the agent runs inside can widen it.  Every
decision of the proxy is kept in :attr:`Relay.decisions` (``allow host:port`` / ``deny host:port``).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Callable

CHUNK = 1 << 16
MAX_HEAD = 1 << 16
CONNECT_TIMEOUT = 30.0
MAX_CONNECTIONS = 128
"""Connections the relay carries at once (each costs two threads of the loop's process); more are closed."""


def parse_entry(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` or ``*.domain[:port]`` as (pattern, port or None)."""
    entry = entry.strip().lower()
    if entry.startswith("[") and "]" in entry:
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        return host, int(port)
    return entry, None


def allowed(rules: list[tuple[str, int | None]], host: str, port: int) -> bool:
    """Whether ``host:port`` matches one of ``rules`` (:func:`parse_entry`'s)."""
    host = host.lower().strip("[]")
    for pattern, want in rules:
        if want is not None and want != port:
            continue
        if pattern in ("*", host) or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def own_address(host: str, port: int) -> str | None:
    """The first address ``host`` resolves to that is this machine's (:func:`is_own`), or None; a
    name that does not resolve is None (the connection fails by itself)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for info in infos:
        if is_own(str(info[4][0])):
            return str(info[4][0]).split("%")[0]
    return None


def is_own(text: str) -> bool:
    """Whether the address ``text`` reaches this machine or its link: loopback, link-local, unspecified or
    ``0.0.0.0/8``, in every spelling the kernel connects to (an IPv4-mapped ``::ffff:127.0.0.1``, an
    IPv4-compatible ``::127.0.0.1``); an address that does not parse counts as this machine's."""
    import ipaddress

    try:
        address = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return True
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        if int(address) >> 32 == 0:  # ::a.b.c.d (IPv4-compatible; :: and ::1 included)
            candidates.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    for each in candidates:
        if each.is_loopback or each.is_link_local or each.is_unspecified:
            return True
        if isinstance(each, ipaddress.IPv4Address) and each in ipaddress.IPv4Network("0.0.0.0/8"):
            return True
    return False


def _connect(host: str, port: int) -> tuple[socket.socket | None, str | None, str]:
    """(a connection to ``host:port``, None, "") or (None, this machine's address it resolves to, "") or
    (None, None, why it failed). The name is resolved once: the addresses checked are the addresses
    connected to (a name cannot resolve elsewhere in between)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return None, None, str(exc)
    for info in infos:
        if is_own(str(info[4][0])):
            return None, str(info[4][0]).split("%")[0], ""
    error = "no address"
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(address)
            sock.settimeout(None)
            return sock, None, ""
        except OSError as exc:
            sock.close()
            error = str(exc)
    return None, None, error


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _splice(a: socket.socket, b: socket.socket) -> None:
    back = threading.Thread(target=_pump, args=(b, a), daemon=True)
    back.start()
    _pump(a, b)
    back.join()
    a.close()
    b.close()


class Relay:
    """The Unix sockets of one run's sandboxes (see the module's docstring); :meth:`close` ends them."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="ralph-bwrap-net-"))
        os.chmod(self.directory, 0o700)
        self._listeners: dict[str, socket.socket] = {}
        self._lock = threading.Lock()
        self.rules: list[tuple[str, int | None]] = []
        self.decisions: list[str] = []
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0
        """Connections closed at once because :data:`MAX_CONNECTIONS` were open."""

    # -- the sockets ---------------------------------------------------------------------------

    def forward(self, port: int) -> Path:
        """The socket that reaches ``127.0.0.1:PORT`` of this machine (made on the first call)."""
        name = f"tcp-{int(port)}.sock"
        return self._serve(name, lambda client: self._to_port(client, int(port)))

    def proxy(self, hosts: list[str]) -> Path:
        """The allowlist proxy's socket; ``hosts`` replaces the allowlist (entries as :func:`parse_entry` takes)."""
        self.rules = [parse_entry(host) for host in hosts if host.strip()]
        return self._serve("proxy.sock", self._proxy_one)

    def close(self) -> None:
        """Stop serving and remove the directory."""
        with self._lock:
            listeners, self._listeners = self._listeners, {}
        for listener in listeners.values():
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _serve(self, name: str, handle: Callable[[socket.socket], None]) -> Path:
        path = self.directory / name
        with self._lock:
            if name in self._listeners:
                return path
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(64)
            self._listeners[name] = listener
        threading.Thread(target=self._accept, args=(listener, handle), name=f"ralph-bwrap-{name}", daemon=True).start()
        return path

    def _accept(self, listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):  # a flood from the sandbox costs the loop nothing more
                self.refused += 1
                client.close()
                continue
            threading.Thread(target=self._carry, args=(handle, client), daemon=True).start()

    def _carry(self, handle: Callable[[socket.socket], None], client: socket.socket) -> None:
        try:
            handle(client)
        finally:
            self._slots.release()

    # -- what each socket does -----------------------------------------------------------------

    def _to_port(self, client: socket.socket, port: int) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        _splice(client, upstream)

    def _proxy_one(self, client: socket.socket) -> None:
        try:
            head, rest = _read_head(client)
            method, target = _request_line(head)
            host, port = _destination(method, target)
        except (OSError, ValueError):
            _answer(client, 400, "ralph sandbox proxy: not an HTTP proxy request")
            return
        if not allowed(self.rules, host, port):
            self.decisions.append(f"deny {host}:{port}")
            _answer(client, 403, f"ralph sandbox proxy: {host}:{port} is not in the network allowlist")
            return
        upstream, mine, why = _connect(host, port)
        if mine is not None:
            self.decisions.append(f"deny {host}:{port}")
            _answer(client, 403, f"ralph sandbox proxy: {host}:{port} is this machine ({mine}), which the sandbox "
                                 "does not reach")
            return
        self.decisions.append(f"allow {host}:{port}")
        if upstream is None:
            _answer(client, 502, f"ralph sandbox proxy: cannot reach {host}:{port}: {why}")
            return
        try:
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                upstream.sendall(head + rest)
        except OSError:
            upstream.close()
            client.close()
            return
        _splice(client, upstream)


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request's head (through the blank line) and the bytes that came after it."""
    client.settimeout(CONNECT_TIMEOUT)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(CHUNK)
        if not chunk:
            raise ValueError("closed before the request's head")
        data += chunk
        if len(data) > MAX_HEAD:
            raise ValueError("request head too long")
    client.settimeout(None)
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _request_line(head: bytes) -> tuple[str, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError("not a request line")
    return parts[0].upper(), parts[1]


def _destination(method: str, target: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    if method == "CONNECT":
        host, port = parse_entry(target)
        if port is None:
            raise ValueError("CONNECT without a port")
        return host, port
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError("a plain request needs an absolute http:// URL")
    return url.hostname, url.port or 80


def _answer(client: socket.socket, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(status, "Error")
    body = (message + "\n").encode()
    try:
        client.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                       "Connection: close\r\n\r\n".encode() + body)
    except OSError:
        pass
    client.close()


__all__ = ["Relay", "allowed", "is_own", "own_address", "parse_entry"]
