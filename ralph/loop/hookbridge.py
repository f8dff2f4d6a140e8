"""The agent's way back to the loop during a run: the hook server, its token, and the answers.

The agent-side hook client reaches :class:`HookBridge` through a Unix socket named in the
agent's environment, with a per-run token; every answer is made from the loop's own
trusted state (the running iteration, the plugins), never from files the agent can write.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.plugin.manager import PluginFailure

if TYPE_CHECKING:
    from ralph.contracts import LoopView, Runner, Selection, Violation
    from ralph.hooks.server import HookServer
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings
    from ralph.tasks import TaskList

Running = tuple["Selection", "TaskList", "str | None"]
"""(selection, pre-iteration tasks, checkpoint commit) of the running iteration."""


class HookBridge:
    """Serves the agent's hook calls for one run and knows which iteration is running."""

    def __init__(
        self,
        settings: Settings,
        host: PluginHost,
        runner: Runner,
        run_dir: Path,
        marker: Path,
        *,
        emit: Callable[..., None],
        cancel: threading.Event,
        stop_checks: Callable[[Selection, TaskList], list[Violation]],
    ) -> None:
        self.host = host
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.runner = runner
        self.run_dir = run_dir
        self.marker = marker
        self.emit = emit
        self.cancel = cancel
        self.stop_checks = stop_checks
        """The checks a Stop hook runs: the task list on disk against the iteration's snapshot."""
        self.token = secrets.token_urlsafe(32)
        self.server: HookServer | None = None
        self.sessions: dict[str, Any] = {}
        self.current: Running | None = None
        """The running iteration; None between iterations (hooks arriving then see no iteration)."""
        self.plugin_failure: PluginFailure | None = None
        """Set when a guard or Stop check raised: the run stops after the iteration."""
        self._protected: list[Path] | None = None

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

    def env(self) -> dict[str, str]:
        """The agent's way to the loop: run dir, hook socket and the per-run token."""
        assert self.server is not None
        return {
            "RALPH_RUN_DIR": str(self.run_dir),
            "RALPH_HOOK_SOCKET": str(self.server.path),
            "RALPH_HOOK_TOKEN": self.token,
        }

    def hook_settings(self, env: dict[str, str]) -> Path | None:
        """A Claude Code settings file in the run directory (outside the project) wiring ralph's hooks.

        A runner without a hook command of its own gets the host's client, compiled into the run
        directory (:func:`~ralph.hooks.wiring.compiled_hook_command`).  It also pins what decides
        whether those hooks run (``disableAllHooks``, the hook
        process's ``RALPH_*`` and loader variables): see :mod:`ralph.hooks.wiring`.
        """
        from ralph.hooks.wiring import compiled_hook_command, pinned_env, write_hook_settings

        command = self.runner.hook_command() or compiled_hook_command(self.run_dir)
        return write_hook_settings(self.run_dir, command, pinned_env(env, inherit=not self.runner.isolates))

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

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one agent-side hook call with the loop's trusted state and plugins."""
        from ralph.hooks.answers import HookContext, answer, deny
        from ralph.hooks.sessionstore import MemorySession

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
        try:
            output = answer(payload, context, dict(request.get("env") or {}))
        except PluginFailure as exc:  # a guard (or a Stop check) that cannot run: deny, and stop the run
            self.plugin_failure = exc
            self.cancel.set()
            output = deny(payload, f"ralph: {exc}")
        if output:
            self.emit("hook", event=payload.get("hook_event_name"), tool=payload.get("tool_name"), output=output)
        return output
