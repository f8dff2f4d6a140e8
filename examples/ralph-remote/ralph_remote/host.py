"""The agent host: ``python -m ralph_remote.host``, run where the agent runs, talking on stdin/stdout.

It shares nothing with the loop's machine but this connection (start it over ``ssh`` for another
machine).  It keeps the agent's checkout in a private directory of its own, runs the agent and the
loop's gate commands there with ``ralph.api.process.run_process`` (each in a pid namespace: nothing they
start outlives them), relays the agent's hook calls back over the connection, and runs the workspace
exchange's side (``ralph.api.workspace``) for the runner.  When the connection ends (the loop is
done, or gone) it stops the agent and removes everything it made.

Requests it answers (see :mod:`ralph_remote.wire`): ``hello``, ``inside`` (run a command where the
checkout is: the workspace exchange), ``start`` (the agent, until it ends; ``stop`` ends it),
``command`` (a gate command, in the checkout or in a tree the runner sent).  Its one request to
the runner is ``hook``.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any

from ralph.api import ProcessSpec
from ralph.api.process import run_process, run_shell
from ralph.api.hooks import HookRelay, hook_client_path, hook_peer
from ralph.api.workspace import inside_script

from .wire import Lost, Wire, pack, unpack

HOOK_WAIT_SECONDS = 55.0
"""How long a hook call waits for the loop's answer (the hook client gives up at 55 s, then denies)."""


class AgentHost:
    """One run's checkout, agent process and hook relay."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ralph-agent-host-"))  # 0700
        self.checkout = self.root / "checkout"
        self.private = self.root / "private"  # the run directory as the agent sees it
        self.private.mkdir(mode=0o700)
        self.cancel = threading.Event()  # ends the running agent
        self.agent_done = threading.Event()
        self.agent_done.set()
        self.relay = HookRelay(self.forward_hook, self.private / "relay").start()
        # the connection keeps fds 0 and 1 to itself: what a child inherits there is /dev/null and stderr
        reader, writer = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(2, 1)
        self.wire = Wire(reader, writer, self.handle, on_close=self.cancel.set)

    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        op = message["op"]
        if op == "hello":
            return {"hostname": os.uname().nodename, "checkout": str(self.checkout), "private": str(self.private),
                    "hook_socket": str(self.relay.path), "hook_command": [sys.executable, "-I", "-S", str(hook_client_path())],
                    "hook_peer": hook_peer(),
                    "inside": [sys.executable, "-I", "-S", str(inside_script())], "git": shutil.which("git"),
                    "env": dict(os.environ), "home": os.path.expanduser("~")}
        if op == "inside":
            done = subprocess.run(message["argv"], input=unpack(message["stdin"]), capture_output=True)
            return {"exit_code": done.returncode, "stdout": pack(done.stdout), "stderr": pack(done.stderr)}
        if op == "start":
            return self.run_agent(message)
        if op == "stop":
            self.cancel.set()
            return None
        if op == "command":
            return self.run_command(message)
        raise ValueError(f"unknown request {op!r}")

    def run_agent(self, message: dict[str, Any]) -> dict[str, Any]:
        """The agent in the checkout until it ends, its output lines sent as they come."""
        argv = list(message["argv"])
        if not Path(argv[0]).exists() and message.get("program") and shutil.which(message["program"]):
            argv[0] = shutil.which(message["program"]) or argv[0]  # this machine's own copy of the program
        files = {Path(path): text for path, text in message["files"].items()}
        for path in files:  # loop-owned files (a settings file): only in the private directory
            if self.private not in path.parents:
                raise ValueError(f"{path} is not in the agent host's private directory")
        self.cancel.clear()
        if self.wire.closed.is_set():  # the runner went away meanwhile
            self.cancel.set()
        self.agent_done.clear()
        spec = ProcessSpec(argv, message["env"], self.checkout, stdin=message.get("stdin"), files=files)
        try:
            outcome = run_process(spec, lambda line: self.wire.notify("line", text=line), message.get("timeout"),
                                  self.cancel)
        finally:
            self.agent_done.set()
        return {"exit_code": outcome.exit_code, "timed_out": outcome.timed_out, "interrupted": outcome.interrupted,
                "stderr": outcome.stderr, "swept": outcome.swept}

    def run_command(self, message: dict[str, Any]) -> dict[str, Any]:
        """A gate command in the checkout, or in a tree the runner sent (a directory the loop made)."""
        cwd, tree = Path(message["cwd"]), None
        if message.get("tree") is not None:
            tree = Path(tempfile.mkdtemp(dir=self.root, prefix="tree-"))
            with tarfile.open(fileobj=io.BytesIO(unpack(message["tree"]))) as archive:
                archive.extractall(tree, filter="data")
            cwd = tree
        try:
            code, output, timed_out = run_shell(message["command"], cwd, message.get("timeout"))
        finally:
            if tree is not None:
                shutil.rmtree(tree, ignore_errors=True)
        return {"exit_code": code, "output": output, "timed_out": timed_out, "cwd": str(cwd)}

    def forward_hook(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The relay's forwarder: the hook call to the runner, which asks the loop.  None (no answer:
        the hook client fails closed) when the connection is gone or the loop did not answer in time."""
        try:
            return self.wire.call("hook", HOOK_WAIT_SECONDS, request=request).get("reply")
        except Lost:
            return None

    def serve(self) -> None:
        """Answer until the connection ends, then stop the agent and remove what this host made."""
        self.wire.closed.wait()
        self.cancel.set()
        self.agent_done.wait(60)  # run_process ends the agent and everything it started
        self.relay.stop()
        shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    AgentHost().serve()
