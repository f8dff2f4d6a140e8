"""The ``[tool.ralph.docker-sandbox]`` config section (imports pydantic: loaded with config only)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

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
DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?")
"""A Debian package name, optionally ``:arch`` and ``=version`` (never an option: it goes to apt-get's argv)."""
VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SandboxConfig(ConfigSection):
    """Settings of the ``docker-sandbox`` runner."""

    image: str = Field(DEFAULT_IMAGE, description="sandbox image (build it with `ralph sandbox build`)")
    network: Literal["none", "allowlist", "open"] = Field(
        "allowlist", description="none: no network; allowlist: only allow_hosts through a proxy; open: a normal bridge"
    )
    allow_hosts: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ALLOW_HOSTS),
        description=(
            "host or host:port the allowlist proxy lets through (an unmetered agent's own model endpoint "
            "is added)"
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

    # -- the project's toolchain: `ralph sandbox build` makes the project's image from these --------------------

    packages: list[str] = Field(
        default_factory=list, description="Debian packages added to the project's sandbox image (e.g. python3-pytest)"
    )
    setup: list[str] = Field(
        default_factory=list,
        description=(
            "shell commands run as root in the project's image at build time, with network, in a copy of "
            "setup_files kept at /opt/ralph/setup"
        ),
    )
    setup_files: list[str] | None = Field(
        None,
        description=(
            "project files (or globs) setup reads: copied in, and their content is part of the image's hash "
            "(default: the files the setup commands name and the usual manifests: requirements*.txt, pyproject.toml, "
            "package.json, go.mod ...)"
        ),
    )
    path: list[str] = Field(
        default_factory=list, description="directories put first on PATH in the project's image (a venv's bin ...)"
    )
    image_env: dict[str, str] = Field(
        default_factory=dict, description="variables set in the project's image (at build time and in every container)"
    )
    devcontainer: bool | str = Field(
        True,
        description=(
            "use .devcontainer/devcontainer.json (its image or Dockerfile, containerEnv and create commands) when "
            "there is one; false: ignore it; a path: that file"
        ),
    )

    @field_validator("packages")
    @classmethod
    def _package_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not DEBIAN_PACKAGE.fullmatch(name):
                raise ValueError(f"{name!r} is not a Debian package name (e.g. \"python3-pytest\", \"nodejs\")")
        return value

    @field_validator("setup_files")
    @classmethod
    def _inside_the_project(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            parts = name.replace("\\", "/").split("/")
            if not name or name.startswith("/") or ".." in parts:
                raise ValueError(f"{name!r} is not a path inside the project (relative, without ..)")
        return value

    @field_validator("path")
    @classmethod
    def _absolute_dirs(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.startswith("/") or ":" in name:
                raise ValueError(f"{name!r} is not an absolute directory without ':' (e.g. \"/opt/venv/bin\")")
        return value

    @field_validator("image_env")
    @classmethod
    def _variable_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not VARIABLE.fullmatch(name) or name in ("PATH", "HOME"):
                raise ValueError(f"{name!r} cannot be set here (a variable name; PATH goes in `path`, HOME is the agent's)")
            if "\n" in text or "\0" in text:
                raise ValueError(f"the value of {name} holds a newline or NUL")
        return value

    def has_toolchain(self) -> bool:
        """The config asks for a project image of its own (a devcontainer counts too: :mod:`.toolchain`)."""
        return bool(self.packages or self.setup or self.path or self.image_env)
