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
from typing import TYPE_CHECKING, Any, Mapping

from ralph.hooks.answers import EVENTS

if TYPE_CHECKING:
    from ralph.contracts import AgentChannel

PINNED: dict[str, Any] = {"disableAllHooks": False, "allowManagedHooksOnly": False}
"""Settings keys that decide whether hooks run, at the values ralph needs."""

PINNED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONHASHSEED",
              "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH")
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
    """This interpreter running the stdlib-only hook client, isolated from the agent's environment.

    ``-I`` ignores every ``PYTHON*`` variable (``PYTHONHASHSEED=bogus`` would stop the interpreter
    before the client runs, ``PYTHONPATH`` or ``PYTHONSTARTUP`` would run the agent's code in it), the
    user site and the cwd on ``sys.path`` (the project's ``ralph/`` directory would shadow the package);
    ``-S`` skips site-packages for a fast start (the client loads them only when no loop answers).
    """
    return f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(hook_client_path()))}"


def hook_peer(pid: int | None = None) -> str:
    """``PID:PIDNS:PIDFS``: this process (the one serving the hook socket) as the hook client checks the
    process answering it (``ralph.hooks.client.peer_refusal``): its pid, the inode of its pid namespace
    and the pidfs inode of its pidfd (unique per process while the machine runs; empty where pidfds
    share one inode, before Linux 6.9, or where there are none)."""
    pid = os.getpid() if pid is None else pid
    try:
        namespace = str(os.stat(f"/proc/{pid}/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return f"{pid}:{namespace}:{_pidfs_inode(pid)}"


def _pidfs_inode(pid: int) -> str:
    """The pidfs inode of ``pid``, or "" where a pidfd's inode does not tell processes apart."""
    if not hasattr(os, "pidfd_open"):
        return ""
    inodes = []
    for each in (pid, os.getppid() if pid == os.getpid() else os.getpid()):
        try:
            fd = os.pidfd_open(each)
        except OSError:
            return ""
        try:
            inodes.append(os.fstat(fd).st_ino)
        finally:
            os.close(fd)
    return str(inodes[0]) if inodes[0] != inodes[1] else ""  # one anon inode for all: not pidfs


def hook_argv(script: Path | None = None) -> tuple[str, ...]:
    """:func:`hook_command` as argv, running ``script`` (default: the client's source)."""
    return (sys.executable, "-I", "-S", str(script or hook_client_path()))


def compiled_hook_argv(directory: Path) -> tuple[str, ...]:
    """:func:`compiled_hook_command` as argv (the channel's ``hook_command`` on this machine)."""
    import py_compile

    target = directory / "hook_client.pyc"
    if not target.is_file():
        try:
            py_compile.compile(str(hook_client_path()), cfile=str(target), doraise=True)
        except (OSError, py_compile.PyCompileError):
            return hook_argv()
    return hook_argv(target)


class CompiledClient:
    """The hook client compiled into a run directory once per run, and put back before every agent
    process when anything changed it.

    The directory is outside the project, but in direct mode code the agent runs as you can still
    write there: a broken client only blocks (the fail-closed wrapper), while a working fake that
    answers "allow" would let every later tool call of its session through.  So the loop keeps the
    compiled bytes in memory and, before each agent process, replaces whatever is at the path
    (never writing through it) when it differs: a fake lasts at most the session that wrote it, and
    the loop says so.
    """

    NAME = "hook_client.pyc"

    def __init__(self, directory: Path) -> None:
        import py_compile

        self.path = directory / self.NAME
        self.data: bytes | None = None
        try:
            py_compile.compile(str(hook_client_path()), cfile=str(self.path), doraise=True)
            self.data = self.path.read_bytes()
        except (OSError, py_compile.PyCompileError):
            self.data = None

    def argv(self) -> tuple[str, ...]:
        """The client's command line: the compiled copy, or the source where it could not be written."""
        return hook_argv(self.path) if self.data is not None else hook_argv()

    def restore(self) -> str | None:
        """Put the compiled client back if it is not what the loop wrote; returns how it had changed
        (``changed``, ``replaced``: not a regular file, ``deleted``), or None."""
        import stat
        import tempfile

        if self.data is None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            how = "deleted"
        except OSError:
            how = "replaced"  # a symlink (ELOOP) or something unreadable in its place
        else:
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
                current = os.read(fd, len(self.data) + 1) if regular else None
            finally:
                os.close(fd)
            if current == self.data:
                return None
            how = "changed" if regular else "replaced"
        if os.path.isdir(self.path) and not os.path.islink(self.path):
            import shutil

            shutil.rmtree(self.path, ignore_errors=True)
        tmp_fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".hook_client-")
        with os.fdopen(tmp_fd, "wb") as handle:
            handle.write(self.data)
        os.replace(tmp, self.path)
        return how


def loader_env(inherit: bool = True) -> dict[str, str]:
    """The :data:`PINNED_ENV` values the hook process gets: this process's (``inherit``) or empty."""
    return {name: (os.environ.get(name, "") if inherit else "") for name in PINNED_ENV}


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
    return f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(target))}"


LOOP_ENV = "RALPH_HOOK_LOOP"
"""Set to ``1`` on the client's command line by :func:`fail_closed_command`: the client is in a loop and
fails closed even when ``RALPH_HOOK_SOCKET`` is missing (a client that believed it was outside a loop
would allow everything)."""

SOCKET_ENV = "RALPH_HOOK_SOCKET"
LOADER_ENV = ("LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH")
"""Dynamic-loader variables: set on the client's command line to the loop's own values (empty in a sandbox)."""

FAILED_MESSAGE = ("ralph hook: the hook client failed; in a loop a failed hook denies the tool call (or keeps the "
                  "session from stopping). Nothing more can be done in this session; stop and let the loop recover.")
HOOK_TIMEOUT = 60
"""Claude Code's timeout for ralph's hook, in seconds (the client gives up before it: see ``ralph.hooks.client``)."""


def fail_closed_command(command: str, loader_env: Mapping[str, str] | None = None) -> str:
    """``command`` (a simple command running the hook client) wrapped so that any failure blocks.

    Claude Code treats a hook's exit code 2 as blocking (PreToolUse: the tool call is denied;
    Stop: the session goes on, with stderr as the reason) and every other failure, a timeout
    included, as a non-blocking error: the tool call would run unchecked.  The wrapper is plain
    ``/bin/sh`` using only its builtins: it runs the client with
    :data:`LOOP_ENV` and the loader variables set on the command line (``loader_env``, missing
    names empty; the hook socket too when ``loader_env`` names it: where the client asks does not
    depend on the environment it inherits), passes on its output when the client exited 0 with a
    JSON object, and otherwise exits 2 with the reason on stderr: the interpreter could not start,
    the client crashed, was killed, timed out (it stops itself before Claude Code would) or wrote
    no JSON.  The run's token is never put on the command line (other users can read that).
    """
    values = loader_env or {}
    names = LOADER_ENV + ((SOCKET_ENV,) if values.get(SOCKET_ENV) else ())
    assignments = " ".join(f"{name}={shlex.quote(values.get(name, ''))}" for name in names)
    return (
        f"out=$({LOOP_ENV}=1 {assignments} exec {command}); rc=$?; "
        "case $rc:$out in 0:\\{*\\}) printf '%s\\n' \"$out\"; exit 0;; esac; "
        f"printf '%s (exit status %s)\\n' {shlex.quote(FAILED_MESSAGE)} \"$rc\" >&2; exit 2"
    )


def pinned_env(loop_env: Mapping[str, str], inherit: bool = True) -> dict[str, str]:
    """``env`` for the settings file: the ``RALPH_*`` entries of ``loop_env`` and :data:`PINNED_ENV`.

    With ``inherit`` (the agent runs on this machine) the pinned variables keep this
    process's values; otherwise (a sandbox) they are empty.
    """
    env = loader_env(inherit)
    env.update({name: value for name, value in loop_env.items() if name.startswith("RALPH_")})
    return env


def hook_settings(command: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, object]:
    """Claude Code settings with ralph's hook on every event it handles, and the pins above."""
    command = command or hook_command()
    entry = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}
    hooks: dict[str, object] = {event: [{"hooks": [entry]}] for event in EVENTS}
    hooks["ConfigChange"] = [{"hooks": [{"type": "command", "command": CONFIG_CHANGE_COMMAND, "timeout": 10}]}]
    settings: dict[str, object] = {"hooks": hooks, **PINNED}
    if env:
        settings["env"] = dict(env)
    return settings


def hook_command_for(channel: AgentChannel) -> str:
    """The shell command an agent CLI runs for ralph's hooks: the channel's hook client inside
    :func:`fail_closed_command` (with the channel's loader variables), so any failure blocks."""
    return fail_closed_command(channel.hook_command_line(), channel.hook_env())


def claude_settings(channel: AgentChannel) -> str:
    """The Claude Code ``--settings`` file for ``channel`` (ralph's hooks, fail-closed, and the pins
    above), as text."""
    return json.dumps(hook_settings(hook_command_for(channel), channel.hook_env()), indent=2) + "\n"


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
    found.extend(ignored_mcp_servers(project_dir))
    return found


def ignored_mcp_servers(project_dir: Path) -> list[str]:
    """A line naming the servers of the project's ``.mcp.json``, which Claude Code does not start in a loop."""
    path = project_dir / ".mcp.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        return [f"{path}: unreadable ({exc}); its MCP servers are not started during a loop anyway"]
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict) or not servers:
        return []
    return [f"{path}: its MCP servers ({', '.join(sorted(map(str, servers)))}) are not started during a loop; list the "
            "ones the agent needs in [tool.ralph.claude] mcp_servers"]
