"""What a build of the project's image borrows from this machine: its proxy and the CAs it trusts.

Machines behind a TLS-intercepting egress trust extra certificate authorities
(``/usr/local/share/ca-certificates/*.crt``, bundled into ``/etc/ssl/certs/ca-certificates.crt``)
that a container does not: ``pip`` or ``npm`` in a build would fail with "certificate verify
failed".  The build gets this machine's bundle in its ``/tmp`` (a directory of this machine
mounted for the build: a mount is never part of a commit) and the variables that point the usual
tools at it, and the proxy variables when they are set, on the build's own commands only: none of
it is written into the image (its config, its layers) or reaches a sandbox at run time.  Stdlib only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["BUILD_DIR", "BuildEnv", "build_env", "ca_bundle"]

BUILD_DIR = "/tmp/ralph-build"
"""Where the build's borrowed files are (its /tmp is a directory of this machine: never part of the image)."""
CA_FILE = f"{BUILD_DIR}/ca-certificates.crt"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY")
HOST_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
EXTRA_CA_DIR = "/usr/local/share/ca-certificates"
CA_VARIABLES = (
    "SSL_CERT_FILE",  # OpenSSL (Python's ssl, curl, Go's crypto/x509 on Linux)
    "REQUESTS_CA_BUNDLE",  # requests
    "PIP_CERT",  # pip
    "CURL_CA_BUNDLE",  # curl
    "NODE_EXTRA_CA_CERTS",  # node, npm
    "GIT_SSL_CAINFO",  # git
    "CARGO_HTTP_CAINFO",  # cargo
    "UV_NATIVE_TLS",  # uv: use the system store (set to "1" below, not to the file)
)


@dataclass
class BuildEnv:
    """The variables for the build's commands and the CA bundle to mount (None: the image's own)."""

    env: dict[str, str] = field(default_factory=dict)
    ca_bundle: bytes | None = None
    proxies: list[str] = field(default_factory=list)
    """The proxy variables carried in (names)."""
    host_network: bool = False
    """A proxy listens on this machine's loopback: the build container shares this machine's network."""

    def apt_options(self) -> list[str]:
        """apt-get's options for the bundle (apt reads none of the variables)."""
        return ["-o", f"Acquire::https::CAInfo={CA_FILE}"] if self.ca_bundle is not None else []

    def describe(self) -> str:
        """One line for ``ralph sandbox build``: what the build borrows."""
        parts = []
        if self.ca_bundle is not None:
            parts.append("this machine's CA certificates")
        if self.proxies:
            parts.append("its proxy (" + ", ".join(self.proxies) + ")")
        if self.host_network:
            parts.append("its network (the proxy is on loopback)")
        return "the build uses " + " and ".join(parts) if parts else "the build uses the image's own CAs, no proxy"


def ca_bundle(environ: dict[str, str] | None = None) -> bytes | None:
    """This machine's CA bundle plus its extra CAs (``/usr/local/share/ca-certificates``), or None."""
    environ = dict(os.environ) if environ is None else environ
    chunks: list[bytes] = []
    for candidate in (environ.get("SSL_CERT_FILE"), *HOST_BUNDLES):
        if candidate and Path(candidate).is_file():
            try:
                chunks.append(Path(candidate).read_bytes())
                break
            except OSError:
                continue
    extra = Path(EXTRA_CA_DIR)
    if extra.is_dir():
        for cert in sorted(extra.rglob("*.crt")):
            try:
                data = cert.read_bytes()
            except OSError:
                continue
            if not any(data.strip() in chunk for chunk in chunks):
                chunks.append(data)
    if not chunks:
        return None
    return b"\n".join(chunk.rstrip(b"\n") for chunk in chunks) + b"\n"


def build_env(environ: dict[str, str] | None = None) -> BuildEnv:
    """The build's borrowed settings from ``environ`` (default: this process's) and this machine's CAs."""
    environ = dict(os.environ) if environ is None else environ
    found = BuildEnv(ca_bundle=ca_bundle(environ))
    if found.ca_bundle is not None:
        found.env.update({name: CA_FILE for name in CA_VARIABLES if name != "UV_NATIVE_TLS"})
        found.env["UV_NATIVE_TLS"] = "1"
    for upper in PROXY_VARIABLES:
        for name in (upper, upper.lower()):
            value = environ.get(name)
            if value:
                found.env[name] = value
                found.proxies.append(name)
                host = urlsplit(value if "://" in value else f"http://{value}").hostname
                if upper != "NO_PROXY" and host in ("127.0.0.1", "localhost", "::1"):
                    found.host_network = True
    return found
