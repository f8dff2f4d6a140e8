"""The quality review (soft gate, off by default): a separate agent call with a quality prompt.

Its findings are logged and shown; they never block a story.
"""

from __future__ import annotations

import time
from pathlib import Path

from ralph.api import Gate, GateContext, GateResult, hookimpl
from ralph.api.text import fence_for

QUALITY_PROMPT = """You are a code-quality reviewer with a fresh context. Do not change any file.
Review this diff of story {story} for code quality only (naming, duplication, error handling,
tests, dead code). Reply with one line per finding, each starting with "WARNING: ", or the single
line "NO WARNINGS" when you find nothing worth changing.

{fence}diff
{diff}
{fence}
"""
MAX_DIFF_CHARS = 60_000


class QualityReviewGate(Gate):
    """Asks the agent for a quality review of the iteration's diff; warnings only."""

    name = "quality"
    description = "a separate agent call reviewing code quality — soft gate, [tool.ralph.quality] enabled = true"
    hard = False
    order = 50

    def enabled(self) -> bool:
        section = self.settings.section("quality")
        return bool(section and section.enabled)

    @property
    def timeouts(self) -> tuple[float, float]:
        section = self.settings.section("quality")
        if section is None:
            return 120.0, 180.0
        return section.soft_timeout, section.hard_timeout

    def run(self, context: GateContext) -> GateResult:
        started = time.monotonic()
        base = context.checkpoint or "HEAD~1"
        from ralph.api.process import git  # hardened, after the git metadata check

        diff = git(context.project_dir, "diff", base, "--", ".", check=False).stdout
        if not diff.strip():
            return GateResult(self.name, True, "empty diff: nothing to review")
        template = QUALITY_PROMPT
        section = self.settings.section("quality")
        if section is not None and section.prompt:
            template = Path(section.prompt).read_text(encoding="utf-8")
        diff = diff[:MAX_DIFF_CHARS]  # the agent's code: a fence longer than any backtick run in it
        answer = context.ask_agent(template.format(story=context.story_id, diff=diff, fence=fence_for(diff)))
        warnings = [
            line.strip()[len("WARNING:") :].strip()
            for line in answer.splitlines()
            if line.strip().upper().startswith("WARNING:")
        ]
        # the review is an agent call through the runner: it ran where the agent runs
        return GateResult(self.name, True, answer, seconds=time.monotonic() - started, warnings=warnings,
                          where=context.where)


@hookimpl(trylast=True)
def ralph_register_gates(register):  # type: ignore[no-untyped-def]
    """Register the quality review gate."""
    register(QualityReviewGate)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """``[tool.ralph.quality]``: enabled, timeouts, prompt."""
    from ralph_plugins.gates.config import QualityConfig

    return {"quality": QualityConfig}
