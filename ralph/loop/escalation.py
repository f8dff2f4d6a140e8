"""Escalation when a story keeps failing with the same error (seed 002): tier 1, a strategy shift
(the next prompt says to drop the approach); tier 2, context expansion when the error says information
is missing (the project's file list and the files the error names go into the prompt); tier 3, the hard
stop (:mod:`ralph.loop.hardstop`).  :meth:`StoryAttempts.escalation` decides which.
"""

from __future__ import annotations

from ralph.agenttext import fenced, name, quote

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ralph.loop.gates import GateLoop
    from ralph.loop.records import IterationRecord
    from ralph.loop.storystate import StoryAttempts

CONTEXT_FILES = 3
"""Tier 2: at most this many files the error names go into the prompt."""
CONTEXT_LINES = 200
"""Tier 2: the first this many lines of each."""
TIERS = {"strategy-shift": 1, "context-expansion": 2, "stop": 3}


class Escalation:
    """Decides each failed attempt's escalation and holds what tiers 1 and 2 add to a story's prompt."""

    def __init__(self, loop: GateLoop, project_dir: Path, strategy_shifts: int) -> None:
        self.loop = loop
        self.project_dir = project_dir
        self.strategy_shifts = strategy_shifts
        self.expanded_context: dict[str, str] = {}
        """Tier 2's prompt item per story."""

    def escalate(self, record: IterationRecord, state: StoryAttempts) -> str | None:
        """Decide after a failed attempt (None, ``strategy-shift``, ``context-expansion``, ``stop``) and emit it."""
        decision = state.escalation(self.strategy_shifts)
        if decision == "strategy-shift":
            state.strategy_shifts += 1
            state.attempts[-1].strategy_shift = True
        elif decision == "context-expansion":
            state.context_expanded = True
            self.expanded_context[state.task_id] = self._expanded_context(state)
        self.loop.emit(
            "escalation" if decision else "attempt_failed",
            iteration=record.number,
            story=state.task_id,
            tier=TIERS.get(decision or "", 0),
            decision=decision,
            attempts=state.iteration,
            stuck_count=state.stuck_count,
            error_hash=state.error_hash,
        )
        return decision

    def directives(self, story_id: str, state: StoryAttempts) -> list[str]:
        """The prompt items tiers 1 and 2 add for the story (its last attempt shifted strategy; context expanded)."""
        items = []
        last = state.attempts[-1]
        if last.strategy_shift:
            first_line = next((line for line in last.output.splitlines() if line.strip()), last.gate)
            files = ", ".join(name(path) for path in state.files_modified[:10]) or "the same files"  # the agent named them
            items.append(
                "IMPORTANT: Strategy Shift Required. You have failed "
                f"{state.stuck_count}x with the same error at the {last.gate} gate (error hash "
                f"{last.error_hash}). Your previous approach does not work; try a fundamentally different "
                f"one. Do NOT repeat the approach of the last attempts, which changed {files} and ended "
                f"with: {quote(first_line.strip(), 300)}"
            )
        if story_id in self.expanded_context:
            items.append(self.expanded_context[story_id])
        return items

    def _expanded_context(self, state: StoryAttempts) -> str:
        """Tier 2: the files the error names (that exist in the project) and the project's file list."""
        from ralph import safeio
        from ralph.gitutil import git

        project = self.project_dir
        output = state.attempts[-1].output if state.attempts else ""
        listing = git(project, "ls-files", check=False).stdout.splitlines()
        named = []
        for candidate in re.findall(r"[\w./-]+\.\w+", output):
            try:  # a regular file inside the project, reached without a symlink (never a host file via a link)
                inside = safeio.kind(project / candidate, project) == "file"
            except ValueError:
                inside = False
            if inside and candidate not in named:
                named.append(candidate)
        # the agent chose these names: the listing is fenced (a name cannot pose as a line of the loop's)
        parts = [
            "Context expansion: the error points at missing information. Files tracked in the project "
            f"({len(listing)}):\n" + fenced("\n".join(listing[:300]), "")
        ]
        for path in named[:CONTEXT_FILES]:
            try:
                data = safeio.read_bytes(project / path, project)
            except OSError:
                continue
            text = data.decode("utf-8", errors="replace").splitlines()[:CONTEXT_LINES]
            parts.append(f"Contents of {name(path)}:\n" + fenced("\n".join(text), ""))
        return "\n\n".join(parts)
