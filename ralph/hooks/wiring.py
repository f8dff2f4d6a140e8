"""Wire ralph's agent-side hooks into Claude Code for one run.

The settings file lives in the run directory, outside the project, and is
passed with ``--settings``: the agent cannot edit it away.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from ralph.fsutil import atomic_write_text
from ralph.hooks.answers import EVENTS


def hook_client_path() -> Path:
    return Path(__file__).with_name("client.py")


def hook_command() -> str:
    """This interpreter running the stdlib-only hook client.

    ``-S`` skips site-packages for a fast start (the client loads them only when
    no loop answers); ``-P`` keeps the project's ``ralph/`` directory, the cwd,
    from shadowing the package.
    """
    return f"{shlex.quote(sys.executable)} -S -P {shlex.quote(str(hook_client_path()))}"


def hook_settings(command: str | None = None) -> dict[str, object]:
    """Claude Code settings with ralph's hook on every event it handles."""
    command = command or hook_command()
    entry = {"type": "command", "command": command, "timeout": 60}
    return {"hooks": {event: [{"hooks": [entry]}] for event in EVENTS}}


def write_hook_settings(run_dir: Path, command: str | None = None) -> Path:
    path = run_dir / "claude-settings.json"
    atomic_write_text(path, json.dumps(hook_settings(command), indent=2) + "\n")
    return path
