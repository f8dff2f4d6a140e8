"""Everything that talks to the Docker engine for the ``docker-sandbox`` runner.

Imported only when the runner is used (it imports the docker SDK).
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.types import Mount
from docker.utils.socket import frames_iter

from ralph.api import ProcessOutcome, ProcessSpec
from ralph.api.hooks import hook_packages
from ralph.api.workspace import PhaseClock

from .naming import (
    ASK_SHIM,
    IN_CONTAINER_BIN,
    IN_CONTAINER_HOME,
    IN_CONTAINER_LIB,
    LABEL,
    LABEL_PROJECT,
    PROXY_ALIAS,
    PROXY_PORT,
    STANDARD_PATH,
    project_labels,
    sandbox_name,
)

ENGINE_TIMEOUT = 60
KILL_GRACE = 10
BUILD_HINT = "build it with `ralph sandbox build --offline-base` (or `ralph sandbox build --base IMAGE`)"


SHIP_TIMEOUT = 900.0
"""Seconds one exchange with the agent's checkout may take (then the workspace container is made anew)."""
MAX_EXCHANGE_BYTES = 2 << 30
"""Bytes read from a capture (the workspace exchange refuses a state larger than this)."""
INSIDE_SCRIPT = "/opt/ralph/workspace/workspace_inside.py"
OBJECTS_DIR = "/opt/ralph/objects"
"""Where the loop's object store of the checkout (a volume of its own) appears: read-write in the workspace
container only, read-only in the agent's and the gates' (the checkout's ``.git`` borrows from it)."""
"""Where the workspace container has ralph's stdlib-only checkout side (mounted read-only)."""


class SandboxError(RuntimeError):
    """An engine problem, worded for the user."""


def connect() -> Any:
    """A client whose engine answered a ping, or SandboxError saying why not."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT)
        client.ping()
        return client
    except Exception as exc:  # DockerException, or requests errors when nobody listens
        raise SandboxError(
            f"the Docker engine does not answer at {where} ({_short(exc)}): start Docker "
            "(e.g. `sudo systemctl start docker`) or set DOCKER_HOST"
        ) from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


def image_present(client: Any, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def sweep(client: Any, project_dir: Path | None = None) -> dict[str, list[str]]:
    """Remove ralph's containers, networks and checkout volumes (of one project, or all); their names by
    kind (``container``, ``network``, ``volume``)."""
    filters = [f"{LABEL}=1"] + ([f"{LABEL_PROJECT}={project_dir}"] if project_dir is not None else [])
    removed: dict[str, list[str]] = {"container": [], "network": [], "volume": []}
    # sparse: no per-container inspect, so a container vanishing meanwhile cannot fail the listing
    for container in client.containers.list(all=True, sparse=True, filters={"label": filters}):
        try:
            container.remove(force=True)
            # sparse listings carry "Names" (["/name"]), not "Name"
            removed["container"].append((container.attrs.get("Names") or [container.short_id])[0].lstrip("/"))
        except docker.errors.NotFound:
            pass
    for network in client.networks.list(filters={"label": filters}):
        try:
            network.remove()
            removed["network"].append(network.name)
        except docker.errors.NotFound:
            pass
    for volume in client.volumes.list(filters={"label": filters}):
        try:
            volume.remove(force=True)
            removed["volume"].append(volume.name)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:  # in use by a container of another run of this machine
            pass
    return removed


def program_of(spec: ProcessSpec) -> str | None:
    """``spec.program``, or a guess from argv[0] for agents that do not set it."""
    program = getattr(spec, "program", None)
    if program:
        return str(program)
    first = spec.argv[0] if spec.argv else ""
    if Path(first).name in ("claude", "claude.exe"):
        return "claude"
    if Path(first).name in ("codex", "codex.exe"):
        return "codex"
    if first == sys.executable or Path(first).name.startswith("python"):
        return "python3"
    return None


@dataclass
class Options:
    image: str
    network: str
    allow_hosts: list[str]
    env_names: list[str]
    state_dir: Path | None
    user: str
    memory: str
    cpus: float
    pids: int
    tmpfs_size: str
    lifetime: int
    """Seconds the container's PID 1 (``sleep``) lives: orphans expire on their own."""
    path: str = STANDARD_PATH
    """The image's ``PATH`` (the project's toolchain's); the agent's has ralph's bin directory first."""


METERED_HOSTS = ("api.anthropic.com:443", "api.openai.com:443")
"""The model APIs the allowlist lets through by default; dropped when the loop meters the traffic."""


class Sandbox:
    """One project's sandbox for one run: the agent's own checkout in a Docker volume, a fresh
    container per agent process and per gate command, and a workspace container that ships the
    project into the checkout and the agent's work back.

    The project and its ``.git`` are never mounted: the agent's containers see the volume at the
    project's path.  What they leave there reaches the project only as a state captured by
    :mod:`ralph.workspace_inside` in the workspace container (a container no agent process ever runs
    in) and checked as bytes on this machine (:class:`ralph.api.workspace.AgentCheckout`).  Every
    container the agent's code ran in is removed when its process ends, times out or is cancelled,
    which kills every process in it: nothing sweeps from inside, and no marker is read back."""

    def __init__(self, client: Any, project_dir: Path, options: Options) -> None:
        self.client = client
        self.project_dir = project_dir
        self.options = options
        self.name = sandbox_name(project_dir)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.network: Any = None
        self.proxy: Any = None
        self.volume: Any = None
        self.objects: Any = None
        """The volume of the loop's object store for the checkout (:data:`OBJECTS_DIR`)."""
        self.workspace: Any = None
        """The workspace container: the checkout's side of every exchange (never the agent's code)."""
        self.checkout: Any = None
        """The :class:`~ralph.api.workspace.AgentCheckout` of the volume."""
        self.running: Any = None
        """The agent container running now (a Stop check's bring-back captures while it runs)."""
        self._serial = 0
        self._lock = threading.Lock()
        self._gateway: str | None = None
        self._allowed: set[str] = set()
        self._extra_allowed: list[str] = []
        self._metered = False
        """The agent's model traffic goes through the loop's meter: the model APIs are not let through."""
        self.timings: dict[str, float] = {}
        """Seconds of the last run()'s or run_command()'s phases (ship_in, container, bring_back)."""
        self._removing: list[threading.Thread] = []
        self._stopped = False
        """Whether the engine reported the last container stopped (then its removal need not be waited for)."""
        """Removals of stopped containers still going on (joined at teardown)."""

    # -- lifecycle ---------------------------------------------------------------

    def prepare(self) -> list[str]:
        """Remove what a crashed run of the project left (its names), then make the proxy and the checkout."""
        removed = [name for names in sweep(self.client, self.project_dir).values() for name in names]
        if self.options.network == "allowlist":
            self._start_proxy()
        self._make_checkout()
        return removed

    def teardown(self) -> None:
        for remover in self._removing:
            remover.join(timeout=60)
        self._removing.clear()
        for thing in (self.running, self.workspace, self.proxy):
            if thing is not None:
                try:
                    thing.remove(force=True)
                except docker.errors.NotFound:
                    pass
        self.running = self.workspace = self.proxy = None
        if self.network is not None:
            try:
                self.network.remove()
            except docker.errors.NotFound:
                pass
            self.network = None
        for volume in (self.volume, self.objects):
            if volume is None:
                continue
            try:
                volume.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:  # still in use by a container being removed: retried once
                time.sleep(0.5)
                try:
                    volume.remove(force=True)
                except docker.errors.DockerException:
                    pass
        self.volume = self.objects = None

    def _labels(self, role: str) -> dict[str, str]:
        return project_labels(self.project_dir, role, self.owner)

    def _hardening(self) -> dict[str, Any]:
        o = self.options
        return {
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"],
            "read_only": True,
            "init": True,
            "pids_limit": o.pids,
            "mem_limit": o.memory,
            "memswap_limit": o.memory,
            "nano_cpus": int(o.cpus * 1e9),
        }

    # -- the agent's checkout ------------------------------------------------------

    def _checkout_mount(self) -> Mount:
        return Mount(str(self.project_dir), self.volume.name, type="volume")

    def _objects_mount(self, read_only: bool = True) -> Mount:
        return Mount(OBJECTS_DIR, self.objects.name, type="volume", read_only=read_only)

    def _make_checkout(self) -> None:
        """The volume at the project's path, owned by the agent's user, and the workspace container on it."""
        from ralph.api.workspace import AgentCheckout

        image = self.options.image
        if not image_present(self.client, image):
            raise SandboxError(f"the sandbox image {image!r} does not exist: {BUILD_HINT}")
        self.volume = self.client.volumes.create(name=f"{self.name}-checkout", labels=self._labels("checkout"))
        self.objects = self.client.volumes.create(name=f"{self.name}-objects", labels=self._labels("objects"))
        self._make_workspace()
        if not self._agent_is_root():
            code, _, err = self._exec_bytes(["chown", self.options.user, str(self.project_dir), OBJECTS_DIR], b"",
                                            user="0:0")
            if code != 0:
                raise SandboxError(f"cannot give the agent's checkout to {self.options.user}: "
                                   + err.decode("utf-8", "replace")[:300])
        self.checkout = AgentCheckout(self.project_dir, str(self.project_dir), ["python3", "-I", "-S", INSIDE_SCRIPT],
                                      objects=OBJECTS_DIR)

    def run_inside(self, argv: Any, stdin: bytes) -> Any:
        """``argv`` fed ``stdin`` in the workspace container, as the agent's user: the primitive of
        :class:`~ralph.api.workspace.AgentCheckout` (no agent process ever runs in that container)."""
        from ralph.api.workspace import InsideResult

        code, out, err = self._exec_bytes(list(argv), stdin, user=self.options.user)
        return InsideResult(code, out, err)

    def _exec_bytes(self, argv: list[str], stdin: bytes, user: str) -> tuple[int, bytes, bytes]:
        """(exit code, stdout, the end of stderr) of ``argv`` in the workspace container; stdout read up
        to :data:`MAX_EXCHANGE_BYTES` (then the container is removed: the checkout stays in its volume)."""
        api = self.client.api
        exec_id = api.exec_create(self.workspace.id, argv, stdin=True, stdout=True, stderr=True, user=user,
                                  environment={"HOME": "/tmp", "TMPDIR": "/tmp", "PATH": STANDARD_PATH,
                                               "LC_ALL": "C.UTF-8"})["Id"]
        sock = api.exec_start(exec_id, socket=True)
        api._disable_socket_timeout(sock)
        raw = getattr(sock, "_sock", sock)

        def feed() -> None:
            try:
                raw.sendall(stdin)
            except OSError:
                pass
            try:
                raw.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        out, err = bytearray(), bytearray()
        too_big = False
        killer = threading.Timer(SHIP_TIMEOUT, self._reset_workspace)
        killer.start()
        try:
            for stream, data in frames_iter(sock, tty=False):
                if stream == 1:
                    out.extend(data)
                    if len(out) > MAX_EXCHANGE_BYTES:
                        too_big = True
                        break
                elif stream == 2:
                    err.extend(data)
                    del err[:-(1 << 20)]
        except (OSError, ValueError):
            pass
        finally:
            killer.cancel()
            try:
                sock.close()
            except OSError:
                pass
        feeder.join(timeout=10)
        if too_big:
            self._reset_workspace()
            return 0, bytes(out), bytes(err)  # the exchange refuses a state this large
        code = self._exit_code(exec_id)
        return (code if code is not None else 1), bytes(out), bytes(err)

    def _reset_workspace(self) -> None:
        """Remove the workspace container (an exchange that ran too long or sent too much) and make a
        new one on the same volume."""
        workspace, self.workspace = self.workspace, None
        if workspace is not None:
            try:
                workspace.remove(force=True)
            except docker.errors.NotFound:
                pass
        self._make_workspace()  # on the same volume: the checkout stays

    def _make_workspace(self) -> None:
        """Start a workspace container on the checkout volume: the loop's exchange script, no network,
        root with only ``CHOWN`` (once, to give the empty volume to the agent's user)."""
        from ralph.api.workspace import inside_script

        hardening = self._hardening()
        if not self._agent_is_root():
            hardening["cap_add"] = ["CHOWN"]
        self._serial += 1
        self.workspace = self.client.containers.create(
            self.options.image,
            ["sleep", str(self.options.lifetime)],
            name=f"{self.name}-workspace-{self._serial}",
            labels=self._labels("workspace"),
            user="0:0",
            working_dir="/",
            mounts=[self._checkout_mount(), self._objects_mount(read_only=False),
                    Mount(INSIDE_SCRIPT, str(inside_script()), type="bind", read_only=True)],
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.options.tmpfs_size},mode=1777"},
            environment={"HOME": "/tmp"},
            network_mode="none",
            **hardening,
        )
        self.workspace.start()

    def ship_in(self) -> None:
        """Make the agent's checkout the project's current state."""
        from ralph.api.workspace import WorkspaceError

        try:
            self.checkout.ship_in(self.run_inside)
        except WorkspaceError as exc:
            raise SandboxError(str(exc)) from None

    def bring_back(self, keep: Path | None) -> None:
        """The checkout captured in the workspace container, checked and mirrored onto the project
        (:class:`~ralph.api.workspace.WorkspaceRefused` when it breaks a rule)."""
        self.checkout.bring_back(self.run_inside, keep=keep)

    def bring_back_while_running(self) -> None:
        """A Stop check's bring-back: the running agent's work so far (nothing when no agent runs)."""
        with self._lock:
            if self.running is None or self.checkout is None:
                return
            self.checkout.bring_back(self.run_inside)

    # -- network -------------------------------------------------------------------

    def allow_list(self) -> list[str]:
        hosts = list(self.options.allow_hosts)
        if self._metered:  # the container reaches the model only through the loop's meter
            hosts = [host for host in hosts if host not in METERED_HOSTS]
        return sorted(set(hosts))

    def route_models_through(self, url: str) -> None:
        """The agent's model traffic goes through the loop's meter at ``url``: let the proxy through to it
        and to none of the model APIs (so nothing the agent runs bypasses the meter)."""
        if self.options.network != "allowlist" or self._metered:
            self.allow(url)
            return
        self._metered = True
        parts = urlsplit(url)
        if parts.hostname:
            self._extra_allowed.append(f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}")
        if self.proxy is not None:
            self.proxy.remove(force=True)
            self.proxy = None
            self._start_proxy(reuse_network=True)

    def gateway(self) -> str:
        """This machine's address on the default bridge (what a container reaches it at)."""
        if self._gateway is None:
            import ipaddress

            config = (self.client.networks.get("bridge").attrs.get("IPAM") or {}).get("Config") or [{}]
            gateway = config[0].get("Gateway")
            if not gateway and config[0].get("Subnet"):
                gateway = str(next(ipaddress.ip_network(config[0]["Subnet"]).hosts()))
            self._gateway = str(gateway or "172.17.0.1")
        return self._gateway

    def allow(self, url: str) -> None:
        """Let the allowlist proxy through to ``url``'s host (a loop-owned endpoint named later than
        ``prepare``, or the agent's own model upstream): the proxy is made again with it when it is not
        listed yet."""
        parts = urlsplit(url)
        if self.options.network != "allowlist" or not parts.hostname:
            return
        entry = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        if entry in self._allowed:
            return
        if self._metered and entry in METERED_HOSTS:
            return
        self._extra_allowed.append(entry)
        if self.proxy is not None:
            self.proxy.remove(force=True)
            self.proxy = None
            self._start_proxy(reuse_network=True)

    def _start_proxy(self, reuse_network: bool = False) -> None:
        allow = sorted(set(self.allow_list() + self._extra_allowed))
        self._allowed = set(allow)
        if reuse_network and self.network is not None:
            self._proxy_container(allow)
            return
        self.network = self.client.networks.create(
            f"{self.name}-net",
            driver="bridge",
            internal=True,
            labels=self._labels("network"),
            # no address for the host on this bridge: an internal network alone still reaches
            # this machine's own addresses (measured); with it the proxy is the only way out
            options={"com.docker.network.bridge.inhibit_ipv4": "true"},
        )
        self._proxy_container(allow)

    def _proxy_container(self, allow: list[str]) -> None:
        self._serial += 1
        self.proxy = self.client.containers.create(
            self.options.image,
            ["python3", "-P", "/opt/ralph/proxy.py", "--port", str(PROXY_PORT), "--allow", ",".join(allow)],
            name=f"{self.name}-proxy-{self._serial}",
            labels=self._labels("proxy"),
            user="65534:65534",
            network="bridge",
            **self._hardening(),
        )
        self.network.connect(self.proxy, aliases=[PROXY_ALIAS])
        self.proxy.start()

    def _network_args(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(container args, proxy environment) for the configured policy."""
        if self.options.network == "none":
            return {"network_mode": "none"}, {}
        if self.options.network == "open":
            return {"network_mode": "bridge"}, {}
        if self.network is None:
            raise SandboxError("the allowlist proxy is not running (prepare() was not called)")
        url = f"http://{PROXY_ALIAS}:{PROXY_PORT}"
        proxy_env = {k: url for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
        proxy_env["NO_PROXY"] = proxy_env["no_proxy"] = "localhost,127.0.0.1"
        return {"network": self.network.name}, proxy_env

    # -- the containers ------------------------------------------------------------

    def mounts_for(self, spec: ProcessSpec) -> tuple[list[Mount], list[str]]:
        """(mounts, argv rewritten for the container)."""
        mounts = [self._checkout_mount(), self._objects_mount()]
        for name, path in hook_packages().items():
            mounts.append(Mount(f"{IN_CONTAINER_LIB}/{name}", str(path), type="bind", read_only=True))
        channel = spec.channel
        if channel is not None and Path(channel.run_dir).is_dir():
            mounts.append(Mount(str(channel.run_dir), str(channel.run_dir), type="bind", read_only=True))
        if channel is not None:
            # read-only: the agent can connect to the socket but not delete or replace it
            socket_dir = Path(channel.hook_socket).parent
            self._share_socket(socket_dir, Path(channel.hook_socket))
            mounts.append(Mount(str(socket_dir), str(socket_dir), type="bind", read_only=True))
            if Path(channel.run_dir).is_dir():  # `ralph ask` inside: the hook client's ask, over that socket
                mounts.append(Mount(f"{IN_CONTAINER_BIN}/ralph", str(write_ask_shim(Path(channel.run_dir))), type="bind",
                                    read_only=True))
        argv = list(spec.argv)
        program = program_of(spec)
        if program == "claude":
            binary = Path(argv[0]).resolve()
            mounts.append(Mount(f"{IN_CONTAINER_BIN}/claude", str(binary), type="bind", read_only=True))
            argv[0] = f"{IN_CONTAINER_BIN}/claude"
        elif program == "codex":
            # a static binary: it runs as is in the image (Codex's own sandbox is off in the container)
            binary = Path(argv[0]).resolve()
            mounts.append(Mount(f"{IN_CONTAINER_BIN}/codex", str(binary), type="bind", read_only=True))
            argv[0] = f"{IN_CONTAINER_BIN}/codex"
        elif program == "python3":
            argv[0] = "python3"
        if self.options.state_dir is not None:
            # only the login: the container's config dir is fresh (tmpfs) in every container, so
            # settings, hooks and MCP servers the agent writes there never reach a later process
            credentials = self.options.state_dir / ".claude" / ".credentials.json"
            if credentials.is_file() and not credentials.is_symlink():
                mounts.append(Mount(f"{IN_CONTAINER_HOME}/.claude/.credentials.json", str(credentials), type="bind"))
        return mounts, argv

    def _share_socket(self, directory: Path, path: Path) -> None:
        """A sandbox user other than the host's needs the private socket directory handed over."""
        uid, _, gid = self.options.user.partition(":")
        if not uid.isdigit() or int(uid) == os.getuid() or not path.exists():
            return
        try:
            os.chown(directory, int(uid), int(gid or uid))
            os.chown(path, int(uid), int(gid or uid))
        except PermissionError:  # not root: traversal only; the run token still authenticates
            os.chmod(directory, 0o711)
            os.chmod(path, 0o666)

    def _container(self, role: str, argv: list[str], mounts: list[Mount], env: dict[str, str], cwd: str,
                   stdin: bool) -> Any:
        """A fresh container of the agent's user (created, not started) on the checkout."""
        network_args, _ = self._network_args()
        size = self.options.tmpfs_size
        self._serial += 1
        return self.client.containers.create(
            self.options.image,
            argv,
            name=f"{self.name}-{role}-{self._serial}",
            labels=self._labels(role),
            user=self.options.user,
            working_dir=cwd,
            mounts=mounts,
            tmpfs={
                # exec: test binaries run from /tmp (`go test`); the checkout is writable and executable anyway
                "/tmp": f"rw,exec,nosuid,nodev,size={size},mode=1777",
                IN_CONTAINER_HOME: f"rw,nosuid,nodev,size={size},mode=1777",
            },
            environment=env,
            stdin_open=stdin,
            **network_args,
            **self._hardening(),
        )

    def _path(self) -> str:
        """The image's ``PATH`` without entries inside the project, where every container shows the agent's
        checkout (a devcontainer's ``node_modules/.bin``), and relative ones."""
        from ralph.api.process import path_outside

        return path_outside(self.options.path, self.project_dir) or STANDARD_PATH

    def environment(self, spec: ProcessSpec) -> dict[str, str]:
        env = {
            "IS_SANDBOX": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        for name in self.options.env_names:
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(spec.env)
        env.update(
            {
                "HOME": IN_CONTAINER_HOME,
                "PATH": f"{IN_CONTAINER_BIN}:{self._path()}",
                "PYTHONPATH": IN_CONTAINER_LIB,
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        env.update(self._network_args()[1])
        return env

    def _attach_and_run(self, container: Any, stdin: str | None, on_out: Callable[[str], None],
                        on_err: Callable[[str], None], timeout: float | None,
                        cancel: threading.Event | None) -> tuple[int, bool, bool]:
        """Start ``container`` with its output streamed; (exit code, timed out, interrupted).  On a
        timeout or a cancel the container is killed from outside, with every process in it."""
        params = {"stdout": 1, "stderr": 1, "stream": 1, "stdin": 1 if stdin is not None else 0}
        sock = container.attach_socket(params=params)
        self.client.api._disable_socket_timeout(sock)  # a quiet agent must not end the read after ENGINE_TIMEOUT
        container.start()
        raw = getattr(sock, "_sock", sock)
        if stdin is not None:
            try:
                raw.sendall(stdin.encode("utf-8"))
            except OSError:
                pass
        try:
            raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        reader = threading.Thread(target=_pump, args=(sock, on_out, on_err), daemon=True)
        reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = interrupted = False
        while reader.is_alive():
            if cancel is not None and cancel.wait(0.05):
                interrupted = True
                break
            if cancel is None:
                reader.join(0.05)
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
        if timed_out or interrupted:
            try:
                container.kill()
            except docker.errors.APIError:
                pass
        reader.join(timeout=10)
        try:
            sock.close()
        except OSError:
            pass
        stopped = False
        try:
            code = int(container.wait(timeout=30).get("StatusCode", 1))
            stopped = True
        except Exception:  # noqa: BLE001 - the engine did not say: a killed container
            code = 137
        if (timed_out or interrupted) and code in (0, -1):
            code = 137
        self._stopped = stopped
        return code, timed_out, interrupted

    def _remove(self, container: Any, stopped: bool = False) -> None:
        """Remove ``container`` with every process in it.  One the engine reported ``stopped`` (its
        init ended, and the kernel with it every process of its pid namespace) is removed in the
        background: nothing of it runs any more, only its record and file system are left."""
        if stopped:
            remover = threading.Thread(target=self._remove, args=(container,), daemon=True)
            remover.start()
            self._removing.append(remover)
            return
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:  # removal already in progress
            pass

    # -- one agent process -----------------------------------------------------------

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        """One agent process in a fresh container on the checkout (the project's state shipped in
        first); the container removed when it ends, then its work brought back."""
        from ralph.api.workspace import WorkspaceError, WorkspaceRefused

        clock = PhaseClock()
        self.ship_in()
        clock.lap("ship_in")
        spec.write_files()  # under the run directory, mounted read-only at the same path
        mounts, argv = self.mounts_for(spec)
        if timeout is not None:  # belt and braces: the process ends on its own even if this one dies
            argv = ["timeout", "-k", str(KILL_GRACE), str(int(timeout) + 30), *argv]
        image = self.options.image
        if not image_present(self.client, image):
            raise SandboxError(f"the sandbox image {image!r} does not exist: {BUILD_HINT}")
        container = self._container("agent", argv, mounts, self.environment(spec), str(spec.cwd), spec.stdin is not None)
        stderr_tail: deque[str] = deque(maxlen=200)
        with self._lock:
            self.running = container
        self._stopped = False
        try:
            code, timed_out, interrupted = self._attach_and_run(container, spec.stdin, on_line, stderr_tail.append,
                                                                timeout, cancel)
        finally:
            with self._lock:  # waits for a Stop check's bring-back in flight
                self.running = None
            self._remove(container, stopped=self._stopped)  # every process the agent started goes with it
        clock.lap("container")
        outcome = ProcessOutcome(code, timed_out, interrupted, "\n".join(stderr_tail))
        keep = Path(spec.channel.run_dir) if spec.channel is not None else None
        try:
            self.bring_back(keep)
        except WorkspaceRefused:
            if not interrupted:
                raise
            outcome.stderr += "\nralph: the agent's work was refused when it was brought back (see the run's events)"
        except WorkspaceError as exc:
            if not interrupted:
                raise SandboxError(str(exc)) from None
            outcome.stderr += f"\nralph: the agent's work could not be brought back: {exc}"
        clock.lap("bring_back")
        self.timings = clock.laps
        return outcome

    def _agent_is_root(self) -> bool:
        return self.options.user.partition(":")[0] in ("0", "root")

    # -- one gate command ------------------------------------------------------------

    def run_command(self, command: str, cwd: Path, timeout: float | None,
                    shared: Sequence[str] = ()) -> tuple[int, str, bool]:
        """A loop-owned shell command (a gate) in a fresh container on the checkout (the project's
        state shipped in first), as the agent's user, with the sandbox's network; (exit code, merged
        output, timed out).  The container is removed when the command ends, with everything it left
        running.

        A ``cwd`` outside the project (a directory the loop made from the project as it is on this
        machine: the trusted tests' tree) is bind-mounted read-write at its own path and the agent's
        checkout is **not** mounted: the tree's links to the project's dependency directories
        (``shared``: ``.venv``, ``node_modules`` ..., links ``TREE/NAME -> PROJECT/NAME``) lead to this
        machine's directories, mounted read-only at the project's path, never to what the agent left
        in its checkout (which never travels and which no check on this machine sees)."""
        clock = PhaseClock()
        self.ship_in()
        clock.lap("ship_in")
        if Path(cwd).resolve().is_relative_to(self.project_dir.resolve()):
            mounts = [self._checkout_mount(), self._objects_mount()]
        else:
            mounts = [Mount(str(cwd), str(cwd), type="bind"), *self._project_dependencies(Path(cwd), shared)]
        env = {
            "HOME": IN_CONTAINER_HOME,
            "PATH": self._path(),
            "PYTHONDONTWRITEBYTECODE": "1",
            **self._network_args()[1],
        }
        container = self._container("gate", ["sh", "-c", command], mounts, env, str(cwd), False)
        lines: list[str] = []
        self._stopped = False
        try:
            # one reader for both streams, in arrival order (the gate's output is shown verbatim)
            code, timed_out, _ = self._attach_and_run(container, None, lines.append, lines.append, timeout, None)
        finally:
            self._remove(container, stopped=self._stopped)
        clock.lap("container")
        self.timings = clock.laps
        return code, "\n".join(lines), timed_out

    def _project_dependencies(self, tree: Path, names: Sequence[str]) -> list[Mount]:
        """Read-only mounts of this machine's ``PROJECT/NAME`` directories that ``tree`` links to as
        ``TREE/NAME -> PROJECT/NAME`` (``NAME`` one of ``names``): a link anything else made, to another
        place, or to something that is not a real directory here, gets no mount (it leads nowhere)."""
        mounts: list[Mount] = []
        for name in dict.fromkeys(names):
            if not name or "/" in name or name in (".", "..") or name.lower().rstrip(". ") == ".git":
                continue
            try:
                target = os.readlink(tree / name)
            except OSError:
                continue
            where = Path(target)
            if not where.is_absolute() or where.name != name or os.path.realpath(where.parent) != str(self.project_dir):
                continue
            host = self.project_dir / name
            try:
                info = os.lstat(host)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                continue
            mounts.append(Mount(str(where), str(host), type="bind", read_only=True))
        return mounts

    def _exit_code(self, exec_id: str) -> int | None:
        for _ in range(200):
            try:
                info = self.client.api.exec_inspect(exec_id)
            except docker.errors.NotFound:
                return None
            if not info.get("Running"):
                code = info.get("ExitCode")
                return int(code) if code is not None else None
            time.sleep(0.02)
        return None


def _pump(sock: Any, on_line: Callable[[str], None], on_err: Callable[[str], None]) -> None:
    buffers = {1: b"", 2: b""}
    sinks = {1: on_line, 2: on_err}
    try:
        for stream, data in frames_iter(sock, tty=False):
            if stream not in buffers or not data:
                continue
            buffers[stream] += data
            *lines, buffers[stream] = buffers[stream].split(b"\n")
            for line in lines:
                sinks[stream](line.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass
    for stream, rest in buffers.items():
        if rest:
            sinks[stream](rest.decode("utf-8", "replace"))


def write_ask_shim(run_dir: Path) -> Path:
    """``<run dir>/bin/ralph``: the container's ``ralph`` (only ``ralph ask``; :data:`ASK_SHIM`), mode 0755."""
    import tempfile

    path = run_dir / "bin" / "ralph"
    path.parent.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ralph-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(ASK_SHIM)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)  # whatever is at the name is replaced, never written through
    return path
