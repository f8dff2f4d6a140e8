"""The ``[tool.ralph.bwrap]`` config section (imports pydantic: loaded with the config only)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ralph.api import ConfigSection

DEFAULT_ENV_ALLOWLIST = [
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "OPENAI_API_KEY",
    "RALPH_CODEX_BASE_URL",
]
DEFAULT_ALLOW_HOSTS = ["api.anthropic.com:443", "api.openai.com:443"]
DEFAULT_TOOLCHAIN = [".venv", "venv", "node_modules"]


class BwrapConfig(ConfigSection):
    """Settings of the ``bwrap`` runner."""

    network: Literal["none", "allowlist", "open"] = Field(
        "allowlist",
        description=(
            "none: loopback only; allowlist: loopback only, plus the loop's model meter and allow_hosts "
            "through a proxy outside the sandbox; open: the meter and any host but this machine's loopback "
            "and link-local addresses, through the same proxy"
        ),
    )
    allow_hosts: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOW_HOSTS),
        description=(
            "host, host:port or *.domain[:port] the allowlist proxy lets through (the model APIs are dropped "
            "when the loop meters the agent: it then reaches the model only through the meter)"
        ),
    )
    env: list[str] = Field(
        default_factory=list,
        description="more host environment variables passed into the sandbox when set (globs: `CLAUDE_CODE_*`)",
    )
    env_allowlist: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ENV_ALLOWLIST),
        description="credential variables passed into the sandbox when set (never the whole environment)",
    )
    toolchain: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TOOLCHAIN),
        description=(
            "entries of the project that git ignores (a virtualenv, node_modules) shown read-only in the "
            "sandbox's checkout at the same place, for the agent and the gates"
        ),
    )
    ro_binds: list[str] = Field(
        default_factory=list,
        description="more host paths shown read-only inside (a tool under your home: `~/.cargo`)",
    )
    hide: list[str] = Field(
        default_factory=list,
        description="more host paths hidden inside (an empty directory in their place)",
    )
    tmpfs_size: str = Field("1g", pattern=r"^[0-9]+[kKmMgG]?$",
                            description="how much each private directory (/tmp, the home, /run) may hold")
    checkout_dir: str | None = Field(
        None, description="where the agent's checkout of each run is made (default: the system's temp directory)"
    )
