"""A prompt written for another Ralph loop, under a policy it contradicts.

snarktank/ralph's ``prompt.md`` (and its ``CLAUDE.md``, the same prompt for Claude Code) tells the
agent to set ``passes: true`` itself once a story works.  Under a policy whose implement mode may
not do that (``review``: only a review approves), every iteration would follow the prompt and be
undone by the loop, for ever.  ralph reads such instructions before iteration 1:

- in the ralph directory's ``prompt.md`` when it has no ``ralph:`` markers (ralph's own template has
  them) and never names the policy's other state fields (a prompt that speaks of ``reviewStatus``
  knows the review cycle: its ``passes: true`` is a review's approval);
- in the ralph directory's ``CLAUDE.md``: Claude Code reads a folder's ``CLAUDE.md`` as instructions
  whenever the agent works on files in that folder (the task list, the progress log).

Then (:func:`settle_policy`, :func:`refusal`): when the person chose no policy, the run uses one the
instructions do not contradict (``skip-review``: the agent sets ``passes: true`` and the loop's gates
check the work) and says so; when they chose one, ``ralph run`` stops before iteration 1 naming the
lines and the ways out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ralph.contracts import Check, Policy
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings

__all__ = ["NO_REVIEW_POLICY", "Instruction", "contradictions", "refusal", "self_approval_allowed", "settle_policy"]

NO_REVIEW_POLICY = "skip-review"
"""The policy a prompt written for a loop without review runs under when the person chose none."""

MEMORY_FILES = ("CLAUDE.md",)
"""Instruction files in the ralph directory that the agent's CLI reads on its own when it works there."""

_SETS_PASSES = re.compile(
    r"\b(?:set|sets|setting|mark|marks|update|updating|change|flip|toggle|switch)\b.*?"
    r"[\"'`]?\bpasses\b[\"'`]?\s*(?::|=|to|as)\s*[\"'`]?true\b",
    re.IGNORECASE,
)
_NEGATED = re.compile(r"\b(?:not|never|no|don'?t|do\s+not|must\s+not|mustn'?t|only\s+a\s+review|only\s+the\s+review)\b", re.IGNORECASE)
_MARKER = re.compile(r"<!--\s*ralph:")


@dataclass(frozen=True)
class Instruction:
    """A line of a file that tells the agent to set ``passes: true`` itself."""

    file: str
    """The file as the person sees it (relative to the project)."""
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file} line {self.line}: {self.text.strip()[:160]}"


def self_approval_allowed(policy: Policy) -> bool:
    """Whether an implement iteration of ``policy`` may set ``passes: true`` on its story, from the
    policy's table (True when the policy declares no table or no implement mode: nothing to contradict)."""
    from ralph.transitions import allowed_by

    rules = policy.rules("implement")
    if rules is None:
        return True
    initial = dict(policy.initial_state)
    old = SimpleNamespace(**{"passes": False, "notes": "", **initial})
    new = SimpleNamespace(**{**vars(old), "passes": True, "notes": "done"})
    return allowed_by(rules.transitions, old, new) is not None


def instructions(text: str, shown: str, knows: tuple[str, ...]) -> list[Instruction]:
    """The lines of ``text`` that tell the agent to set ``passes: true`` (negated lines are not), unless
    ``text`` is ralph's own kind of template (``ralph:`` markers) or names one of ``knows`` (the
    policy's other state fields: such a prompt speaks of the review cycle)."""
    if _MARKER.search(text) or any(re.search(rf"\b{re.escape(name)}\b", text) for name in knows):
        return []
    return [
        Instruction(shown, number, line)
        for number, line in enumerate(text.splitlines(), 1)
        if _SETS_PASSES.search(line) and not _NEGATED.search(line)
    ]


def contradictions(ralph_dir: Path, project_dir: Path, policy: Policy, prompt: str | None) -> list[Instruction]:
    """The instructions the agent would read that ``policy`` contradicts: in ``prompt`` (the text of
    the ralph directory's prompt.md; None for ralph's built-in prompt) and in the folder's memory files."""
    if self_approval_allowed(policy):
        return []
    from ralph.loop.prompt import relative_dir
    from ralph.safeio import UnsafePath, read_text

    knows = tuple(name for name in policy.state_fields if name != "passes")
    found: list[Instruction] = []
    if prompt is not None:
        found += instructions(prompt, relative_dir(ralph_dir / "prompt.md", project_dir), knows)
    for name in MEMORY_FILES:
        try:
            text = read_text(ralph_dir / name, project_dir)
        except (OSError, UnsafePath, UnicodeDecodeError, ValueError):
            continue
        found += instructions(text, relative_dir(ralph_dir / name, project_dir), knows)
    return found


def _prompt_text(ralph_dir: Path, project_dir: Path) -> str | None:
    from ralph.safeio import UnsafePath, read_text

    try:
        return read_text(ralph_dir / "prompt.md", project_dir)
    except (OSError, UnsafePath, UnicodeDecodeError, ValueError):
        return None


def settle_policy(settings: Settings, host: PluginHost, policy_name: str) -> tuple[str, Check | None]:
    """The policy to run: ``policy_name``, or :data:`NO_REVIEW_POLICY` (with a note saying why) when the
    person chose no policy and the folder's instructions tell the agent to set ``passes: true``,
    which the default policy forbids."""
    from ralph.contracts import Check

    config = settings.config
    chosen = "policy" in config.model_fields_set or policy_name != config.policy
    if chosen or NO_REVIEW_POLICY not in host.policies.names() or not settings.ralph_dir.is_dir():
        return policy_name, None
    found = contradictions(settings.ralph_dir, settings.project_dir, host.policies.get(policy_name)(settings),
                           _prompt_text(settings.ralph_dir, settings.project_dir))
    if not found:
        return policy_name, None
    config.policy = NO_REVIEW_POLICY
    return NO_REVIEW_POLICY, Check(
        None,
        f"{_quoted(found)} tells the agent to set passes: true itself: written for a loop without review, so this "
        f"run uses policy {NO_REVIEW_POLICY} instead of {policy_name} (the agent sets passes: true, the loop's "
        "gates check the work)",
        f"--skip-review (or policy = \"{NO_REVIEW_POLICY}\" in your ralph config) keeps this without the warning; "
        + _review_way(settings, found, policy_name),
    )


def refusal(settings: Settings, policy: Policy, prompt: str | None) -> str | None:
    """Why ``ralph run`` must not start: the instructions contradict the policy the person chose
    (every iteration would be undone); None when they do not."""
    found = contradictions(settings.ralph_dir, settings.project_dir, policy, prompt)
    if not found:
        return None
    lines = "\n".join(f"  {each}" for each in found[:5])
    return (
        f"{found[0].file} tells the agent to set passes: true itself, which an implement iteration may not do "
        f"under policy {policy.name}: every iteration would be undone.\n{lines}\n"
        f"--skip-review runs these instructions as written; {_review_way(settings, found, policy.name)}; "
        "nothing was started"
    )


def _quoted(found: list[Instruction]) -> str:
    first = found[0]
    more = f" (and {len(found) - 1} more line{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    return f"{first.file} line {first.line} (\"{first.text.strip()[:120]}\"){more}"


def _review_way(settings: Settings, found: list[Instruction], policy_name: str) -> str:
    """How to run ralph's own cycle instead: replace the prompt, move the memory file aside."""
    from ralph.loop.prompt import relative_dir

    folder = relative_dir(settings.ralph_dir, settings.project_dir)
    files = sorted({each.file for each in found})
    steps = []
    if any(name.endswith("prompt.md") for name in files):
        steps.append(f"rename {folder}/prompt.md, then `ralph init --ralph-dir {folder}` adds ralph's prompt.md")
    memory = [name for name in files if not name.endswith("prompt.md")]
    if memory:
        steps.append(f"move {', '.join(memory)} out of {folder} (Claude Code reads it whenever the agent works there)")
    return f"for ralph's {policy_name} cycle: " + " and ".join(steps)
