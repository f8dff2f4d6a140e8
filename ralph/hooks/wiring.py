"""Wire ralph's agent-side hooks into Claude Code for one run, so the project cannot switch them off.

The settings file lives in the run directory, outside the project, and is passed with
``--settings``; Claude Code gives it precedence over user, project and local settings
(observed with Claude Code 2.1.332, see tests/test_trust_hooks_claude.py). Besides the hooks it pins:

- ``disableAllHooks: false``: a project's (or user's) ``true`` would silence every hook,
  ralph's included; the flag settings' ``false`` wins.
- ``allowManagedHooksOnly: false`` (only honoured from managed settings today; pinned anyway).
- ``env``: the variables that steer the hook process (``RALPH_*``: the loop's socket, run
  directory, state file) and the ones that could load the agent's code into it
  (``PYTHONPATH``, ``PYTHONHOME``, ``LD_PRELOAD`` ...). A project's ``env`` otherwise
  overrides the process environment of the hooks (observed).
- a ``ConfigChange`` hook that refuses every settings reload during an iteration: without it a
  hook the agent writes into ``.claude/settings.local.json`` goes live in the same session
  (observed: a project PreToolUse hook rewriting the command ralph's guards had approved).

:func:`weakening_settings` names what a project's settings would do to ralph's hooks, for the
run-start warning; the loop restores ``.claude/settings*`` after every iteration.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping

from ralph.fsutil import atomic_write_text
from ralph.hooks.answers import EVENTS

PINNED: dict[str, Any] = {"disableAllHooks": False, "allowManagedHooksOnly": False}
"""Settings keys that decide whether hooks run, at the values ralph needs."""

PINNED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT", "LD_PRELOAD", "LD_LIBRARY_PATH")
"""Variables that could load code into the hook process: pinned to the loop's value (or empty)."""

CONFIG_CHANGE_MESSAGE = "ralph: settings changes are not applied during a loop iteration (the loop restores them after it)"
CONFIG_CHANGE_COMMAND = f"cat >/dev/null; echo {shlex.quote(CONFIG_CHANGE_MESSAGE)} >&2; exit 2"
"""Blocks the reload (exit 2); plain sh, so it works on the host and in a sandbox alike."""


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


def compiled_hook_command(directory: Path) -> str:
    """:func:`hook_command` running a copy of the client compiled into ``directory/hook_client.pyc``.

    Python runs a ``.pyc`` given as the script without compiling the source, which is ~2 ms of each
    hook call (a script's bytecode is never cached).  For this interpreter only: the loop writes it into
    its run directory (outside the project; the protected-files guard denies writes there).  Where it
    cannot be written, the plain :func:`hook_command`.
    """
    import py_compile

    target = directory / "hook_client.pyc"
    try:
        py_compile.compile(str(hook_client_path()), cfile=str(target), doraise=True)
    except (OSError, py_compile.PyCompileError):
        return hook_command()
    return f"{shlex.quote(sys.executable)} -S -P {shlex.quote(str(target))}"


def pinned_env(loop_env: Mapping[str, str], inherit: bool = True) -> dict[str, str]:
    """``env`` for the settings file: the ``RALPH_*`` entries of ``loop_env`` and :data:`PINNED_ENV`.

    With ``inherit`` (the agent runs on this machine) the pinned variables keep this
    process's values; otherwise (a sandbox) they are empty.
    """
    env = {name: (os.environ.get(name, "") if inherit else "") for name in PINNED_ENV}
    env.update({name: value for name, value in loop_env.items() if name.startswith("RALPH_")})
    return env


def hook_settings(command: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, object]:
    """Claude Code settings with ralph's hook on every event it handles, and the pins above."""
    command = command or hook_command()
    entry = {"type": "command", "command": command, "timeout": 60}
    hooks: dict[str, object] = {event: [{"hooks": [entry]}] for event in EVENTS}
    hooks["ConfigChange"] = [{"hooks": [{"type": "command", "command": CONFIG_CHANGE_COMMAND, "timeout": 10}]}]
    settings: dict[str, object] = {"hooks": hooks, **PINNED}
    if env:
        settings["env"] = dict(env)
    return settings


def write_hook_settings(run_dir: Path, command: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Write :func:`hook_settings` to ``<run dir>/claude-settings.json`` and return its path."""
    path = run_dir / "claude-settings.json"
    atomic_write_text(path, json.dumps(hook_settings(command, env), indent=2) + "\n")
    return path


def project_settings_files(project_dir: Path) -> list[Path]:
    """The project's Claude Code settings files."""
    return [project_dir / ".claude" / "settings.json", project_dir / ".claude" / "settings.local.json"]


def weakening_settings(project_dir: Path) -> list[str]:
    """What the project's Claude Code settings would do to ralph's hooks, one line per finding."""
    found = []
    for path in project_settings_files(project_dir):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            found.append(f"{path}: unreadable ({exc}); Claude Code may ignore or misread it")
            continue
        if not isinstance(data, dict):
            continue
        for key in PINNED:
            if key in data and data[key] != PINNED[key]:
                found.append(f"{path}: {key} = {json.dumps(data[key])} would switch off ralph's hooks; ralph pins it to "
                             f"{json.dumps(PINNED[key])} for the run (remove it to silence this warning)")
        env = data.get("env")
        if isinstance(env, dict):
            named = sorted(k for k in env if k.startswith("RALPH_") or k in PINNED_ENV)
            if named:
                found.append(f"{path}: env sets {', '.join(named)}, which steer ralph's hook process; ralph pins them for the run")
        hooks = data.get("hooks")
        if isinstance(hooks, dict) and hooks:
            events = ", ".join(sorted(str(k) for k in hooks))
            found.append(
                f"{path}: defines its own hooks ({events}); they run next to ralph's, and a PreToolUse hook can rewrite a "
                "tool call after ralph's guards allowed it (the sandbox, not the guards, is the boundary)"
            )
    return found
