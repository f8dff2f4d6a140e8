"""Config models of the default gates (imported only when config is loaded)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VerifyConfig(BaseModel):
    """``[tool.ralph.verify]``: the test gate running the task list's verifyCommands."""

    model_config = ConfigDict(extra="forbid")

    soft_timeout: float = Field(300.0, gt=0, description="seconds before a warning")
    hard_timeout: float = Field(600.0, gt=0, description="seconds before the commands are killed")


class QualityConfig(BaseModel):
    """``[tool.ralph.quality]``: the optional quality review (soft gate)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    soft_timeout: float = Field(120.0, gt=0)
    hard_timeout: float = Field(180.0, gt=0)
    prompt: str | None = Field(None, description="path to a custom quality-review prompt")
