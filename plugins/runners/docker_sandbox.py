"""The ``docker-sandbox`` runner: the agent in hardened containers on a checkout of its own, through the docker SDK.

- **The workspace**: the project and its ``.git`` are never mounted.  The agent's checkout is a Docker
  volume (``ralph-<project path sanitized>-checkout``, labelled ``ralph.sandbox=1``) shown at the
  project's path; the project's state goes in, and the agent's work comes back, only through
  :class:`ralph.api.workspace.AgentCheckout`, run in a workspace container no agent process ever runs
  in, and what comes back is checked as bytes on this machine before the project changes.
- **Containers**: a fresh one per agent process and per gate command, removed when its command ends,
  times out or is cancelled, with every process in it (nothing is swept from inside).  All
  capabilities dropped, no-new-privileges, read-only root, pids, memory and CPU limited, the agent as
  the host user's uid:gid; the run directory and the hook socket's directory read-only.
- **Network**: ``none``, ``allowlist`` (an internal network whose only way out is a proxy container)
  or ``open``.
- **Image**: the project's own when its config (or its devcontainer) describes a toolchain
  (:mod:`.docker.toolchain`, built by ``ralph sandbox build``); before iteration 1 every program the
  gates run is looked up in it (:meth:`DockerSandboxRunner.gate_check`).  See docs/sandbox.md.

The docker SDK is imported only when this runner is used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ralph.api import AgentView, Availability, Check, CommandResult, ProcessOutcome, ProcessSpec, Runner, hookimpl
from ralph.api import section_or_default

from .docker.naming import DEFAULT_IMAGE, HOOK_ARGV, STANDARD_PATH, reachable_endpoint

if TYPE_CHECKING:
    from ralph.api import AgentChannel, PreflightContext

    from .docker.engine import Options, Sandbox

SECTION = "docker-sandbox"
NO_SDK = (
    "the docker Python package is not importable (it is a dependency of ralph-trustloop; "
    "reinstall ralph, or pip install 'docker>=7')"
)


def prepare_state_dir(path: Path) -> Path:
    """The credential state dir (seed: ``~/.dclaude_state``): ``.claude/`` and ``.claude.json`` = ``{}``."""
    path = path.expanduser()
    if path.resolve() == (Path.home() / ".claude").resolve():
        raise ValueError(f"state_dir {path} is ~/.claude itself: use a separate directory such as ~/.dclaude_state")
    (path / ".claude").mkdir(parents=True, exist_ok=True)
    config = path / ".claude.json"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config.write_text("{}\n", encoding="utf-8")  # an empty file breaks the CLI (seed §4)
    return path


class DockerSandboxRunner(Runner):
    """Runs every agent process and gate command in a fresh hardened container on the agent's own checkout."""

    name = "docker-sandbox"
    description = "agent in fresh hardened containers on its own checkout (docker SDK): caps dropped, read-only root, network policy"
    isolates = True

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._client: Any = None
        self._availability: Availability | None = None
        self._sandbox: Sandbox | None = None
        self._image: str | None = None
        """The image the run uses: the project's own (its toolchain's hash), else the ``image`` key."""
        self._toolchain = False
        self._gate_checks: dict[tuple[str, ...], list[Check]] = {}
        self.timings: dict[str, float] = {}
        """Seconds of the last run()'s or run_command()'s phases (ship_in, container, bring_back): for the benchmarks."""

    # -- configuration --------------------------------------------------------------

    def config(self) -> Any:
        from .docker.config import SandboxConfig

        return section_or_default(self.settings, SECTION, SandboxConfig)

    def options(self) -> Options:
        from .docker.engine import Options

        cfg = self.config()
        state_dir = prepare_state_dir(Path(cfg.state_dir)) if cfg.state_dir else None
        core = getattr(self.settings, "config", None)
        timeout = float(getattr(core, "timeout", 3600) or 3600)
        iterations = int(getattr(core, "max_iterations", 15) or 15)
        image = self.image()
        from .docker.projectimage import image_path

        return Options(
            image=image,
            path=image_path(self._client, image) if self._client is not None else STANDARD_PATH,
            network=cfg.network,
            allow_hosts=list(cfg.allow_hosts),
            env_names=list(dict.fromkeys([*cfg.env_allowlist, *cfg.env])),
            state_dir=state_dir,
            user=cfg.user or f"{os.getuid()}:{os.getgid()}",
            memory=cfg.memory,
            cpus=cfg.cpus,
            pids=cfg.pids,
            tmpfs_size=cfg.tmpfs_size,
            lifetime=int(min(timeout * iterations + 600, 7 * 24 * 3600)),
        )

    # -- the Runner contract ------------------------------------------------------------

    def availability(self) -> Availability:
        """The engine answers and the image exists (never pulls)."""
        if self._availability is None:
            self._availability = self._check()
        return self._availability

    def _check(self) -> Availability:
        try:
            from .docker import engine
        except ImportError:
            return Availability.no(NO_SDK)
        try:
            self._client = engine.connect()
        except engine.SandboxError as exc:
            return Availability.no(str(exc))
        from .docker import projectimage, toolchain

        cfg = self.config()
        try:
            project = toolchain.toolchain_of(Path(self.settings.project_dir).resolve(), cfg)
            if project is None:
                if not engine.image_present(self._client, cfg.image):
                    return Availability.no(f"the sandbox image {cfg.image!r} does not exist: {engine.BUILD_HINT}")
                self._image = cfg.image
                return Availability.yes()
            state = projectimage.image_state(self._client, project)
        except toolchain.ToolchainError as exc:
            return Availability.no(str(exc))
        problem = state.problem()
        if problem is not None:
            return Availability.no(problem)
        self._image, self._toolchain = state.tag, True
        return Availability.yes()

    def image(self) -> str:
        """The image the sandbox runs (the project's own when its config describes a toolchain);
        known once :meth:`availability` said yes."""
        if self._image is None:
            self.availability()
        return self._image or self.config().image

    def agent_view(self) -> AgentView:
        """The allowlisted environment, the state dir as home, the project (and ralph's code) as files."""
        from ralph.api.hooks import hook_packages

        cfg = self.config()
        names = list(dict.fromkeys([*cfg.env_allowlist, *cfg.env]))
        mounted = [Path(self.settings.project_dir).resolve()] + [
            path for path in hook_packages().values()
        ]

        def sees(path: Path) -> bool:
            resolved = Path(path).resolve()
            return any(resolved == root or root in resolved.parents for root in mounted)

        return AgentView(
            env={name: os.environ[name] for name in names if name in os.environ},
            home=Path(cfg.state_dir).expanduser() if cfg.state_dir else None,
            network=cfg.network,
            sees=sees,
            where="the sandbox container",
        )

    def preflight(self, context: PreflightContext) -> list[Check]:
        """Engine and image (already known to be there), the credential state dir, the network policy."""
        cfg = self.config()
        if self._toolchain:
            checks = [Check(True, f"Docker engine answers; the project's sandbox image {self.image()} is built from "
                                  "its toolchain config as it is now")]
        else:
            checks = [Check(True, f"Docker engine answers; sandbox image {self.image()} present")]
        if cfg.state_dir:
            try:
                state = prepare_state_dir(Path(cfg.state_dir))
                checks.append(Check(True, f"credential state dir {state} is the agent's ~/.claude"))
            except (ValueError, OSError) as exc:
                checks.append(Check(False, f"[tool.ralph.docker-sandbox] state_dir: {exc}",
                                    'set state_dir = "~/.dclaude_state" (a directory of its own)'))
        if cfg.network == "allowlist":
            checks.append(Check(True, "network policy: allowlist through the proxy: " + ", ".join(cfg.allow_hosts)))
        elif cfg.network == "open":
            checks.append(Check(None, "network policy: open (no egress control)", 'set network = "allowlist" to restrict egress'))
        else:
            checks.append(Check(True, "network policy: none"))
        return checks

    def gate_check(self, commands: Sequence[str]) -> list[Check]:
        """Each program the gate commands run, looked up in the sandbox image (one throw-away
        container; docs/sandbox.md): a failed check naming the program and the config keys that add
        it.  Remembered for the same commands (``auto`` and pre-flight ask the same runner)."""
        key = tuple(commands)
        if not key:
            return []
        if key in self._gate_checks:
            return self._gate_checks[key]
        if not self.availability().ok:
            return []  # the runner cannot be used at all: that is said instead
        from .docker import gateprograms

        project = Path(self.settings.project_dir).resolve()
        image, cfg = self.image(), self.config()
        needs, missing, unchecked = gateprograms.gate_needs(list(key), project, tracked_files(project))
        checks: list[Check] = []
        try:
            from .docker.projectimage import image_path

            missing += gateprograms.look_up(self._client, image, cfg.user or f"{os.getuid()}:{os.getgid()}",
                                            image_path(self._client, image), needs)
        except Exception as exc:  # noqa: BLE001 - an engine or image problem: said, the gates will show the rest
            checks.append(Check(None, f"could not look up the gates' programs in the sandbox image {image}: "
                                      f"{str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__}",
                                "see that the image runs python3 (`docker run --rm IMAGE python3 -V`)"))
        checks += gateprograms.missing_checks(missing, list(key))
        if not checks:
            names = sorted({n.program + (f" -m {n.module}" if n.module else "") for n in needs})
            checks.append(Check(True, f"the sandbox image {image} has what the gates run"
                                      + (": " + ", ".join(names) if names else "")))
        for note in unchecked:
            checks.append(Check(None, f"a gate program was not looked up in the sandbox: {note}",
                                "write the program's name itself to have it checked before the run"))
        self._gate_checks[key] = checks
        return checks

    def prepare(self, project_dir: Path) -> None:
        """Remove leftovers of a crashed run of this project (found by label); start the proxy; make the
        agent's checkout (a volume) and the workspace container."""
        from ralph.api import UnavailableError

        from .docker import engine

        available = self.availability()
        if not available.ok:
            raise UnavailableError(f"runner 'docker-sandbox' cannot be used: {available.reason}")
        self._sandbox = engine.Sandbox(self._client, Path(project_dir).resolve(), self.options())
        try:
            self._sandbox.prepare()
        except Exception as exc:
            self._sandbox.teardown()
            raise UnavailableError(f"docker-sandbox: cannot set up the sandbox: {exc}") from None

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        if self._sandbox is None:
            self.prepare(Path(spec.cwd))
        assert self._sandbox is not None
        from .docker import engine

        try:
            outcome = self._sandbox.run(spec, on_line, timeout, cancel)
            self.timings = dict(self._sandbox.timings)
            return outcome
        except engine.SandboxError as exc:
            from ralph.api import UnavailableError

            raise UnavailableError(str(exc)) from None

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """Gate commands run in the sandbox container (same image, hardening, user, network)."""
        if self._sandbox is None:
            self.prepare(Path(cwd))
        assert self._sandbox is not None
        from .docker import engine

        try:
            code, output, timed_out = self._sandbox.run_command(command, Path(cwd), timeout,
                                                                shared=self._dependency_dirs())
            self.timings = dict(self._sandbox.timings)
        except engine.SandboxError as exc:
            from ralph.api import UnavailableError

            raise UnavailableError(str(exc)) from None
        return CommandResult(code, output, timed_out, "sandbox")

    def _dependency_dirs(self) -> list[str]:
        """The project's dependency directories the trusted tests' tree links to (``[tool.ralph.test-integrity]
        link``): in a gate run there they are this machine's, mounted read-only, never the agent's checkout's."""
        from ralph.api.testintegrity import TRUSTED_TREE_LINKS

        section = self.settings.section("test-integrity") if hasattr(self.settings, "section") else None
        names = getattr(section, "link", None)
        if names is None:
            names = TRUSTED_TREE_LINKS
        return [str(name) for name in names]

    def bring_back(self) -> None:
        """The running agent's work so far, captured in the workspace container, checked and mirrored
        onto the project (before the loop's Stop checks read it)."""
        if self._sandbox is not None:
            self._sandbox.bring_back_while_running()

    def cleanup(self) -> None:
        """Remove the containers, the proxy, the network and the agent's checkout, however the run ended."""
        if self._sandbox is not None:
            self._sandbox.teardown()
            self._sandbox = None

    def hook_command(self) -> str | None:
        """ralph's stdlib hook client, from the read-only library mount (see :meth:`agent_channel`)."""
        return shlex.join(HOOK_ARGV)

    def agent_channel(self, channel: AgentChannel) -> AgentChannel:
        """The channel inside the container: the container's own hook client, no loader variables
        from this machine, and a model endpoint on this machine's loopback reached at the address
        the containers see it at (the same paths otherwise: the run directory and the socket's
        directory are mounted read-only at their own paths).

        The hook client runs with ``-S``: in a loop it imports nothing outside the standard
        library, so the container's site-packages are not scanned on every tool call; when the
        loop does not answer it fails closed without importing ralph."""
        from ralph.api.hooks import PINNED_ENV

        endpoint = channel.model_endpoint
        if endpoint:
            endpoint = reachable_endpoint(endpoint, self._gateway())
            if self._sandbox is not None:
                self._sandbox.route_models_through(endpoint)
        elif channel.model_upstream and self._sandbox is not None:  # an unmetered agent's own model endpoint
            self._sandbox.allow(channel.model_upstream)
        return dataclasses.replace(
            channel, hook_command=HOOK_ARGV, loader_env={name: "" for name in PINNED_ENV}, model_endpoint=endpoint
        )

    def model_endpoint_host(self) -> str | None:
        """The loop's model meter listens on this machine's address on the containers' bridge (its
        gateway), which the agent's container reaches directly (``open``) or through the allowlist
        proxy (``allowlist``: then only the meter, not the model APIs); none with ``network = "none"``."""
        if self.config().network == "none":
            return None
        return self._gateway()

    def _gateway(self) -> str:
        """This machine's address on the containers' bridge (for a model endpoint on loopback)."""
        if self._sandbox is not None:
            return self._sandbox.gateway()
        return "host.docker.internal"

    @property
    def sandbox(self) -> Sandbox | None:
        return self._sandbox


def tracked_files(project_dir: Path) -> set[str]:
    """The repository's files (project-relative; none when it is not one): what a checkout of it has."""
    from ralph.api.process import git

    try:
        listed = git(project_dir, "ls-files", "-z", check=False)
    except Exception:  # noqa: BLE001 - not a repository, or git refused: nothing is known to be there
        return set()
    return {name for name in listed.stdout.split("\0") if name} if listed.returncode == 0 else set()


@hookimpl
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the docker-sandbox runner."""
    register(DockerSandboxRunner)


@hookimpl
def ralph_config_sections() -> dict[str, type]:
    """The ``[tool.ralph.docker-sandbox]`` section."""
    from .docker.config import SandboxConfig

    return {SECTION: SandboxConfig}


__all__ = ["DEFAULT_IMAGE", "DockerSandboxRunner", "prepare_state_dir"]
