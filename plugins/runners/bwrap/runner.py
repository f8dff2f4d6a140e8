"""The ``bwrap`` runner: the agent, and every gate command, in a fresh bubblewrap sandbox on a checkout of its own.

Written against ``ralph.api`` and the runner contract only, as a third party would.

- **The workspace**: the agent never sees the project.  Its checkout is a directory of this machine
  (made for the run in the system's temp directory, mode 0700, outside the project) that no code of
  this machine reads or writes through: the project's state goes in, and the agent's work comes
  back, only through :class:`ralph.api.workspace.AgentCheckout`, whose ``run_inside`` primitive is
  here a fresh sandbox with the checkout and nothing else writable (:meth:`BwrapRunner.run_inside`).
  What comes back is checked as bytes on this machine before the project changes.
- **The sandbox** (:mod:`.command`): the host read-only, the checkout read-write at the project's
  path, private ``/tmp``, ``/run`` and home, its own pid namespace whose end ends every process in
  it (``--unshare-pid --die-with-parent``; the loop kills it from outside on a timeout or Ctrl-C),
  no capabilities, a new session, the run directory and the hook socket's directory read-only, the
  agent CLI's run-owned config home read-write.
- **Network** (:mod:`.relay`, :mod:`.inside`): ``allowlist`` (the default) and ``none`` give the
  sandbox a network namespace with only loopback; with ``allowlist`` its first process carries
  ``127.0.0.1:PORT`` inside to Unix sockets this runner serves outside: the loop's model meter, and a
  proxy to ``allow_hosts`` (the model APIs dropped when the loop meters the agent).
- **Gates** (:meth:`BwrapRunner.run_command`): a fresh sandbox on the project's state, shipped into
  the checkout first; never on the host.

See docs/sandbox.md ("The bwrap runner") and docs/security.md.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ralph.api import AgentView, Availability, Check, CommandResult, ProcessOutcome, ProcessSpec, Runner
from ralph.api import section_or_default

from .command import PRIVATE_MOUNT, Layout, bwrap_argv, hidden_roots, under

if TYPE_CHECKING:
    from ralph.api import AgentChannel, PreflightContext
    from ralph.api.workspace import AgentCheckout, InsideResult

    from .relay import Relay

SECTION = "bwrap"
SHIP_TIMEOUT = 900.0
"""Seconds a ship-in or a capture may take in its sandbox (then it is killed and the run stops)."""
MAX_CAPTURE_BYTES = 2 << 30
"""Bytes read from a capture (the workspace exchange refuses a state larger than this): a checkout
the agent filled with gigabytes is stopped there instead of filling the loop's memory."""
ALWAYS_PASSED = ("LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "COLORTERM", "NO_COLOR", "GIT_AUTHOR_NAME",
                 "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
"""Host variables every sandbox gets when they are set (locale, terminal, the person's git identity)."""
METERED_HOSTS = ("api.anthropic.com:443", "api.openai.com:443")
"""The model APIs the allowlist lets through by default; dropped when the loop meters the agent."""
PROXY_PORT = 3128
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
GITCONFIG = """# git inside ralph's bwrap sandbox (the person's ~/.gitconfig is not visible there)
[user]
\temail = ralph@localhost
\tname = Ralph Loop
[safe]
\tdirectory = *
[init]
\tdefaultBranch = main
"""
ASK_SHIM = """#!/bin/sh
# `ralph` inside ralph's bwrap sandbox: only `ralph ask` (the agent's question to a person, over the loop's hook socket).
case "$1" in
  ask) shift; exec {hook} ask "$@" ;;
  *) echo "ralph: inside the sandbox only \\`ralph ask \\"QUESTION\\"\\` is available (the loop runs outside)" >&2; exit 2 ;;
esac
"""


class BwrapRunner(Runner):
    """Runs every agent process and gate command in a fresh bubblewrap sandbox, on the run's own checkout."""

    name = "bwrap"
    description = "agent in a bubblewrap sandbox on its own checkout: host read-only, own pid namespace, network allowlist"
    isolates = True

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._project: Path | None = None
        self._state: Path | None = None
        """The run's directory of this runner (0700): ``checkout/`` and ``private/``."""
        self._checkout: AgentCheckout | None = None
        self._relay: Relay | None = None
        self._toolchain: list[str] = []
        self._running: Path | None = None
        """The run directory of the agent process running now (a Stop check's bring-back then captures)."""
        self._lock = threading.Lock()
        self._gate_checks: dict[tuple[str, ...], list[Check]] = {}
        self.timings: dict[str, float] = {}
        """Seconds of the last run()'s or run_command()'s phases (ship-in, sandbox, bring-back): for the benchmarks."""

    # -- configuration ----------------------------------------------------------------------------

    def config(self) -> Any:
        from .config import BwrapConfig

        return section_or_default(self.settings, SECTION, BwrapConfig)

    def availability(self) -> Availability:
        """bubblewrap is installed and makes the runner's sandbox here (one trial, cached)."""
        from .probe import probe

        found = probe()
        return Availability.yes() if found.ok else Availability.no(found.reason)

    def agent_view(self) -> AgentView:
        """The allowlisted environment, a fresh private home (your ``~/.claude`` login is not visible there),
        every host path but the hidden ones (the project's path shows the agent's checkout)."""
        cfg = self.config()
        env = {name: value for name, value in os.environ.items() if self._passed(name)}
        hidden = self._hidden()
        project = Path(self.settings.project_dir).resolve() if self.settings is not None else None
        shown = [Path(p).resolve() for p in self._system_paths()] + [Path(os.path.expanduser(p)).resolve() for p in cfg.ro_binds]

        def sees(path: Path) -> bool:
            resolved = Path(path).resolve()
            if project is not None and under(resolved, [project]):
                return True
            return not under(resolved, hidden) or under(resolved, shown)

        return AgentView(env=env, home=None, network=cfg.network, sees=sees, where="the bwrap sandbox")

    def preflight(self, context: PreflightContext) -> list[Check]:
        """bubblewrap and what it makes here, the network policy, the toolchain shown to the gates."""
        from .probe import probe

        found = probe()
        cfg = self.config()
        checks = [Check(True, f"{found.version or 'bubblewrap'} ({found.binary}) makes the sandbox: host read-only, "
                              "the agent's own checkout, private /tmp and home, its own pid namespace")]
        checks += [Check(None, note, "install bubblewrap 0.8 or later") for note in found.notes]
        if os.getuid() == 0:
            checks.append(Check(None, "ralph runs as root: the agent reads, read-only, every file of this machine that "
                                      "root can read outside the hidden paths (your home, /tmp, /run)",
                                "run ralph as an ordinary user, or hide more with [tool.ralph.bwrap] hide"))
        if cfg.network == "allowlist":
            hosts = ", ".join(cfg.allow_hosts) or "no other host"
            checks.append(Check(True, f"network policy: loopback only; the loop's model meter and {hosts} through "
                                      "the runner's proxy (the model APIs only when the agent is not metered)"))
        elif cfg.network == "open":
            checks.append(Check(None, "network policy: open (any host but this machine's loopback and link-local "
                                      "addresses, through the runner's proxy: no egress control)",
                                'set [tool.ralph.bwrap] network = "allowlist" to restrict egress'))
        else:
            checks.append(Check(True, "network policy: none (loopback only)"))
        project = Path(context.project_dir)
        shown = self._toolchain_of(project)
        if shown:
            checks.append(Check(True, "the project's " + ", ".join(shown) + " shown read-only in the sandbox's "
                                      "checkout (for the agent and the gates)"))
        return checks

    def gate_check(self, commands: Sequence[str]) -> list[Check]:
        """Each program the gate commands run, looked up in one sandbox made like a gate's, on the project
        as it is now (read-only): a failed check naming the program and what shows it to the gates
        (:mod:`.gates`).  Remembered for the same commands (``auto`` and pre-flight ask the same runner)."""
        key = tuple(commands)
        if not key:
            return []
        if key in self._gate_checks:
            return self._gate_checks[key]
        if not self.availability().ok:
            return []  # the runner cannot be used at all: that is said instead
        from .gates import gate_needs, look_up, missing_checks
        from .probe import probe

        project = Path(self.settings.project_dir).resolve()
        toolchain = self._toolchain_of(project)
        needs, unchecked = gate_needs(list(key), project)
        checks: list[Check] = []
        if needs:
            layout = Layout(project=project, checkout=project, chdir=project, hidden=self._hidden(), toolchain=toolchain,
                            read_only=[p for p in map(Path, self._system_paths()) if under(p, self._hidden())],
                            checkout_read_only=True)
            argv = bwrap_argv(probe().binary, layout, [_python(), "-I", "-S"], probe().features)
            try:
                found = look_up(argv, self._gate_env(), needs)
                checks += missing_checks(needs, found, project, toolchain, self._hidden())
            except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                checks.append(Check(None, f"could not look up the gates' programs in the bwrap sandbox: {exc}",
                                    "run `ralph doctor --runner bwrap` again; the gates will show the rest"))
            if not checks:
                names = sorted({n.program + (f" -m {n.module}" if n.module else "") for n in needs})
                checks.append(Check(True, "the bwrap sandbox has what the gates run: " + ", ".join(names)))
        for note in unchecked:
            checks.append(Check(None, f"a gate program was not looked up in the sandbox: {note}",
                                "write the program's name itself to have it checked before the run"))
        self._gate_checks[key] = checks
        return checks

    def model_endpoint_host(self) -> str | None:
        """The loop's meter listens on this machine's loopback; the sandbox reaches it through the
        runner's relay (``allowlist``, ``open``); not with ``network = "none"``."""
        return None if self.config().network == "none" else "127.0.0.1"

    # -- the run's sandbox state ------------------------------------------------------------------

    def prepare(self, project_dir: Path) -> None:
        """The run's checkout (empty until the first ship-in) and private directory."""
        from ralph.api import UnavailableError
        from ralph.api.workspace import AgentCheckout, inside_script

        available = self.availability()
        if not available.ok:
            raise UnavailableError(f"runner 'bwrap' cannot be used: {available.reason}")
        if self._checkout is not None:
            return
        cfg = self.config()
        self._project = Path(project_dir).resolve()
        base = Path(os.path.expanduser(cfg.checkout_dir)) if cfg.checkout_dir else Path(tempfile.gettempdir())
        base.mkdir(parents=True, exist_ok=True)
        self._state = Path(tempfile.mkdtemp(prefix="ralph-bwrap-", dir=base))
        for name in ("checkout", "private", "private/bin", "private/net", "private/objects"):
            (self._state / name).mkdir(mode=0o700)
        (self._state / "private" / "gitconfig").write_text(GITCONFIG, encoding="utf-8")
        # private/objects: the loop's object store of the checkout, read-write only in the workspace side's sandbox
        self._checkout = AgentCheckout(self._project, str(self._project), [_python(), "-I", "-S", str(inside_script())],
                                       objects=str(PRIVATE_MOUNT / "objects"))
        self._toolchain = self._toolchain_of(self._project)

    def cleanup(self) -> None:
        """Stop the relays; remove the checkout and the private directory, however the run ended."""
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self._state is not None:
            _remove_tree(self._state)
            self._state = None
        self._checkout = None

    def _ensure(self, project_dir: Path) -> AgentCheckout:
        if self._checkout is None:
            self.prepare(project_dir)
        assert self._checkout is not None
        return self._checkout

    def relay(self) -> Relay:
        """The run's relay (its sockets in the private directory)."""
        from .relay import Relay

        if self._relay is None:
            assert self._state is not None
            self._relay = Relay(self._state / "private" / "net")
        return self._relay

    # -- the workspace exchange -------------------------------------------------------------------

    def run_inside(self, argv: Sequence[str], stdin: bytes) -> InsideResult:
        """``argv`` with ``stdin`` in a fresh sandbox where the checkout is the only writable path
        (no network, no run directory): the primitive of :class:`~ralph.api.workspace.AgentCheckout`."""
        from ralph.api.workspace import InsideResult

        assert self._project is not None and self._state is not None
        from .probe import probe

        layout = self._layout(self._project)
        layout.toolchain = []  # a capture never lists the project's own toolchain as the agent's files
        layout.private_read_write = ["objects"]  # only here: the loop's object store for the checkout
        argv_all = bwrap_argv(probe().binary, layout, list(argv), probe().features)
        code, out, err = _bounded_run(argv_all, stdin, env=self._plain_env(), cwd=self._state)
        return InsideResult(code, out, err)

    def bring_back(self) -> None:
        """The running agent's work so far, captured in a fresh sandbox, checked and mirrored onto the
        project (before the loop's Stop checks read it).  Nothing to do when no agent runs."""
        with self._lock:
            running = self._running
            if running is None or self._checkout is None:
                return
            self._checkout.bring_back(self.run_inside)  # refused bytes are kept by the bring-back after the run

    # -- one agent process ------------------------------------------------------------------------

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        """One agent process in a fresh sandbox on the project's shipped state; its work brought back.

        :class:`~ralph.api.workspace.WorkspaceRefused` (the project as it was) when what the agent left
        breaks a rule of the workspace check."""
        from ralph.api import RalphError
        from ralph.api.process import run_process
        from ralph.api.workspace import PhaseClock, WorkspaceError, WorkspaceRefused

        from .probe import probe

        clock = PhaseClock()
        checkout = self._ensure(Path(spec.cwd))
        assert self._project is not None and self._state is not None
        try:
            checkout.ship_in(self.run_inside)
        except WorkspaceError as exc:
            raise RalphError(f"bwrap: {exc}") from None
        clock.lap("ship_in")
        channel = spec.channel
        keep = Path(channel.run_dir) if channel is not None else self._state
        layout = self._layout(Path(spec.cwd), spec=spec)
        _prepare_mount_points(layout.checkout, layout.toolchain)
        command, env = self._network(list(spec.argv), self._agent_env(spec), spec)
        argv = bwrap_argv(probe().binary, layout, command, probe().features)
        sandboxed = ProcessSpec(argv=argv, env={}, cwd=self._state, stdin=spec.stdin, program=spec.program,
                                files=spec.files, channel=channel)
        with self._lock:
            self._running = keep
        try:
            outcome = run_process(sandboxed, on_line, timeout, cancel, env=env)
        finally:
            with self._lock:  # waits for a Stop check's bring-back in flight
                self._running = None
        clock.lap("sandbox")
        try:
            checkout.bring_back(self.run_inside, keep=keep)
        except WorkspaceRefused:
            if not outcome.interrupted:
                raise
            outcome.stderr += "\nralph: the agent's work was refused when it was brought back (see the run's events)"
        except WorkspaceError as exc:
            if not outcome.interrupted:
                raise RalphError(f"bwrap: {exc}") from None
            outcome.stderr += f"\nralph: the agent's work could not be brought back: {exc}"
        clock.lap("bring_back")
        self.timings = clock.laps
        return outcome

    # -- one gate command -------------------------------------------------------------------------

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """A gate command in a fresh sandbox on the project's state (shipped into the checkout first),
        output merged; a ``cwd`` outside the project (a directory the loop made: the trusted tests' tree)
        is shown read-write at its own path.  Never on the host."""
        from ralph.api import RalphError
        from ralph.api.process import run_process
        from ralph.api.workspace import PhaseClock, WorkspaceError

        from .probe import probe

        clock = PhaseClock()
        checkout = self._ensure(Path(cwd))
        assert self._project is not None and self._state is not None
        try:
            checkout.ship_in(self.run_inside)
        except WorkspaceError as exc:
            raise RalphError(f"bwrap: {exc}") from None
        clock.lap("ship_in")
        where = Path(cwd).resolve()
        layout = self._layout(where)
        if not under(where, [self._project]):
            layout.read_write.append(where)
            # the tree's links into the project (the trusted tests' .tox, target, submodules) mean the project's
            # directories: shown read-only from this machine, never the agent's checkout's (which it filled)
            linked = _links_into(where, self._project, self._linked_names())
            layout.toolchain = list(dict.fromkeys([*layout.toolchain, *linked]))
        _prepare_mount_points(layout.checkout, layout.toolchain)
        argv, env = self._network(["/bin/sh", "-c", command], self._gate_env(), None)
        lines: list[str] = []
        outcome = run_process(ProcessSpec(bwrap_argv(probe().binary, layout, argv, probe().features), {}, self._state),
                              lines.append, timeout, env=env, merge_stderr=True)
        clock.lap("sandbox")
        self.timings = clock.laps
        return CommandResult(outcome.exit_code, "".join(line + "\n" for line in lines), outcome.timed_out, "sandbox")

    # -- what a sandbox is made of -----------------------------------------------------------------

    def _hidden(self) -> list[Path]:
        return hidden_roots(os.environ.get("HOME"), [Path(p) for p in self.config().hide])

    def _system_paths(self) -> list[str]:
        """What every sandbox needs to see read-only: this Python (the workspace side and the hook client
        run on it), ralph's packages and this plugin."""
        from ralph.api.hooks import hook_packages

        paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(_python())]
        paths += [str(path) for path in hook_packages().values()]
        paths.append(str(Path(__file__).resolve().parent))
        from ralph.api.workspace import inside_script

        paths.append(str(inside_script().parent))
        return list(dict.fromkeys(os.path.realpath(p) for p in paths))

    def _layout(self, chdir: Path, spec: ProcessSpec | None = None) -> Layout:
        """A sandbox of this run: the checkout at the project's path, the toolchain, what must be seen;
        with ``spec`` (an agent process) also its CLI, the run directory, the hook socket's directory and
        the config home (read-write)."""
        cfg = self.config()
        assert self._project is not None and self._state is not None
        hidden = self._hidden()
        read_only = [Path(p) for p in self._system_paths()]
        read_only += [Path(os.path.realpath(os.path.expanduser(p))) for p in cfg.ro_binds if os.path.exists(os.path.expanduser(p))]
        read_write: list[Path] = []
        if spec is not None:
            program = spec.argv[0] if spec.argv else ""
            if os.path.isabs(program):
                read_only += [Path(program), Path(os.path.realpath(program))]
            channel = spec.channel
            if channel is not None:
                run_dir = Path(channel.run_dir)
                if run_dir.is_dir():
                    read_only.append(run_dir)
                socket_dir = Path(channel.hook_socket).parent
                if socket_dir.is_dir():
                    read_only.append(socket_dir)
                for part in channel.hook_command[:1]:
                    if os.path.isabs(part):
                        read_only.append(Path(os.path.realpath(part)).parent)
                home = channel.config_home
                if home is not None and Path(home).is_dir() and not Path(home).is_symlink():
                    read_write.append(Path(home))
        # only what is hidden needs a mount of its own (the host is read-only already)
        read_only = [p for p in dict.fromkeys(read_only) if under(p, hidden) and os.path.exists(p)]
        return Layout(project=self._project, checkout=self._state / "checkout", chdir=chdir, hidden=hidden,
                      toolchain=list(self._toolchain), read_only=read_only, read_write=read_write,
                      private=self._state / "private", tmpfs_size=_bytes(cfg.tmpfs_size))

    def _linked_names(self) -> list[str]:
        """What a tree the loop made may link from the project: the test-integrity gate's ``link`` directories
        and the project's submodules (its gitlinks; the agent's work never brings one)."""
        from ralph.api.process import git
        from ralph.api.testintegrity import TRUSTED_TREE_LINKS

        section = self.settings.section("test-integrity") if self.settings is not None else None
        names = list(getattr(section, "link", None) or TRUSTED_TREE_LINKS)
        assert self._project is not None
        try:
            listed = git(self._project, "ls-files", "-s", "-z", check=False, binary=True).stdout
        except OSError:
            listed = b""
        for record in listed.split(b"\0"):
            meta, _, path = record.partition(b"\t")
            if meta.startswith(b"160000 "):
                names.append(os.fsdecode(path))
        return names

    def _toolchain_of(self, project: Path) -> list[str]:
        """The configured toolchain entries that exist in the project and that git ignores."""
        from ralph.api.process import git

        names = []
        for name in self.config().toolchain:
            if not name or name.startswith("/") or ".." in Path(name).parts or Path(name).parts[:1] == (".git",):
                continue
            path = project / name
            if not path.is_dir():
                continue
            try:
                ignored = git(project, "check-ignore", "-q", "--", name, check=False).returncode == 0
            except OSError:
                ignored = False
            if ignored:
                names.append(name)
        return names

    def _passed(self, name: str) -> bool:
        cfg = self.config()
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in (*ALWAYS_PASSED, *cfg.env_allowlist, *cfg.env))

    def _plain_env(self) -> dict[str, str]:
        """The environment of the workspace side (git and Python, nothing of the person's): no ``PATH``
        entry inside the project, where the sandbox shows the agent's checkout."""
        env = {name: value for name, value in os.environ.items() if name in ("LANG", "LC_ALL", "TZ")}
        env.update({"PATH": self._path(()), "HOME": os.environ.get("HOME", "/tmp"),
                    "TMPDIR": "/tmp", "GIT_CONFIG_GLOBAL": str(PRIVATE_MOUNT / "gitconfig")})
        return env

    def _path(self, keep: Sequence[str]) -> str:
        """The person's ``PATH`` without relative entries and entries inside the project (the agent's
        checkout there: direnv's ``PATH_add bin``, ``node_modules/.bin``), but for those under ``keep``
        (toolchain entries, shown read-only from this machine)."""
        from ralph.api.process import path_outside

        project = self._project_dir()
        kept = tuple(str(project / name) for name in keep)
        return path_outside(os.environ.get("PATH", os.defpath), project, keep=kept)

    def _project_dir(self) -> Path:
        return self._project or Path(self.settings.project_dir).resolve()

    def _sandbox_env(self) -> dict[str, str]:
        toolchain = self._toolchain if self._checkout is not None else self._toolchain_of(self._project_dir())
        env = {name: value for name, value in os.environ.items() if self._passed(name)}
        env.update({
            "HOME": os.environ.get("HOME") or str(Path.home()),
            "TMPDIR": "/tmp",
            "PATH": f"{PRIVATE_MOUNT / 'bin'}:{self._path(toolchain)}",
            "GIT_CONFIG_GLOBAL": str(PRIVATE_MOUNT / "gitconfig"),
        })
        return env

    def _agent_env(self, spec: ProcessSpec) -> dict[str, str]:
        env = {"IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               **self._sandbox_env()}
        env.update(spec.env)
        for name in ("HOME", "TMPDIR", "PATH", "GIT_CONFIG_GLOBAL"):  # the sandbox's, whatever the agent's spec says
            env[name] = self._sandbox_env()[name]
        if spec.channel is not None:
            self._write_ask_shim(spec.channel)
        return env

    def _gate_env(self) -> dict[str, str]:
        cfg = self.config()
        env = self._sandbox_env()
        credentials = set(cfg.env_allowlist)
        return {name: value for name, value in env.items() if name not in credentials}

    def _write_ask_shim(self, channel: AgentChannel) -> None:
        assert self._state is not None
        shim = self._state / "private" / "bin" / "ralph"
        text = ASK_SHIM.format(hook=shlex.join(channel.hook_command))
        if not shim.exists() or shim.read_text(encoding="utf-8") != text:
            shim.write_text(text, encoding="utf-8")
            shim.chmod(0o755)

    def _network(self, command: list[str], env: dict[str, str], spec: ProcessSpec | None) -> tuple[list[str], dict[str, str]]:
        """``command`` behind the sandbox's forwarders (``allowlist``) and the environment that uses them."""
        cfg = self.config()
        if cfg.network == "none":
            return command, env
        from urllib.parse import urlsplit

        forwards: list[int] = []
        hosts = list(cfg.allow_hosts) if cfg.network == "allowlist" else ["*"]
        endpoint = spec.channel.model_endpoint if spec is not None and spec.channel is not None else None
        metered = bool(endpoint)
        if endpoint:
            meter = urlsplit(endpoint)
            if meter.hostname in LOOPBACK and meter.port:
                forwards.append(meter.port)
        elif spec is not None:  # not metered: the agent's configured model endpoints, as the docker sandbox lets through
            for name in ("ANTHROPIC_BASE_URL", "RALPH_CODEX_BASE_URL"):
                base = env.get(name)
                model = urlsplit(base) if base else None
                if model is None or not model.hostname:
                    continue
                port = model.port or (443 if model.scheme == "https" else 80)
                if model.hostname in LOOPBACK:
                    forwards.append(port)
                else:
                    hosts.append(f"{model.hostname}:{port}")
        if metered or spec is None:  # a gate command needs no model API
            hosts = [host for host in hosts if host not in METERED_HOSTS]
        from .relay import parse_entry

        for host in list(hosts):  # this machine's loopback: at the same address inside, through a relay
            name, listed = parse_entry(host)
            if name in LOOPBACK and listed:
                forwards.append(listed)
                hosts.remove(host)
        relay = self.relay()
        options: list[str] = []
        for port in dict.fromkeys(forwards):
            relay.forward(port)
            options += ["--forward", f"{port}={PRIVATE_MOUNT}/net/tcp-{port}.sock"]
        if hosts:
            relay.proxy(sorted(set(hosts)))
            port = next(p for p in range(PROXY_PORT, PROXY_PORT + 100) if p not in forwards)  # not a forwarded one
            options += ["--forward", f"{port}={PRIVATE_MOUNT}/net/proxy.sock"]
            proxy = f"http://127.0.0.1:{port}"
            env = {**env, **{name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}}
            env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
        if not options:
            return command, env
        inside = str(Path(__file__).resolve().parent / "inside.py")
        return [_python(), "-I", "-S", inside, *options, "--", *command], env


def _bounded_run(argv: list[str], stdin: bytes, env: dict[str, str], cwd: Path) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, the end of stderr) of ``argv`` fed ``stdin``; stdout read up to one byte more
    than :data:`MAX_CAPTURE_BYTES` (then the sandbox is killed: ``--die-with-parent`` ends what is in it),
    the whole run within :data:`SHIP_TIMEOUT` (else killed, exit 124)."""
    import time

    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=env, cwd=cwd, start_new_session=True)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    errors = bytearray()

    def feed() -> None:
        try:
            process.stdin.write(stdin)  # type: ignore[union-attr]
        except OSError:
            pass
        finally:
            try:
                process.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass

    def drain() -> None:
        for chunk in iter(lambda: process.stderr.read(65536), b""):  # type: ignore[union-attr]
            errors.extend(chunk)
            del errors[:-(1 << 20)]

    helpers = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
    for helper in helpers:
        helper.start()
    deadline = time.monotonic() + SHIP_TIMEOUT
    killed = threading.Timer(SHIP_TIMEOUT, process.kill)
    killed.start()
    out = bytearray()
    try:
        while len(out) <= MAX_CAPTURE_BYTES:
            chunk = os.read(process.stdout.fileno(), 1 << 20)
            if not chunk:
                break
            out.extend(chunk)
        if len(out) > MAX_CAPTURE_BYTES:
            process.kill()
        code = process.wait()
    finally:
        killed.cancel()
        process.stdout.close()
    for helper in helpers:
        helper.join(timeout=10)
    if time.monotonic() >= deadline:
        return 124, bytes(out), f"the sandbox did not finish within {SHIP_TIMEOUT:.0f} s".encode()
    return (0 if len(out) > MAX_CAPTURE_BYTES else code), bytes(out), bytes(errors)


def _bytes(size: str) -> int:
    """``1g``, ``512m``, ``100k`` or a number of bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    size = size.strip().lower()
    return int(size[:-1]) * units[size[-1]] if size[-1:] in units else int(size)


def _prepare_mount_points(checkout: Path, names: list[str]) -> None:
    """Each toolchain entry's place in the checkout a real directory, before a sandbox mounts the project's
    there: whatever the agent left in its place (a symbolic link, a file) is removed, never followed
    (walked from the checkout with ``O_NOFOLLOW`` descriptors; no sandbox runs meanwhile)."""
    import errno
    import stat

    for name in names:
        fd = os.open(checkout, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in Path(name).parts:
                try:
                    info = os.lstat(part, dir_fd=fd)
                    if not stat.S_ISDIR(info.st_mode):
                        os.unlink(part, dir_fd=fd)
                        raise FileNotFoundError(errno.ENOENT, part)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = child
        finally:
            os.close(fd)


def _links_into(tree: Path, project: Path, names: list[str]) -> list[str]:
    """Which of ``names`` (the project's dependency directories and submodules) ``tree`` (a directory the loop
    made outside the project: the trusted tests' tree) has as a symbolic link to the project's own
    directory; links are read, never followed.  Only these names: a link the agent's code planted in the
    tree names nothing else of the project."""
    found = []
    for name in dict.fromkeys(names):
        parts = Path(name).parts
        if not name or Path(name).is_absolute() or ".." in parts or parts[:1] == (".git",):
            continue
        link = tree / name
        try:
            if os.readlink(link) != str(project / name):
                continue
        except OSError:
            continue
        if (project / name).is_dir():
            found.append(name)
    return found


def _python() -> str:
    """This interpreter's real binary (run with ``-I -S`` inside: no site-packages needed)."""
    return os.path.realpath(sys.executable)


def _remove_tree(path: Path) -> None:
    """Remove ``path`` and what the sandboxes left in it: links are removed, never followed, and the
    directories the agent made unreadable are made this user's again first (no sandbox runs then)."""
    import stat

    for directory, names, _files in os.walk(path):
        for name in names:
            child = os.path.join(directory, name)
            try:
                if stat.S_ISDIR(os.lstat(child).st_mode):  # a real directory, not a link to one
                    os.chmod(child, 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


__all__ = ["BwrapRunner"]
