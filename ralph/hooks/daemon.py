"""A per-user hook helper for hooks that run without a loop (the plugin used interactively).

Starting Python, pluggy and every plugin for each tool call costs ~65 ms; a
Claude Code session makes hundreds of calls.  The first call outside a loop
answers in-process and starts this helper; later calls reach it over a Unix
socket in a private directory (~20 ms, as inside a loop).  It answers exactly
as the in-process path does, with the plugins loaded once per set of installed
plugins and plugin switches (:class:`Hosts`), exits after a quiet spell, and
exits as soon as ralph's installed files change (looked at after each answer
has gone out, so an upgrade is served by old code at most until then).

It never acts for a loop's agent, by two rules the agent cannot talk its way past:

- **who may ask** (:func:`admission`): the kernel's word on the process that connected
  (``SO_PEERCRED``/``SO_PEERPIDFD``): it must run as this user, in this helper's own pid namespace
  (every agent process of a loop on Linux lives in a pid namespace of its own), and still be there.
  Refused, the client answers in its own process (in the caller's namespace, with its containment).
- **what it runs** (:func:`forbid_programs`): nothing.  An audit hook stops every program start in
  this process (``subprocess``, ``os.system``, ``exec``, ``fork``, ``posix_spawn``); a request whose
  answer would start one (a Stop check's ``git status``, a guard's ``git rev-parse``) is declined and
  the client answers it itself.  A directory a request names (its ``.git/config``: a clean filter, an
  fsmonitor) therefore never decides what runs here — which also covers a machine where no pid
  namespace can be made and the helper cannot tell an agent's process from the person's.

Run as ``python -P -m ralph.hooks.daemon SOCKET``.  ``RALPH_HOOK_DAEMON=0``
disables it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

IDLE_ENV = "RALPH_HOOK_DAEMON_IDLE"
DEFAULT_IDLE_SECONDS = 600.0
PROGRAM_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                            "os.forkpty", "pty.spawn", "os.startfile"})
"""Audit events of every way Python starts a program or a process (:func:`forbid_programs`)."""


class ProgramRefused(BaseException):
    """A program start in the hook helper (:func:`forbid_programs`).  A BaseException: a plugin's
    ``except Exception`` around its own subprocess call does not turn it into an answer."""


_attempts = threading.local()
_forbidden = {"installed": False, "everywhere": False}


def forbid_programs(everywhere: bool = True) -> None:
    """No program or process starts while a request is answered (``everywhere``: in this process at all, the
    helper's own): each attempt raises :class:`ProgramRefused` and is noted for the request being answered on
    this thread (:func:`declining`).  An audit hook cannot be removed, and it sees every start through Python."""

    def hook(event: str, _args: tuple[Any, ...]) -> None:
        if event in PROGRAM_EVENTS and (_forbidden["everywhere"] or getattr(_attempts, "answering", False)):
            _attempts.seen = event
            raise ProgramRefused(f"the hook helper starts no program ({event})")

    _forbidden["everywhere"] = _forbidden["everywhere"] or everywhere
    if not _forbidden["installed"]:
        _forbidden["installed"] = True
        sys.addaudithook(hook)


def declining(answer: Any) -> Any:
    """``answer()``, or :class:`ralph.hooks.server.Declined` when it tried to start a program (even one a
    plugin's ``except`` swallowed): the client then answers that request in its own process."""
    from ralph.hooks.server import Declined

    _attempts.seen, _attempts.answering = None, True
    try:
        output = answer()
    except ProgramRefused as exc:
        raise Declined(f"{exc}: answer it in-process") from None
    finally:
        seen, _attempts.seen, _attempts.answering = _attempts.seen, None, False
    if seen is not None:
        raise Declined(f"the hook helper starts no program ({seen}): answer it in-process")
    return output


def _pid_namespace(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


def admission(connection: Any) -> str | None:
    """Why the process that opened ``connection`` may not ask this helper, or None.

    The kernel's facts only (an environment variable or a path is the agent's to write): the peer must run as
    this user, in this helper's pid namespace (not a nested one: a loop's agent; a sandbox; a container), and
    be there still.  Where the kernel says nothing of the kind (not Linux) every peer is admitted: the helper
    runs no program for anyone (:func:`forbid_programs`), and there is no pid namespace to leave.
    """
    from ralph.peercred import namespace_pids, peer_of

    if not os.path.exists("/proc/self/ns/pid"):
        return None
    peer = peer_of(connection)
    if peer is None:
        return "the kernel does not say who connected"
    try:
        if peer.uid != os.getuid():
            return f"the process that connected runs as uid {peer.uid}"
        if peer.pid <= 0:
            return "the process that connected lives outside this helper's pid namespace"
        pids = namespace_pids(peer)  # through its pidfd where the kernel gives one: that very process
        if not pids or len(pids) > 1:
            return (f"the process that connected (pid {peer.pid}) is gone or runs in a pid namespace of its own "
                    "(a loop's agent, a sandbox): this helper answers only the person's own sessions")
        try:
            if _pid_namespace(peer.pid) != _pid_namespace("self"):
                return f"the process that connected (pid {peer.pid}) runs in another pid namespace"
        except OSError:
            return f"the process that connected (pid {peer.pid}) cannot be inspected"
        if namespace_pids(peer) is None:  # it exited meanwhile: its pid may be another process's now
            return f"the process that connected (pid {peer.pid}) is gone"
        return None
    finally:
        peer.close()


def _code_stamp() -> float:
    """The newest modification time among ralph's and its default plugins' source files."""
    from ralph.hooks.wiring import hook_packages

    newest = 0.0
    for root in hook_packages().values():
        for path in root.rglob("*.py"):
            try:
                newest = max(newest, path.stat().st_mtime)
            except OSError:
                continue
    return newest


class Hosts:
    """The plugins the helper answers with, loaded once per set of installed plugins and plugin switches.

    Loading them costs ~8 ms (pluggy inspects every attribute of every plugin module) and the
    helper answers every tool call of a session.  A host is kept for the switches that decide which
    plugins load (``RALPH_DISABLE_PLUGINS``, ``RALPH_DISABLE_PLUGIN_AUTOLOAD``, ``RALPH_TRACE_PLUGINS``)
    and the ``ralph`` entry points installed, read again for every call (~1 ms): a plugin installed
    or removed since is answered with by a host of its own.  A host where a plugin failed to load is
    not kept (the next call tries it again, as before).  The plugin modules themselves were imported
    once per process before this too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[Any, Any] = {}

    def get(self, environ: dict[str, str]) -> Any:
        """The plugins to answer a request with ``environ`` (the client's forwarded environment)."""
        from ralph.plugin.calls import TRACE_ENV
        from ralph.plugin.entrypoints import ENTRY_POINT_GROUP, disabled_plugins, entry_points, only_own_plugins
        from ralph.plugin.manager import PluginHost

        key = (frozenset(disabled_plugins(environ)), only_own_plugins(environ), environ.get(TRACE_ENV),
               tuple(entry_points(ENTRY_POINT_GROUP)))
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                host = PluginHost(environ=environ, sections=False)
                if not host.failures:
                    self._hosts[key] = host
            return host


def serve(socket_path: Path, idle_seconds: float, *, everywhere: bool = False) -> None:
    """Answer hook requests on ``socket_path`` until idle for ``idle_seconds`` or the code changes.

    No request's answer starts a program; with ``everywhere`` (the helper's own process) nothing in this
    process does (:func:`forbid_programs`)."""
    from ralph.hooks.answers import handle_without_loop
    from ralph.hooks.server import HookServer

    stamp = _code_stamp()
    last = [time.monotonic()]
    answered = threading.Event()
    hosts = Hosts()

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        last[0] = time.monotonic()
        environ = dict(request.get("env") or {})
        try:
            return declining(lambda: handle_without_loop(request.get("payload") or {}, environ, hosts.get(environ)))
        finally:
            answered.set()  # the look for changed code (~3 ms of stats) runs on the main thread, not before the answer

    forbid_programs(everywhere)
    server = HookServer(respond, path=socket_path, admit=admission)
    server.start()
    try:
        while True:
            if answered.wait(1.0):
                answered.clear()
                if _code_stamp() != stamp:
                    break  # ralph changed on disk: let a fresh helper take over
            if time.monotonic() - last[0] > idle_seconds:
                break
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -P -m ralph.hooks.daemon SOCKET\n")
        return 2
    try:
        idle = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_SECONDS)
    except ValueError:
        idle = DEFAULT_IDLE_SECONDS
    try:
        serve(Path(args[0]), idle, everywhere=True)
    except OSError as exc:  # another helper won the race for the socket
        sys.stderr.write(f"ralph hook helper: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
