"""Wire ralph's agent-side hook entry point into Claude Code for one run.

The settings file lives in the run directory, outside the project, and is
passed with ``--settings``: the agent cannot edit it away.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from ralph.fsutil import atomic_write_text

HOOK_EVENTS = ("Stop",)


def hook_command() -> str:
    """The command Claude Code runs for a hook: this interpreter, ``-m ralph.hook``."""
    # -P: the cwd is the project, whose ralph/ directory would shadow the ralph package
    return f"{shlex.quote(sys.executable)} -P -m ralph.hook"


def hook_settings(command: str | None = None) -> dict[str, object]:
    command = command or hook_command()
    return {
        "hooks": {
            event: [{"hooks": [{"type": "command", "command": command, "timeout": 60}]}] for event in HOOK_EVENTS
        }
    }


def write_hook_settings(run_dir: Path) -> Path:
    path = run_dir / "claude-settings.json"
    if not path.exists():
        atomic_write_text(path, json.dumps(hook_settings(), indent=2) + "\n")
    return path
