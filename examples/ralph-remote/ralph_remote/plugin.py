"""The ``remote`` plugin: a runner whose agent runs on another machine, behind an agent host.

The agent host (:mod:`ralph_remote.host`) is started with ``[tool.ralph.remote] command`` and reached
only over that command's stdin/stdout: no shared filesystem, no way to the loop's socket.  What a
remote runner owes the loop (docs/plugins.md, "Writing a remote runner"), and where it is here:

- **the workspace in and out**, checked: an ``AgentCheckout`` over the host's ``inside`` request
  (:meth:`RemoteRunner._run_inside`): shipped in before the agent and before every gate command,
  brought back after the agent and for the Stop checks (:meth:`RemoteRunner.bring_back`);
- **the channel** as the agent host sees it (:meth:`RemoteRunner.agent_channel`);
- **the hook calls relayed back** with their token, paths translated, failing closed
  (:meth:`RemoteRunner._answer_hook`);
- **gate commands where the agent runs** (:meth:`RemoteRunner.run_command`);
- **nothing outlives the run**: the host runs each process with ``run_process`` (a pid namespace),
  ``stop`` ends the agent, and closing the connection (:meth:`RemoteRunner.cleanup`, or this process
  dying) makes the host stop everything and remove its checkout;
- **no model endpoint**: the loop's meter listens on this machine, which the host may not reach
  (``model_endpoint_host`` stays None): the agent uses its own, and its cost reports count;
- **availability and pre-flight** that say why not (:meth:`RemoteRunner.availability`,
  :meth:`RemoteRunner.preflight`, :meth:`RemoteRunner.agent_view`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ralph.api import (AgentChannel, AgentView, Availability, Check, CommandResult, ProcessOutcome, ProcessSpec,
                       RalphError, Runner, UnavailableError, hookimpl, section_or_default)
from ralph.api.hooks import ask_loop
from ralph.api.workspace import AgentCheckout, InsideResult

from .wire import Lost, Wire, pack, unpack

RALPH_API = "2"
SECTION = "remote"
GRACE_SECONDS = 60.0
"""How much longer than the agent's timeout the runner waits for the host to say the agent ended."""


class RemoteRunner(Runner):
    """The agent (and the gate commands) on an agent host; the loop stays on this machine."""

    name = "remote"
    description = "agent on another machine, behind an agent host reached over a command's stdin/stdout (ssh ...)"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._host: subprocess.Popen[bytes] | None = None
        self._wire: Wire | None = None
        self._hello: dict[str, Any] = {}
        self._checkout: AgentCheckout | None = None
        self._project = Path()
        self._loop: AgentChannel | None = None
        """The loop's channel as this machine sees it (its socket, its run directory)."""
        self._on_line: Callable[[str], None] | None = None
        self._running = threading.Event()

    def config(self) -> Any:
        from .config import RemoteConfig

        return section_or_default(self.settings, SECTION, RemoteConfig)

    # -- can it run, and what the agent will see ----------------------------------------------------

    def availability(self) -> Availability:
        program = self.config().command[0]
        if shutil.which(program) is None:
            return Availability.no(f"the agent host's command {program!r} is not on PATH ([tool.ralph.remote] command)")
        return Availability.yes()

    def preflight(self, context: Any) -> list[Check]:
        """The agent host starts and answers, and has git (the workspace exchange runs it there)."""
        hello = self._connect()
        where = f"the agent host on {hello['hostname']}"
        checks = [Check(True, f"remote: {where} answers; the agent works in {hello['checkout']} there")]
        if not hello["git"]:
            checks.append(Check(False, f"remote: git is not on the PATH of {where}", "install git there"))
        return checks

    def agent_view(self) -> AgentView:
        """The host's own environment and home, and what ``env`` sends; none of this machine's files."""
        hello = self._connect()
        return AgentView(env={**hello["env"], **self._forwarded_env()}, home=Path(hello["home"]),
                         sees=lambda path: False, where=f"the agent host on {hello['hostname']}")

    # -- the run ---------------------------------------------------------------------------------------

    def prepare(self, project_dir: Path) -> None:
        hello = self._connect()
        self._project = Path(project_dir).resolve()
        self._checkout = AgentCheckout(self._project, hello["checkout"], hello["inside"])

    def agent_channel(self, channel: AgentChannel) -> AgentChannel:
        """The channel on the agent host: its checkout and private directory instead of the project and
        the run directory, its relay's socket, its hook client (taking answers from the host's process,
        the relay's, only); nothing of this machine's loader variables or config home (the person's
        login stays here)."""
        self._loop = channel
        hello = self._hello
        there = channel.remap(self._project, Path(hello["checkout"])).remap(channel.run_dir, Path(hello["private"]))
        return dataclasses.replace(there, hook_socket=Path(hello["hook_socket"]), hook_command=tuple(hello["hook_command"]),
                                   hook_peer=hello.get("hook_peer"), loader_env={}, config_home=None, model_endpoint=None)

    def run(self, spec: ProcessSpec, on_line: Callable[[str], None], timeout: float | None,
            cancel: threading.Event) -> ProcessOutcome:
        assert self._checkout is not None and self._wire is not None and self._loop is not None, "prepare() first"
        self._checkout.ship_in(self._run_inside)
        failed: list[BaseException] = []

        def line(text: str) -> None:  # on the wire's reader thread, in order
            try:
                on_line(text)
            except BaseException as exc:  # stop the agent, raise it from run()
                failed.append(exc)
                self._wire_or_fail().notify("stop")

        to_host = self._paths(to_loop=False)
        self._on_line = line
        self._running.set()
        pending = self._wire.request(
            "start", argv=translate(spec.argv, to_host), env={**self._forwarded_env(), **translate(spec.env, to_host)},
            stdin=translate(spec.stdin, to_host), program=spec.program, timeout=timeout,
            files={str(path): text for path, text in spec.files.items()})  # already where the host has them
        deadline = None if timeout is None else time.monotonic() + timeout + GRACE_SECONDS
        stopped = False
        try:
            while not pending.wait(0.2):
                if (cancel.is_set() or (deadline is not None and time.monotonic() > deadline)) and not stopped:
                    self._wire.notify("stop")
                    stopped = True
            result = pending.result()
        except Lost as exc:
            raise RalphError(f"runner 'remote': the agent host went away during the iteration ({exc})") from None
        finally:
            self._running.clear()
            self._on_line = None
        self._checkout.bring_back(self._run_inside, keep=self._loop.run_dir)
        if failed:
            raise failed[0]
        return ProcessOutcome(result["exit_code"], result["timed_out"], result["interrupted"], result["stderr"],
                              result["swept"])

    def bring_back(self) -> None:
        """Before the loop's Stop checks read the project: the agent's work so far, checked as after the run."""
        if self._running.is_set() and self._checkout is not None and self._loop is not None:
            self._checkout.bring_back(self._run_inside, keep=self._loop.run_dir)

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """A gate command on the agent host, on the project as it is now: in the checkout, or in a copy of
        a directory the loop made outside the project (the trusted tests' tree)."""
        assert self._checkout is not None, "prepare() first"
        self._checkout.ship_in(self._run_inside)
        cwd = Path(cwd).resolve()
        inside = cwd.is_relative_to(self._project)
        there = Path(self._hello["checkout"]) / cwd.relative_to(self._project) if inside else Path(".")
        tree = None if inside else pack(_tar(cwd))
        reply = self._call("command", None if timeout is None else timeout + GRACE_SECONDS, command=command,
                           cwd=str(there), tree=tree, timeout=timeout)
        output = translate(reply["output"], {reply["cwd"]: str(cwd), **self._paths(to_loop=True)})
        return CommandResult(reply["exit_code"], output, reply["timed_out"], "remote")

    def cleanup(self) -> None:
        """Close the connection: the host stops the agent and removes its checkout, then exits."""
        if self._wire is not None:
            self._wire.close()
        if self._host is not None:
            try:
                self._host.wait(timeout=GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self._host.kill()
                self._host.wait()
        self._host = self._wire = None

    # -- the connection --------------------------------------------------------------------------------

    def _connect(self) -> dict[str, Any]:
        """Start the agent host (once per run) and read its ``hello``: where it keeps things."""
        if self._wire is not None and not self._wire.closed.is_set():
            return self._hello
        command = self.config().command
        errors = tempfile.TemporaryFile()
        try:  # its own session: a Ctrl-C reaches the loop, which stops the agent through the host
            self._host = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                          cwd="/", start_new_session=True)
        except OSError as exc:
            raise UnavailableError(f"runner 'remote': the agent host did not start ({command[0]}): {exc}") from None
        assert self._host.stdin is not None and self._host.stdout is not None
        self._wire = Wire(self._host.stdout, self._host.stdin, self._handle)
        try:
            self._hello = self._wire.call("hello", 120)
        except Lost:
            self._host.kill()
            errors.seek(0)
            said = errors.read().decode("utf-8", "replace").strip().splitlines()[-3:]
            raise UnavailableError(f"runner 'remote': the agent host did not answer (`{' '.join(command)}`): "
                                   + (" / ".join(said) or "no output")
                                   + "; it must run `python -m ralph_remote.host` where ralph-remote is installed") from None
        return self._hello

    def _handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """What the agent host sends: the agent's output lines, and its hook calls."""
        if message["op"] == "line":
            if self._on_line is not None:
                self._on_line(message["text"])
            return None
        if message["op"] == "hook":
            return {"reply": self._answer_hook(message["request"])}
        raise ValueError(f"unknown request {message['op']!r}")

    def _answer_hook(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """One of the agent's hook calls, asked of the loop's own socket with the token it carries.

        The paths in it are the agent host's; the loop's guards judge the project's, so they are
        translated (and the answer's back).  None when the loop does not answer: the host's relay
        then closes the call without an answer, and the hook client fails closed (PreToolUse denies,
        Stop blocks), as it would on this machine.
        """
        if self._loop is None:
            return None
        try:
            reply = ask_loop(str(self._loop.hook_socket), translate(request, self._paths(to_loop=True)))
        except (OSError, ValueError):
            return None
        answer: dict[str, Any] = translate(reply, self._paths(to_loop=False))
        return answer

    def _run_inside(self, argv: Sequence[str], stdin: bytes) -> InsideResult:
        """The runner's one primitive for ``AgentCheckout``: run ``argv`` where the checkout is."""
        reply = self._call("inside", 600, argv=list(argv), stdin=pack(stdin))
        return InsideResult(reply["exit_code"], unpack(reply["stdout"]), unpack(reply["stderr"]))

    def _call(self, op: str, wait: float | None, **fields: Any) -> dict[str, Any]:
        try:
            return self._wire_or_fail().call(op, wait, **fields)
        except Lost as exc:
            raise RalphError(f"runner 'remote': the agent host did not answer {op!r} ({exc})") from None

    def _wire_or_fail(self) -> Wire:
        if self._wire is None:
            raise RalphError("runner 'remote': not connected to the agent host")
        return self._wire

    def _paths(self, to_loop: bool) -> dict[str, str]:
        """Agent host -> this machine (``to_loop``), or back: the checkout and the run directory."""
        assert self._loop is not None
        pairs = {self._hello["checkout"]: str(self._project), self._hello["private"]: str(self._loop.run_dir)}
        return pairs if to_loop else {here: there for there, here in pairs.items()}

    def _forwarded_env(self) -> dict[str, str]:
        patterns = self.config().env
        return {k: v for k, v in os.environ.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def translate(value: Any, paths: dict[str, str]) -> Any:
    """``value`` (JSON: strings, lists, dicts) with every path of ``paths`` replaced by its counterpart,
    in one pass (a path inside another is replaced whole, a replacement never again)."""
    if isinstance(value, str):
        pattern = "|".join(re.escape(old) for old in sorted(paths, key=len, reverse=True))
        return re.sub(pattern, lambda found: paths[found.group(0)], value) if paths else value
    if isinstance(value, dict):
        return {key: translate(item, paths) for key, item in value.items()}
    if isinstance(value, list):
        return [translate(item, paths) for item in value]
    return value


def _tar(directory: Path) -> bytes:
    """``directory`` (one the loop made) as a tar archive; links are stored as links, not followed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(directory, arcname=".")
    return buffer.getvalue()


@hookimpl
def ralph_register_runners(register: Callable[[type[Runner]], None]) -> None:
    """Offer ``--runner remote``."""
    register(RemoteRunner)


@hookimpl
def ralph_config_sections() -> dict[str, Any]:
    """``[tool.ralph.remote]`` (its pydantic model is imported only when config is read)."""
    from .config import RemoteConfig

    return {SECTION: RemoteConfig}
