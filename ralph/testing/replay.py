"""Build scripts for the ``replay`` agent: a scripted agent that runs as a real process.

The format (docs/plugins.md, "Replay scripts") is a JSON object::

    {"iterations": {"1": [ACTION, ...], "2": [...]},   # per loop iteration
     "default": [ACTION, ...],                         # iterations not listed
     "quality": {"2": [...], "default": [...]}}        # extra calls, by purpose

An action is a one-key object: ``{"say": text}``, ``{"write": {"path", "content"}}``,
``{"append": {"path", "content"}}``, ``{"set": {"story", "fields"}}``,
``{"run": shell command}``, ``{"commit": message}``, ``{"sleep": seconds}``,
``{"cost": usd}``, ``{"exit": code}``.  Paths are relative to the project.
An iteration with no actions prints nothing (an empty response).

    script = ReplayScript().iteration(1, say("done"), set_fields("US-001", passes=True), commit("feat"))
    project.env.update(script.env(tmp_path / "script.json"))   # RALPH_REPLAY_SCRIPT

or, per iteration number, ``replay_env(tmp_path / "script.json", {1: [say("done")]})``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "ReplayScript",
    "append_file",
    "commit",
    "cost",
    "exit_with",
    "replay_env",
    "run",
    "say",
    "set_fields",
    "sleep",
    "write_file",
]

Action = dict[str, Any]
"""One replay action: a dict with exactly one key."""


def say(text: str) -> Action:
    """The agent says ``text`` (an assistant text message)."""
    return {"say": text}


def write_file(path: str, content: str) -> Action:
    """Write ``content`` to ``path`` (relative to the project), replacing it."""
    return {"write": {"path": path, "content": content}}


def append_file(path: str, content: str) -> Action:
    """Append ``content`` to ``path``."""
    return {"append": {"path": path, "content": content}}


def set_fields(story: str, **fields: Any) -> Action:
    """Set fields of story ``story`` in the task list (``passes=True, reviewStatus="needs_review"``)."""
    return {"set": {"story": story, "fields": fields}}


def run(command: str) -> Action:
    """Run ``command`` with the shell, in the project."""
    return {"run": command}


def commit(message: str) -> Action:
    """``git add -A`` and ``git commit -m message``."""
    return {"commit": message}


def sleep(seconds: float) -> Action:
    """Wait ``seconds`` (to test timeouts and interrupts)."""
    return {"sleep": seconds}


def cost(usd: float) -> Action:
    """Report ``usd`` of cost in the iteration's result."""
    return {"cost": usd}


def exit_with(code: int) -> Action:
    """Exit with ``code`` after the other actions."""
    return {"exit": code}


class ReplayScript:
    """A replay script under construction; ``write()`` saves it as JSON."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {"iterations": {}, "default": []}

    def iteration(self, number: int, *actions: Action) -> ReplayScript:
        """The actions of loop iteration ``number`` (1-based); returns the script."""
        self.data["iterations"][str(number)] = list(actions)
        return self

    def default(self, *actions: Action) -> ReplayScript:
        """The actions of every iteration not given explicitly."""
        self.data["default"] = list(actions)
        return self

    def extra_call(self, purpose: str, number: int | None, *actions: Action) -> ReplayScript:
        """The actions of an extra agent call (a gate's, e.g. ``quality``) in iteration ``number``
        (None: every iteration)."""
        self.data.setdefault(purpose, {})["default" if number is None else str(number)] = list(actions)
        return self

    def write(self, path: Path) -> Path:
        """Save the script to ``path`` and return it."""
        path.write_text(json.dumps(self.data, indent=2) + "\n", encoding="utf-8")
        return path

    def env(self, path: Path) -> dict[str, str]:
        """Save the script to ``path``; the environment that makes ``--agent replay`` act it out."""
        return {"RALPH_REPLAY_SCRIPT": str(self.write(path))}


def replay_env(path: Path, iterations: dict[int, list[Action]]) -> dict[str, str]:
    """A script of ``iterations`` (loop iteration number -> actions) saved to ``path``, as the
    environment (``RALPH_REPLAY_SCRIPT``) that makes ``--agent replay`` act it out."""
    script = ReplayScript()
    for number, actions in iterations.items():
        script.iteration(number, *actions)
    return script.env(path)
