"""Names and labels of everything the sandbox runner creates (stdlib only)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

DEFAULT_IMAGE = "ralph-sandbox:latest"
OFFLINE_BASE_IMAGE = "ralph-sandbox-base:bookworm"
LABEL = "ralph.sandbox"
"""Every container and network the runner creates carries ``ralph.sandbox=1``."""
LABEL_PROJECT = "ralph.project"
LABEL_ROLE = "ralph.role"
LABEL_OWNER = "ralph.owner"
LABEL_RECIPE = "ralph.recipe"
IN_CONTAINER_LIB = "/opt/ralph/lib"
IN_CONTAINER_BIN = "/opt/ralph/bin"
IN_CONTAINER_HOME = "/home/agent"
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The gates' ``PATH`` in an image that sets none (the agent's has ``/opt/ralph/bin`` first)."""
HOOK_CLIENT = f"{IN_CONTAINER_LIB}/ralph/hooks/client.py"
HOOK_ARGV = ("python3", "-I", "-S", HOOK_CLIENT)
"""The hook client inside the container (stdlib only, from the read-only library mount)."""
ASK_SHIM = "\n".join([
    "#!/bin/sh",
    "# `ralph` inside ralph's sandbox: only `ralph ask` (the agent's question to a person, over the loop's hook socket).",
    'case "$1" in',
    f'  ask) shift; exec {" ".join(HOOK_ARGV)} ask "$@" ;;',
    '  *) echo "ralph: inside the sandbox only \\`ralph ask \\"QUESTION\\"\\` is available (the loop runs outside)" >&2; exit 2 ;;',
    "esac",
    "",
])
"""``/opt/ralph/bin/ralph`` in the container (written into the run directory, mounted read-only)."""
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
PROXY_PORT = 3128
PROXY_ALIAS = "ralph-proxy"


def sandbox_name(project_dir: Path) -> str:
    """``ralph-<project path sanitized>`` (seed §3), kept within Docker's name rules."""
    sanitized = re.sub(r"[^A-Za-z0-9._-]", "_", str(project_dir))
    name = f"ralph-{sanitized}"
    if len(name) > 120:
        digest = hashlib.sha256(str(project_dir).encode()).hexdigest()[:10]
        name = f"{name[:100]}-{digest}"
    return name


def project_labels(project_dir: Path, role: str, owner: str) -> dict[str, str]:
    return {LABEL: "1", LABEL_PROJECT: str(project_dir), LABEL_ROLE: role, LABEL_OWNER: owner}


def reachable_endpoint(url: str, gateway: str) -> str:
    """``url`` with a loopback host replaced by ``gateway`` (this machine as the containers see it)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        return url
    netloc = gateway + (f":{parts.port}" if parts.port else "")
    if parts.username or parts.password:
        netloc = parts.netloc.rsplit("@", 1)[0] + "@" + netloc
    return urlunsplit(parts._replace(netloc=netloc))
