"""``[tool.ralph.remote]``: how to start the agent host, and what of this machine's environment it gets."""

from __future__ import annotations

import sys

from pydantic import Field

from ralph.api import ConfigSection


def _this_machine() -> list[str]:
    return [sys.executable, "-I", "-m", "ralph_remote.host"]


class RemoteConfig(ConfigSection):
    """``[tool.ralph.remote]``; unknown keys are rejected, naming their TOML path."""

    command: list[str] = Field(
        default_factory=_this_machine, min_length=1,
        description="the command that starts the agent host and talks to it on stdin/stdout "
                    '(["ssh", "build-box", "/opt/ralph/bin/python", "-m", "ralph_remote.host"]; default: '
                    "this machine's Python, to try it out)",
    )
    env: list[str] = Field(
        default_factory=list,
        description="names (fnmatch patterns) of this machine's environment variables the agent gets "
                    '(["ANTHROPIC_*"]); it also sees the agent host\'s own',
    )
