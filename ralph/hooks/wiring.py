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
    """The stdlib-only hook client script the agent's hooks run."""
    return Path(__file__).with_name("client.py")


HOOK_PACKAGES = ("ralph", "ralph_plugins", "ralph_templates")
"""The import packages the hook client loads when no loop answers (ralph's own distribution)."""


def hook_packages() -> dict[str, Path]:
    """Where the packages of ``HOOK_PACKAGES`` are on this machine, without importing them:
    a runner that runs the agent elsewhere (a container) mounts or ships these directories."""
    import importlib.util

    found = {}
    for name in HOOK_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            found[name] = Path(spec.origin).resolve().parent
    return found


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
