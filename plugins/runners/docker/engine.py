"""Everything that talks to the Docker engine for the ``docker-sandbox`` runner.

Imported only when the runner is used (it imports the docker SDK).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.types import Mount
from docker.utils.socket import frames_iter

from ralph.api import ProcessOutcome, ProcessSpec, hook_packages

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


SWEPT_MARKER = "@@ralph-sandbox-swept@@"
READ_ONLY_GIT_DIRS = ("hooks", "info")
READ_ONLY_GIT_FILES = ("config", "config.worktree", "commondir", "objects/info/alternates")
SWEEP_SCRIPT = """
import os, signal, sys, time
me, lifetime = os.getpid(), sys.argv[1]
def table():
    out = {}
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                stat = open('/proc/%s/stat' % name, 'rb').read()
                cmd = open('/proc/%s/cmdline' % name, 'rb').read().split(b'\\0')
            except OSError:
                continue
            fields = stat[stat.rindex(b')') + 2:].split()
            out[int(name)] = (int(fields[1]), fields[0], cmd)
    return out
procs = table()
keepers = [p for p, (pp, st, cmd) in procs.items() if pp == 1 and cmd[:2] == [b'sleep', lifetime.encode()]]
keep = {1, me, os.getppid()} | set(sorted(keepers)[:1])
killed = set()
for _ in range(50):
    targets = [p for p, (pp, st, cmd) in table().items() if p not in keep and st != b'Z']
    if not targets:
        break
    for pid in targets:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        except OSError:
            pass
    time.sleep(0.01)
print(len(killed))
"""
"""For an agent running as root in the container: kill everything but PID 1 (the init), the
keeper (``sleep <lifetime>``) and itself."""


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


def sweep(client: Any, project_dir: Path | None = None) -> list[str]:
    """Remove ralph's containers and networks (of one project, or all); returns their names."""
    filters = [f"{LABEL}=1"] + ([f"{LABEL_PROJECT}={project_dir}"] if project_dir is not None else [])
    removed = []
    # sparse: no per-container inspect, so a container vanishing meanwhile cannot fail the listing
    for container in client.containers.list(all=True, sparse=True, filters={"label": filters}):
        try:
            container.remove(force=True)
            # sparse listings carry "Names" (["/name"]), not "Name"
            removed.append((container.attrs.get("Names") or [container.short_id])[0].lstrip("/"))
        except docker.errors.NotFound:
            pass
    for network in client.networks.list(filters={"label": filters}):
        try:
            network.remove()
            removed.append(network.name)
        except docker.errors.NotFound:
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


def model_hosts(env: dict[str, str], env_names: list[str]) -> list[str]:
    """The ``host:port`` of the model endpoints the agents are configured with (``ANTHROPIC_BASE_URL``,
    ``RALPH_CODEX_BASE_URL``)."""
    bases = [env.get("ANTHROPIC_BASE_URL") if "ANTHROPIC_BASE_URL" in env_names else None]
    bases.append(env.get("RALPH_CODEX_BASE_URL"))  # the codex agent's endpoint (see docs/agents.md)
    hosts = []
    for base in bases:
        url = urlsplit(base) if base else None
        if url is not None and url.hostname:
            hosts.append(f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}")
    return hosts


class Sandbox:
    """One project's sandbox: a long-lived container, one exec per iteration."""

    def __init__(self, client: Any, project_dir: Path, options: Options) -> None:
        self.client = client
        self.project_dir = project_dir
        self.options = options
        self.name = sandbox_name(project_dir)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.container: Any = None
        self._mount_key: tuple[Any, ...] | None = None
        self.network: Any = None
        self.proxy: Any = None
        self.sweep = True
        self._gateway: str | None = None
        self._allowed: set[str] = set()
        self._extra_allowed: list[str] = []
        self._metered = False
        """The agent's model traffic goes through the loop's meter: the model APIs are not let through."""
        """Kill what the agent's user left in the container after every exec (off only to measure it)."""
        """Seconds from run() to the exec running (including container creation when it happened)."""

    # -- lifecycle ---------------------------------------------------------------

    def prepare(self) -> list[str]:
        removed = sweep(self.client, self.project_dir)
        if self.options.network == "allowlist":
            self._start_proxy()
        return removed

    def teardown(self) -> None:
        for thing in (self.container, self.proxy):
            if thing is not None:
                try:
                    thing.remove(force=True)
                except docker.errors.NotFound:
                    pass
        self.container = self.proxy = None
        self._mount_key = None
        if self.network is not None:
            try:
                self.network.remove()
            except docker.errors.NotFound:
                pass
            self.network = None

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

    # -- network -------------------------------------------------------------------

    def allow_list(self, env: dict[str, str]) -> list[str]:
        hosts = list(self.options.allow_hosts)
        hosts += model_hosts(env, self.options.env_names)
        if self._metered:  # the container reaches the model only through the loop's meter
            hosts = [host for host in hosts if host not in METERED_HOSTS and host not in model_hosts(env, self.options.env_names)]
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
        ``prepare``): the proxy is made again with it when it is not listed yet."""
        parts = urlsplit(url)
        if self.options.network != "allowlist" or not parts.hostname:
            return
        entry = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        if entry in self._allowed:
            return
        self._extra_allowed.append(entry)
        if self.proxy is not None:
            self.proxy.remove(force=True)
            self.proxy = None
            self._start_proxy(reuse_network=True)

    def _start_proxy(self, reuse_network: bool = False) -> None:
        allow = sorted(set(self.allow_list(dict(os.environ)) + self._extra_allowed))
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
        self.proxy = self.client.containers.create(
            self.options.image,
            ["python3", "-P", "/opt/ralph/proxy.py", "--port", str(PROXY_PORT), "--allow", ",".join(allow)],
            name=f"{self.name}-proxy",
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

    # -- the container -------------------------------------------------------------

    def mounts_for(self, spec: ProcessSpec) -> tuple[list[Mount], list[str]]:
        """(mounts, argv rewritten for the container)."""
        mounts = self.base_mounts()
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
            state = self.options.state_dir
            mounts.append(Mount(f"{IN_CONTAINER_HOME}/.claude", str(state / ".claude"), type="bind"))
            mounts.append(Mount(f"{IN_CONTAINER_HOME}/.claude.json", str(state / ".claude.json"), type="bind"))
        return mounts, argv

    def base_mounts(self) -> list[Mount]:
        """The project (read-write) and the git metadata that decides what git runs (read-only).

        Git needs ``.git`` itself writable (``index.lock``, ``HEAD``, ``ORIG_HEAD`` are created
        there and renamed), and ``objects/``, ``refs/``, ``logs/``; ``config``, ``hooks/``,
        ``info/`` and, where they exist, ``commondir``, ``config.worktree`` and
        ``objects/info/alternates`` are mounted read-only.  A file that does not exist cannot
        be mounted: creating it (``.git/commondir``) is caught by the loop's metadata check
        before its next git call on the host.
        """
        project = self.project_dir
        mounts = [Mount(str(project), str(project), type="bind")]
        git = project / ".git"
        if git.is_dir() and not git.is_symlink():
            for name in READ_ONLY_GIT_DIRS:
                (git / name).mkdir(exist_ok=True)
                mounts.append(Mount(str(git / name), str(git / name), type="bind", read_only=True))
            for name in READ_ONLY_GIT_FILES:
                if (git / name).is_file() and not (git / name).is_symlink():
                    mounts.append(Mount(str(git / name), str(git / name), type="bind", read_only=True))
        return mounts

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

    def ensure_container(self, mounts: list[Mount]) -> bool:
        """Start the long-lived container unless one with these mounts runs; True when it was created."""
        key = tuple(sorted((m["Target"], m["Source"], bool(m.get("ReadOnly"))) for m in mounts))
        if self.container is not None and key == self._mount_key:
            return False
        if self.container is not None:
            self.kill_container()
        network_args, _ = self._network_args()
        size = self.options.tmpfs_size
        image = self.options.image
        if not image_present(self.client, image):
            raise SandboxError(f"the sandbox image {image!r} does not exist: {BUILD_HINT}")
        self.container = self.client.containers.create(
            image,
            ["sleep", str(self.options.lifetime)],
            name=self.name,
            labels=self._labels("agent"),
            # init and keeper as root (without capabilities): the agent's user cannot signal
            # them, so the sweep can kill everything that user runs; every exec runs as the agent
            user="0:0" if not self._agent_is_root() else self.options.user,
            working_dir=str(self.project_dir),
            mounts=mounts,
            tmpfs={
                # exec: test binaries run from /tmp (`go test`); the checkout is writable and executable anyway
                "/tmp": f"rw,exec,nosuid,nodev,size={size},mode=1777",
                IN_CONTAINER_HOME: f"rw,nosuid,nodev,size={size},mode=1777",
            },
            environment={"HOME": IN_CONTAINER_HOME},
            **network_args,
            **self._hardening(),
        )
        self.container.start()
        self._mount_key = key
        return True

    def kill_container(self) -> None:
        """SIGKILL everything in the agent's container and remove it (the next run() makes a new one)."""
        container, self.container, self._mount_key = self.container, None, None
        if container is None:
            return
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass

    # -- one iteration ---------------------------------------------------------------

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
                "PATH": f"{IN_CONTAINER_BIN}:{self.options.path}",
                "PYTHONPATH": IN_CONTAINER_LIB,
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        env.update(self._network_args()[1])
        return env

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        spec.write_files()  # under the run directory, mounted read-only at the same path
        mounts, argv = self.mounts_for(spec)
        self.ensure_container(mounts)
        if timeout is not None:
            # belt and braces: the exec ends on its own even if this process dies
            argv = ["timeout", "-k", str(KILL_GRACE), str(int(timeout) + 30), *argv]
        folded = self.sweep
        if folded:  # the sweep in the same exec (see run_command); its marker goes to stderr
            argv = self._sweeping(argv, ">&2")
        api = self.client.api
        exec_id = api.exec_create(
            self.container.id,
            argv,
            stdin=spec.stdin is not None,
            stdout=True,
            stderr=True,
            environment=self.environment(spec),
            workdir=str(spec.cwd),
            user=self.options.user,
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
        api._disable_socket_timeout(sock)  # a quiet agent must not end the read after ENGINE_TIMEOUT
        raw = getattr(sock, "_sock", sock)
        if spec.stdin is not None:
            try:
                raw.sendall(spec.stdin.encode("utf-8"))
            except OSError:
                pass
        try:
            raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        stderr_tail: deque[str] = deque(maxlen=200)
        reader = threading.Thread(target=_pump, args=(sock, on_line, stderr_tail.append), daemon=True)
        reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = interrupted = False
        while reader.is_alive():
            if cancel.wait(0.05):
                interrupted = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
        if timed_out or interrupted:
            self.kill_container()
        reader.join(timeout=10)
        try:
            sock.close()
        except OSError:
            pass
        if self.sweep and not (timed_out or interrupted):  # nothing the agent started outlives its run
            if folded and _strip_marker(stderr_tail):
                pass
            else:  # the agent killed the sweeping shell: sweep with an exec of our own
                self.sweep_processes()
        exit_code = self._exit_code(exec_id, killed=timed_out or interrupted)
        return ProcessOutcome(exit_code, timed_out, interrupted, "\n".join(stderr_tail))

    def sweep_processes(self) -> int:
        """SIGKILL every process in the container except its PID 1 and keeper; returns how many.

        Runs as the agent's user (the container has no capabilities, so only that user's
        processes can be signalled, and every agent process is that user's).
        """
        if self.container is None:
            return 0
        api = self.client.api
        if not self._agent_is_root():
            # kill(-1) signals every process this uid may signal except the caller: all the
            # agent's, none of root's init and keeper; atomic against forks (one kernel pass)
            exec_id = api.exec_create(self.container.id, ["kill", "-KILL", "-1"], stdout=True, stderr=True,
                                      user=self.options.user)["Id"]
            api.exec_start(exec_id)
            return -1
        exec_id = api.exec_create(self.container.id, ["python3", "-S", "-c", SWEEP_SCRIPT, str(self.options.lifetime)],
                                  stdout=True, stderr=True, user=self.options.user)["Id"]
        output = api.exec_start(exec_id)
        try:
            return int(output.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise SandboxError(f"could not sweep the sandbox's processes: {output.decode(errors='replace')[:300]}") from None

    def _sweeping(self, argv: list[str], redirect: str) -> list[str]:
        """``argv`` run by a shell that afterwards kills every other process the agent's user has in
        the container and prints :data:`SWEPT_MARKER` (to stdout, or as ``redirect`` says); the
        caller falls back to :meth:`sweep_processes` when the marker is missing (the agent's code
        killed that shell).  No extra exec: the sweep costs a ``kill`` (or a python3) in this one."""
        if self._agent_is_root():
            sweep = f'python3 -S -c "$code" {self.options.lifetime} >/dev/null 2>&1'
        else:  # kill(-1) spares the caller; root's init and keeper are out of this user's reach
            sweep = "kill -KILL -1 2>/dev/null"
        script = f'm=$1; code=$3; shift 3; "$@"; rc=$?; {sweep}; echo "$m" {redirect}; exit $rc'
        return ["sh", "-c", script, "ralph-sweep", SWEPT_MARKER, "-", SWEEP_SCRIPT, *argv]

    def _agent_is_root(self) -> bool:
        return self.options.user.partition(":")[0] in ("0", "root")

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> tuple[int, str, bool]:
        """Run a loop-owned shell command (a gate) in the agent's container, as the agent's user,
        with the container's network; (exit code, merged output, timed out).  Processes it
        leaves behind are swept.  A ``cwd`` outside the project (a directory the loop made) is
        bind-mounted at its own path for the command (the container is made anew with it)."""
        outside = not Path(cwd).resolve().is_relative_to(self.project_dir.resolve())
        if outside:  # a directory the loop made (the trusted tests' tree): mounted for this command
            self.ensure_container([*self.base_mounts(), Mount(str(cwd), str(cwd), type="bind")])
        elif self.container is None:
            self.ensure_container(self.base_mounts())
        argv = ["sh", "-c", command]
        if timeout is not None:
            argv = ["timeout", "-s", "KILL", str(max(1, int(timeout + 0.999))), *argv]
        folded = self.sweep
        if folded:
            argv = self._sweeping(argv, "")
        env = {
            "HOME": IN_CONTAINER_HOME,
            "PATH": self.options.path,
            "PYTHONDONTWRITEBYTECODE": "1",
            **self._network_args()[1],
        }
        api = self.client.api
        exec_id = api.exec_create(self.container.id, argv, stdout=True, stderr=True, environment=env,
                                  workdir=str(cwd), user=self.options.user)["Id"]
        sock = api.exec_start(exec_id, socket=True)
        api._disable_socket_timeout(sock)  # a quiet test suite must not end the read after ENGINE_TIMEOUT
        lines: list[str] = []
        # one reader for both streams, in arrival order (the gate's output is shown verbatim)
        _pump(sock, lines.append, lines.append)
        try:
            sock.close()
        except OSError:
            pass
        if folded and _strip_marker(lines):
            pass
        elif self.sweep:  # the gate's code killed the outer shell (or the agent runs as root): sweep now
            self.sweep_processes()
        code = self._exit_code(exec_id, killed=False)
        timed_out = timeout is not None and code in (124, 137)
        return code, "\n".join(lines), timed_out

    def _exit_code(self, exec_id: str, killed: bool) -> int:
        if killed:
            code = self._inspect_code(exec_id)
            return code if code not in (None, 0, -1) else 137
        for _ in range(100):
            code = self._inspect_code(exec_id)
            if code is not None:
                return code
            time.sleep(0.05)
        return 1

    def _inspect_code(self, exec_id: str) -> int | None:
        try:
            info = self.client.api.exec_inspect(exec_id)
        except docker.errors.NotFound:
            return None
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        return int(code) if code is not None else None


def _strip_marker(lines: Any) -> bool:
    """Remove :data:`SWEPT_MARKER` from the end of ``lines`` (a list or deque); True when it was there.

    Output without a final newline puts the marker at the end of its last line."""
    if not lines or not lines[-1].endswith(SWEPT_MARKER):
        return False
    rest = lines.pop()[: -len(SWEPT_MARKER)]
    if rest:
        lines.append(rest)
    return True


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
