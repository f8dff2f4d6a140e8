"""The contracts a plugin implements: small ABCs and plain data classes.

Kept free of heavy imports (no pydantic, no docker) so that loading every
plugin stays cheap: ``ralph --help`` and each hook call import this module.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Mapping

from ralph.events import EventKind

if TYPE_CHECKING:
    from ralph.plugin.manager import Registry
    from ralph.settings import Settings
    from ralph.tasks import TaskList

IterationMode = Literal["implement", "review", "review-fix"]
"""The three iteration modes: implement a story, review it, fix what a review asked for."""

Severity = Literal["error", "warning"]
"""How much a violation counts: an ``error`` fails the iteration (and blocks Stop), a
``warning`` is reported only."""

AUTO_APPROVED_PREFIX = "[AUTO-APPROVED AT CAP]"
"""How ``reviewFeedback`` of a story approved at the review cap starts (the review policy
writes it; reports and archives count such stories as auto-approved)."""


@dataclass(frozen=True)
class Availability:
    """Whether a runner or agent can be used here, and if not, why."""

    ok: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Availability:
        """Usable."""
        return cls(True, "")

    @classmethod
    def no(cls, reason: str) -> Availability:
        """Not usable, because of ``reason`` (shown to the user, so say how to fix it)."""
        return cls(False, reason)


# -- pre-flight -------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One pre-flight finding: passed (``ok=True``), a warning (``None``) or a failure (``False``).

    ``what`` says what was checked and found; ``fix`` says what the user should do
    (required for failures).  ``ralph run`` stops before iteration 1 (exit 2) on any
    failure; ``ralph doctor`` prints every check.
    """

    ok: bool | None
    what: str
    fix: str = ""


def _sees_everything(path: Path) -> bool:
    """The default view: every host path is visible to the agent (it runs on this machine)."""
    return True


@dataclass
class AgentView:
    """How the agent's process will see this machine, as its runner arranges it.

    A host runner shows the agent everything; a container or remote runner
    narrows it (an environment allowlist, a fresh home, the project mount only).
    """

    env: Mapping[str, str]
    """The environment variables the agent's process will see (before the loop's own)."""
    home: Path | None
    """The host directory the agent sees as its home (None: a fresh, empty one)."""
    network: str = "host"
    """``host`` (this machine's network), or the runner's policy: ``none``, ``allowlist``, ``open``."""
    sees: Callable[[Path], bool] = _sees_everything
    """Whether a host path is visible to the agent's process at the same path."""
    where: str = "this machine"
    """Where the agent runs, for messages (``the sandbox container``)."""


@dataclass
class PreflightContext:
    """What pre-flight checks see: the chosen runner and agent and the agent's view."""

    settings: Settings
    project_dir: Path
    runner: Runner
    agent: Agent
    view: AgentView


# -- agents ---------------------------------------------------------------------


@dataclass
class AgentEvent:
    """One parsed item of an agent's output stream.

    ``kind`` is one of: ``text``, ``tool_use``, ``tool_result``, ``system``,
    ``result``, ``error``, ``usage_limit``, ``rate_limit`` (a 429/overload rejection
    to wait out), ``context_overflow``.
    ``data`` keeps the structured details (tool name and input, cost, usage).
    """

    kind: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgentInvocation:
    """Everything an agent needs to build one iteration's process."""

    prompt: str
    project_dir: Path
    run_dir: Path
    iteration: int
    model: str | None = None
    hook_settings: Path | None = None
    """A Claude Code settings file (outside the project) wiring ralph's hooks."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment the loop wants the agent to see (RALPH_* variables)."""
    purpose: str = "iteration"
    """``iteration`` for a loop iteration; a gate's name for an extra call (``quality``)."""
    mode: str | None = None
    """The iteration's mode (``implement``, ``review``, ``review-fix``), so an agent can offer
    each mode only the tools it needs; None for extra calls."""
    sandboxed: bool = False
    """True when the runner isolates the agent (a container): an agent may then turn
    its own sandbox off, since the runner is the boundary."""
    read_only: bool = False
    """The session must not change the project (a reviewer gate): agents that can enforce
    it (a read-only sandbox, disallowed edit tools) do; the loop undoes changes anyway."""


@dataclass
class ProcessSpec:
    """A command a runner executes: argv, environment additions, working dir."""

    argv: list[str]
    """The command line; ``argv[0]`` is looked up on PATH."""
    env: dict[str, str]
    """Additions to the environment: merged over the loop's ``os.environ`` (these win).  A runner
    that does not run the process on this machine passes them itself."""
    cwd: Path
    """The working directory (the project, on this machine)."""
    stdin: str | None = None
    """Text written to the process's stdin, which is then closed (None: no stdin)."""
    program: str | None = None
    """The logical program (``claude``) so a runner that does not share this
    machine's filesystem can substitute its own copy of ``argv[0]``."""


class Agent(ABC):
    """An agent CLI: builds its command line and parses its output stream."""

    name: ClassVar[str]
    description: ClassVar[str] = ""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def availability(self) -> Availability:
        """Can this agent run here (binary found, script present ...)?"""

    @abstractmethod
    def process(self, invocation: AgentInvocation) -> ProcessSpec:
        """The process to start for one iteration."""

    @abstractmethod
    def parse_line(self, line: str) -> list[AgentEvent]:
        """Turn one line of the agent's stdout into zero or more events."""

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Checks run once before iteration 1 (and by ``ralph doctor``).

        Say whether the agent can really work where ``context.runner`` runs it: the
        binary runs, credentials are visible in ``context.view`` (or the model
        endpoint answers), the files the agent needs are visible there.  Return
        every check (passed ones too, for ``ralph doctor``); a failed ``Check``
        stops ``ralph run`` with exit 2 and its fix, before any iteration.  Keep it
        quick: seconds, not minutes.
        """
        return []


# -- runners --------------------------------------------------------------------


@dataclass
class ProcessOutcome:
    """How a runner's process ended."""

    exit_code: int
    """The process's exit code (from ``run_process``: minus the signal number when a signal killed it)."""
    timed_out: bool = False
    """Stopped because ``timeout`` passed."""
    interrupted: bool = False
    """Stopped because ``cancel`` was set."""
    stderr: str = ""
    """The end of its stderr (``run_process`` keeps the last 200 lines)."""
    swept: list[int] = field(default_factory=list)
    """Processes the run left behind, killed after it ended (pids; ``run_process`` fills it)."""


@dataclass
class CommandResult:
    """A loop-owned command (a gate's) run where the agent runs; ``where`` is ``host`` or ``sandbox``."""

    exit_code: int
    output: str
    timed_out: bool = False
    where: str = "host"


class Runner(ABC):
    """Where and how the agent process runs (host subprocess, container, remote)."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    isolates: ClassVar[bool] = False
    """True when the agent (and :meth:`run_command`) runs in a sandbox (a container).  False (a host
    subprocess, or unsandboxed on another machine like ``ray``): the agent-side guards are the only
    protection, and they deny what they cannot model."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def availability(self) -> Availability:
        """Can this runner be used here?  The reason is shown when it cannot."""

    def prepare(self, project_dir: Path) -> None:  # noqa: B027 - optional hook
        """Called once before the first iteration (create a container, ...)."""

    @abstractmethod
    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        """Run ``spec`` to completion, calling ``on_line`` for every stdout line.

        ``on_line`` gets each line without its line ending, in order, from one thread that is
        not the caller's (a last line without a newline too); if it raises, stop the process and
        raise that exception.  The process sees ``os.environ`` with ``spec.env`` merged over it.
        Stop the process when ``timeout`` seconds pass (``timed_out``) or ``cancel`` is set
        (``interrupted``): SIGTERM to its process group, SIGKILL after ``KILL_GRACE_SECONDS``.
        Nothing it started may outlive ``run``.  ``ralph.api.run_process`` does all of this for
        a process on this machine; see docs/plugins.md, "Runners".
        """

    def cleanup(self) -> None:  # noqa: B027 - optional hook
        """Called once when the loop ends, however it ends."""

    def agent_view(self) -> AgentView:
        """How the agent's process will see this machine (environment, home, files, network).

        The default is a host process: the whole environment, this user's home,
        every path.  A container or remote runner returns what it really passes.
        Used by the agents' pre-flight checks; called after ``availability()`` said yes.
        """
        home = os.environ.get("HOME")
        return AgentView(env=dict(os.environ), home=Path(home) if home else Path.home())

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Checks of this runner run once before iteration 1 (and by ``ralph doctor``).

        ``availability()`` already said the runner can be used; report here what
        would still make iteration 1 fail (an image, a state directory, a policy that
        cuts the agent off).  Return every check; a failed one stops ``ralph run``
        with exit 2 and its fix.
        """
        return []

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """Run a loop-owned shell command (a gate) where the agent runs, output merged.

        The default runs it on the host in its own session and kills the whole session
        on timeout.  A sandbox runner overrides this so nothing the agent wrote (a
        ``conftest.py``, a Makefile, ``verifyCommands``) runs on the host.
        """
        from ralph.process import run_shell

        code, output, timed_out = run_shell(command, cwd, timeout)
        return CommandResult(code, output, timed_out, "host")

    fallback_reason: str = ""
    """Set on the runner ``auto`` fell back to: why the preferred one was not used."""

    def hook_command(self) -> str | None:
        """The command the agent runs for ralph's hooks where this runner runs it.

        None means the host's own (``<python> -S -P .../ralph/hooks/client.py``).  A
        container or remote runner returns what works inside its environment; the
        hook reaches the loop over the socket named by ``RALPH_HOOK_SOCKET``, which
        the runner must make reachable.
        """
        return None

    def resolve(self, registry: Registry) -> Runner:
        """The runner that will really run; ``auto`` returns its choice from ``registry``."""
        return self


# -- fleet engines --------------------------------------------------------------


class FleetEngine(ABC):
    """Runs whole loops (``ralph run --parallel --engine NAME``) somewhere else, one per unit.

    A unit is a PRD folder or a story group (``ralph.lifecycle.parallel.Unit``:
    ``name``, ``ralph_dir``, ``kind``, ``stories``, ``branch``).  Each loop starts
    from ``base_commit``; its branch comes back to the project as ``unit.branch``.
    An engine never merges or pushes, and one loop failing must not stop the others.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def availability(self) -> Availability:
        """Can this engine be used here?  The reason is shown when it cannot."""
        return Availability.yes()

    @abstractmethod
    def run(self, project_dir: Path, units: list[Any], base_commit: str, run_args: list[str],
            out: Any, err: Any) -> int:
        """Run one loop per unit with ``ralph run RUN_ARGS``; the overall exit code (0 when all completed)."""


# -- policies -------------------------------------------------------------------


@dataclass(frozen=True)
class StoryState:
    """The review-critical fields of one story, as snapshotted by the loop."""

    passes: bool
    reviewStatus: str | None
    reviewCount: int

    def as_dict(self) -> dict[str, Any]:
        """The fields under their task-list names (for the marker file and JSON)."""
        return {"passes": self.passes, "reviewStatus": self.reviewStatus, "reviewCount": self.reviewCount}


Snapshot = dict[str, StoryState]
"""The review-critical fields of every story by id, as the loop took them before an iteration."""


@dataclass(frozen=True)
class Selection:
    """The policy's choice for the next iteration."""

    mode: IterationMode
    story_id: str | None
    reason: str = ""


@dataclass
class Violation:
    """One broken rule, in words the agent (and the user) can act on."""

    check: str
    message: str
    story_id: str | None = None
    undoable: bool = False
    """True when the loop can undo it by restoring the story's snapshot."""
    severity: Severity = "error"
    """``warning``: reported, but it neither fails the iteration nor blocks the agent's Stop."""

    @property
    def is_error(self) -> bool:
        """True unless this is only a warning."""
        return self.severity == "error"


class Policy(ABC):
    """Chooses iteration modes and stories, and says which transitions are legal."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    uses_review: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def select(self, tasks: TaskList) -> Selection | None:
        """The next iteration's mode and story, or None when nothing is left."""

    @abstractmethod
    def is_complete(self, tasks: TaskList) -> bool:
        """True when every story is done as this policy defines done."""

    @abstractmethod
    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        """Markdown appended to the prompt telling the agent this iteration's job."""

    @abstractmethod
    def transition_violations(
        self, mode: IterationMode, before: Snapshot, tasks: TaskList
    ) -> list[Violation]:
        """Illegal changes to review fields between ``before`` and ``tasks``."""


# -- task stores ----------------------------------------------------------------


class TaskStore(ABC):
    """Reads and writes one task-list format behind the common model."""

    name: ClassVar[str]
    filename: ClassVar[str]
    """The task file's name inside the ralph directory (``tasks.json``)."""

    def path(self, ralph_dir: Path) -> Path:
        """Where this store's file lives inside ``ralph_dir``: ``ralph_dir / filename`` unless overridden."""
        return ralph_dir / self.filename

    def detect(self, ralph_dir: Path) -> bool:
        """Does ``ralph_dir`` hold a task list in this format?"""
        return self.path(ralph_dir).is_file()

    @abstractmethod
    def parse(self, raw: str, source: Path) -> TaskList:
        """Parse ``raw``; raise ``TaskListError`` naming ``source`` and the field."""

    @abstractmethod
    def render(self, tasks: TaskList, previous_raw: str | None) -> str:
        """Serialise ``tasks``, changing as little of ``previous_raw`` as possible."""


# -- validation -----------------------------------------------------------------


@dataclass
class ValidationContext:
    """What validators see after (or during) an iteration."""

    project_dir: Path
    tasks_path: Path
    raw: str | None
    """The task file's text, or None when it is missing."""
    tasks: TaskList | None
    """The parsed task list, or None when it does not parse.  Read only: Stop checks share one
    parse while the file's text is unchanged, so a validator that needs to change it works on a
    copy (``tasks.model_copy(deep=True)``)."""
    parse_error: str | None
    policy: Policy
    mode: IterationMode | None
    snapshot: Snapshot | None
    """The pre-iteration review fields (None outside an iteration).  The loop builds them once per
    iteration; each context holds its own copy of the dict, so changing it affects no other check."""
    review_cap: int
    skip_review: bool
    check_git: bool = True


# -- loop events ----------------------------------------------------------------


@dataclass
class LoopEvent:
    """A structured record of something the loop did (``EventKind`` documents each kind's payload)."""

    kind: str
    """An ``EventKind`` member (a ``str`` enum: compare with ``==``).  A kind this ralph does not
    know (read back from a newer ralph's event log) stays a plain ``str``."""
    data: dict[str, Any] = field(default_factory=dict)
    """The payload (JSON-serialisable)."""
    run_dir: Path | None = None
    """The run's directory (None for an event read back from a log)."""

    def __post_init__(self) -> None:
        try:
            # a lookup by value; mypy reads the members' two-argument __new__ as the call's signature
            self.kind = EventKind(self.kind)  # type: ignore[call-arg]
        except ValueError:
            pass


# -- agent-side hooks -------------------------------------------------------------


class SessionStore(ABC):
    """Per-session memory of the agent-side hooks (files read, alerts fired ...).

    Kept by the running loop in memory, or in a JSON file per session when the
    hooks run without a loop.  Values must be JSON-serialisable.
    """

    @abstractmethod
    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key`` for this session."""

    @abstractmethod
    def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` for this session."""


@dataclass
class LoopView:
    """What hooks know about the running loop (None outside a loop)."""

    runner: str
    """The runner's name (``direct``, ``docker-sandbox`` ...)."""
    mode: str | None
    story_id: str | None
    ralph_dir: Path
    run_dir: Path
    protected_paths: list[Path] = field(default_factory=list)
    """Files the agent must not write during the loop (marker, prd.md, prompt.md, hook config ...)."""
    checkpoint: str | None = None
    """The commit the loop recorded before this iteration (``reset --hard`` to it is the loop's job)."""
    isolates: bool = False
    """True when the runner isolates the agent (a container): guards are then early feedback,
    not the boundary.  False for ``direct`` and for runners that run it elsewhere unsandboxed (``ray``)."""


@dataclass
class HookEvent:
    """One Claude Code hook call, as plugins see it.

    ``payload`` is the JSON the CLI sent (``tool_name``, ``tool_input``,
    ``tool_response``, ``transcript_path``, ``prompt`` ...).
    """

    name: str
    """SessionStart, UserPromptSubmit, PreToolUse, PostToolUse or Stop."""
    payload: dict[str, Any]
    project_dir: Path
    session: SessionStore
    state_dir: Path
    """A directory hooks may write to: the run directory during a loop, else a
    per-project directory under ralph's state root (never inside the project)."""
    loop: LoopView | None = None
    environ: dict[str, str] = field(default_factory=dict)

    @property
    def tool_name(self) -> str:
        """The tool called (``Bash``, ``Edit`` ...), or empty."""
        return str(self.payload.get("tool_name") or "")

    @property
    def tool_input(self) -> dict[str, Any]:
        """The tool's arguments (``command``, ``file_path`` ...), or an empty dict."""
        value = self.payload.get("tool_input")
        return value if isinstance(value, dict) else {}

    @property
    def session_id(self) -> str:
        """The agent session's id, or empty."""
        return str(self.payload.get("session_id") or "")


@dataclass(frozen=True)
class Denial:
    """A PreToolUse guard's refusal: which rule, and what the agent should do instead."""

    rule: str
    reason: str


# -- gates ------------------------------------------------------------------------


@dataclass
class GateContext:
    """What a gate sees after an implement or review-fix iteration."""

    project_dir: Path
    run_dir: Path
    tasks: TaskList
    story_id: str | None
    mode: IterationMode
    iteration: int
    soft_timeout: float | None
    hard_timeout: float | None
    ask_agent: Callable[[str], str]
    """Run the agent once more with a prompt (through the same runner); returns its text."""
    checkpoint: str | None = None
    """The commit recorded before the iteration (for diffs)."""
    story_start: str | None = None
    """The commit recorded when the story's first implement iteration started (the story's whole diff)."""
    prd_path: Path | None = None
    """The run's PRD (``prd.md``), as the loop read it."""
    ask_reviewer: Callable[[str, str | None, str | None], tuple[str, str]] | None = None
    """``ask_reviewer(prompt, agent_name, model) -> (answer, "agent/model")``: a fresh, read-only
    session of any agent plugin (None: the loop's review agent); changes it makes are undone."""
    run_command: Callable[[str, float | None], CommandResult] | None = None
    """Run a shell command where the agent runs (the runner's :meth:`Runner.run_command`)."""
    where: str = "host"
    """Where the runner runs the agent and ``run_command``: ``host`` or ``sandbox``."""


@dataclass
class GateResult:
    """One gate's verdict.  ``output`` is verbatim (never summarised)."""

    gate: str
    passed: bool
    output: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    soft_timeout_exceeded: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    """Structured details for the event log and the report (a reviewer's verdict ...)."""
    where: str = "host"
    """Where the gate's commands ran: ``host`` or ``sandbox``."""


class Gate(ABC):
    """A check the loop runs itself after an iteration; hard gates send the story back."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    hard: ClassVar[bool] = True
    order: ClassVar[int] = 100
    default_soft_timeout: ClassVar[float | None] = None
    default_hard_timeout: ClassVar[float | None] = None

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def enabled(self) -> bool:
        """Whether this gate runs in this project (config can turn optional gates on)."""
        return True

    @abstractmethod
    def run(self, context: GateContext) -> GateResult:
        """Run the gate; must honour ``context.hard_timeout`` and never raise for a failing check."""
