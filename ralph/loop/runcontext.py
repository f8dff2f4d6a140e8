"""What the parts of one run share: the run context, the run's options, a gate's session request.

:class:`~ralph.loop.engine.Loop` builds one :class:`RunContext` and hands it to the parts it builds
(the limits, the agents' sessions, the task-list checks and repairs, the gate keeper, the hook
bridge) instead of callbacks into itself: the settings, the plugin host, the runner, the policy,
the task file, the run directory, the clock, the event sink, the progress notes, the model meter
and the agents' session runner are here, once.  Parts that only emit events take ``context.emit``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ralph.contracts import LoopEvent

if TYPE_CHECKING:
    from ralph.contracts import Agent, Policy, Runner
    from ralph.loop.agents import LoopAgents
    from ralph.loop.limits import RunClock
    from ralph.loop.metering import LoopMeter
    from ralph.loop.progressnotes import ProgressNotes
    from ralph.loop.records import IterationRecord
    from ralph.loop.taskchecks import TaskChecks
    from ralph.loop.taskfile import TaskFile
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings
    from ralph.tasks import TaskList


@dataclass(frozen=True)
class RunOptions:
    """How ``ralph run`` was asked to run, beyond its settings (the CLI's flags for this one run)."""

    rerun: str | None = None
    """``resume`` or ``fresh`` when state of an earlier run exists (None: ask, or refuse)."""
    only_story: str | None = None
    """``ralph run --story ID``: the loop works on this story alone."""


@dataclass(frozen=True)
class ExtraSession:
    """A gate's request for an extra agent session during ``iteration``, for ``purpose`` (the gate's name).

    Its file names, its meter session's name and its events' ``label`` are derived here, once.
    """

    iteration: int
    purpose: str
    timeout: float | None = None
    """The session's time limit (None: the iteration's)."""
    reviewer: bool = False
    """A fresh read-only review session (``GateContext.ask_reviewer``) rather than one of the main agent."""
    agent: str | None = None
    """The reviewer's agent (None: the run's review agent); only with ``reviewer``."""
    model: str | None = None
    """The reviewer's model (None: the review model configured for that agent); only with ``reviewer``."""

    @property
    def label(self) -> str:
        """``001.spec-review``: the iteration and the purpose (the ``extra_session_cost`` event's ``label``)."""
        return f"{self.iteration:03d}.{self.purpose}"

    @property
    def file_stem(self) -> str:
        """``iteration-001.spec-review``: the name of its files in the run directory (raw output, config home)."""
        return f"iteration-{self.label}"

    @property
    def meter_name(self) -> str:
        """How the model meter names the session."""
        return f"iteration {self.label}"


class AgentSessions(Protocol):
    """How a gate reaches an agent: one extra session per request (:class:`ralph.loop.agents.LoopAgents`)."""

    def ask(self, request: ExtraSession, prompt: str) -> tuple[str, str]:
        """Run the session; returns (its answer text, "agent" or "agent/model")."""


class RunContext:
    """The run's shared state and services, built once per :class:`~ralph.loop.engine.Loop`.

    Everything here but :attr:`run_dir` (set when the run starts) is fixed for the run.
    """

    def __init__(
        self,
        settings: Settings,
        host: PluginHost,
        runner: Runner,
        policy: Policy,
        taskfile: TaskFile,
        *,
        agent: Agent,
        review_agent: Agent,
    ) -> None:
        from ralph.loop.agents import LoopAgents
        from ralph.loop.limits import RunClock
        from ralph.loop.metering import LoopMeter
        from ralph.loop.progressnotes import ProgressNotes
        from ralph.loop.taskchecks import TaskChecks

        self.settings = settings
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.host = host
        self.runner = runner
        self.policy = policy
        self.taskfile = taskfile
        """The task file: reads, the loop's writes, the last good text, the trusted non-story fields."""
        self.tasks_path: Path = taskfile.path
        self.cancel = threading.Event()
        """Set to stop the run after the running step (a signal, a plugin's stop)."""
        self.run_dir: Path | None = None
        """The run directory (None until the run has started)."""
        self.clock: RunClock = RunClock(self.config)
        self.notes: ProgressNotes = ProgressNotes(settings, self.tasks_path, self.emit)
        self.meter: LoopMeter = LoopMeter(self.config, runner, self.emit)
        """The run's model meter (started when a metered agent first runs)."""
        self.checks: TaskChecks = TaskChecks(self)
        """The validators' and the policy's checks of a task list (after an iteration, on a Stop hook)."""
        from ralph.gitutil import StatusShare

        self.status = StatusShare(self.project_dir)
        """The work tree's ``git status`` after an iteration, shared by its readers while the loop changes nothing
        (the ``git-clean`` validator's, the person's-changes look's); forgotten before each agent session."""
        self.agents: LoopAgents = LoopAgents(self, agent, review_agent)
        """The run's agents and their sessions (the iteration's, a gate's)."""

    @property
    def sessions(self) -> AgentSessions:
        """How the gates reach the agents."""
        return self.agents

    def emit(self, kind: str, **data: Any) -> None:
        """Emit a loop event (with the seconds since the run started)."""
        data.setdefault("elapsed", round(self.clock.elapsed(), 3))
        self.host.emit(LoopEvent(kind, data, self.run_dir))

    def persist_tasks(self, tasks: TaskList, record: IterationRecord, message: str) -> None:
        """Write a task list the loop changed (gates, limits), note it in the progress log and commit it."""
        self.taskfile.persist(tasks)
        self.notes.note(record, message, subject=message.split(";")[0][:72])
