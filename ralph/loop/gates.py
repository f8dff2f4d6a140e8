"""The gate keeper: after every implement and review-fix iteration the loop has it check the story
(seed 002).

The gates run read-only (:mod:`ralph.loop.gaterunner`); a failing hard gate sends the story back with
the verbatim output and may roll the iteration back (:mod:`ralph.loop.sendback`); each failure is
counted in the story's state file (:mod:`ralph.loop.storyledger`) and the same error three times
escalates (:mod:`ralph.loop.escalation`) up to the hard stop (:mod:`ralph.loop.hardstop`).  The keeper
sees the loop only through :class:`GateLoop`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ralph.loop.escalation import Escalation
from ralph.loop.gaterunner import GateRunner
from ralph.loop.hardstop import FailedStory, HardStop
from ralph.loop.lastrun import LastRun
from ralph.loop.records import IterationRecord
from ralph.loop.sendback import roll_back, send_back
from ralph.loop.storyledger import StoryLedger

if TYPE_CHECKING:
    from ralph.contracts import GateResult, Policy, Runner, Selection
    from ralph.loop.limits import RunClock
    from ralph.loop.runcontext import AgentSessions
    from ralph.loop.storystate import StoryAttempts
    from ralph.loop.taskfile import TaskFile
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings
    from ralph.tasks import TaskList

GATED_MODES = ("implement", "review-fix")
"""The modes after which the gates run."""

__all__ = ["GATED_MODES", "FailedStory", "GateKeeper", "GateLoop"]


class GateLoop(Protocol):
    """What the gate keeper uses of the run (:class:`ralph.loop.runcontext.RunContext`), and nothing more.

    The keeper reads these and calls the methods; it never sets anything on them.  Gates reach the
    agents through :attr:`sessions` alone.
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

    @property
    def clock(self) -> RunClock:
        """The run's clock: the iteration's time limit, what the global limit leaves (the gates' timeouts)."""

    @property
    def sessions(self) -> AgentSessions:
        """A gate's extra agent sessions (its reviews)."""

    def emit(self, kind: str, **data: Any) -> None:
        """Emit a loop event."""

    def persist_tasks(self, tasks: TaskList, record: IterationRecord, message: str) -> None:
        """Write a task list the keeper changed, note it in the progress log and commit it."""


class GateKeeper:
    """Checks each gated iteration's story: runs the gates, sends back, escalates, keeps the story's state."""

    def __init__(self, loop: GateLoop, host: PluginHost, settings: Settings) -> None:
        from ralph.loop.rundir import project_state_dir

        self.loop = loop
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.states_dir = project_state_dir(self.project_dir, self.config.state_dir) / "stories"
        self.gates = GateRunner(loop, host, settings)
        self.ledger = StoryLedger(self.states_dir, self.config.max_attempts)
        self.escalation = Escalation(loop, self.project_dir, self.config.strategy_shifts)
        self.hard_stop = HardStop(loop, self.project_dir)
        self.last_run = LastRun(self.states_dir.parent / "last-run.json")
        """How the previous run ended (written when a run reaches its end, absent after a crash)."""
        self.failed_gate: str | None = None
        """The hard gate that failed after the last gated iteration (None: none failed or none ran)."""
        self.approved_starts: dict[str, str] = {}
        """Where the work of each story approved in this run started (its state file is gone by then): the
        final check's test-integrity run compares the tests with the last story's start."""

    @property
    def failed(self) -> list[FailedStory]:
        """The stories stopped at tier 3 so far."""
        return self.hard_stop.failed

    @property
    def quality_warnings(self) -> dict[str, list[str]]:
        """Each story's quality warnings so far."""
        return self.gates.quality_warnings

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        """Every structured verdict a gate returned so far (the spec reviewer's)."""
        return self.gates.verdicts

    def state(self, story_id: str) -> StoryAttempts:
        """The story's attempts so far (loaded from its state file the first time)."""
        return self.ledger.state(story_id)

    def before_iteration(self, selection: Selection, checkpoint: str | None) -> None:
        """Remember where a story's work started: its first implement iteration's checkpoint (or the first
        gated one's, for a story whose start an earlier run forgot, reopened by a final check)."""
        if selection.story_id is not None and selection.mode in GATED_MODES:
            self.ledger.note_start(selection.story_id, checkpoint)
        self.gates.iteration_started = file_clock()

    def story_context(self, selection: Selection) -> list[str]:
        """Prompt items for the selected story: its state file and any escalation directive."""
        if selection.story_id is None:
            return []
        state = self.state(selection.story_id)
        if not state.attempts:
            return []
        return [
            "Previous failed attempts at this story, written by the loop (verbatim gate output; the "
            f"agent's own claims do not count):\n\n{_indent(state.render())}",
            *self.escalation.directives(selection.story_id, state),
        ]

    def after_iteration(
        self, record: IterationRecord, selection: Selection, tasks: TaskList, checkpoint: str | None,
        untracked_before: set[str], before: TaskList | None = None,
    ) -> TaskList:
        """Run the gates after an implement or review-fix iteration; send back, roll back, escalate, stop.

        ``before`` is the task list before the iteration.  Returns the task list as it now is
        (changed and persisted when a gate failed).
        """
        story_id = selection.story_id
        self.failed_gate = None
        if selection.mode not in GATED_MODES or story_id is None or tasks.story(story_id) is None:
            return tasks
        state = self.state(story_id)
        failure: GateResult | None
        if record.timed_out:
            failure = self.gates.timed_out(selection.mode)
        else:
            run = self.gates.run(record, selection, tasks, checkpoint, state.start_commit)
            state.quality_warnings += len(run.warnings)
            failure = run.failed
        if failure is None:
            state.record_success()
            self.ledger.save(state)
            return tasks
        return self._failed(record, selection, tasks, failure, checkpoint, untracked_before, before)

    def final_check(self, record: IterationRecord, tasks: TaskList) -> TaskList:
        """Before a run may end "complete": the gates that judge the whole tree (``Gate.on_final_tree``: the
        tests, and the tests as they were at the last story's start) run once more on the final tree.  A
        failure reopens the last iteration's story and sends it back like any gate failure after an iteration
        of the policy's ``reopen_mode`` (a review-fix under the review policy), and the run goes on; returns
        the task list as it now is."""
        from ralph.contracts import Selection

        story_id = record.story_id
        if story_id is None or tasks.story(story_id) is None:
            return tasks
        selection = Selection(self.loop.policy.reopen_mode, story_id, "the final tree")  # type: ignore[arg-type]
        state = self.state(story_id)
        from ralph.gitutil import head

        start = state.start_commit or self.approved_starts.get(story_id)
        run = self.gates.run(record, selection, tasks, head(self.project_dir), start, final=True)
        if run.failed is None:
            return tasks
        self.loop.emit("final_check_failed", iteration=record.number, story=story_id, gate=run.failed.gate)
        story = tasks.story(story_id)
        if story is not None:
            self.loop.policy.reopen(story)  # done no more (the review policy: approved no more, then changes_requested)
        return self._failed(record, selection, tasks, run.failed, None, set())

    def _failed(
        self, record: IterationRecord, selection: Selection, tasks: TaskList, failure: GateResult,
        checkpoint: str | None, untracked_before: set[str], before: TaskList | None = None,
    ) -> TaskList:
        """A hard gate failed: the story's attempt recorded, the story sent back, rolled back, escalated, stopped."""
        from ralph.gitutil import changed_files

        story_id = selection.story_id or ""
        self.failed_gate = failure.gate
        state = self.state(story_id)
        files = changed_files(self.project_dir, state.start_commit)
        state.record_failure(failure.gate, failure.output, failure.exit_code, failure.timed_out, files)
        log = self.gates.keep_output(record.number, failure)
        tasks = send_back(self.loop, record, selection, tasks, failure, before, log=log)
        if self.config.on_gate_failure == "rollback" and checkpoint:
            tasks = roll_back(self.loop, self.project_dir, record, checkpoint, untracked_before)
        decision = self.escalation.escalate(record, state)
        self.ledger.save(state)
        if decision == "stop":
            tasks = self.hard_stop.stop(record, story_id, state, tasks)
        return tasks

    def forget(self, story_id: str) -> None:
        """The story was approved: its state file goes to the run directory (seed: deleted on success)."""
        start = self.state(story_id).start_commit
        if start:
            self.approved_starts[story_id] = start
        self.ledger.forget(story_id, self.loop.run_dir)


def file_clock() -> float:
    """Now, on the clock the kernel stamps file times with (coarse real time), so a file written after
    this call never has an older ``st_ctime``."""
    import sys
    import time

    if sys.platform.startswith("linux"):
        return time.clock_gettime(5)  # CLOCK_REALTIME_COARSE (Python names no constant for it)
    return time.time() - 0.05  # elsewhere: a margin for a coarser file clock


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())
