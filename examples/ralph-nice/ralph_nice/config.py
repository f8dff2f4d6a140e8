"""``[tool.ralph.nice]``: how much lower the agent's CPU priority is."""

from __future__ import annotations

from pydantic import Field

from ralph.api import ConfigSection


class NiceConfig(ConfigSection):
    """``[tool.ralph.nice]``; unknown keys are rejected, naming their TOML path."""

    niceness: int = Field(10, ge=1, le=19, description="the increment passed to `nice -n`")
