"""Who may use the dashboard: the person holding its token, from a page of the dashboard itself.

Every request must carry the token, as ``?token=`` (the URL ``ralph serve`` prints; the pages keep
it in their links, forms and stream addresses) or as ``Authorization: Bearer TOKEN``.  There is no
cookie, on purpose: a browser sends a cookie of ``127.0.0.1`` to every port of that address, so a
web server the agent starts on this machine (its project's dev server, say) would receive the
token when the person opened it.

Also refused, before any page is looked at:

- a ``Host`` header that is not the address the dashboard listens on (a DNS-rebinding page);
- a POST whose ``Origin`` is another site, or that a browser marks ``Sec-Fetch-Site: cross-site``;
  forms also carry :func:`form_key` (derived from the token), which the form handler checks.

Every answer, refusals included, carries headers that keep the pages inert if something ever got
through the escaping: a Content-Security-Policy without inline scripts, ``nosniff``, no referrer
beyond the dashboard itself (its addresses hold the token; ``same-origin``, not ``no-referrer``, so
that the browser still names the dashboard as the ``Origin`` of its own forms), no framing, no caching.  Pure ASGI, standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["PAGE_POLICY", "REPORT_POLICY", "TokenGate", "allowed_hosts", "form_key", "is_loopback", "token_matches"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The dashboard's own pages: scripts and styles only from its files, nothing inline."""
REPORT_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; base-uri 'none'"
"""The HTML report (one self-contained page with an inline style sheet and SVG): no script at all."""
MIN_TOKEN_CHARS = 16

_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is the token (compared in constant time)."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


def form_key(token: str) -> str:
    """The value every form of the dashboard carries (and the POST handler checks): derived from the token."""
    return hmac.new(token.encode(), b"ralph serve: form", hashlib.sha256).hexdigest()[:32]


def is_loopback(host: str) -> bool:
    """True when ``host`` (an address or a name) means only this machine."""
    name = host.strip("[]")
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    if name.lower() == "localhost":
        return True
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """The ``Host`` headers accepted when listening on ``host``:``port`` (None: any, for a wildcard address)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host.lower()}
    if is_loopback(host):
        names |= {"127.0.0.1", "localhost", "[::1]", "::1"}
    out = set()
    for name in names:
        shown = f"[{name}]" if ":" in name and not name.startswith("[") else name
        out.add(f"{shown}:{port}")
        if port == 80:
            out.add(shown)
    return out


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class TokenGate:
    """ASGI middleware: the checks above, then ``app``; security headers on every answer."""

    def __init__(self, app: ASGIApp, token: str, hosts: Iterable[str] | None) -> None:
        if len(token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the token must have at least {MIN_TOKEN_CHARS} characters")
        self.app = app
        self.token = token
        self.hosts = None if hosts is None else {h.lower() for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # websockets: none here
        refusal = self.refusal(scope)

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {bytes(k).lower() for k, _ in headers}
                headers += [(k, v) for k, v in _HEADERS if k not in present]
                if b"content-security-policy" not in present:
                    headers.append((b"content-security-policy", PAGE_POLICY.encode()))
                message = {**message, "headers": headers}
            await send(message)

        if refusal is not None:
            status, text = refusal
            body = (text + "\n").encode()
            await send_with_headers({"type": "http.response.start", "status": status, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
            await send_with_headers({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, why) when the request is refused, else None."""
        host = (_header(scope, b"host") or "").lower()
        if self.hosts is not None and host not in self.hosts:
            return 421, "ralph serve: refused: the Host header is not the address this dashboard listens on"
        given = dict(parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1"))).get("token")
        authorization = _header(scope, b"authorization")
        if given is None and authorization and authorization[:7].lower() == "bearer ":
            given = authorization[7:].strip()
        if not token_matches(given, self.token):
            return 403, "ralph serve: refused: this dashboard needs its token (open the URL `ralph serve` printed)"
        if scope.get("method") not in ("GET", "HEAD"):
            origin = _header(scope, b"origin")
            if origin is not None and origin.lower() != f"http://{host}":
                return 403, "ralph serve: refused: a form sent from another site"
            if (_header(scope, b"sec-fetch-site") or "same-origin") not in ("same-origin", "none"):
                return 403, "ralph serve: refused: a form sent from another site"
        return None
