"""The spec gate (seed 002, hard): an independent reviewer checks the story against its spec.

After the tests gate passes, the loop starts a fresh agent session (any agent
plugin: ``[tool.ralph.spec] agent``, default the review agent) with the story,
its acceptance criteria, the PRD's constraints and the diff since the story
started.  The reviewer answers with a structured verdict that the loop reads
(:mod:`ralph_plugins.gates.spec_verdict`); "not met" — or an answer the loop
cannot read — fails the gate like a failing test: the story goes back with the
verdict verbatim, counts an attempt and escalates.  The reviewer runs read-only
(Codex: its read-only sandbox; every agent: the loop undoes any change a gate's
agent call makes and logs a violation).

On by default under ``skip-review`` (nothing else checks the spec there),
optional under ``review`` (``[tool.ralph.spec] enabled = true``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ralph.api import Gate, GateContext, GateResult, hookimpl
from ralph.api.text import fence_for, fenced, one_line, quote

MAX_DIFF_CHARS = 60_000
MAX_PRD_CHARS = 8_000
_CONSTRAINT_HEADINGS = re.compile(r"constraint|non-goal|out of scope|technical|requirement|must not", re.IGNORECASE)

SPEC_PROMPT = """You are an independent SPEC REVIEWER with a fresh context. Do not change, create or delete any
file, do not commit, do not edit the task list: you may only read (the diff below, `git diff`, `cat`, `grep`).

Decide whether the change below meets the story's acceptance criteria, every one of them, within the PRD's
constraints. Missing behaviour is "not met"; note anything built that the story did not ask for as "extra".

## Story {story_id}, titled {title}
{description}

## Acceptance criteria
{criteria}

## PRD constraints ({prd_name})
{constraints}

## The diff since the story started ({base})
{fence}diff
{diff}
{fence}

{answer_format}
"""


def prd_constraints(prd_text: str) -> str:
    """The PRD's constraint-like sections (by heading), else the whole PRD, cut to a size."""
    sections: list[list[str]] = []
    keep = False
    for line in prd_text.splitlines():
        if re.match(r"^#{1,6}\s", line):
            keep = bool(_CONSTRAINT_HEADINGS.search(line))
            if keep:
                sections.append([line])
        elif keep:
            sections[-1].append(line)
    text = "\n\n".join("\n".join(lines).strip() for lines in sections) if sections else prd_text.strip()
    if len(text) > MAX_PRD_CHARS:
        text = text[:MAX_PRD_CHARS] + f"\n[... {len(text) - MAX_PRD_CHARS} more characters of the PRD cut ...]"
    return text or "(the PRD states no constraints)"


def story_diff(project_dir: Path, base: str | None) -> str:
    """``git diff BASE`` of the working tree (committed and uncommitted), plus new untracked files' names."""
    from ralph.api.process import git  # hardened, after the git metadata check

    ref = base or "HEAD~1"
    diff = git(project_dir, "diff", ref, "--", ".", check=False, binary=True).stdout.decode("utf-8", "replace")
    untracked = git(project_dir, "ls-files", "--others", "--exclude-standard", check=False).stdout.split()
    if untracked:
        diff += "\n# untracked files (not in the diff): " + ", ".join(untracked[:50])
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[... {len(diff) - MAX_DIFF_CHARS} more characters of the diff cut ...]"
    return diff or "(no changes since the story started)"


class SpecReviewGate(Gate):
    """A fresh agent session reviews the story's diff against its acceptance criteria; hard."""

    name = "spec"
    description = (
        "an independent reviewer (a fresh agent session) checks the acceptance criteria — hard gate; "
        "on under skip-review, [tool.ralph.spec] enabled = true under review"
    )
    hard = True
    order = 20
    default_soft_timeout = 180.0
    default_hard_timeout = 300.0

    def _section(self):  # type: ignore[no-untyped-def]
        return self.settings.section("spec")

    def enabled(self) -> bool:
        """Explicit ``enabled`` wins; otherwise on exactly when the policy is ``skip-review``."""
        section = self._section()
        if section is not None and section.enabled is not None:
            return bool(section.enabled)
        return getattr(self.settings.config, "policy", "review") == "skip-review"

    @property
    def timeouts(self) -> tuple[float, float]:
        section = self._section()
        if section is None:
            return 180.0, 300.0
        return section.soft_timeout, section.hard_timeout

    def reviewer(self) -> tuple[str | None, str | None]:
        """(agent name or None for the loop's review agent, model or None)."""
        section = self._section()
        if section is None:
            return None, None
        return section.agent, section.model

    def prompt(self, context: GateContext) -> str:
        from ralph_plugins.gates.spec_verdict import ANSWER_FORMAT

        story = context.tasks.story(context.story_id or "")
        assert story is not None
        prd_path = getattr(context, "prd_path", None)
        prd_text = prd_path.read_text(encoding="utf-8") if prd_path is not None and prd_path.is_file() else ""
        base = getattr(context, "story_start", None) or context.checkpoint
        section = self._section()
        template = SPEC_PROMPT
        if section is not None and section.prompt:
            template = Path(section.prompt).read_text(encoding="utf-8")
        diff = story_diff(context.project_dir, base)
        # the title and description may be the agent's (a split), the diff is its code: quoted and fenced,
        # a fence longer than any backtick run in the diff (a context line "```" cannot close it)
        return template.format(
            story_id=story.id,
            title=quote(story.title, 300),
            description=fenced(story.description, "text") if story.description else "(no description)",
            criteria="\n".join(f"{i}. {one_line(c)}" for i, c in enumerate(story.acceptanceCriteria, 1)),
            prd_name=prd_path.name if prd_path is not None else "prd.md",
            constraints=prd_constraints(prd_text) if prd_text else "(no PRD found)",
            base=(base or "HEAD~1")[:12],
            diff=diff,
            fence=fence_for(diff),
            answer_format=ANSWER_FORMAT,
        )

    def run(self, context: GateContext) -> GateResult:
        from ralph_plugins.gates.spec_verdict import parse_verdict

        started = time.monotonic()
        agent, model = self.reviewer()
        ask = getattr(context, "ask_reviewer", None)
        if ask is not None:
            answer, reviewer = ask(self.prompt(context), agent, model)
        else:  # an older loop: the implementing agent, without read-only wiring
            answer, reviewer = context.ask_agent(self.prompt(context)), "agent"
        seconds = time.monotonic() - started
        soft = context.soft_timeout
        if context.hard_timeout is not None and seconds >= context.hard_timeout:
            return GateResult(
                self.name, False,
                f"TIMEOUT: the spec reviewer ({reviewer}) gave no verdict within {context.hard_timeout:g}s",
                timed_out=True, seconds=seconds, data={"verdict": "not_met", "reviewer": reviewer, "timed_out": True},
            )
        verdict = parse_verdict(answer)
        return GateResult(
            self.name,
            verdict.met,
            verdict.render(reviewer),
            exit_code=0 if verdict.met else 1,
            seconds=seconds,
            soft_timeout_exceeded=soft is not None and seconds > soft,
            data={**verdict.as_dict(), "reviewer": reviewer},
        )


@hookimpl(trylast=True)
def ralph_register_gates(register):  # type: ignore[no-untyped-def]
    """Register the spec gate."""
    register(SpecReviewGate)


@hookimpl
def ralph_config_sections():  # type: ignore[no-untyped-def]
    """``[tool.ralph.spec]``: enabled, agent, model, timeouts, prompt."""
    from ralph_plugins.gates.config import SpecConfig

    return {"spec": SpecConfig}
