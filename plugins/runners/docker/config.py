"""The ``[tool.ralph.docker-sandbox]`` config section (imports pydantic: loaded with config only)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ralph.api import ConfigSection

from .naming import DEFAULT_IMAGE

DEFAULT_ENV_ALLOWLIST = [
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
]
DEFAULT_ALLOW_HOSTS = ["api.anthropic.com:443", "api.openai.com:443"]


class SandboxConfig(ConfigSection):
    """Settings of the ``docker-sandbox`` runner."""

    image: str = Field(DEFAULT_IMAGE, description="sandbox image (build it with `ralph sandbox build`)")
    network: Literal["none", "allowlist", "open"] = Field(
        "allowlist", description="none: no network; allowlist: only allow_hosts through a proxy; open: a normal bridge"
    )
    allow_hosts: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOW_HOSTS),
        description=(
            "host or host:port the allowlist proxy lets through (the hosts of ANTHROPIC_BASE_URL and "
            "RALPH_CODEX_BASE_URL are added)"
        ),
    )
    env: list[str] = Field(
        default_factory=list, description="extra host environment variables passed into the sandbox when set"
    )
    env_allowlist: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ENV_ALLOWLIST),
        description="credential variables passed into the sandbox when set (never the whole environment)",
    )
    state_dir: str | None = Field(
        None, description="credential state dir mounted as the agent's ~/.claude (e.g. ~/.dclaude_state); never ~/.claude"
    )
    user: str | None = Field(None, description="uid:gid the agent runs as (default: the host user's)")
    memory: str = Field("4g", description="memory limit (also the swap limit)")
    cpus: float = Field(2.0, gt=0, description="CPU limit")
    pids: int = Field(1024, ge=16, description="process limit")
    tmpfs_size: str = Field("1g", description="size of the writable /tmp and home tmpfs")
