"""The run-owned configuration directory of the agent's CLI (Claude Code's config dir, ``CODEX_HOME``).

An agent CLI reads settings, hooks, MCP servers, plugins and commands from its user-scope
configuration directory (``~/.claude``, ``~/.codex``), which the agent itself can write: in
direct mode one write there made ralph's hook crash (every guard failed open), and a user-scope
PreToolUse hook rewrote a command ralph's guards had approved.  So the loop gives the CLI a
directory of its own for every agent process: made fresh (mode 0700; at the same path for every
process of one agent, so the CLI's prompt stays cacheable) in the run directory, outside the project, holding nothing but the person's login
(:meth:`~ralph.contracts.Agent.login_files`), and removed when the process has ended.  What the
agent writes there during one session never reaches the next one.

The login is made available as a hard link where the file system allows it (a refreshed token
the CLI writes in place reaches the person's own file, and the link works inside a container
that mounts the directory), else as a symbolic link when the agent runs on this machine, else
as a private copy.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.fsutil import private_dir

if TYPE_CHECKING:
    from ralph.contracts import Agent, AgentView, Runner

HOMES_DIR = "agent-homes"
"""Where in the run directory the config homes are made."""


class ConfigHomes:
    """The config homes of a run's agent processes: one per process, gone when it has ended."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._view: AgentView | None = None

    def open(self, agent: Agent, run_dir: Path, label: str) -> Path | None:
        """A fresh home for one process of ``agent``, or None (the agent takes none, or its CLI runs
        where this machine's run directory is not: a sandbox keeps its own home for now)."""
        if self._view is None:  # where the person's login is: looked up once per run
            self._view = self.runner.agent_view()
        logins = agent.login_files(self._view)
        if logins is None or self.runner.isolates or not self._view.sees(run_dir):
            return None
        return stable_config_home(run_dir, getattr(agent, "name", "agent"), logins, same_machine=True)

    def close(self, home: Path | None) -> None:
        """Remove ``home`` (None: nothing to do)."""
        if home is not None:
            remove_config_home(home)


def new_config_home(run_dir: Path, label: str, logins: Mapping[str, Path | bytes], *, same_machine: bool = True) -> Path:
    """A fresh, private config home under ``<run dir>/agent-homes/`` with ``logins`` in it.

    ``logins`` maps a name in the home (``.credentials.json``) to the person's file, or to its
    bytes (a login kept elsewhere, such as the macOS keychain).  ``same_machine``: the agent runs
    on this machine, where a symbolic link resolves.  ``agent-homes`` is made (again) a private
    directory of this user first: whatever the agent left in its place is removed, never followed.
    """
    parent = private_dir(run_dir / HOMES_DIR)
    home = Path(tempfile.mkdtemp(prefix=f"{_safe(label)}-", dir=parent))
    for name, source in logins.items():
        provide(home / name, source, same_machine=same_machine)
    return home


def stable_config_home(run_dir: Path, name: str, logins: Mapping[str, Path | bytes], *, same_machine: bool = True) -> Path:
    """:func:`new_config_home`'s fresh, private home, at the same path for every process of the run's
    agent ``name`` (``<run dir>/agent-homes/<name>``): whatever is at that path is removed first, never
    followed.  The path is the same because Claude Code writes it into its system prompt (the memory
    directory): a new path per process would make every iteration's prompt prefix new to the API's
    prompt cache, written (1.25x the input price) instead of read (0.1x)."""
    parent = private_dir(run_dir / HOMES_DIR)
    home = parent / _safe(name)
    for _ in range(3):
        if os.path.lexists(home):
            if os.path.isdir(home) and not os.path.islink(home):
                shutil.rmtree(home, ignore_errors=True)
            else:
                home.unlink()
        try:
            home.mkdir(mode=0o700)
            break
        except FileExistsError:  # made again in between: remove it again
            continue
    else:
        raise FileExistsError(f"{home}: cannot make a fresh config home there (something keeps making it)")
    for file_name, source in logins.items():
        provide(home / file_name, source, same_machine=same_machine)
    return home


def provide(target: Path, source: Path | bytes, *, same_machine: bool = True) -> None:
    """Make ``source`` (a regular file, or bytes) available at ``target``, which must not exist yet.

    A ``source`` that is a symbolic link is followed only for an agent on this machine (where it
    runs as the person anyway); for one elsewhere (a container that could have planted it) it is
    left out.  Anything else than a regular file is left out.
    """
    if isinstance(source, bytes):
        _write_private(target, source)
        return
    try:
        info = os.lstat(source)
    except OSError:
        return
    if stat.S_ISLNK(info.st_mode):
        if same_machine:
            target.symlink_to(source)
        return
    if not stat.S_ISREG(info.st_mode):
        return
    try:
        os.link(source, target, follow_symlinks=False)
        return
    except OSError:
        pass
    if same_machine:
        target.symlink_to(source)
        return
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        _write_private(target, handle.read())


def remove_config_home(home: Path) -> None:
    """Remove a config home and what the CLI wrote into it (links are removed, never followed)."""
    shutil.rmtree(home, ignore_errors=True)


def _write_private(target: Path, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40] or "agent"
