"""Config model of the replay agent (imported only when config is loaded)."""

from __future__ import annotations

from ralph.api import ConfigSection


class ReplayConfig(ConfigSection):
    """``[tool.ralph.replay]``."""

    script: str | None = None
