"""The ``[tool.ralph.claude]`` config section (kept apart: it imports pydantic)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClaudeConfig(BaseModel):
    """Settings of the ``claude`` agent."""

    model_config = ConfigDict(extra="forbid")

    binary: str | None = Field(None, description="path of the claude executable (default: found automatically)")
    extra_args: list[str] = Field(default_factory=list, description="arguments appended to every claude command")
    env_passthrough: list[str] = Field(
        default_factory=list, description="environment variables passed through to claude when set"
    )
