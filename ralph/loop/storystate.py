"""Per-story attempt state, written by the loop only (seed 002 "State File Format").

A markdown file with YAML front matter (iteration, last gate, exit code,
error hash, stuck count, strategy shifts, files modified) and the verbatim
output of the failing gates of the last three attempts.  It lives in ralph's
state directory, outside the project, and its body goes into the next prompt
for that story.  Stuck detection and escalation are decided here.
"""

from __future__ import annotations

from ralph.agenttext import fenced

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_OUTPUT_LINES = 100
HISTORY = 3
STUCK_AFTER = 3

# What changes from run to run without the error changing.
_NOISE = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:ms|s|sec|secs|seconds|µs|us|ns)\b"), "<duration>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),
    (re.compile(r"(?:/tmp|/var/folders|/private/var)/[^\s:'\"]+"), "<tmp>"),
    (re.compile(r"\b(?:pid|PID|process)\s*[:=]?\s*\d+"), "<pid>"),
    (re.compile(r"\b[0-9a-f]{12,40}\b"), "<hash>"),
]
_BLANKS = re.compile(r"[ \t]+")

# Errors that say information is missing rather than the approach being wrong.
_INFO_GAP = re.compile(
    r"ImportError|ModuleNotFoundError|NameError|FileNotFoundError|No such file or directory|"
    r"Cannot find module|Module not found|is not defined|cannot find symbol|undefined: |"
    r"cannot find (?:value|type|crate|module)|unresolved import|LoadError|uninitialized constant|ENOENT",
    re.IGNORECASE,
)


def normalize(output: str) -> str:
    """The output without what differs between runs of the same failure."""
    text = output
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    return "\n".join(_BLANKS.sub(" ", line).strip() for line in text.splitlines() if line.strip())


def error_hash(output: str) -> str:
    """A short hash of ``output`` with run-to-run noise (times, temp paths, addresses) normalised away."""
    return hashlib.sha1(normalize(output).encode("utf-8")).hexdigest()[:8]


def truncate(output: str, limit: int = MAX_OUTPUT_LINES) -> str:
    """At most ``limit`` lines: the first half and the last half, with a marker between."""
    lines = output.rstrip("\n").splitlines()
    if len(lines) <= limit:
        return "\n".join(lines)
    head, tail = lines[: limit // 2], lines[-(limit - limit // 2) :]
    return "\n".join([*head, f"[... {len(lines) - limit} lines truncated ...]", *tail])


def is_info_gap(output: str) -> bool:
    """Does the error point at missing information (a module, file or name not found)?"""
    return bool(_INFO_GAP.search(output))


@dataclass
class Attempt:
    """One failed attempt of a story at a gate."""

    number: int
    gate: str
    error_hash: str
    exit_code: int | None
    output: str
    strategy_shift: bool = False
    timed_out: bool = False


@dataclass
class StoryAttempts:
    """The loop's record of one story's failed attempts."""

    task_id: str
    iteration: int = 0
    max_iterations: int = 5
    last_gate: str | None = None
    exit_code: int | None = None
    error_hash: str | None = None
    timestamp: str | None = None
    stuck_count: int = 0
    strategy_shifts: int = 0
    context_expanded: bool = False
    files_modified: list[str] = field(default_factory=list)
    start_commit: str | None = None
    quality_warnings: int = 0
    attempts: list[Attempt] = field(default_factory=list)

    def record_failure(self, gate: str, output: str, exit_code: int | None, timed_out: bool, files: list[str]) -> None:
        """Count a failed attempt at ``gate`` (the same error hash again makes it stuck longer)."""
        digest = error_hash(output)
        self.stuck_count = self.stuck_count + 1 if digest == self.error_hash else 1
        self.iteration += 1
        self.last_gate = gate
        self.exit_code = exit_code
        self.error_hash = digest
        self.timestamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.files_modified = files
        attempt = Attempt(self.iteration, gate, digest, exit_code, truncate(output), timed_out=timed_out)
        self.attempts = [*self.attempts, attempt][-HISTORY:]

    def record_success(self) -> None:
        """A passing gate run: the error is gone, so the story is no longer stuck."""
        self.stuck_count = 0
        self.error_hash = None

    def escalation(self, max_shifts: int = 2) -> str | None:
        """What the loop does next for this story: None, ``strategy-shift`` (tier 1),
        ``context-expansion`` (tier 2) or ``stop`` (tier 3, also when attempts run out).

        Only the same error hash ``STUCK_AFTER`` times in a row is "stuck": an
        error that changes is progress and never escalates before the attempt cap.  The cap is
        a cap: no attempt after ``max_iterations`` failures, so an error that points at missing
        information gets its context expansion after the first strategy shift, within the cap.
        """
        if self.iteration >= self.max_iterations:
            return "stop"
        if self.stuck_count < STUCK_AFTER:
            return None
        last = self.attempts[-1].output if self.attempts else ""
        expand = not self.context_expanded and is_info_gap(last)
        if expand and self.strategy_shifts >= min(1, max_shifts):
            return "context-expansion"
        if self.strategy_shifts < max_shifts:
            return "strategy-shift"
        return "context-expansion" if expand else "stop"

    # -- the file ---------------------------------------------------------------------------

    def front_matter(self) -> dict[str, Any]:
        """The state without the attempts (the state file's front matter)."""
        data = asdict(self)
        data.pop("attempts")
        return data

    def render(self) -> str:
        """The state file's markdown: front matter, then each attempt's verbatim gate output."""
        lines = ["---"]
        for key, value in self.front_matter().items():
            if isinstance(value, list):
                lines.append(f"{key}:" + ("" if value else " []"))
                lines += [f"  - {json.dumps(item)}" for item in value]
            else:
                lines.append(f"{key}: {_scalar(value)}")
        lines.append("---")
        for attempt in reversed(self.attempts):
            lines += [
                "",
                f"## Attempt {attempt.number}: {attempt.gate} gate output (verbatim)"
                + (" — TIMEOUT" if attempt.timed_out else ""),
                fenced(attempt.output, ""),  # the output (the agent's code printed it) cannot close the fence
            ]
        lines += ["", "## Attempt History", "| # | Gate | Error Hash | Strategy Shift |", "|---|------|------------|----------------|"]
        lines += [
            f"| {a.number} | {a.gate} | {a.error_hash} | {'yes' if a.strategy_shift else 'no'} |" for a in self.attempts
        ]
        return "\n".join(lines) + "\n"

    def save(self, directory: Path) -> Path:
        """Write the state file (markdown, and JSON beside it) into ``directory``; returns the markdown's path."""
        from ralph.fsutil import atomic_write_text

        directory.mkdir(parents=True, exist_ok=True)
        path = state_path(directory, self.task_id)
        atomic_write_text(path, self.render())
        atomic_write_text(path.with_suffix(".json"), json.dumps(asdict(self)))
        return path

    @classmethod
    def load(cls, directory: Path, task_id: str, max_iterations: int) -> StoryAttempts:
        """The story's saved state, or a fresh one when there is none (or it does not parse)."""
        path = state_path(directory, task_id).with_suffix(".json")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            text = None
        return cls.parse(text, task_id, max_iterations)

    @classmethod
    def parse(cls, text: str | None, task_id: str, max_iterations: int) -> StoryAttempts:
        """The state in a state file's ``text`` (None, or text that does not parse: a fresh one)."""
        try:
            data = json.loads(text) if text is not None else None
            if not isinstance(data, dict) or data.get("task_id") != task_id:
                raise ValueError("not this story's state")
            data["attempts"] = [Attempt(**a) for a in data.get("attempts", [])]
            data["max_iterations"] = max_iterations
            return cls(**data)
        except (TypeError, ValueError):
            return cls(task_id, max_iterations=max_iterations)


def state_path(directory: Path, task_id: str) -> Path:
    """The state file of story ``task_id`` in ``directory`` (unsafe characters replaced)."""
    return directory / (re.sub(r"[^A-Za-z0-9._-]", "_", task_id) + ".md")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    return json.dumps(text) if re.search(r"[:#\[\]{}\"',]|^\s|\s$", text) or not text else text
