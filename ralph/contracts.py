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
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal, Mapping, Sequence, TextIO

from ralph.events import EventKind

if TYPE_CHECKING:
    from ralph.fleetunit import Unit
    from ralph.gitutil import TreeStatus
    from ralph.plugin.manager import Registry
    from ralph.settings import Settings
    from ralph.tasks import Story, TaskList

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


CHANNEL_ENV = ("RALPH_RUN_DIR", "RALPH_HOOK_SOCKET", "RALPH_HOOK_TOKEN", "RALPH_STATE_FILE", "RALPH_TASKS_FILE")
"""The environment names :meth:`AgentChannel.env` gives the channel's fields (for scripts and older agents)."""


@dataclass(frozen=True)
class AgentChannel:
    """The agent's way back to the loop, as data: what the hook client needs, where the agent runs.

    The loop builds it for this machine; the runner remaps it through :meth:`Runner.agent_channel`
    to where the agent really runs (paths in a container, a node's relay socket ...); the agent
    renders it into its CLI's own format (Claude Code: a ``--settings`` file with ralph's hooks;
    Codex: ``-c hooks.*`` overrides), as files on :attr:`ProcessSpec.files`.  No plugin parses
    another plugin's format.
    """

    hook_socket: Path
    """The Unix socket the hook client talks to (the loop's own, or a runner's relay)."""
    token: str
    """The run's token: every hook request carries it (a request without it is refused)."""
    run_dir: Path
    """The run directory as the agent sees it (outside the project; loop-owned files such as the
    settings file an agent renders go here: see :attr:`ProcessSpec.files`)."""
    state_file: Path
    """The loop's ``state.json`` (the iteration's trusted snapshot), as the agent sees it."""
    tasks_file: Path
    """The task list the agent works on, as the agent sees it."""
    hook_command: tuple[str, ...]
    """The hook client's command line (argv) where the agent runs."""
    model_endpoint: str | None = None
    """A loop-owned model endpoint (base URL) the agent's CLI talks to, or None (the CLI's own)."""
    model_upstream: str | None = None
    """Where the agent's CLI sends its model calls itself when :attr:`model_endpoint` is None (its
    :meth:`Agent.model_upstream` on this machine), so a runner that filters the network can let it
    through; None when the calls go through the loop's meter, or the agent cannot say."""
    config_home: Path | None = None
    """A run-owned configuration directory for the agent's CLI (Claude Code's config dir,
    ``CODEX_HOME``), or None (the CLI's own)."""
    loader_env: Mapping[str, str] = field(default_factory=dict)
    """Values pinned for the variables that could load code into the hook process (``PYTHONPATH``,
    ``LD_PRELOAD`` ...): this machine's when the agent runs here, empty in a sandbox."""
    hook_peer: str | None = None
    """The process that answers on :attr:`hook_socket` (the loop, or a runner's relay), as
    ``ralph.api.hooks.hook_peer()`` names it in that process; the hook client takes answers only from
    it (:meth:`hook_command_line` passes it as ``--loop=``).  None: only from a process outside the
    agent's pid namespace."""

    def env(self) -> dict[str, str]:
        """The channel as ``RALPH_*`` environment variables (:data:`CHANNEL_ENV`)."""
        values = (self.run_dir, self.hook_socket, self.token, self.state_file, self.tasks_file)
        return {name: str(value) for name, value in zip(CHANNEL_ENV, values)}

    def hook_env(self) -> dict[str, str]:
        """What the hook process must see whatever the agent sets: :meth:`env` and :attr:`loader_env`."""
        return {**self.loader_env, **self.env()}

    def hook_command_line(self) -> str:
        """:attr:`hook_command` as one shell command line (what settings files and ``-c`` overrides hold),
        with ``--loop=`` :attr:`hook_peer`."""
        import shlex

        peer = (f"--loop={self.hook_peer}",) if self.hook_peer else ()
        return shlex.join((*self.hook_command, *peer))

    def remap(self, old: Path, new: Path) -> AgentChannel:
        """This channel with every path under ``old`` moved under ``new`` (a checkout or run
        directory that lives elsewhere where the agent runs)."""
        import dataclasses

        def moved(path: Path) -> Path:
            try:
                return new / Path(path).relative_to(old)
            except ValueError:
                return path

        return dataclasses.replace(
            self, hook_socket=moved(self.hook_socket), run_dir=moved(self.run_dir), state_file=moved(self.state_file),
            tasks_file=moved(self.tasks_file),
            config_home=moved(self.config_home) if self.config_home is not None else None,
        )


@dataclass
class AgentInvocation:
    """Everything an agent needs to build one iteration's process."""

    prompt: str
    project_dir: Path
    run_dir: Path
    iteration: int
    model: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment the loop wants the agent to see (the channel's ``RALPH_*`` variables)."""
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
    channel: AgentChannel | None = None
    """The way back to the loop where the agent runs (None outside a loop): render it into the CLI's
    own hook wiring (see :class:`AgentChannel`)."""


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
    files: dict[Path, str] = field(default_factory=dict)
    """Loop-owned files the process needs before it starts (a settings file), by their path where it
    runs (under the channel's run directory): the runner writes them there (on this machine, into a
    container's mount, shipped to a node) before it starts the process; ``run_process`` writes them
    on this machine."""
    channel: AgentChannel | None = None
    """The channel the process was built for (the loop fills it in when the agent did not): a runner
    reads the hook socket and run directory it must make reachable from here, never from ``env``."""

    def write_files(self, root: Path | None = None) -> None:
        """Write :attr:`files` on this machine (atomically, mode 0600, parents created); with ``root``,
        each path is taken relative to ``/`` under ``root`` (a directory that is ``/`` elsewhere)."""
        from ralph.fsutil import atomic_write_text

        for path, text in self.files.items():
            target = Path(path) if root is None else root / Path(path).relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(target, text)
            os.chmod(target, 0o600)


class Agent(ABC):
    """An agent CLI: builds its command line and parses its output stream."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    uses_channel: ClassVar[bool] = False
    """True when :meth:`process` renders ``invocation.channel`` into its CLI's hook wiring.  The loop
    refuses to run an agent that does not say so (its tool calls would go unguarded): it renders no
    agent's format for another."""

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

    def login_files(self, view: AgentView) -> dict[str, Path | bytes] | None:
        """The person's login this agent's CLI needs in a run-owned config home, or None (no home).

        An agent whose CLI reads settings, hooks or MCP servers from a user-scope config directory
        (``~/.claude``, ``~/.codex``) returns a dict, empty or not: the loop then makes a fresh, private
        directory for every process of it (in the run directory, outside the project) with these
        entries in it, name in the home -> the person's file as ``view`` shows where the agent runs
        (or its bytes, for a login kept elsewhere), and passes it (the agent points its CLI at it:
        ``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``).  Nothing else of the person's configuration is
        copied: what the agent writes there never reaches another session.  Default: None.
        """
        return None

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

    def credential_check(self, view: AgentView) -> Check | None:
        """Whether the agent has credentials where ``view`` shows it (passed or failed, with the fix),
        or None when it needs none or cannot tell (the default).

        ``--runner auto`` asks before it chooses a sandbox: when the agent can log in on this
        machine but not in the sandbox (a subscription login kept in the host's config directory or
        keychain, which a container does not see), ``auto`` runs the agent directly instead and says
        why, with the failed check's fix (how to give the sandbox a credential of its own).
        """
        return None

    def model_upstream(self) -> str | None:
        """The model API base URL this agent's CLI would talk to, when the CLI can be pointed at another.

        Return it, and render the invocation's model endpoint (the loop's meter, which forwards
        there) as the CLI's base URL: then the loop's cost, tokens, rate and usage limits come from
        the model traffic itself (docs/metering.md).  None (the default): the agent is not metered
        and the loop takes its own cost reports (sanitized: a report never lowers the cost).
        """
        return None


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
    """Processes the run left behind, killed when it ended (pids; ``run_process`` fills it: in a pid
    namespace, as the namespace numbers them)."""


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
        Nothing it started may outlive ``run``.  ``ralph.api.process.run_process`` does all of this for
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

    def model_endpoint_host(self) -> str | None:
        """The address on this machine where the loop's model meter must listen for this runner's
        agents to reach it (``127.0.0.1`` for a process here; a container network's gateway), or
        None (the default): the agent cannot reach a loop-owned endpoint, and is not metered."""
        return None

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Checks of this runner run once before iteration 1 (and by ``ralph doctor``).

        ``availability()`` already said the runner can be used; report here what
        would still make iteration 1 fail (an image, a state directory, a policy that
        cuts the agent off).  Return every check; a failed one stops ``ralph run``
        with exit 2 and its fix.
        """
        return []

    def gate_check(self, commands: Sequence[str]) -> list[Check]:
        """Can the gate commands (the task list's ``verifyCommands``) run where this runner runs them?

        Called before iteration 1 (and by ``ralph doctor``) after ``availability()`` said yes, and
        by ``auto`` before it chooses this runner.  Return a failed :class:`Check` per program a
        command needs that is missing there, its fix naming how to add it; a failure stops
        ``ralph run`` with exit 2, and makes ``auto`` choose ``direct``, saying why.  The default
        checks nothing.
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
        """The command the agent runs for ralph's hooks where this runner runs it (older form of
        :meth:`agent_channel`, which the default applies).

        None means the host's own (``<python> -I -S .../ralph/hooks/client.py``).  A
        container or remote runner returns what works inside its environment; the
        hook reaches the loop over the channel's socket, which the runner must make reachable.
        """
        return None

    def agent_channel(self, channel: AgentChannel) -> AgentChannel:
        """The loop's channel (as this machine sees it) remapped to where this runner runs the agent.

        The one place a runner translates the channel: paths in a container or on a node, the hook
        client that works there, a relay's socket instead of the loop's, a model endpoint reachable
        from there.  Called for every agent process, after :meth:`prepare`; the process's
        :class:`ProcessSpec` then carries the result (``spec.channel``) and the files rendered from
        it (``spec.files``).  The default returns ``channel`` with :meth:`hook_command`'s command
        when it gives one.
        """
        import dataclasses
        import shlex

        command = self.hook_command()
        if command:
            return dataclasses.replace(channel, hook_command=tuple(shlex.split(command)))
        return channel

    def bring_back(self) -> None:  # noqa: B027 - optional hook
        """Make the project show the agent's work so far, while the agent still runs.

        Called (from the hook server's thread) before the loop's Stop checks read the project.
        A runner whose agent works on the project itself does nothing (the default); one whose
        agent works on its own checkout ships that work back here, checked as after the run.
        Raising makes the Stop hook block with the error.
        """

    def resolve(self, registry: Registry) -> Runner:
        """The runner that will really run; ``auto`` returns its choice from ``registry``."""
        return self

    def resolve_for(self, registry: Registry, agents: Sequence[Agent], gates: Sequence[str] = ()) -> Runner:
        """The runner that will really run ``agents`` (the run's agent and review agent) and the
        gate commands ``gates`` (the task list's ``verifyCommands``).

        The default is :meth:`resolve`'s choice; ``auto`` also asks each agent whether it has
        credentials in the sandbox it would choose (:meth:`Agent.credential_check`), and the
        sandbox whether it can run the gates (:meth:`gate_check`).
        """
        return self.resolve(registry)


# -- fleet engines --------------------------------------------------------------


class FleetEngine(ABC):
    """Runs whole loops (``ralph run --parallel --engine NAME``) somewhere else, one per unit.

    A unit is a PRD folder or a story group (:class:`~ralph.fleetunit.Unit`, public as
    ``ralph.api.fleet.Unit``: ``name``, ``ralph_dir``, ``kind``, ``stories``, ``branch``).  Each loop starts
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
    def run(self, project_dir: Path, units: list[Unit], base_commit: str, run_args: list[str],
            out: TextIO, err: TextIO) -> int:
        """Run one loop per unit with ``ralph run RUN_ARGS``, each loop's output written to ``out`` and
        ralph's own problems to ``err``; the overall exit code (0 when all completed)."""


# -- policies -------------------------------------------------------------------


REVIEW_STATE_NAMES = ("passes", "reviewStatus", "reviewCount")
"""What ``StoryState(passes, reviewStatus, reviewCount)`` names by position (the seeds' snapshot)."""


_ABSENT = object()
_INTERNED: dict[tuple[tuple[str, ...], tuple[Any, ...]], StoryState] = {}
_INTERNED_MAX = 200_000
_GETTERS: dict[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] = {}


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function returning ``names`` of an object as a tuple (``AttributeError`` when one is missing)."""
    found = _GETTERS.get(names)
    if found is None:
        from operator import attrgetter

        get = attrgetter(*names) if names else (lambda story: ())
        found = _GETTERS[names] = get if len(names) > 1 else (lambda story: (get(story),) if names else ())
    return found


def _frozen(value: Any) -> Any:
    """``value`` as something hashable (JSON lists and objects as tuples)."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((str(key), _frozen(item)) for key, item in value.items()))
    return value


class StoryState:
    """One story's state fields as the loop snapshots them before an iteration: the policy's
    ``state_fields`` (:meth:`Policy.state_of`), each read as an attribute (``state.passes``,
    ``getattr(state, "stage", None)``) or all at once with :meth:`as_dict`.

    A state *carries* the fields it was taken with; a carried field the story did not have (a policy's
    own key, not set yet) is carried as absent: reading it raises ``AttributeError``, as on the story.
    ``StoryState(passes, reviewStatus, reviewCount)`` names the seeds' three fields by position; any
    field can be given by name.  Frozen and hashable; equal when the same fields hold the same values.
    """

    __slots__ = ("_names", "_values", "_hash")
    _names: tuple[str, ...]
    _values: dict[str, Any]
    _hash: int | None

    def __init__(self, *review: Any, _carried: Sequence[str] = (), **fields: Any) -> None:
        if len(review) > len(REVIEW_STATE_NAMES):
            raise TypeError(f"StoryState takes at most {len(REVIEW_STATE_NAMES)} fields by position ({', '.join(REVIEW_STATE_NAMES)})")
        values = dict(zip(REVIEW_STATE_NAMES, review))
        values.update(fields)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_names", tuple(dict.fromkeys([*values, *_carried])))
        object.__setattr__(self, "_hash", None)

    @classmethod
    def of(cls, story: Any, fields: Sequence[str]) -> StoryState:
        """``story``'s ``fields`` (a field the story does not have is carried as absent).

        Equal states are one object (a snapshot of 10,000 stories in few distinct states builds few), so
        comparing two snapshots is mostly an identity check."""
        names = tuple(fields)
        try:
            values = _getter(names)(story)
        except AttributeError:  # a policy's own field the story does not have
            values = tuple(getattr(story, name, _ABSENT) for name in names)
        return cls._interned(names, values)

    @classmethod
    def of_each(cls, stories: Iterable[Any], fields: Sequence[str]) -> dict[str, StoryState]:
        """``{story.id: StoryState.of(story, fields)}`` for each of ``stories``, the per-story lookups made once."""
        names = tuple(fields)
        get, interned, made = _getter(names), _INTERNED, cls._interned
        snapshot: dict[str, StoryState] = {}
        for story in stories:
            try:
                values = get(story)
            except AttributeError:
                values = tuple(getattr(story, name, _ABSENT) for name in names)
            try:
                state = interned[(names, values)]
            except (KeyError, TypeError):
                state = made(names, values)
            snapshot[story.id] = state
        return snapshot

    @classmethod
    def _interned(cls, names: tuple[str, ...], values: tuple[Any, ...]) -> StoryState:
        """The one state of ``names`` holding ``values`` (a new, unkept one when a value is unhashable)."""
        key = (names, values)
        try:
            return _INTERNED[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value (a list): not kept
            return cls._made(names, values)
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()
        state = _INTERNED[key] = cls._made(names, values)
        return state

    @classmethod
    def _made(cls, names: tuple[str, ...], values: tuple[Any, ...]) -> StoryState:
        state = object.__new__(cls)
        object.__setattr__(state, "_values", {n: v for n, v in zip(names, values) if v is not _ABSENT})
        object.__setattr__(state, "_names", names)
        object.__setattr__(state, "_hash", None)
        return state

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], fields: Sequence[str] = ()) -> StoryState:
        """The state :meth:`as_dict` wrote; ``fields``: every field it was taken with (absent ones included)."""
        return cls(_carried=fields, **dict(values))

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field this state carries (present or absent)."""
        return self._names

    def carries(self, name: str) -> bool:
        """Was ``name`` among the fields this state was taken with (present or absent on the story)?"""
        return name in self._names

    def as_dict(self) -> dict[str, Any]:
        """The present fields under their task-list names (for the marker file and JSON)."""
        return dict(self._values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a StoryState is frozen")

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, StoryState):
            return NotImplemented
        return self._values == other._values and set(self._names) == set(other._names)

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash((frozenset(self._names), _frozen(self._values)))
            object.__setattr__(self, "_hash", found)
        return found

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self._values[name]!r}" if name in self._values else f"{name}=(absent)"
                          for name in self._names)
        return f"StoryState({shown})"

    def __reduce__(self) -> Any:
        return (_state_from, (self._values, self._names))


def _state_from(values: dict[str, Any], names: tuple[str, ...]) -> StoryState:
    return StoryState(_carried=names, **values)


Snapshot = dict[str, StoryState]
"""Every story's state fields by id, as the loop took them before an iteration (:meth:`Policy.snapshot`)."""


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


@dataclass(frozen=True)
class Transition:
    """One legal change of the selected story's state fields in a mode, and how the prompt teaches it.

    ``allows(old, new)`` says whether the selected story may go from ``old`` (before the iteration:
    the story itself in a loop; outside one, the :class:`StoryState` the loop recorded, which holds the
    policy's ``state_fields``) to ``new`` (the story after it).  ``prompt`` lists phrases
    the rendered prompt of that mode must contain (compared with whitespace collapsed).
    """

    name: str
    allows: Callable[[Any, Any], bool]
    prompt: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModeRules:
    """What an iteration of one mode may change in the task list: the policy's whitelist for the mode.

    Only the iteration's (selected) story may change.  Its state fields (``Policy.state_fields``)
    change only as one of ``transitions`` allows; when none of them allows leaving them unchanged,
    the mode must decide (a review gives a verdict).  ``fields`` are its other fields the mode may
    set freely; with ``split`` the story may be split: it keeps some of its acceptance criteria and
    new stories take the others, word for word.  Every other change is undone by the loop, logged
    and told to the next iteration, and the fields only the loop or only a person sets
    (``ralph.tasks.LOOP_FIELDS``, ``PERSON_FIELDS``) are never the mode's, whatever ``fields`` says.
    """

    transitions: tuple[Transition, ...]
    fields: frozenset[str] = frozenset({"notes"})
    split: bool = False


@dataclass(frozen=True)
class StateChange:
    """A story whose state fields an iteration changed (or had to change), judged by the mode's table.

    ``kind``: ``selected`` (the iteration's story: ``legal`` when ``transition`` allows it),
    ``undecided`` (the selected story unchanged where the mode must decide), ``other`` (another
    story: never legal; ``transition`` names what would have allowed it on the selected story),
    ``new`` (an added story whose state is not the policy's initial state).  ``selected`` is the
    iteration's story, None when it is not known (the Stop hook without a loop).
    """

    story_id: str | None
    kind: Literal["selected", "undecided", "other", "new"]
    diffs: tuple[tuple[str, Any, Any], ...]
    """``(field, before, after)`` per changed state field (``before`` is the initial value for ``new``)."""
    legal: bool = False
    transition: str | None = None
    selected: str | None = None
    old: Any = None
    new: Any = None


@dataclass(frozen=True)
class GateAttempt:
    """One failed attempt of a story at a gate, as the loop recorded it."""

    gate: str
    exit_code: int | None
    timed_out: bool
    error_hash: str


@dataclass(frozen=True)
class StoryHistory:
    """What the loop knows of a story's past when a policy selects (``Policy.select_next``)."""

    story_id: str
    iterations: Mapping[str, int] = field(default_factory=dict)
    """This run's iterations on the story, per mode."""
    failures: int = 0
    """Failed gate attempts recorded for the story (this run and earlier runs, until it is approved)."""
    stuck: int = 0
    """How many failed attempts in a row ended with the same error."""
    attempts: tuple[GateAttempt, ...] = ()
    """The last failed attempts (at most three), oldest first."""


def _no_history(story_id: str) -> StoryHistory:
    return StoryHistory(story_id)


_UNSET = object()

REVIEW_STATE: Mapping[str, Any] = {"passes": False, "reviewStatus": None, "reviewCount": 0, "reviewFeedback": ""}
"""The task model's review fields and the values a new story starts with."""


class Policy(ABC):
    """Chooses iteration modes and stories, and declares what each mode may change in the task list.

    The declaration is data: ``state_fields`` (the story fields that hold the policy's state of a
    story), ``initial_state`` (their values on a new story) and ``table`` (a :class:`ModeRules` per
    mode).  The loop derives every check from it (``ralph.transitions``, ``ralph/loop/listcheck.py``):
    the selected story's legal transitions, the other stories left alone, splits that move criteria
    verbatim.  A policy without a ``table`` (written before it existed) is asked through
    :meth:`transition_violations` instead.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    uses_review: ClassVar[bool] = True
    """False for a policy without a review cycle (the prompt's ``skip-review`` sections apply)."""
    state_fields: ClassVar[tuple[str, ...]] = tuple(REVIEW_STATE)
    """The story fields that hold this policy's state of a story (the task model's review fields by
    default; a policy may use its own fields, kept as extra keys of the story)."""
    initial_state: ClassVar[Mapping[str, Any]] = REVIEW_STATE
    """The value of each state field on a story that was just added."""
    table: ClassVar[Mapping[str, ModeRules] | None] = None
    """The whitelist per iteration mode (None: the policy checks transitions itself)."""
    judged_outside_a_loop: ClassVar[bool] = True
    """Does the Stop hook outside a loop (answered from the ``.ralph-active`` marker) judge this policy's state
    changes (:meth:`transition_violations`)?  In a loop the whitelist from :attr:`table` applies either way;
    the skip-review policy says no (the seeds' Check 2.5 is off without a review cycle)."""
    reopen_mode: ClassVar[str] = "implement"
    """The mode in which a done story is worked on again when the final tree fails a gate (the review
    policy: ``review-fix``); the final check runs the gates as after an iteration of this mode."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def rules(self, mode: str) -> ModeRules | None:
        """The mode's rules from :attr:`table` (None: the policy declares none for ``mode``)."""
        return (self.table or {}).get(mode)

    def state_of(self, story: Any) -> StoryState:
        """``story``'s state as the loop snapshots it before an iteration: its :attr:`state_fields`."""
        return StoryState.of(story, self.state_fields)

    def snapshot(self, tasks: TaskList) -> Snapshot:
        """Every story's :meth:`state_of` by id: what the marker records and the Stop hook judges outside a loop."""
        if type(self).state_of is Policy.state_of:  # the default state_of: every story's state_fields, in one pass
            return StoryState.of_each(tasks.userStories, self.state_fields)
        state_of = self.state_of
        return {story.id: state_of(story) for story in tasks.userStories}

    def reopen(self, story: Any) -> None:
        """The final tree failed a hard gate after ``story`` was done: make it not done, as this workflow says.

        The loop then sends it back as after a :attr:`reopen_mode` iteration (:meth:`send_back`, with no
        earlier state); the default leaves that to :meth:`send_back`, which puts the state fields back to
        :attr:`initial_state`.
        """
        return None

    def story_state(self, story: Any) -> str:
        """A story's state in a word or two for people (``ralph status``, reports, the dashboard):
        ``done``, ``failed``, ``waiting for a person`` or ``open`` by default; a policy names its own states."""
        if getattr(story, "passes", False):
            return "done"
        if getattr(story, "failed", False):
            return "failed"
        return "waiting for a person" if getattr(story, "waiting", False) else "open"

    @abstractmethod
    def select(self, tasks: TaskList) -> Selection | None:
        """The next iteration's mode and story, or None when nothing is left."""

    def select_next(self, tasks: TaskList, history: Callable[[str], StoryHistory] = _no_history) -> Selection | None:
        """What the loop calls: :meth:`select`, with each story's past at hand (``history(story_id)``).

        Override this instead of :meth:`select` to choose by attempts and gate results.
        """
        return self.select(tasks)

    @abstractmethod
    def is_complete(self, tasks: TaskList) -> bool:
        """True when every story is done as this policy defines done."""

    @abstractmethod
    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        """Markdown appended to the prompt telling the agent this iteration's job."""

    def transition_violations(self, mode: IterationMode, before: Snapshot, tasks: TaskList) -> list[Violation]:
        """Illegal changes of state fields between ``before`` and ``tasks`` (the iteration's story not known).

        Derived from :attr:`table`; the Stop hook asks it outside a loop.  In a loop the loop applies
        the whole whitelist itself, with the selected story known.
        """
        from ralph.transitions import state_violations

        return state_violations(self, mode, before, tasks.userStories, None)

    def describe_changes(self, mode: str, changes: list[StateChange]) -> list[Violation]:
        """The violations, in words the agent can act on, for the illegal ones of ``changes``.

        Wording only: whether a change is legal was decided by the table.  The default names the
        fields, their values and the mode's legal transitions.
        """
        from ralph.transitions import describe

        return describe(self, mode, changes)

    def invariant_violations(self, tasks: TaskList, review_cap: int) -> list[Violation]:
        """What must hold for every story in any state of this policy (the ``invariants`` validator asks)."""
        return []

    def restore_state(self, story: Any, old: Any | None) -> None:
        """Put ``story``'s state fields back as they were in ``old`` (None: a new story, to the initial state)."""
        for name in self.state_fields:
            value = self.initial_state.get(name) if old is None else getattr(old, name, _UNSET)
            if value is not _UNSET:
                setattr(story, name, value)
            elif name in (getattr(story, "__pydantic_extra__", None) or {}):
                delattr(story, name)  # a key of the policy's own that the story did not have

    def send_back(self, story: Any, mode: str, gate: str, old: Any | None) -> list[str]:
        """A hard gate failed on ``story`` after a ``mode`` iteration: undo its verdict; what changed, in words.

        ``old`` is the story before the iteration.  The default puts the state fields back as they were.
        """
        from ralph.transitions import fmt

        changed = []
        for name in self.state_fields:
            was = self.initial_state.get(name) if old is None else getattr(old, name, None)
            now = getattr(story, name, None)
            if was != now:
                setattr(story, name, was)
                changed.append(f"{name} {fmt(now)} → {fmt(was)}")
        return changed

    def unselectable_reason(self, tasks: TaskList) -> str:
        """Why this policy selects no story of ``tasks`` although it is not complete, for a person."""
        from ralph.tasks import blocked_reason

        waiting = [s for s in tasks.userStories if not s.passes and not s.failed]
        if waiting:
            return blocked_reason(tasks, waiting)
        if not tasks.userStories:
            return "the task list has no stories"
        return "the policy selects none of the stories in their current state"


# -- task stores ----------------------------------------------------------------


class TaskStore(ABC):
    """Reads and writes one task-list format behind the common model."""

    name: ClassVar[str]
    filename: ClassVar[str]
    """The task file's name inside the ralph directory (``tasks.json``)."""
    parse_reads_only_its_text: ClassVar[bool] = False
    """True when :meth:`parse`'s result depends on ``raw`` (and ``source``) alone, never on another file or
    anything else: the loop then answers a read whose text equals one it parsed before (compared whole)
    with a copy of that parse instead of parsing again.  Leave False when in doubt: every read is parsed."""

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
    check_git: bool = True
    story_id: str | None = None
    """The iteration's story (None outside an iteration)."""
    before: TaskList | None = None
    """The task list before the iteration, when the loop checks it: the loop then applies the policy's
    whole whitelist itself (``ralph/loop/listcheck.py``) and the ``transitions`` validator leaves it
    to the loop.  None outside a loop (the Stop hook without one), where the validator judges the
    :attr:`snapshot`.  Read only, like :attr:`tasks`."""
    tree_status: Callable[[], TreeStatus] | None = None
    """The work tree's ``git status`` as the loop reads it after an iteration, the agent's processes gone
    (``ralph.gitutil.StatusShare``: one status for its readers while the loop changed nothing in between);
    None during an iteration (a Stop hook) or outside a loop: take your own."""

    @property
    def skip_review(self) -> bool:
        """The seeds' ``skipReview``: the policy has no review cycle (``not policy.uses_review``, the one place
        that fact is held).  What a policy checks is its own (:meth:`Policy.invariant_violations`,
        :meth:`Policy.transition_violations`): a validator asks the policy rather than this flag."""
        return not self.policy.uses_review


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
    run_command_in: Callable[[str, Path, float | None], CommandResult] | None = None
    """``run_command_in(command, cwd, timeout)``: like :attr:`run_command`, in ``cwd``: the project or a
    directory the loop made outside it (the trusted tests' tree)."""
    trusted_story: Story | None = None
    """The selected story as the task list held it when the run started (None: added during the run).
    Person-only fields (``allowTestChanges``) are read from it, never from the list the agent can write."""
    iteration_started: float | None = None
    """When the iteration's agent started (``CLOCK_REALTIME_COARSE`` seconds, the clock of file times)."""
    final: bool = False
    """True for the run of the ``on_final_tree`` gates on the final tree, before a run may end
    "complete" (``mode`` and ``story_id`` are then the last iteration's)."""


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
    skipped: bool = False
    """The gate had nothing to check after this iteration (it passed; no ``gate`` event is emitted)."""


class Gate(ABC):
    """A check the loop runs itself after an iteration; hard gates send the story back."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    hard: ClassVar[bool] = True
    order: ClassVar[int] = 100
    default_soft_timeout: ClassVar[float | None] = None
    default_hard_timeout: ClassVar[float | None] = None
    on_final_tree: ClassVar[bool] = False
    """Also run once more on the final tree before a run may end "complete" (``GateContext.final``):
    for gates that judge the whole tree deterministically (``tests``, ``test-integrity``), not a story's
    diff or a reviewer's reading of it (``spec``, ``quality``, ``diff-coverage``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def enabled(self) -> bool:
        """Whether this gate runs in this project (config can turn optional gates on)."""
        return True

    @abstractmethod
    def run(self, context: GateContext) -> GateResult:
        """Run the gate; must honour ``context.hard_timeout`` and never raise for a failing check."""
