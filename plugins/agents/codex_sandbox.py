"""Where Codex's own sandbox helper can live: the run-owned ``CODEX_HOME``, out of the sandbox's reach.

On Linux Codex runs every command of the agent through its helper, ``codex-linux-sandbox``
(its own binary under that name), inside bubblewrap.  Which bubblewrap: the first ``bwrap`` on
``PATH`` outside the working directory that lists ``--as-pid-1`` and ``--perms`` in its ``--help``
(the system's), else the one in the wheel (``codex_cli_bin/codex-resources/bwrap``).  A bubblewrap
older than 0.9.0 (Debian 12 ships 0.8.0) has no ``--argv0``, so Codex then starts the helper by the
path of an alias it makes at start-up in ``$CODEX_HOME/tmp/arg0-linux/``.  Codex refuses to make
that alias when ``CODEX_HOME`` lies under the temporary directory (``$TMPDIR``, else ``/tmp``): its
``workspace-write`` sandbox lets commands write ``/tmp`` and ``$TMPDIR``, and a helper the sandboxed
agent can replace is run by Codex outside the sandbox.  Without the alias every command fails with
``bwrap: execvp codex-linux-sandbox: No such file or directory`` while ``codex exec`` still exits 0.

So when the run's ``CODEX_HOME`` lies where the sandbox could write (``/tmp`` or ``$TMPDIR``: a state
directory under ``/tmp``, as in tests), the agent gets a temporary directory of its own inside that
home (``$CODEX_HOME/agent-tmp``, ``TMPDIR`` for Codex and every command it runs) and ``/tmp`` is
left out of the sandbox's writable roots (``sandbox_workspace_write.exclude_slash_tmp``): Codex makes
its alias, and the sandbox can write the project, its git directories and that one directory, never
the alias.  Elsewhere (``~/.local/state/ralph``, the default) nothing changes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.api.agents import private_dir

__all__ = ["AGENT_TMP", "HelperPlacement", "describe_bubblewrap", "helper_placement", "system_bubblewrap",
           "temporary_roots"]

AGENT_TMP = "agent-tmp"
"""The agent's temporary directory inside ``CODEX_HOME`` when the home lies under a temporary root."""


@dataclass
class HelperPlacement:
    """What the codex agent adds so Codex's sandbox helper lives out of the sandbox's reach."""

    env: dict[str, str] = field(default_factory=dict)
    """Environment additions (``TMPDIR``)."""
    overrides: list[tuple[str, Any]] = field(default_factory=list)
    """``-c`` overrides (``sandbox_workspace_write.exclude_slash_tmp``)."""
    why: str | None = None
    """Why anything was added (None: the home is out of the sandbox's reach already)."""


def temporary_roots(environ: Mapping[str, str]) -> list[Path]:
    """The directories Codex's ``workspace-write`` sandbox makes writable besides the workspace:
    ``/tmp`` and ``$TMPDIR`` (resolved)."""
    roots = [Path("/tmp")]
    tmpdir = environ.get("TMPDIR")
    if tmpdir:
        roots.append(Path(tmpdir))
    resolved: list[Path] = []
    for root in roots:
        try:
            real = root.resolve()
        except OSError:
            continue
        if real not in resolved:
            resolved.append(real)
    return resolved


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def helper_placement(home: Path, environ: Mapping[str, str], sandbox: str) -> HelperPlacement:
    """What keeps Codex's helper alias in ``home`` (the process's ``CODEX_HOME``) out of reach of the
    ``sandbox`` mode's writable roots; makes ``home/agent-tmp`` (mode 0700) when one is needed.

    ``sandbox``: ``workspace-write``, ``read-only`` or ``danger-full-access`` (no sandbox, no helper:
    nothing to do).
    """
    if sandbox == "danger-full-access":
        return HelperPlacement()
    real = home.resolve()
    inside = [root for root in temporary_roots(environ) if _under(real, root)]
    if not inside:
        return HelperPlacement()
    scratch = private_dir(home / AGENT_TMP)
    overrides: list[tuple[str, Any]] = []
    if sandbox == "workspace-write":
        overrides.append(("sandbox_workspace_write.exclude_slash_tmp", True))
    why = (
        f"CODEX_HOME {home} lies under {inside[0]}, which Codex's sandbox may write: the agent's "
        f"TMPDIR is {scratch} and /tmp is not writable in the sandbox"
    )
    return HelperPlacement({"TMPDIR": str(scratch)}, overrides, why)



def system_bubblewrap(environ: Mapping[str, str], cwd: Path) -> tuple[Path, bool] | None:
    """The system bubblewrap Codex would use, as Codex 0.163 picks it: the first ``bwrap`` on ``PATH``
    outside ``cwd`` whose ``--help`` lists ``--as-pid-1`` and ``--perms``; with whether it has
    ``--argv0`` (0.9.0 and later).  None: Codex uses the bubblewrap in its wheel."""
    import subprocess

    try:
        inside = cwd.resolve()
    except OSError:
        inside = cwd
    for entry in environ.get("PATH", "").split(os.pathsep):
        candidate = Path(entry or ".") / "bwrap"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        real = candidate.resolve()
        if _under(real, inside) and inside.parent != inside:
            continue
        try:
            shown = subprocess.run([str(real), "--help"], capture_output=True, text=True, timeout=10,
                                   stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = shown.stdout + shown.stderr
        if "--as-pid-1" not in text or "--perms" not in text:
            return None
        return real, "--argv0" in text
    return None


def describe_bubblewrap(environ: Mapping[str, str], cwd: Path) -> str:
    """Which bubblewrap Codex runs its commands in, for ``ralph doctor``."""
    found = system_bubblewrap(environ, cwd)
    if found is None:
        return "the bubblewrap bundled with Codex"
    path, argv0 = found
    if argv0:
        return f"the system's bubblewrap {path}"
    return f"the system's bubblewrap {path}, without --argv0: Codex's helper is made in the run's CODEX_HOME"
