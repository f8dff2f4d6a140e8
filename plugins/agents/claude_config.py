"""The ``[tool.ralph.claude]`` config section (kept apart: it imports pydantic)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from ralph.api import ConfigSection

DEFAULT_TOOLS: dict[str, list[str]] = {
    "implement": ["Bash", "Read", "Edit", "Write"],
    "review-fix": ["Bash", "Read", "Edit", "Write"],
    # A review writes only the task list and the progress log (Edit, restricted to the ralph
    # directory by the review-scope guard) and commits them (Bash); it creates no files.
    "review": ["Bash", "Read", "Edit"],
    # the quality gate's extra call: read and run, change nothing
    "quality": ["Bash", "Read"],
    # the spec gate's reviewer: read and run, change nothing (the loop undoes any change anyway)
    "spec": ["Bash", "Read"],
    # any other read-only call (a third-party gate's reviewer)
    "read-only": ["Bash", "Read"],
}
"""Claude Code built-in tools offered per iteration mode, per extra call's purpose, or for any
read-only call (``--tools``): the CLI refuses every other built-in tool.  A call matching no key gets
the CLI's own set."""


SettingSource = Literal["project", "local"]
DEFAULT_SETTING_SOURCES: tuple[SettingSource, ...] = ("project", "local")
"""What Claude Code reads besides ralph's settings by default (``--setting-sources``); never ``user``."""


class ClaudeConfig(ConfigSection):
    """Settings of the ``claude`` agent."""

    binary: str | None = Field(None, description="path of the claude executable (default: found automatically)")
    extra_args: list[str] = Field(default_factory=list, description="arguments appended to every claude command")
    env_passthrough: list[str] = Field(
        default_factory=list, description="environment variables passed through to claude when set"
    )
    tools: dict[str, list[str]] = Field(
        default_factory=lambda: {mode: list(names) for mode, names in DEFAULT_TOOLS.items()},
        description=(
            "built-in tools per mode (implement, review, review-fix), extra call (quality, spec) or read-only "
            "call (read-only), passed as "
            '--tools; ["default"] keeps the CLI\'s own set; keys you set replace only those entries'
        ),
    )
    disallowed_tools: list[str] = Field(
        default_factory=list,
        description='permission rules the CLI denies in every mode (--disallowedTools), e.g. "Bash(git push:*)"',
    )

    setting_sources: list[SettingSource] = Field(
        default_factory=lambda: list(DEFAULT_SETTING_SOURCES),
        description=(
            "the settings Claude Code reads besides ralph's own (--setting-sources): project (.claude/settings.json, "
            "CLAUDE.md, skills, agents), local (.claude/settings.local.json); the person's user settings are never "
            "read during a loop; [] reads none"
        ),
    )
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "the MCP servers the agent gets (as in .mcp.json's mcpServers); no other is started during a loop "
            "(--strict-mcp-config: the project's .mcp.json and the user's servers are ignored)"
        ),
    )

    @field_validator("setting_sources", mode="before")
    @classmethod
    def _no_user_settings(cls, value: Any) -> Any:
        if isinstance(value, list) and "user" in value:
            raise ValueError('"user" is not allowed: during a loop the agent reads only the configuration ralph '
                             'gives it (use "project" and "local", or put what the agent needs into the project)')
        return value

    @field_validator("tools")
    @classmethod
    def _merge_defaults(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for mode, names in value.items():
            for name in names:
                if not name or not name.replace("_", "").isalnum():
                    raise ValueError(f"tools.{mode}: {name!r} is not a tool name (e.g. \"Bash\", \"Read\")")
        return {**{mode: list(names) for mode, names in DEFAULT_TOOLS.items()}, **value}
