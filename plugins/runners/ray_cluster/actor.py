"""The workspace actor: one per run, on one Ray node, holding the agent's checkout.

It never sees the user's project path: its checkout lives in a private temp
directory on its node, filled and emptied with :mod:`ralph.workspace` states.
It runs the agent process there, buffers its output for the loop to poll, and
relays the agent's hook calls (through :class:`ralph.hooks.relay.HookRelay`)
to the loop, which answers them over Ray.

With ``agent_runs = "docker-sandbox"`` the actor holds a
:class:`~ralph_plugins.runners.docker_sandbox.DockerSandboxRunner` whose project is
its checkout: the agent (and the loop's gate commands) then run in the hardened
sandbox container on the node's own Docker engine, removed when the actor closes.

This module is imported on the node by Ray; it must not import ray at module
level (the class is wrapped with ``ray.remote`` by the runner).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

from ralph.api import ProcessSpec
from ralph.api.process import run_process
from ralph.api.hooks import HookRelay, hook_peer
from ralph.api.workspace import WorkspaceState, apply, capture, init_checkout

KILL_GRACE_SECONDS = 3.0
HOOK_ANSWER_SECONDS = 55.0


class WorkspaceActor:
    """A checkout, an agent process and a hook relay on one node."""

    def __init__(self, hook_client_source: str, sandbox: dict[str, Any] | None = None, name: str | None = None) -> None:
        if name:  # the run's name: an actor started again after a lost node has the same paths
            self.root = Path(tempfile.gettempdir()) / name
            shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir(mode=0o700)
        else:
            self.root = Path(tempfile.mkdtemp(prefix="ralph-ray-"))
        self.repo = self.root / "workspace"
        init_checkout(self.repo)
        self.private = self.root / "private"
        self.private.mkdir(mode=0o700)
        self.client = self.private / "hook_client.py"
        self.client.write_text(hook_client_source, encoding="utf-8")
        self._cond = threading.Condition()
        self._lines: list[str] = []
        self._stderr: deque[str] = deque(maxlen=200)
        self._pending: list[tuple[int, dict[str, Any]]] = []
        self._answers: dict[int, dict[str, Any] | None] = {}
        self._next_hook = 0
        self._exit: int | None = None
        self.relay = HookRelay(self._relay, self.private / "relay").start()
        self._sandbox_runner: Any = _sandbox_runner(self.repo, sandbox) if sandbox is not None else None
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    # -- where ---------------------------------------------------------------------

    def where(self) -> dict[str, Any]:
        """Node, host, process and checkout of this actor, the hook command that works here and the
        relay's process as the hook client checks it (``hook_peer``: this actor)."""
        import ray

        sandboxed = self._sandbox_runner is not None
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "workspace": str(self.repo),
            "agent_runs": "docker-sandbox" if sandboxed else "direct",
            "hook_socket": str(self.relay.path),
            "hook_command": self._sandbox_runner.hook_command() if sandboxed else f"{sys.executable} -I -S {self.client}",
            "hook_peer": hook_peer(),
        }

    def sandbox_check(self) -> str | None:
        """None when this node's Docker engine answers and has the sandbox image, else why not (with the fix)."""
        if self._sandbox_runner is None:
            return None
        available = self._sandbox_runner.availability()
        if not available.ok:
            return available.reason
        try:
            self._sandbox_runner.prepare(self.repo)  # leftovers of a crashed actor swept; the proxy started
        except Exception as exc:  # UnavailableError, worded by the docker runner
            return str(exc)
        return None

    # -- workspace -----------------------------------------------------------------

    def sync_in(self, state: WorkspaceState, branch: str | None) -> str:
        """Make the checkout ``state`` (on ``branch``); returns its HEAD.  The state is the loop's: it is
        applied as the agent's side of every runner applies it (``.git``'s config and hooks put back)."""
        apply(self.repo, state, branch)
        return state.head

    def sync_out(self, known: list[str]) -> WorkspaceState:
        """The checkout as it is, with the commits a peer that has ``known`` lacks (the sandbox runner's
        agent works on a checkout of its own: its work so far is brought back here first)."""
        if self._sandbox_runner is not None:
            self._sandbox_runner.bring_back()
        return capture(self.repo, known)

    def put_files(self, files: dict[str, str]) -> None:
        """Write loop-owned files (a settings file the agent's command line names) at their paths,
        which must lie in the private directory (the node's run directory)."""
        spec = ProcessSpec([], {}, self.repo, files={Path(path): text for path, text in files.items()})
        for path in spec.files:
            if self.private not in Path(path).parents:
                raise ValueError(f"{path} is not in the actor's private directory {self.private}")
        spec.write_files()

    # -- the agent process ------------------------------------------------------------

    def start(self, argv: list[str], env: dict[str, str], stdin: str | None, program: str | None,
              channel: Any = None) -> None:
        """Start the agent in the checkout with hooks pointed at the relay: ``run_process`` on this
        node (own session, the sweep of what it leaves behind) or the sandbox runner's exec."""
        if not Path(argv[0]).exists() and program and shutil.which(program):
            argv = [shutil.which(program) or argv[0], *argv[1:]]
        if self._sandbox_runner is None and not _startable(argv[0], self.repo):  # raised here, as Popen would
            raise FileNotFoundError(f"no such program on this node: {argv[0]}")
        with self._cond:
            self._lines, self._pending, self._answers, self._exit = [], [], {}, None
            self._stderr.clear()
        # the channel (the runner's agent_channel) already names this relay's socket
        spec = ProcessSpec(argv, env, self.repo, stdin=stdin, program=program, channel=channel)
        self._cancel = cancel = threading.Event()

        def on_line(line: str) -> None:
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()

        def run() -> None:
            try:  # the loop keeps the deadline (it calls stop()); no timeout here
                if self._sandbox_runner is not None:
                    outcome = self._sandbox_runner.run(spec, on_line, None, cancel)
                else:
                    outcome = run_process(spec, on_line, None, cancel, kill_grace=KILL_GRACE_SECONDS)
                code, stderr = outcome.exit_code, outcome.stderr
            except Exception as exc:  # the engine failed mid-run: the loop sees it as the agent's failure
                where = "docker-sandbox" if self._sandbox_runner is not None else "the agent process"
                code, stderr = 125, f"{where} on the node: {type(exc).__name__}: {exc}"
            with self._cond:
                self._stderr.extend(stderr.splitlines())
                self._exit = code
                self._cond.notify_all()

        self._thread = threading.Thread(target=run, name="ralph-ray-agent", daemon=True)
        self._thread.start()

    def run_command(self, command: str, cwd: str, timeout: float | None) -> Any:
        """A loop-owned command (a gate) in this checkout's sandbox container; a CommandResult."""
        if self._sandbox_runner is None:
            raise RuntimeError("run_command on the node needs agent_runs = \"docker-sandbox\"")
        return self._sandbox_runner.run_command(command, Path(cwd), timeout)

    def poll(self, wait: float) -> dict[str, Any]:
        """New output lines, hook requests waiting for an answer, and the exit code once it ended."""
        with self._cond:
            self._cond.wait_for(lambda: self._lines or self._pending or self._exit is not None, timeout=wait)
            lines, self._lines = self._lines, []
            hooks, self._pending = self._pending, []
            exit_code = self._exit
            stderr = "\n".join(self._stderr) if exit_code is not None else ""
        return {"lines": lines, "hooks": hooks, "exit": exit_code, "stderr": stderr}

    def answer(self, hook_id: int, reply: dict[str, Any] | None) -> None:
        """The loop's reply to hook request ``hook_id`` (None: the loop could not answer)."""
        with self._cond:
            self._answers[hook_id] = reply
            self._cond.notify_all()

    def _relay(self, request: dict[str, Any]) -> dict[str, Any] | None:
        with self._cond:
            self._next_hook += 1
            hook_id = self._next_hook
            self._pending.append((hook_id, request))
            self._cond.notify_all()
            self._cond.wait_for(lambda: hook_id in self._answers, timeout=HOOK_ANSWER_SECONDS)
            return self._answers.pop(hook_id, None)

    def stop(self) -> None:
        """Stop the agent: its process group, then every process it left behind (or its container exec)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._cancel.set()  # run_process ends the agent and all it started; the docker runner removes the container
            thread.join(timeout=60)

    def close(self) -> None:
        """Stop everything and remove the checkout."""
        self.stop()
        if self._sandbox_runner is not None:
            self._sandbox_runner.cleanup()  # the container (and the allowlist proxy and network) go
        self.relay.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _sandbox_runner(repo: Path, shipped: dict[str, Any]) -> Any:
    """A docker-sandbox runner whose project is this actor's checkout, from the loop's shipped settings."""
    from types import SimpleNamespace

    from ralph.api import Settings
    from ..docker_sandbox import SECTION, DockerSandboxRunner

    core = SimpleNamespace(timeout=shipped["timeout"], max_iterations=shipped["max_iterations"])
    return DockerSandboxRunner(Settings(repo, core, {SECTION: shipped["section"]}))  # type: ignore[arg-type]


def _startable(program: str, cwd: Path) -> bool:
    """Would ``Popen([program, ...], cwd=cwd)`` find ``program``?"""
    if os.sep in program:
        return os.access(cwd / program, os.X_OK)  # an absolute ``program`` replaces ``cwd``
    return shutil.which(program) is not None
