"""The agent's way back to the loop during a run: the hook server, its token, and the answers.

The agent-side hook client reaches :class:`HookBridge` through a Unix socket named in the
agent's environment, with a per-run token; every answer is made from the loop's own
trusted state (the running iteration, the plugins), never from files the agent can write.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.plugin.manager import PluginFailure

if TYPE_CHECKING:
    from ralph.hooks.wiring import CompiledClient
    from ralph.contracts import AgentChannel, LoopView, Selection, Violation
    from ralph.hooks.server import HookServer
    from ralph.loop.runcontext import RunContext
    from ralph.tasks import TaskList

RECENT_TOOLS = 5
"""Tool calls of the running iteration kept as the context of a question."""
STOP_EVENTS = ("Stop", "SubagentStop")
"""Hook events whose checks read the project: the runner brings the agent's work back first."""


class WorkNotBack(Exception):
    """The runner could not show the project the agent's work before a Stop check."""


Running = tuple["Selection", "TaskList", "str | None"]
"""(selection, pre-iteration tasks, checkpoint commit) of the running iteration."""
AskHandler = Callable[[Any, "Running | None", "int | None", list[str]], dict[str, Any]]
"""Records an agent's question (``ralph ask``): the loop's :meth:`ralph.loop.parking.Parking.ask`."""


class HookBridge:
    """Serves the agent's hook calls for one run and knows which iteration is running."""

    def __init__(self, context: RunContext, run_dir: Path, marker: Path, on_ask: AskHandler | None = None) -> None:
        self.host = context.host
        self.project_dir = context.project_dir
        self.ralph_dir = context.settings.ralph_dir
        self.runner = context.runner
        self.run_dir = run_dir
        self.marker = marker
        self.emit = context.emit
        self.cancel = context.cancel
        self.stop_checks = context.checks.stop_checks
        """The checks a Stop hook runs: the task list on disk against the iteration's snapshot."""
        self.token = secrets.token_urlsafe(32)
        self.server: HookServer | None = None
        self.sessions: dict[str, Any] = {}
        self.current: Running | None = None
        """The running iteration; None between iterations (hooks arriving then see no iteration)."""
        self.iteration: int | None = None
        """The running iteration's number (set with :attr:`current`)."""
        self.on_ask = on_ask
        """Records an agent's question (``ralph ask``): the loop's :meth:`ralph.loop.parking.Parking.ask`."""
        self.recent: deque[str] = deque(maxlen=RECENT_TOOLS)
        """The running iteration's last tool calls, one line each (the context of a question)."""
        self.plugin_failure: PluginFailure | None = None
        """Set when a guard or Stop check raised: the run stops after the iteration."""
        self.denied_ids: set[str] = set()
        """The ``tool_use_id`` of each PreToolUse call the guards denied during the running iteration,
        where the agent's CLI sends one (reset by :meth:`start_iteration`)."""
        self._protected: list[Path] | None = None
        self._hook_argv: tuple[str, ...] | None = None
        self._client: CompiledClient | None = None

    def start(self) -> HookBridge:
        """Start the hook server (a socket in the run directory)."""
        from ralph.hooks.server import HookServer

        self.server = HookServer(
            self.answer, token=self.token, on_refused=lambda reason: self.emit("hook_refused", reason=reason)
        ).start()
        return self

    def stop(self) -> None:
        """Stop the hook server; the errors it met go to the event log."""
        if self.server is None:
            return
        self.server.stop()
        for error in self.server.errors:
            self.emit("hook_error", error=error[-4000:])

    def channel(self, tasks_file: Path, iteration: int | None = None) -> AgentChannel:
        """The agent's way to the loop as this machine sees it: hook socket, token, run directory,
        the loop's state and task files, the hook client compiled into the run directory (made once
        per run, outside the project, where the protected-files guard denies writes; put back, and
        reported, when it changed since: :class:`~ralph.hooks.wiring.CompiledClient`), this
        process's loader variables and its identity (the only process whose answers the client takes).  A runner remaps it (:meth:`Runner.agent_channel`)."""
        from ralph.contracts import AgentChannel
        from ralph.hooks.wiring import CompiledClient, hook_peer, loader_env

        assert self.server is not None
        if self._client is None:
            self._client = CompiledClient(self.run_dir)
            self._hook_argv = self._client.argv()
        how = self._client.restore()
        if how is not None:
            self.emit("protected_file_restored", iteration=iteration, path=str(self._client.path), how=how,
                      message="ralph's hook client in the run directory was changed during the last agent session "
                              "(a fake client would allow every tool call); the loop put its own back")
        assert self._hook_argv is not None
        return AgentChannel(
            hook_socket=Path(self.server.path),
            token=self.token,
            run_dir=self.run_dir,
            state_file=self.run_dir / "state.json",
            tasks_file=tasks_file,
            hook_command=self._hook_argv,
            loader_env=loader_env(inherit=True),
            hook_peer=hook_peer(),
        )

    def start_iteration(self, running: Running, number: int | None = None) -> None:
        """An iteration starts: hooks now see it (iteration ``number``), and it has no denials and no
        tool calls yet."""
        self.denied_ids = set()
        self.recent.clear()
        self.iteration = number
        self.current = running

    def loop_view(self) -> LoopView:
        """What guards see of the loop: runner, the running iteration, the protected paths."""
        from ralph.contracts import LoopView
        from ralph.loop.trustedfiles import protected_files

        selection, _, checkpoint = self.current if self.current else (None, None, None)
        if self._protected is None:  # the same paths all run long
            self._protected = [self.marker, *protected_files(self.project_dir, self.ralph_dir)]
        return LoopView(
            runner=self.runner.name,
            isolates=self.runner.isolates,
            mode=selection.mode if selection else None,
            story_id=selection.story_id if selection else None,
            ralph_dir=self.ralph_dir,
            run_dir=self.run_dir,
            protected_paths=list(self._protected),  # a copy: a guard may change its view's list
            checkpoint=checkpoint,
        )

    def _bring_back(self) -> None:
        """The runner's :meth:`~ralph.contracts.Runner.bring_back`, its failure worded for the agent."""
        try:
            self.runner.bring_back()
        except Exception as exc:  # any failure: the Stop checks would read a stale project
            self.emit("hook_error", error=f"bring_back: {type(exc).__name__}: {exc}"[-4000:])
            raise WorkNotBack(f"the loop could not read your work back from the sandbox: {exc}") from exc

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one agent-side hook call with the loop's trusted state and plugins (or record the
        agent's question: a request with ``ask``, from ``ralph ask``)."""
        from ralph.hooks.answers import HookContext, answer, deny
        from ralph.hooks.sessionstore import MemorySession

        if "ask" in request:
            return self._ask(request.get("ask"))
        payload = request.get("payload") or {}
        session_id = str(payload.get("session_id") or "")
        session = self.sessions.setdefault(session_id, MemorySession())
        current = self.current

        def stop_checks() -> list[Violation]:
            from ralph.loop.taskfile import shared_reads

            if current is None:
                return []
            selection, before, _ = current
            with shared_reads():  # the checks only look: an unchanged file is not parsed again
                return self.stop_checks(selection, before)

        context = HookContext(self.host, self.project_dir, session, self.run_dir, self.loop_view(), stop_checks)
        if current is not None and payload.get("hook_event_name") == "PreToolUse":
            self.recent.append(tool_line(payload))
        try:
            if current is not None and payload.get("hook_event_name") in STOP_EVENTS:
                self._bring_back()
            output = answer(payload, context, dict(request.get("env") or {}))
        except WorkNotBack as exc:  # the Stop checks cannot see the agent's work: block, saying why
            output = deny(payload, f"ralph: {exc}")
        except PluginFailure as exc:  # a guard (or a Stop check) that cannot run: deny, and stop the run
            self.plugin_failure = exc
            self.cancel.set()
            output = deny(payload, f"ralph: {exc}")
        if output:
            if current is not None and _denies(output) and payload.get("tool_use_id"):
                self.denied_ids.add(str(payload["tool_use_id"]))
            self.emit("hook", event=payload.get("hook_event_name"), tool=payload.get("tool_name"), output=output)
        return output

    def _ask(self, body: Any) -> dict[str, Any]:
        """An agent's question for a person (``ralph ask``): recorded by :attr:`on_ask`."""
        if self.on_ask is None:
            return {"ok": False, "message": "ralph ask: this loop does not take questions"}
        question = body.get("question") if isinstance(body, dict) else None
        return self.on_ask(question, self.current, self.iteration if self.current is not None else None, list(self.recent))


def tool_line(payload: dict[str, Any]) -> str:
    """One line for a tool call: its name and its command, path or pattern (cut; agent text, shown stripped)."""
    tool = str(payload.get("tool_name") or "?")
    data = payload.get("tool_input")
    data = data if isinstance(data, dict) else {}
    detail = next((data[key] for key in ("command", "file_path", "path", "pattern", "url", "prompt") if isinstance(data.get(key), str)), "")
    detail = " ".join(str(detail).split())
    return f"{tool}: {detail[:160]}{'...' if len(detail) > 160 else ''}" if detail else tool


def _denies(output: dict[str, Any]) -> bool:
    """Whether a hook output refuses a tool call (PreToolUse ``permissionDecision: deny``)."""
    specific = output.get("hookSpecificOutput")
    return isinstance(specific, dict) and specific.get("permissionDecision") == "deny"
