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
HOOK_CLIENT = f"{IN_CONTAINER_LIB}/ralph/hooks/client.py"
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
