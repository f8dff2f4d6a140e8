"""Config models of the default gates (imported only when config is loaded)."""

from __future__ import annotations

from pydantic import Field

from ralph.api import ConfigSection


class VerifyConfig(ConfigSection):
    """``[tool.ralph.verify]``: the test gate running the task list's verifyCommands."""

    soft_timeout: float = Field(300.0, gt=0, description="seconds before a warning")
    hard_timeout: float = Field(600.0, gt=0, description="seconds before the commands are killed")


class QualityConfig(ConfigSection):
    """``[tool.ralph.quality]``: the optional quality review (soft gate)."""

    enabled: bool = False
    soft_timeout: float = Field(120.0, gt=0)
    hard_timeout: float = Field(180.0, gt=0)
    prompt: str | None = Field(None, description="path to a custom quality-review prompt")


class SpecConfig(ConfigSection):
    """``[tool.ralph.spec]``: the spec gate (an independent reviewer's structured verdict, hard)."""

    enabled: bool | None = Field(None, description="default: on under skip-review, off under review")
    agent: str | None = Field(None, description="agent plugin of the reviewer (default: the review agent)")
    model: str | None = Field(None, description="model of the reviewer (default: the agent's own)")
    soft_timeout: float = Field(180.0, gt=0, description="seconds before a warning (seed 002: 3 min)")
    hard_timeout: float = Field(300.0, gt=0, description="seconds before the reviewer is stopped (seed 002: 5 min)")
    prompt: str | None = Field(None, description="path to a custom spec-review prompt (same placeholders)")
