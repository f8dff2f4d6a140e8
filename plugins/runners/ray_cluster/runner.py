"""The ``ray`` runner: each iteration's agent runs on a Ray node, in a checkout kept by a workspace actor.

Per iteration: the project's state goes to the actor as a :class:`ralph.workspace.WorkspaceState`
(only the commits it lacks), the agent runs there with its output streamed back
and its hook calls relayed to the loop, and the checkout's state comes back and
is mirrored onto the project before :meth:`RayRunner.run` returns — so the loop's
validators, gates and git checks see exactly what direct mode would show them.
Before a Stop hook is answered the project is brought up to date the same way,
so the Stop checks read what the agent has done so far.

With ``agent_runs = "docker-sandbox"`` the actor runs the agent (and the loop's
gate commands, :meth:`RayRunner.run_command`) in the docker-sandbox container
on its node's Docker engine, hardened exactly as the ``docker-sandbox`` runner
does on this machine; the runner then isolates (``isolates`` is True).

If the actor's node dies mid-iteration the project is put back as it was at the
start of the iteration, and the iteration is retried once on another node;
a second loss stops the run with a clear error.
"""

from __future__ import annotations

import fnmatch
import json
import os
import secrets
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ralph.api import Availability, CommandResult, ProcessOutcome, ProcessSpec, RalphError, Runner, UnavailableError
from ralph.api import section_or_default

if TYPE_CHECKING:
    from ralph.api import AgentChannel
    from ralph.api.workspace import WorkspaceState

SECTION = "ray"
NO_RAY = "the ray package is not installed: pip install 'ralph-trustloop[ray]'"
HOOK_EVENTS_THAT_READ_THE_PROJECT = {"Stop", "SubagentStop"}


class NodeLost(Exception):
    """The actor (or its node) went away during an iteration."""


class RayRunner(Runner):
    """Runs every iteration's agent on a Ray node; the loop stays on this machine."""

    name = "ray"
    description = "agent on a Ray cluster node, in a checkout shipped as git bundles; hooks relayed over Ray"
    @property  # type: ignore[override]
    def isolates(self) -> bool:  # type: ignore[override]
        """True with ``agent_runs = "docker-sandbox"``: the agent and gate commands run in the node's sandbox container."""
        return self.sandboxed

    @property
    def sandboxed(self) -> bool:
        """Whether the agent runs in the docker-sandbox container on its node."""
        return bool(self.config().agent_runs == "docker-sandbox")

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._cluster: Any = None
        self._actor: Any = None
        self._where: dict[str, Any] = {}
        self._known: set[str] = set()
        self._lost_nodes: list[str] = []
        self._project: Path | None = None
        self._branch: str | None = None
        self._name = f"ralph-ray-{secrets.token_hex(6)}"
        """The actor's directory name on its node (the same for an actor started again after a lost node,
        so the paths the agent's files name stay right)."""
        self._loop_channel: AgentChannel | None = None
        """The loop's channel of the running agent (its own socket and run directory, on this machine)."""
        self.placements: list[dict[str, Any]] = []

    # -- configuration ------------------------------------------------------------------

    def config(self) -> Any:
        from .config import RayConfig

        return section_or_default(self.settings, SECTION, RayConfig)

    def availability(self) -> Availability:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            return Availability.no(NO_RAY)
        return Availability.yes()

    def agent_view(self) -> Any:
        """The agent on a node sees only the forwarded environment ([tool.ralph.ray] env) and what ralph ships."""
        from ralph.api import AgentView

        env = _forwarded_env(self.config().env)
        if self.sandboxed:
            sandbox = self._sandbox_section()
            state = Path(sandbox.state_dir).expanduser() if sandbox.state_dir else None
            return AgentView(env=env, home=state, network=sandbox.network, where="the sandbox container on a Ray node")
        home = env.get("HOME") or os.environ.get("HOME") or str(Path.home())
        return AgentView(env=env, home=Path(home))

    def _sandbox_section(self) -> Any:
        """The ``[tool.ralph.docker-sandbox]`` settings the node's container is made with."""
        from ..docker.config import SandboxConfig

        return section_or_default(self.settings, "docker-sandbox", SandboxConfig)

    def _sandbox_settings(self) -> dict[str, Any] | None:
        """What the actor needs to build its docker-sandbox runner (None: the agent runs directly)."""
        if not self.sandboxed:
            return None
        core = getattr(self.settings, "config", None)
        return {
            "section": self._sandbox_section(),
            "timeout": float(getattr(core, "timeout", 3600) or 3600),
            "max_iterations": int(getattr(core, "max_iterations", 15) or 15),
        }

    def preflight(self, context: Any) -> list[Any]:
        """The cluster answers, and some alive node offers what one iteration asks for."""
        from ralph.api import Check

        cfg = self.config()
        sandbox = []
        if self.sandboxed:
            sandbox = [Check(True, f"ray: the agent and gate commands run in the docker-sandbox container "
                                   f"({self._sandbox_section().image}) on the node; its engine and image are "
                                   "checked when the workspace actor starts")]
        if not cfg.address:
            return [*sandbox, Check(True, "ray: no address set: a local Ray cluster will be started for the run and stopped after it")]
        from .cluster import describe_cluster

        try:
            lines, fitting = describe_cluster(cfg)
        except RalphError as exc:
            return [Check(False, str(exc), "start the cluster (`ray start --head`) or fix [tool.ralph.ray] address")]
        checks = [*sandbox, *(Check(True, line) for line in lines)]
        if not fitting:
            wanted = {"CPU": cfg.num_cpus, **cfg.resources}
            checks.append(Check(False, f"ray: no alive node offers what an iteration asks for ({wanted})",
                                "add a node with those resources, or change [tool.ralph.ray] num_cpus/resources"))
        return checks

    # -- lifecycle ----------------------------------------------------------------------

    def prepare(self, project_dir: Path) -> None:
        from .cluster import connect

        self._project = project_dir
        self._cluster = connect(self.config())
        self._branch = _current_branch(project_dir)
        self._start_actor(avoid=None)

    def cleanup(self) -> None:
        self._drop_actor()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def agent_channel(self, channel: AgentChannel) -> AgentChannel:
        """The channel on the node: the actor's relay socket, its private directory as the run
        directory, its checkout instead of the project, the hook client that works there (the
        node's interpreter, or the sandbox container's) taking answers from the actor (the relay's
        process) only, and no loader variables of this machine.
        No config home: the one the loop made holds this machine's login, which the node cannot
        see; the node's CLI keeps its own home (its login), whose user settings and MCP servers the
        agent's flags leave unread (``--setting-sources``, ``--strict-mcp-config``)."""
        import dataclasses
        import shlex

        assert self._project is not None, "prepare() was not called"
        self._loop_channel = channel
        private = Path(self._where["workspace"]).parent / "private"
        node = channel.remap(self._project, Path(self._where["workspace"])).remap(channel.run_dir, private)
        return dataclasses.replace(
            node,
            hook_socket=Path(self._where["hook_socket"]),
            hook_command=tuple(shlex.split(self._where["hook_command"])),
            hook_peer=self._where.get("hook_peer"),
            loader_env={},
            config_home=None,
        )

    def describe(self) -> dict[str, Any]:
        """Where the current actor runs (node id, host, pid, checkout path)."""
        return dict(self._where)

    def _start_actor(self, avoid: str | None) -> None:
        import ray

        from .actor import WorkspaceActor

        from .cluster import actor_options

        cfg = self.config()
        options = actor_options(cfg, max_concurrency=8)
        if avoid is not None:
            options["scheduling_strategy"] = _another_node(avoid, self._lost_nodes, cfg)
        remote = ray.remote(WorkspaceActor).options(**options)
        from ralph.api.hooks import hook_client_path

        self._actor = remote.remote(hook_client_path().read_text(encoding="utf-8"), self._sandbox_settings(), self._name)
        self._known = set()
        try:
            self._where = ray.get(self._actor.where.remote(), timeout=max(cfg.call_timeout, 120))
            problem = ray.get(self._actor.sandbox_check.remote(), timeout=max(cfg.call_timeout, 120))
        except Exception as exc:
            self._drop_actor()
            raise RalphError(f"ray runner: the workspace actor could not start: {type(exc).__name__}: {exc}") from exc
        if problem:
            host = self._where.get("hostname", "?")
            self._drop_actor()
            raise UnavailableError(
                f"ray runner: agent_runs = \"docker-sandbox\" but node {self._where.get('node_id', '?')[:12]} "
                f"({host}) cannot run the sandbox: {problem} (run it on that node)"
            )
        self.placements.append(dict(self._where))

    def _drop_actor(self) -> None:
        if self._actor is None:
            return
        import ray

        actor, self._actor = self._actor, None
        try:
            ray.get(actor.close.remote(), timeout=15)
        except Exception:  # the node may be gone; the actor is killed either way
            pass
        try:
            ray.kill(actor)
        except Exception:
            pass

    # -- gate commands ------------------------------------------------------------------

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """With ``agent_runs = "docker-sandbox"``, a gate command runs in the node's sandbox container
        on the project's current state (never on this machine); otherwise on this machine as in direct mode."""
        if not self.sandboxed:
            return super().run_command(command, cwd, timeout)
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        from ralph.api.workspace import capture

        if self._actor is None or self._project is None:
            raise RalphError("ray runner: a gate command ran before the workspace actor started (prepare() was not called)")
        shipped = capture(self._project, self._known)
        self._call(self._actor.sync_in.remote(shipped, self._branch))
        self._known.add(shipped.head)
        workspace = self._where["workspace"]
        node_cwd = _translate(str(Path(cwd).resolve()), str(self._project.resolve()), workspace)
        wait = None if timeout is None else timeout + self.config().call_timeout
        try:
            result = ray.get(self._actor.run_command.remote(command, node_cwd, timeout), timeout=wait)
        except (RayActorError, GetTimeoutError) as exc:
            raise RalphError(f"ray runner: the gate command's node was lost ({type(exc).__name__}); run again") from exc
        output = _translate(result.output, workspace, str(self._project))
        return CommandResult(result.exit_code, output, result.timed_out, "sandbox")

    # -- one iteration ------------------------------------------------------------------

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        from ralph.api.workspace import capture

        assert self._project is not None, "prepare() was not called"
        shipped = capture(self._project, self._known)
        # what to restore if the node dies (its commits are the project's own: no bundle needed)
        start = shipped.replace(bundle=None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for attempt in (1, 2):
            try:
                return self._attempt(spec, on_line, deadline, cancel, shipped if attempt == 1 else None)
            except NodeLost as lost:
                self._restore(start)
                node = self._where.get("node_id", "?")
                self._lost_nodes.append(node)
                self._record({"event": "node_lost", "node_id": node, "attempt": attempt, "error": str(lost)})
                if attempt == 2 or cancel.is_set():
                    raise RalphError(
                        f"ray runner: the agent's node was lost twice ({lost}); the project is as it was before "
                        "the iteration. Check the cluster (`ray status`) and run again."
                    ) from None
                self._drop_actor()
                self._start_actor(avoid=node)
        raise AssertionError("unreachable")

    def _attempt(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        deadline: float | None,
        cancel: threading.Event,
        shipped: WorkspaceState | None,
    ) -> ProcessOutcome:
        from ralph.api.hooks import ask_loop
        from ralph.api.workspace import capture

        assert self._project is not None
        cfg = self.config()
        loop_socket = str(self._loop_channel.hook_socket) if self._loop_channel is not None else None
        if shipped is None:  # a retry on a fresh actor: it has nothing yet
            shipped = capture(self._project, self._known)
        self._call(self._actor.sync_in.remote(shipped, self._branch))
        self._known.add(shipped.head)
        spec = self._on_node(spec)
        env = _forwarded_env(cfg.env)
        env.update(spec.env)
        self._record({"event": "iteration_placed", **self._where, "shipped_bytes": shipped.size})
        self._call(self._actor.start.remote(spec.argv, env, spec.stdin, spec.program, spec.channel))
        timed_out = interrupted = False
        while True:
            if cancel.is_set():
                interrupted = True
            elif deadline is not None and time.monotonic() >= deadline:
                timed_out = True
            if timed_out or interrupted:
                self._call(self._actor.stop.remote())
                polled = self._call(self._actor.poll.remote(0))
                for line in polled["lines"]:
                    on_line(line)
                exit_code = polled["exit"] if polled["exit"] is not None else -9
                stderr = polled["stderr"]
                break
            polled = self._call(self._actor.poll.remote(cfg.poll_seconds))
            for line in polled["lines"]:
                on_line(line)
            for hook_id, request in polled["hooks"]:
                self._actor.answer.remote(hook_id, self._answer_hook(request, loop_socket, ask_loop))
            if polled["exit"] is not None and not polled["hooks"]:
                exit_code, stderr = polled["exit"], polled["stderr"]  # the actor swept what the agent left
                break
        self._bring_back()
        return ProcessOutcome(exit_code, timed_out, interrupted, stderr)

    def _answer_hook(self, request: dict[str, Any], loop_socket: str | None, ask_loop: Any) -> dict[str, Any] | None:
        """Forward one relayed hook request to the loop's own socket; None when the loop cannot answer."""
        if not loop_socket:
            return None
        assert self._project is not None
        # the agent's paths are the node checkout's; the loop judges them as the project's
        request = _translate(request, self._where["workspace"], str(self._project))
        event = (request.get("payload") or {}).get("hook_event_name")
        if event in HOOK_EVENTS_THAT_READ_THE_PROJECT:
            self._bring_back()  # the Stop checks read the project: show them the agent's work so far
        try:
            return ask_loop(loop_socket, request)
        except (OSError, ValueError):
            return None

    def _bring_back(self) -> None:
        """Mirror the node's checkout onto the project (only new commits travel)."""
        from ralph.api.workspace import WorkspaceError, head, mirror

        assert self._project is not None
        current = head(self._project)
        state = self._call(self._actor.sync_out.remote(sorted(self._known | {current})))
        try:
            mirror(self._project, state, branch=self._branch, must_descend=current)
        except WorkspaceError as exc:
            raise RalphError(f"ray runner: the agent's result does not apply to the project: {exc}") from exc
        self._known.add(state.head)

    def _restore(self, start: WorkspaceState) -> None:
        from ralph.api.workspace import mirror

        assert self._project is not None
        mirror(self._project, start, branch=self._branch)

    def _call(self, ref: Any) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(ref, timeout=self.config().call_timeout)
        except (RayActorError, GetTimeoutError) as exc:
            raise NodeLost(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc

    def _on_node(self, spec: ProcessSpec) -> ProcessSpec:
        """``spec`` for the node: the loop-owned files it names written there (in the actor's private
        directory, where the node's channel puts them), the channel remapped when a retry started a new actor."""
        import dataclasses

        if self._loop_channel is not None and spec.channel is not None:
            node = self.agent_channel(self._loop_channel)
            old, new = spec.channel.hook_peer, node.hook_peer
            if old and new and old != new:  # a retry's new actor serves the hooks: the client must expect it
                spec = _repeer(spec, f"--loop={old}", f"--loop={new}")
            spec = dataclasses.replace(spec, channel=node)
        if spec.files:
            self._call(self._actor.put_files.remote({str(path): text for path, text in spec.files.items()}))
        return spec

    def _record(self, data: dict[str, Any]) -> None:
        """Append placement facts to ``<run dir>/ray.jsonl`` (the run directory stays on this machine)."""
        if self._loop_channel is None:
            return
        with open(Path(self._loop_channel.run_dir) / "ray.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"ts": time.time(), **data}) + "\n")


def _repeer(spec: ProcessSpec, old: str, new: str) -> ProcessSpec:
    """``spec`` with the hook client's ``--loop=`` naming the new actor, in its argv and in the files it
    writes (the agent rendered its settings for the actor that was lost)."""
    import dataclasses

    return dataclasses.replace(
        spec,
        argv=[arg.replace(old, new) for arg in spec.argv],
        files={path: text.replace(old, new) for path, text in spec.files.items()},
    )


def _translate(value: Any, old: str, new: str) -> Any:
    """``value`` (JSON) with every path under ``old`` rewritten to lie under ``new``."""
    if isinstance(value, str):
        return value.replace(old, new) if old in value else value
    if isinstance(value, dict):
        return {key: _translate(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_translate(item, old, new) for item in value]
    return value


def _forwarded_env(patterns: list[str]) -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)
    }


def _current_branch(project: Path) -> str | None:
    from ralph.api.workspace import git

    result = git(project, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return result.stdout.decode().strip() or None


def _another_node(avoid: str, lost: list[str], cfg: Any) -> Any:
    """A hard node-affinity strategy to an alive node other than the lost ones that has the resources."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .cluster import fitting_nodes, wanted_resources

    for node_id in fitting_nodes(cfg):
        if node_id not in lost and node_id != avoid:
            return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    raise RalphError(
        "ray runner: the agent's node was lost and no other alive node offers "
        f"{wanted_resources(cfg)}; the project is as it was before the iteration"
    )
