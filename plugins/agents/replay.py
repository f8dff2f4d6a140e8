"""The ``replay`` agent: a scripted agent for demos and tests.

It runs as a real subprocess (through any runner) and acts out a JSON script:
per iteration a list of actions that write files, edit story fields, run
commands, commit and say things.  Its output uses Claude Code's stream-json
shape, so it exercises the same parsing as the real agent.

Script format (``[tool.ralph.replay] script = "path.json"`` or
``RALPH_REPLAY_SCRIPT``)::

    {"iterations": {"1": [{"say": "hi"}, {"write": {"path": "a.py", "content": "..."}},
                          {"set": {"story": "US-001", "fields": {"reviewStatus": "needs_review"}}},
                          {"commit": "feat: [US-001] - A"}],
                    "2": [...]},
     "default": [],
     "quality": {"2": [{"say": "WARNING: long function"}]}}

Extra calls (a gate's review) use the section named after their purpose
(``quality``), keyed by iteration, with ``"default"`` as fallback.

Actions: ``say``, ``write``, ``append``, ``set``, ``run``, ``commit``,
``sleep``, ``cost``, ``exit``.  An iteration with no actions says nothing
(an empty response, which the loop retries).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ralph.api import Agent, AgentEvent, AgentInvocation, Availability, Check, PreflightContext, ProcessSpec, hookimpl

SCRIPT_ENV = "RALPH_REPLAY_SCRIPT"


class ReplayAgent(Agent):
    """Acts out a script instead of calling a model."""

    name = "replay"
    description = "scripted agent for demos and tests (no model)"
    uses_channel = True

    def script_path(self) -> Path | None:
        section = self.settings.section("replay")
        configured = getattr(section, "script", None) or os.environ.get(SCRIPT_ENV)
        if not configured:
            return None
        path = Path(configured)
        return path if path.is_absolute() else self.settings.project_dir / path

    def availability(self) -> Availability:
        path = self.script_path()
        if path is None:
            return Availability.no(
                f"the replay agent needs a script: set [tool.ralph.replay] script or {SCRIPT_ENV}"
            )
        if not path.is_file():
            return Availability.no(f"replay script {path} not found")
        return Availability.yes()

    def preflight(self, context: PreflightContext) -> list[Check]:
        """The script parses and is visible where the runner runs the agent."""
        import json

        path = self.script_path()
        if path is None or not path.is_file():
            return [Check(False, self.availability().reason, f"set {SCRIPT_ENV} or [tool.ralph.replay] script")]
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return [Check(False, f"replay script {path} is not valid JSON: {exc}", "fix the script")]
        if not context.view.sees(path):
            return [
                Check(
                    False,
                    f"replay script {path} is not visible in {context.view.where} "
                    f"(the {context.runner.name} runner shows the agent only the project)",
                    f"move the script into the project (e.g. {context.project_dir / 'ralph' / path.name}), "
                    "or run with --runner direct",
                )
            ]
        return [Check(True, f"replay script {path} is visible in {context.view.where}")]

    def process(self, invocation: AgentInvocation) -> ProcessSpec:
        script = self.script_path()
        channel = invocation.channel
        tasks = str(channel.tasks_file) if channel is not None else str(self.settings.ralph_dir / "tasks.json")
        argv = [
            sys.executable,
            "-P",  # the cwd (the project) must not shadow installed packages
            "-m",
            "ralph_plugins.agents.replay_main",
            "--script",
            str(script),
            "--iteration",
            str(invocation.iteration),
            "--tasks",
            str(tasks),
            "--purpose",
            invocation.purpose,
        ]
        return ProcessSpec(
            argv=argv, env=dict(invocation.env), cwd=invocation.project_dir, stdin=invocation.prompt, program="python3",
            channel=channel,
        )

    def parse_line(self, line: str) -> list[AgentEvent]:
        from ralph_plugins.agents.streamjson import parse_line

        return parse_line(line)


@hookimpl(trylast=True)
def ralph_register_agents(register):  # type: ignore[no-untyped-def]
    """Register the replay agent."""
    register(ReplayAgent)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """The ``[tool.ralph.replay]`` section: ``script``."""
    from ralph_plugins.agents.replay_config import ReplayConfig

    return {"replay": ReplayConfig}
