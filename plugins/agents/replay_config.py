"""Config model of the replay agent (imported only when config is loaded)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ReplayConfig(BaseModel):
    """``[tool.ralph.replay]``."""

    model_config = ConfigDict(extra="forbid")

    script: str | None = None
