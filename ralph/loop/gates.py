"""Gates, per-story state, stuck detection and escalation (seed 002), run by the loop.

After every implement and review-fix iteration the loop runs the gates
itself.  A failing hard gate sends the story back with the verbatim output;
the same error three times escalates: strategy shift (tier 1), context
expansion when information is missing (tier 2), hard stop (tier 3): the story
is marked failed, its work kept on a ``wip/ralph-fail-*`` branch and the
working branch reset to before the story's work.
"""

from __future__ import annotations

import functools
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ralph.contracts import Gate, GateContext, GateResult, Selection
from ralph.loop.records import IterationRecord
from ralph.loop.storystate import StoryAttempts, truncate

from ralph.plugin.manager import PluginFailure

if TYPE_CHECKING:
    from ralph.contracts import Policy, Runner
    from ralph.loop.taskfile import TaskFile
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings
    from ralph.tasks import TaskList

GATED_MODES = ("implement", "review-fix")
CONTEXT_FILES = 3
CONTEXT_LINES = 200


@dataclass
class FailedStory:
    """A story stopped at tier 3, for the end-of-run report."""

    story_id: str
    attempts: int
    max_attempts: int
    last_gate: str | None
    branch: str | None
    error: str
    stuck: bool
    quality_warnings: int
    reset: str


class GateLoop(Protocol):
    """What the gate keeper uses of the loop that runs it, and nothing more.

    The keeper reads these and calls the methods; it never sets anything on the loop.
    """

    @property
    def run_dir(self) -> Path | None:
        """The run directory (None until the run has started)."""

    @property
    def taskfile(self) -> TaskFile:
        """The task file: reads, the loop's writes, the last good text, the trusted fields."""

    @property
    def runner(self) -> Runner:
        """Where the project's commands run (the gates' ``run_command``)."""

    @property
    def policy(self) -> Policy:
        """The review policy (a failed gate sends a story back as the policy's fields say)."""

    def emit(self, kind: str, **data: Any) -> None:
        """Emit a loop event."""

    def persist_tasks(self, tasks: TaskList, record: IterationRecord, message: str) -> None:
        """Write a task list the keeper changed, note it in the progress log and commit it."""

    def ask_agent(self, prompt: str, label: str, timeout: float | None) -> str:
        """One extra session of the main agent for a gate; returns its text."""

    def ask_reviewer(
        self, prompt: str, label: str, timeout: float | None, agent_name: str | None, model: str | None
    ) -> tuple[str, str]:
        """A fresh read-only review session for a gate: (answer text, "agent" or "agent/model")."""

    def iteration_timeout(self) -> float:
        """The agent's time limit for one iteration (already cut to the global limit)."""

    def global_remaining(self) -> float | None:
        """Seconds left before the global hard timeout (None: no global limit)."""


class GateKeeper:
    """Runs gates for a loop and keeps each story's state file."""

    def __init__(self, loop: GateLoop, host: PluginHost, settings: Settings) -> None:
        from ralph.loop.rundir import project_state_dir

        self.loop = loop
        self.host = host
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.states_dir = project_state_dir(self.project_dir, self.config.state_dir) / "stories"
        self.gates: list[Gate] = sorted(self._enabled_gates(host, settings), key=lambda g: (not g.hard, g.order))
        self.states: dict[str, StoryAttempts] = {}
        self.failed: list[FailedStory] = []
        self.quality_warnings: dict[str, list[str]] = {}
        self.expanded_context: dict[str, str] = {}
        self.verdicts: list[dict[str, Any]] = []
        """Every structured verdict a gate returned (the spec reviewer's), for the report."""

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

    # -- state ---------------------------------------------------------------------------------

    def state(self, story_id: str) -> StoryAttempts:
        """The story's attempts so far (loaded from its state file the first time)."""
        if story_id not in self.states:
            self.states[story_id] = StoryAttempts.load(self.states_dir, story_id, self.config.max_attempts)
        return self.states[story_id]

    def pending_states(self) -> list[Path]:
        """State files left by an earlier (interrupted) run."""
        return sorted(self.states_dir.glob("*.json")) if self.states_dir.is_dir() else []

    @property
    def end_marker(self) -> Path:
        """Written when a run reaches its end (any exit code); absent after a crash."""
        return self.states_dir.parent / "last-run.json"

    def previous_end(self) -> dict[str, Any] | None:
        """How the previous run of this project ended, or None (no run, or it never reached its end)."""
        try:
            data = json.loads(self.end_marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def clear_end(self) -> None:
        """A run is starting: until it ends, a crash must leave no end marker behind."""
        try:
            self.end_marker.unlink()
        except FileNotFoundError:
            pass

    def record_end(self, data: dict[str, Any]) -> None:
        """The run reached its end: write the end marker (how it ended, the task file's hash)."""
        from ralph.fsutil import atomic_write_text

        try:
            self.end_marker.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.end_marker, json.dumps(data))
        except OSError:
            pass  # the next run asks --resume/--fresh, as after a crash

    def archive_states(self) -> Path | None:
        """Move earlier state files aside (``--fresh``); returns where they went."""
        pending = self.pending_states()
        if not pending:
            return None
        target = self.states_dir.parent / "stories-archive" / time.strftime("%Y%m%d-%H%M%S")
        target.mkdir(parents=True, exist_ok=True)
        for path in self.states_dir.iterdir():
            path.rename(target / path.name)
        return target

    def before_iteration(self, selection: Selection, checkpoint: str | None) -> None:
        """Remember where a story's work started (its first implement iteration's checkpoint)."""
        if selection.story_id is None or selection.mode != "implement":
            return
        state = self.state(selection.story_id)
        if state.start_commit is None:
            state.start_commit = checkpoint
            state.save(self.states_dir)

    def story_context(self, selection: Selection) -> list[str]:
        """Prompt items for the selected story: its state file and any escalation directive."""
        if selection.story_id is None:
            return []
        state = self.states.get(selection.story_id) or self.state(selection.story_id)
        if not state.attempts:
            return []
        items = [
            "Previous failed attempts at this story, written by the loop (verbatim gate output; the "
            f"agent's own claims do not count):\n\n{_indent(state.render())}"
        ]
        last = state.attempts[-1]
        if last.strategy_shift:
            first_line = next((line for line in last.output.splitlines() if line.strip()), last.gate)
            files = ", ".join(state.files_modified[:10]) or "the same files"
            items.append(
                "IMPORTANT: Strategy Shift Required. You have failed "
                f"{state.stuck_count}x with the same error at the {last.gate} gate (error hash "
                f"{last.error_hash}). Your previous approach does not work; try a fundamentally different "
                f"one. Do NOT repeat the approach of the last attempts, which changed {files} and ended "
                f"with: {first_line.strip()[:300]}"
            )
        if selection.story_id in self.expanded_context:
            items.append(self.expanded_context[selection.story_id])
        return items

    # -- after an iteration ------------------------------------------------------------------------

    def after_iteration(
        self,
        record: IterationRecord,
        selection: Selection,
        tasks: TaskList,
        checkpoint: str | None,
        untracked_before: set[str],
    ) -> TaskList:
        """Run the gates after an implement or review-fix iteration; send back, roll back, escalate, stop.

        Returns the task list as it now is (changed and persisted when a gate failed).
        """
        story_id = selection.story_id
        if selection.mode not in GATED_MODES or story_id is None or tasks.story(story_id) is None:
            return tasks
        loop = self.loop
        state = self.state(story_id)
        if record.timed_out:
            result = GateResult(
                "iteration", False, f"TIMEOUT: the {selection.mode} iteration was stopped after "
                f"{loop.iteration_timeout():g}s", timed_out=True,
            )
        else:
            result = None
            for gate in self.gates:
                soft, hard = self._timeouts(gate)
                context = GateContext(
                    project_dir=self.project_dir,
                    run_dir=loop.run_dir,  # type: ignore[arg-type]
                    tasks=loop.taskfile.trusted_view(tasks),  # verifyCommands as the run started
                    story_id=story_id,
                    mode=selection.mode,
                    iteration=record.number,
                    soft_timeout=soft,
                    hard_timeout=hard,
                    ask_agent=functools.partial(self._ask_agent, label=f"{record.number:03d}.{gate.name}", timeout=hard),
                    checkpoint=checkpoint,
                    story_start=state.start_commit,
                    prd_path=self.ralph_dir / "prd.md",
                    ask_reviewer=functools.partial(self._ask_reviewer, label=f"{record.number:03d}.{gate.name}", timeout=hard),
                    run_command=lambda command, timeout: loop.runner.run_command(command, self.project_dir, timeout),
                    where="sandbox" if loop.runner.isolates else "host",
                )
                gate_result = self._run_read_only(gate, context, record, story_id)
                if gate_result.data.get("verdict"):
                    verdict = {"iteration": record.number, "story": story_id, "gate": gate_result.gate,
                               "passed": gate_result.passed, **gate_result.data}
                    self.verdicts.append(verdict)
                    loop.emit("gate_verdict", **verdict)
                loop.emit(
                    "gate",
                    iteration=record.number,
                    story=story_id,
                    gate=gate_result.gate,
                    passed=gate_result.passed,
                    hard=gate.hard,
                    exit_code=gate_result.exit_code,
                    timed_out=gate_result.timed_out,
                    seconds=round(gate_result.seconds, 3),
                    soft_timeout_exceeded=gate_result.soft_timeout_exceeded,
                    where=gate_result.where,
                    output=truncate(gate_result.output, 40),
                )
                if gate_result.soft_timeout_exceeded:
                    loop.emit("gate_soft_timeout", iteration=record.number, gate=gate_result.gate, seconds=gate_result.seconds)
                for warning in gate_result.warnings:
                    self.quality_warnings.setdefault(story_id, []).append(warning)
                    loop.emit("quality_warning", iteration=record.number, story=story_id, gate=gate_result.gate, warning=warning)
                if gate_result.warnings:
                    state.quality_warnings += len(gate_result.warnings)
                if gate.hard and not gate_result.passed:
                    result = gate_result
                    break
        if result is None:
            state.record_success()
            state.save(self.states_dir)
            return tasks

        from ralph.gitutil import changed_files

        state.record_failure(
            result.gate, result.output, result.exit_code, result.timed_out, changed_files(self.project_dir, state.start_commit)
        )
        tasks = self._send_back(record, selection, tasks, result)
        if self.config.on_gate_failure == "rollback" and checkpoint:
            tasks = self._rollback(record, checkpoint, untracked_before)
        escalation = self._escalate(record, state, tasks)
        state.save(self.states_dir)
        if escalation == "stop":
            tasks = self._stop_story(record, story_id, state, tasks)
        return tasks

    def _run_read_only(self, gate: Gate, context: GateContext, record: IterationRecord, story_id: str) -> GateResult:
        """Run ``gate``; whatever it (its agent session) changed in the project is undone and logged."""
        from ralph.loop.treeguard import TreeSnapshot

        loop = self.loop
        snapshot = TreeSnapshot.take(self.project_dir)
        from ralph.gitutil import GitMetadataChanged

        try:
            result = gate.run(context)
        except GitMetadataChanged:  # the loop's own stop (tampered .git), not the gate's fault
            raise
        except Exception as exc:  # a failing check returns a result; raising means the gate is broken
            raise PluginFailure("gate", self.host.provider_of(gate), self.host.owner_of(gate), exc) from exc
        changes = snapshot.changes()
        if changes:
            snapshot.restore()
            message = (
                f"the {gate.name} gate's session changed the project, which a gate must not do; the loop undid it: "
                + "; ".join(changes[:20])
            )
            loop.emit("violation", iteration=record.number, check="gate-read-only", story=story_id, message=message)
            loop.emit("gate_changes_undone", iteration=record.number, gate=gate.name, changes=changes[:50])
            result.warnings.append(message)
            result.data.setdefault("violations", []).append(message)
        return result

    def _ask_agent(self, prompt: str, label: str, timeout: float | None) -> str:
        return self.loop.ask_agent(prompt, label, timeout)

    def _ask_reviewer(
        self, prompt: str, agent: str | None, model: str | None, label: str, timeout: float | None
    ) -> tuple[str, str]:
        return self.loop.ask_reviewer(prompt, label, timeout, agent, model)

    def _timeouts(self, gate: Gate) -> tuple[float | None, float | None]:
        soft, hard = gate.default_soft_timeout, gate.default_hard_timeout
        configured = getattr(gate, "timeouts", None)
        if configured is not None:
            soft, hard = configured
        factor = self.config.timeout_multiplier
        remaining = self.loop.global_remaining()
        hard = None if hard is None else hard * factor
        if remaining is not None:
            hard = remaining if hard is None else min(hard, remaining)
        return (None if soft is None else soft * factor), hard

    def _send_back(self, record: IterationRecord, selection: Selection, tasks: TaskList, result: GateResult) -> TaskList:
        """The agent's verdict does not count when a hard gate fails: put the story back."""
        loop = self.loop
        story = tasks.story(selection.story_id or "")
        assert story is not None
        changed = []
        if loop.policy.uses_review:
            if selection.mode == "implement" and story.reviewStatus == "needs_review":
                story.reviewStatus = None
                changed.append("reviewStatus needs_review → null")
            elif selection.mode == "review-fix" and story.reviewStatus != "changes_requested":
                story.reviewStatus = "changes_requested"
                story.reviewFeedback = (
                    f"[ralph {result.gate} gate] the {result.gate} gate failed after the fix; see the loop's "
                    "state for the verbatim output."
                )
                changed.append("reviewStatus → changes_requested")
        elif story.passes:
            story.passes = False
            changed.append("passes true → false")
        loop.emit(
            "gate_failed",
            iteration=record.number,
            story=story.id,
            gate=result.gate,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            sent_back=changed,
        )
        if changed:
            loop.persist_tasks(
                tasks,
                record,
                f"the {result.gate} gate failed for {story.id}; the loop set it back ({'; '.join(changed)})",
            )
        return tasks

    def _rollback(self, record: IterationRecord, checkpoint: str, untracked_before: set[str]) -> TaskList:
        from ralph.gitutil import rollback

        saved = self.save_work(record, checkpoint, f"iteration {record.number}'s work, rolled back after a failed gate")
        removed = rollback(self.project_dir, checkpoint, untracked_before)
        self.loop.emit("rollback", iteration=record.number, to=checkpoint, removed=removed, saved=saved)
        raw, tasks, _ = self.loop.taskfile.read()
        assert tasks is not None
        self.loop.taskfile.accept(raw)
        return tasks

    def save_work(self, record: IterationRecord, base: str, what: str) -> str | None:
        """Copy the tree's changes against ``base`` into the run directory before the loop discards them."""
        from ralph.gitutil import work_patch
        from ralph.loop.savedwork import record_saved_work

        patch = work_patch(self.project_dir, base)
        if not patch or self.loop.run_dir is None:
            return None
        where = record_saved_work(self.loop.run_dir, "rollback", patch, what)
        self.loop.emit("work_saved", iteration=record.number, what=what, where=where)
        return where

    def _escalate(self, record: IterationRecord, state: StoryAttempts, tasks: TaskList) -> str | None:
        decision = state.escalation(self.config.strategy_shifts)
        if decision == "strategy-shift":
            state.strategy_shifts += 1
            state.attempts[-1].strategy_shift = True
        elif decision == "context-expansion":
            state.context_expanded = True
            self.expanded_context[state.task_id] = self._expanded_context(state)
        self.loop.emit(
            "escalation" if decision else "attempt_failed",
            iteration=record.number,
            story=state.task_id,
            tier={"strategy-shift": 1, "context-expansion": 2, "stop": 3}.get(decision or "", 0),
            decision=decision,
            attempts=state.iteration,
            stuck_count=state.stuck_count,
            error_hash=state.error_hash,
        )
        return decision

    def _expanded_context(self, state: StoryAttempts) -> str:
        """Tier 2: the files the error names (that exist in the project) and the project's file list."""
        from ralph.gitutil import git

        project = self.project_dir
        output = state.attempts[-1].output if state.attempts else ""
        listing = git(project, "ls-files", check=False).stdout.splitlines()
        named = []
        for candidate in re.findall(r"[\w./-]+\.\w+", output):
            path = (project / candidate).resolve()
            if path.is_file() and project.resolve() in path.parents and candidate not in named:
                named.append(candidate)
        parts = [
            "Context expansion: the error points at missing information. Files tracked in the project "
            f"({len(listing)}):\n" + "\n".join(f"- {name}" for name in listing[:300])
        ]
        for name in named[:CONTEXT_FILES]:
            text = (project / name).read_text(encoding="utf-8", errors="replace").splitlines()[:CONTEXT_LINES]
            parts.append(f"Contents of {name}:\n```\n" + "\n".join(text) + "\n```")
        return "\n\n".join(parts)

    def _stop_story(self, record: IterationRecord, story_id: str, state: StoryAttempts, tasks: TaskList) -> TaskList:
        """Tier 3: keep the work on a failure branch, reset the working branch, mark the story failed."""
        from ralph.gitutil import branch_failed_work, git

        loop = self.loop
        project = self.project_dir
        stuck = state.stuck_count >= 3
        branch = f"wip/ralph-fail-{re.sub(r'[^A-Za-z0-9._-]', '_', story_id)}-{time.strftime('%Y%m%d-%H%M%S')}"
        last = state.attempts[-1] if state.attempts else None
        error = next((line.strip() for line in (last.output if last else "").splitlines() if line.strip()), "")
        message = (
            f"Ralph Loop failed: {story_id}\n\nIterations: {state.iteration}/{state.max_iterations}\n"
            f"Last gate: {state.last_gate}\nError hash: {state.error_hash}\nStuck: {'yes' if stuck else 'no'}\n"
            f"Strategy shifts: {state.strategy_shifts}\n\n"
            + (f"Last output (verbatim, cut):\n{truncate(last.output, 60)}\n" if last else "")
        )
        if state.start_commit:
            self.save_work(record, state.start_commit, f"{story_id}'s work before the tier-3 reset (also on {branch})")
        tip = branch_failed_work(project, branch, message)
        reset = "not reset: no start commit recorded"
        if state.start_commit:
            others_changed = self._others_changed_since(state.start_commit, story_id, tasks)
            if others_changed:
                reset = f"not reset: other stories changed since {state.start_commit[:8]} ({', '.join(others_changed)})"
            else:
                git(project, "reset", "-q", "--hard", state.start_commit)
                reset = f"reset to {state.start_commit[:8]}"
        raw, current, _ = loop.taskfile.read()
        if current is None or current.story(story_id) is None:
            current = tasks
        story = current.story(story_id)
        assert story is not None
        story.failed = True
        story.failureReason = (
            f"stopped after {state.iteration} failed attempts at the {state.last_gate} gate"
            f"{' (stuck: same error ' + str(state.stuck_count) + 'x)' if stuck else ''}; work kept on {branch}"
        )
        loop.taskfile.accept(raw)
        loop.persist_tasks(current, record, f"{story_id} stopped (tier 3): {story.failureReason}")
        self.failed.append(
            FailedStory(story_id, state.iteration, state.max_iterations, state.last_gate, branch, error[:300], stuck,
                        state.quality_warnings, reset)
        )
        loop.emit("story_failed", iteration=record.number, story=story_id, branch=branch, tip=tip, reset=reset,
                  stuck=stuck, error=error[:300])
        return current

    def _others_changed_since(self, commit: str, story_id: str, tasks: TaskList) -> list[str]:
        from ralph.errors import TaskListError
        from ralph.gitutil import show_file

        taskfile = self.loop.taskfile
        raw = show_file(self.project_dir, commit, taskfile.path)
        if raw is None:
            return []
        try:
            then = taskfile.store.parse(raw, taskfile.path)
        except TaskListError:
            return []
        before = {s.id: s.state() for s in then.userStories}
        return [
            s.id for s in tasks.userStories
            if s.id != story_id and s.id in before and before[s.id] != s.state()
        ]

    def forget(self, story_id: str) -> None:
        """The story was approved: its state file goes to the run directory (seed: deleted on success)."""
        from ralph.loop.storystate import state_path

        self.states.pop(story_id, None)

        for suffix in (".md", ".json"):
            path = state_path(self.states_dir, story_id).with_suffix(suffix)
            if path.exists() and self.loop.run_dir is not None:
                path.rename(self.loop.run_dir / f"story-{path.name}")

    def summary(self) -> list[dict[str, Any]]:
        """The stories stopped at tier 3, as dicts."""
        return [failed.__dict__ for failed in self.failed]


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())
