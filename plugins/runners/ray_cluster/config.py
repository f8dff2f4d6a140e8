"""The ``[tool.ralph.ray]`` config section (imports pydantic: loaded with config only)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ralph.api import ConfigSection

DEFAULT_ENV = [
    "ANTHROPIC_*",
    "CLAUDE_*",
    "OPENAI_*",
    "DISABLE_*",
    "API_TIMEOUT_MS",
    "IS_SANDBOX",
    "GIT_AUTHOR_*",
    "GIT_COMMITTER_*",
]


class RayConfig(ConfigSection):
    """Settings of the ``ray`` runner and of ``ralph run --parallel --engine ray``."""

    address: str | None = Field(
        None,
        description='"auto", "ray://host:10001" or "host:port"; unset: a local cluster started for the run and stopped after it',
    )
    num_cpus: float = Field(1.0, ge=0, description="CPUs one iteration's agent needs on its node")
    memory: int | None = Field(None, ge=0, description="bytes of memory one iteration needs (Ray's `memory` resource)")
    resources: dict[str, float] = Field(
        default_factory=dict, description='custom Ray resources, e.g. {"agent" = 1} to place the agent on nodes that offer them'
    )
    label_selector: dict[str, str] = Field(default_factory=dict, description="node labels the agent's node must have")
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="passed to Ray as the actor's runtime_env")
    env: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ENV),
        description="host environment variables sent to the node when set (a trailing * matches a prefix)",
    )
    agent_runs: Literal["direct", "docker-sandbox"] = Field(
        "direct", description="how the agent runs on the node: a plain process, or in the docker-sandbox container"
    )
    poll_seconds: float = Field(0.2, gt=0, le=5, description="longest wait of one output/hook poll")
    call_timeout: float = Field(60.0, gt=0, description="seconds a single call to the node may take before it counts as lost")
