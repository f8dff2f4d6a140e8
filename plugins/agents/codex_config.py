"""The ``[tool.ralph.codex]`` config section (kept apart: it imports pydantic)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ralph.api import ConfigSection


class CodexConfig(ConfigSection):
    """Settings of the ``codex`` agent (the OpenAI Codex CLI)."""

    binary: str | None = Field(None, description="path of the codex executable (default: found automatically)")
    model: str | None = Field(None, description="model for codex when no per-mode or --model choice applies")
    extra_args: list[str] = Field(default_factory=list, description="arguments added to every `codex exec` command")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Codex config overrides, each passed as `-c key=value` (value as TOML)"
    )
    base_url: str | None = Field(
        None, description="an OpenAI-compatible Responses endpoint; ralph defines a model provider for it"
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key for base_url")
    retries: int = Field(1, ge=0, description="request/stream retries for the base_url provider")
    sandbox: Literal["workspace-write", "read-only", "danger-full-access"] = Field(
        "workspace-write", description="Codex's own sandbox in direct mode (off inside ralph's container)"
    )
    env_passthrough: list[str] = Field(
        default_factory=list, description="environment variables passed through to codex when set"
    )
