"""Running the gates after an iteration: each enabled gate in order, read-only, with its events.

Hard gates run before soft ones; the first hard gate that fails ends the run of
gates.  Whatever a gate (its agent session) changes in the project is undone
and reported as a violation.  Structured verdicts and quality warnings are kept
for the end-of-run report.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.contracts import Gate, GateContext, GateResult, Selection
from ralph.loop.runcontext import ExtraSession
from ralph.loop.storystate import truncate
from ralph.plugin.manager import PluginFailure

if TYPE_CHECKING:
    from ralph.loop.treeguard import TreeSnapshot
    from ralph.loop.gates import GateLoop
    from ralph.loop.records import IterationRecord
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings
    from ralph.tasks import TaskList


@dataclass
class GateRun:
    """What one run of the gates found: the hard gate that failed (None: all passed) and the warnings."""

    failed: GateResult | None = None
    warnings: list[str] = field(default_factory=list)


class GateRunner:
    """The enabled gates of a loop and how one run of them goes (timeouts, context, read-only, events)."""

    def __init__(self, loop: GateLoop, host: PluginHost, settings: Settings) -> None:
        self.loop = loop
        self.host = host
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.gates: list[Gate] = sorted(self._enabled_gates(host, settings), key=lambda g: (not g.hard, g.order))
        self.quality_warnings: dict[str, list[str]] = {}
        """Each story's quality warnings (soft gates, undone changes), for the report."""
        self.verdicts: list[dict[str, Any]] = []
        """Every structured verdict a gate returned (the spec reviewer's), for the report."""
        self.iteration_started: float | None = None
        """When the running iteration's agent started (the coarse real-time clock file times use)."""
        self.kept: dict[tuple[int, str], str | None] = {}
        """Where each failed or warning gate's whole output went, by (iteration, gate)."""

    @staticmethod
    def _enabled_gates(host: PluginHost, settings: Settings) -> list[Gate]:
        """Every registered gate that is enabled here; one that raises doing so stops the run."""
        gates = []
        for name in host.gates.names():
            try:
                gate = host.gates.get(name)(settings)
                if gate.enabled():
                    gates.append(gate)
            except Exception as exc:
                raise PluginFailure("gate", host.gates.providers[name], host.gates.owners[name], exc) from exc
        return gates

    def timed_out(self, mode: str) -> GateResult:
        """The failure of an iteration the loop stopped at its time limit (no gate runs then)."""
        return GateResult(
            "iteration", False, f"TIMEOUT: the {mode} iteration was stopped after "
            f"{self.loop.clock.iteration_timeout():g}s", timed_out=True,
        )

    def run(
        self, record: IterationRecord, selection: Selection, tasks: TaskList, checkpoint: str | None,
        story_start: str | None, final: bool = False,
    ) -> GateRun:
        """Run the gates in order for the selected story until a hard gate fails, emitting each result.

        ``final``: only the hard gates that run on the final tree (``Gate.on_final_tree``), before "complete".
        """
        story_id = selection.story_id or ""
        outcome = GateRun()
        watch = _TreeWatch(self.project_dir)
        for gate in self.gates:
            if final and not (gate.hard and gate.on_final_tree):
                continue
            context = watch.guard(self._context(gate, record, selection, tasks, checkpoint, story_start))
            context.final = final
            result = self._run_read_only(gate, context, record, story_id, watch)
            self._report(gate, result, record, story_id, final)
            outcome.warnings += result.warnings
            if gate.hard and not result.passed:
                outcome.failed = result
                break
        return outcome

    def _context(
        self, gate: Gate, record: IterationRecord, selection: Selection, tasks: TaskList, checkpoint: str | None,
        story_start: str | None,
    ) -> GateContext:
        """What ``gate`` is given: the project, the trusted task list, its time limits, agent sessions, a shell."""
        loop = self.loop
        soft, hard = self._timeouts(gate)
        session = ExtraSession(record.number, gate.name, timeout=hard)
        return GateContext(
            project_dir=self.project_dir,
            run_dir=loop.run_dir,  # type: ignore[arg-type]
            tasks=loop.taskfile.trusted_view(tasks),  # verifyCommands as the run started
            story_id=selection.story_id or "",
            mode=selection.mode,
            iteration=record.number,
            soft_timeout=soft,
            hard_timeout=hard,
            ask_agent=functools.partial(self._ask_agent, session),
            checkpoint=checkpoint,
            story_start=story_start,
            prd_path=self.ralph_dir / "prd.md",
            ask_reviewer=functools.partial(self._ask_reviewer, session),
            run_command=lambda command, timeout: loop.runner.run_command(command, self.project_dir, timeout),
            where="sandbox" if loop.runner.isolates else "host",
            run_command_in=loop.runner.run_command,
            trusted_story=loop.taskfile.started_story(selection.story_id or ""),
            iteration_started=self.iteration_started,
        )

    def keep_output(self, iteration: int, result: GateResult) -> str | None:
        """Keep a failed or warning gate's whole output in the run directory (once); its path."""
        from ralph.loop.gateoutput import keep

        key = (iteration, result.gate)
        if key not in self.kept:
            self.kept[key] = keep(self.loop.run_dir, iteration, result.gate, result.output)
        return self.kept[key]

    def _report(self, gate: Gate, result: GateResult, record: IterationRecord, story_id: str, final: bool = False) -> None:
        """Emit the gate's result (and verdict, soft timeout, warnings); keep its verdict and warnings."""
        loop = self.loop
        if result.skipped and result.passed and not result.warnings:
            return
        log = self.keep_output(record.number, result) if not result.passed or result.warnings else None
        if result.data.get("verdict"):
            verdict = {"iteration": record.number, "story": story_id, "gate": result.gate,
                       "passed": result.passed, **result.data}
            self.verdicts.append(verdict)
            loop.emit("gate_verdict", **verdict)
        loop.emit(
            "final_gate" if final else "gate",
            iteration=record.number,
            story=story_id,
            gate=result.gate,
            passed=result.passed,
            hard=gate.hard,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            seconds=round(result.seconds, 3),
            soft_timeout_exceeded=result.soft_timeout_exceeded,
            where=result.where,
            output=truncate(result.output, 40),
            log=log,
        )
        if result.soft_timeout_exceeded:
            loop.emit("gate_soft_timeout", iteration=record.number, gate=result.gate, seconds=result.seconds)
        for warning in result.warnings:
            self.quality_warnings.setdefault(story_id, []).append(warning)
            loop.emit("quality_warning", iteration=record.number, story=story_id, gate=result.gate, warning=warning,
                      log=log)

    def _run_read_only(
        self, gate: Gate, context: GateContext, record: IterationRecord, story_id: str, watch: _TreeWatch
    ) -> GateResult:
        """Run ``gate``; whatever its agent sessions and commands changed in the project is undone and logged."""
        loop = self.loop
        from ralph.gitutil import GitMetadataChanged

        try:
            result = gate.run(context)
        except GitMetadataChanged:  # the loop's own stop (tampered .git), not the gate's fault
            raise
        except Exception as exc:  # a failing check returns a result; raising means the gate is broken
            raise PluginFailure("gate", self.host.provider_of(gate), self.host.owner_of(gate), exc) from exc
        for message in result.data.get("violations", []):  # the gate's own findings (file:line ...)
            loop.emit("violation", iteration=record.number, check=gate.name, story=story_id, message=str(message),
                      severity="error")
        changes = watch.changes()
        if changes:
            watch.restore()
            message = (
                f"the {gate.name} gate's session changed the project, which a gate must not do; the loop undid it: "
                + "; ".join(changes[:20])
            )
            loop.emit("violation", iteration=record.number, check="gate-read-only", story=story_id, message=message)
            loop.emit("gate_changes_undone", iteration=record.number, gate=gate.name, changes=changes[:50])
            result.warnings.append(message)
            result.data.setdefault("violations", []).append(message)
        return result

    def _ask_agent(self, session: ExtraSession, prompt: str) -> str:
        """``GateContext.ask_agent``: a session of the main agent."""
        return self.loop.sessions.ask(session, prompt)[0]

    def _ask_reviewer(self, session: ExtraSession, prompt: str, agent: str | None, model: str | None) -> tuple[str, str]:
        """``GateContext.ask_reviewer``: a fresh read-only review session of ``agent`` (and ``model``)."""
        return self.loop.sessions.ask(dataclasses.replace(session, reviewer=True, agent=agent, model=model), prompt)

    def _timeouts(self, gate: Gate) -> tuple[float | None, float | None]:
        """The gate's soft and hard limits: configured or its defaults, times the multiplier, cut to the global limit."""
        soft, hard = gate.default_soft_timeout, gate.default_hard_timeout
        configured = getattr(gate, "timeouts", None)
        if configured is not None:
            soft, hard = configured
        factor = self.config.timeout_multiplier
        remaining = self.loop.clock.global_remaining()
        hard = None if hard is None else hard * factor
        if remaining is not None:
            hard = remaining if hard is None else min(hard, remaining)
        return (None if soft is None else soft * factor), hard


class _TreeWatch:
    """The tree guard over a run of gates: a snapshot of the project taken right before a gate first starts
    something of the agent's (an agent session or a command, through its context), compared after that gate.

    A gate's own code is trusted plugin code; what can change the project behind the loop's back is only what
    the context's callables start (the agent, its tests).  A gate that starts nothing costs no git call, and one
    gate's unchanged "after" is the next one's "before"."""

    CALLABLES = ("ask_agent", "ask_reviewer", "run_command", "run_command_in")

    def __init__(self, project_dir: Path) -> None:
        self.project_dir = project_dir
        self.snapshot: TreeSnapshot | None = None
        self.started = False
        """Did the gate being run start anything since the last :meth:`changes`?"""

    def guard(self, context: GateContext) -> GateContext:
        """``context`` with each of its process-starting callables taking the snapshot first."""
        for name in self.CALLABLES:
            call = getattr(context, name)
            if call is not None:
                setattr(context, name, self._before(call))
        return context

    def _before(self, call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.snapshot is None:
                from ralph.loop.treeguard import TreeSnapshot

                self.snapshot = TreeSnapshot.take(self.project_dir)
            self.started = True
            from ralph.safeio import note_change

            note_change()  # a runner's command or session may change the tree by any means: a status shared
            try:  # from before it is never reused after it (ralph.gitutil.StatusShare)
                return call(*args, **kwargs)
            finally:
                note_change()

        return guarded

    def changes(self) -> list[str]:
        """What the gate's sessions and commands changed (empty: nothing, or it started none)."""
        started, self.started = self.started, False
        if not started or self.snapshot is None:
            return []
        return self.snapshot.changes()

    def restore(self) -> None:
        """Undo those changes; the next gate's "before" is taken anew."""
        assert self.snapshot is not None
        self.snapshot.restore()
        self.snapshot = None
