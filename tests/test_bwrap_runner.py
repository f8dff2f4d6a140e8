"""The ``bwrap`` runner at the runner level, with the system's bubblewrap and real git projects.

The agent works on its own checkout, at the project's path: the project and its ``.git`` are not
visible, what the agent's git does lands in its checkout only, and its work comes back checked.
Every agent run and gate command is a fresh sandbox whose pid namespace ends with it; the host is
read-only, ``/tmp``, ``/run`` and the home are private, ``/proc/sys`` is read-only, no capability
is left; the network is loopback only, with the runner's relays as the only ways out.

Attack strings are data built here and reach the sandbox as one argv element.
"""

from __future__ import annotations

import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from ralph.testing.project import RalphProject
from ralph.testing.requirements import require


def make_runner(project: Path, **section: Any) -> Any:
    from ralph.config import load_config
    from ralph.settings import Settings
    from ralph_plugins.runners.bwrap.config import BwrapConfig
    from ralph_plugins.runners.bwrap.runner import BwrapRunner

    config, _, _ = load_config(project, {}, environ={})
    return BwrapRunner(Settings(project, config, {"bwrap": BwrapConfig(**section)}))


def run_in(runner: Any, project: Path, argv: list[str], timeout: float = 60, **kw: Any) -> tuple[Any, list[str]]:
    from ralph.contracts import ProcessSpec

    lines: list[str] = []
    outcome = runner.run(ProcessSpec(argv, kw.pop("env", {}), project, **kw), lines.append, timeout, threading.Event())
    return outcome, lines


@pytest.fixture
def runner(bwrap_available: None, ralph_project: RalphProject) -> Iterator[Any]:
    runner = make_runner(ralph_project.path, network="none")
    runner.prepare(ralph_project.path)
    yield runner
    runner.cleanup()


def git_files(project: Path) -> dict[str, bytes]:
    """The host repository's git metadata that decides what git runs, and its refs, as bytes."""
    git = project / ".git"
    found = {}
    for path in sorted(git.rglob("*")):
        rel = path.relative_to(git).as_posix()
        if rel.startswith(("objects/", "logs/")) or rel in ("index", "ORIG_HEAD", "COMMIT_EDITMSG") or path.is_dir():
            continue
        found[rel] = path.read_bytes() if not path.is_symlink() else b"symlink:" + os.readlink(path).encode()
    return found


# -- the workspace -----------------------------------------------------------------------------------


def test_the_agents_git_works_on_its_own_checkout_and_never_on_the_projects(runner: Any,
                                                                           ralph_project: RalphProject) -> None:
    path = ralph_project.path
    script = (
        "mkdir -p .git/hooks; for f in .git/config .git/info/exclude .git/hooks/pre-commit; do "
        "  (echo x >> $f) 2>/dev/null; echo $f=$?; done; "
        "echo change > work.txt && git add work.txt; echo add=$?; "
        "git -c user.name=a -c user.email=b@c commit -qm in-sandbox; echo commit=$?; "
        "git branch side && git checkout -q side && git checkout -q -; echo branch=$?; "
        "git update-ref refs/heads/persons-branch HEAD; echo ref=$?; "
        "git gc -q; echo gc=$?; "
        # the project's path in here is the agent's checkout: one mount there, and not the project
        f"grep -c ' {path} ' /proc/self/mountinfo; echo mounts=$?"
    )
    before = git_files(path)
    branch = ralph_project.git("symbolic-ref", "--short", "HEAD").strip()
    outcome, lines = run_in(runner, path, ["sh", "-c", script])
    out = dict(line.split("=", 1) for line in lines if "=" in line)
    for step in (".git/config", ".git/info/exclude", ".git/hooks/pre-commit", "add", "commit", "branch", "ref", "gc"):
        assert out[step] == "0", (step, lines)
    after = git_files(path)
    moved = f"refs/heads/{branch}"
    assert {k: v for k, v in after.items() if k != moved} == {k: v for k, v in before.items() if k != moved}
    assert not (path / ".git" / "hooks" / "pre-commit").exists() and b"x\n" not in after["config"]
    assert "in-sandbox" in ralph_project.git("log", "-1", "--format=%s")  # the work came back, checked
    assert ralph_project.git("branch", "--list", "side", "persons-branch") == ""  # its refs did not
    assert (path / "work.txt").read_text() == "change\n"
    assert lines[lines.index("mounts=0") - 1] == "1", lines
    # the checkout is the runner's own directory, outside the project
    checkout = runner._state / "checkout"
    assert (checkout / "work.txt").read_text() == "change\n" and path not in checkout.parents


def test_writes_to_the_host_fail_and_the_private_places_are_empty(runner: Any, ralph_project: RalphProject,
                                                                  tmp_path: Path) -> None:
    path = ralph_project.path
    home = Path(os.environ.get("HOME") or "/root")
    probe_file = tmp_path / "host-file"
    probe_file.write_text("host\n")
    script = (
        "for f in /etc/ralph-probe /usr/ralph-probe /var/ralph-probe; do (echo x > $f) 2>/dev/null; echo $f=$?; done; "
        f"echo home=$(ls -A {home}); echo tmp=$(ls -A /tmp); "
        f"test -e {probe_file}; echo tmpfile=$?; test -e /run/docker.sock -o -e /var/run/docker.sock; echo docker=$?; "
        "(echo core > /proc/sys/kernel/core_pattern) 2>/dev/null; echo core_pattern=$?; "
        "grep CapEff /proc/self/status | tr -d '\\t' | sed 's/:/=/'; grep NoNewPrivs /proc/self/status | tr -d '\\t' | sed 's/:/=/'; "
        "ls /proc | grep -c '^[0-9]' | sed 's/^/pids=/'"
    )
    outcome, lines = run_in(runner, path, ["sh", "-c", script])
    out = dict(line.split("=", 1) for line in lines if "=" in line)
    for name in ("/etc/ralph-probe", "/usr/ralph-probe", "/var/ralph-probe", "core_pattern"):
        assert out[name] != "0", (name, lines)
    # in the private home and /tmp only the mount points of what the runner shows there (this Python, the project)
    shown = [Path(p) for p in runner._system_paths()] + [path]
    for root, key in ((home.resolve(), "home"), (Path("/tmp"), "tmp")):
        expected = {p.relative_to(root).parts[0] for p in shown if root in p.parents}
        assert set(out[key].split()) == expected, (key, lines)
    assert (out["tmpfile"], out["docker"]) == ("1", "1"), lines
    assert out["CapEff"] == "0000000000000000" and out["NoNewPrivs"] == "1", lines
    assert int(out["pids"]) < 10, lines  # its own pid namespace: only the sandbox's processes
    assert not Path("/etc/ralph-probe").exists()


def test_a_symlink_to_a_host_file_is_refused_and_nothing_is_followed(runner: Any, ralph_project: RalphProject,
                                                                   tmp_path: Path) -> None:
    from ralph.api.workspace import WorkspaceRefused

    path = ralph_project.path
    canary = tmp_path / "host-bashrc"
    canary.write_text("# the person's rc\n")
    tasks_before = ralph_project.tasks_path.read_bytes()
    script = f"rm ralph/tasks.json && ln -s {canary} ralph/tasks.json && echo linked"
    with pytest.raises(WorkspaceRefused, match=r"ralph/tasks.json"):
        run_in(runner, path, ["sh", "-c", script])
    assert canary.read_text() == "# the person's rc\n"
    assert not ralph_project.tasks_path.is_symlink() and ralph_project.tasks_path.read_bytes() == tasks_before
    # the next run starts from the project's state again: the link is gone from the checkout
    outcome, lines = run_in(runner, path, ["sh", "-c", "test -L ralph/tasks.json; echo link=$?"])
    assert lines == ["link=1"]


# -- processes -------------------------------------------------------------------------------------------


WRITER = "setsid sh -c 'while :; do echo x >> bg.log; sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo started"


def marked(marker: str) -> list[int]:
    """Pids on this machine whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                pass
    return found


def test_a_daemon_dies_with_its_sandbox(runner: Any, ralph_project: RalphProject) -> None:
    path = ralph_project.path
    marker = "ralph-bwrap-daemon-marker"
    daemon = f"setsid nohup sh -c 'while :; do echo x >> bg.log; sleep 0.1; done; : {marker}' </dev/null >/dev/null 2>&1 &"
    outcome, lines = run_in(runner, path, ["sh", "-c", daemon + " echo started"])
    assert lines == ["started"] and outcome.exit_code == 0
    assert marked(marker) == []
    # gate commands too
    result = runner.run_command(daemon + " echo started", path, 60)
    assert result.output == "started\n" and result.where == "sandbox"
    assert marked(marker) == []


def test_a_timed_out_agent_is_killed_and_its_work_still_comes_back(runner: Any, ralph_project: RalphProject) -> None:
    path = ralph_project.path
    marker = "ralph-bwrap-hang-marker"
    outcome, lines = run_in(runner, path, ["sh", "-c", f"echo partial > partial.txt; echo ok; trap '' TERM; sleep 300; : {marker}"],
                            timeout=3)
    assert outcome.timed_out and lines == ["ok"]
    assert (path / "partial.txt").read_text() == "partial\n"
    assert marked(marker) == []


# -- gate commands -----------------------------------------------------------------------------------


def test_gate_command_runs_in_a_fresh_sandbox_on_the_projects_state(runner: Any, ralph_project: RalphProject,
                                                                   tmp_path: Path) -> None:
    path = ralph_project.path
    canary = tmp_path / "host-canary"  # /tmp of this machine: the sandbox has its own
    (path / "check.py").write_text(
        f"open({str(canary)!r}, 'w').write('gate ran on this machine')\n"
        "open('gate-was-here', 'w').write('x')\n"
        "print('pid1=' + open('/proc/1/comm').read().strip())\n"
    )
    result = runner.run_command("python3 check.py", path, 60)
    assert result.exit_code == 0 and result.where == "sandbox", result.output
    assert "pid1=bwrap" in result.output
    assert list(runner.timings) == ["ship_in", "sandbox"]  # what benchmarks/bwrap_overhead.py reads
    assert not canary.exists()
    assert not (path / "gate-was-here").exists()  # it wrote into the checkout, never the project
    timed = runner.run_command("sleep 30", path, 2)
    assert timed.timed_out and timed.exit_code != 0
    failing = runner.run_command("echo some output; exit 3", path, 60)
    assert (failing.exit_code, failing.output) == (3, "some output\n")
    # a gate runs on the project's state as it is now (the loop's), not on what the agent left
    (path / "check.py").write_text("print('the loop version')\n")
    assert runner.run_command("python3 check.py", path, 60).output == "the loop version\n"


def test_gate_command_in_a_directory_the_loop_made_outside_the_project(runner: Any, ralph_project: RalphProject,
                                                                       tmp_path: Path) -> None:
    trusted = tmp_path / "trusted-tree"
    trusted.mkdir()
    (trusted / "t.py").write_text("print(open('data.txt').read())\n")
    (trusted / "data.txt").write_text("from the trusted tree")
    result = runner.run_command("python3 t.py && echo out > result.txt", trusted, 60)
    assert result.output == "from the trusted tree\n", result.output
    assert (trusted / "result.txt").read_text() == "out\n"


def test_the_projects_toolchain_is_shown_read_only(bwrap_available: None, ralph_project: RalphProject) -> None:
    path = ralph_project.path
    (path / ".gitignore").write_text(".venv/\n")
    ralph_project.commit_all("ignore the venv")
    (path / ".venv" / "bin").mkdir(parents=True)
    tool = path / ".venv" / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho the project tool\n")
    tool.chmod(0o755)
    runner = make_runner(path, network="none")
    runner.prepare(path)
    try:
        result = runner.run_command(".venv/bin/tool; (echo x > .venv/bin/tool) 2>/dev/null; echo write=$?", path, 60)
        outcome, lines = run_in(runner, path, ["sh", "-c", ".venv/bin/tool"])
    finally:
        runner.cleanup()
    assert result.output.splitlines()[0] == "the project tool" and "write=0" not in result.output, result.output
    assert lines == ["the project tool"]
    assert tool.read_text().startswith("#!/bin/sh")


# -- the network ------------------------------------------------------------------------------------


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"hello from this machine"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


FETCH = (
    "import os, sys, urllib.request\n"
    "url = sys.argv[1]\n"
    "try:\n"
    "    print('got', urllib.request.urlopen(url, timeout=5).read().decode())\n"
    "except Exception as exc:\n"
    "    print('failed', type(exc).__name__, getattr(exc, 'code', ''))\n"
)


def test_network_none_reaches_nothing(runner: Any, ralph_project: RalphProject, listener: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{listener.server_port}/"
    (ralph_project.path / "fetch.py").write_text(FETCH)
    result = runner.run_command(f"python3 fetch.py {url}", ralph_project.path, 60)
    assert result.output.startswith("failed"), result.output


def this_machines_address() -> str | None:
    """An IPv4 address of this machine other than loopback (none: None)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the route's source address
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_allowlist_lets_through_only_its_hosts(bwrap_available: None, ralph_project: RalphProject) -> None:
    address = this_machines_address()
    require(address is not None, "this machine has no address besides loopback")
    path = ralph_project.path
    servers = [ThreadingHTTPServer(("0.0.0.0", 0), _Hello) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    listed, unlisted = (server.server_port for server in servers)
    runner = make_runner(path, network="allowlist", allow_hosts=[f"{address}:{listed}", f"127.0.0.1:{listed}"])
    runner.prepare(path)
    (path / "fetch.py").write_text(FETCH)
    try:
        results = {name: runner.run_command(f"{prefix}python3 fetch.py http://{host}:{port}/", path, 60).output
                   for name, prefix, host, port in (
                       ("proxied", "", address, listed), ("denied", "", address, unlisted),
                       ("loopback", "", "127.0.0.1", listed), ("loopback-unlisted", "", "127.0.0.1", unlisted),
                       ("around-the-proxy", "env -u http_proxy -u HTTP_PROXY ", address, listed))}
        decisions = list(runner.relay().decisions)
    finally:
        runner.cleanup()
        for server in servers:
            server.shutdown()
    assert results["proxied"] == "got hello from this machine\n", results
    assert results["denied"].startswith("failed HTTPError 403"), results
    assert results["loopback"] == "got hello from this machine\n", results  # a listed port of this machine's loopback
    assert results["loopback-unlisted"].startswith("failed URLError"), results  # loopback inside is the sandbox's
    assert results["around-the-proxy"].startswith("failed URLError"), results  # no route out but the relays
    assert decisions == [f"allow {address}:{listed}", f"deny {address}:{unlisted}"]


def test_the_model_meter_is_reached_through_the_relay(bwrap_available: None, ralph_project: RalphProject,
                                                      listener: ThreadingHTTPServer, tmp_path: Path) -> None:
    import dataclasses

    from ralph.contracts import AgentChannel

    path = ralph_project.path
    runner = make_runner(path, network="allowlist", allow_hosts=[])
    runner.prepare(path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    meter = f"http://127.0.0.1:{listener.server_port}/s/secret"
    channel = AgentChannel(hook_socket=tmp_path / "hook" / "hook.sock", token="t", run_dir=run_dir,
                           state_file=run_dir / "state.json", tasks_file=ralph_project.tasks_path, hook_command=("true",))
    channel = dataclasses.replace(runner.agent_channel(channel), model_endpoint=meter)
    try:
        outcome, lines = run_in(runner, path, ["python3", "-c", FETCH, meter], channel=channel)
        other, other_lines = run_in(runner, path, ["python3", "-c", FETCH, "http://127.0.0.1:9/"], channel=channel)
    finally:
        runner.cleanup()
    assert lines == ["got hello from this machine"], lines
    assert other_lines[0].startswith("failed"), other_lines


# -- the hook channel ---------------------------------------------------------------------------------


def test_hook_socket_directory_is_read_only_and_still_answers(runner: Any, ralph_project: RalphProject,
                                                              tmp_path: Path) -> None:
    from ralph.contracts import AgentChannel

    sockets = tmp_path / "hooks"
    sockets.mkdir(mode=0o700)
    path_ = sockets / "hook.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path_))
    server.listen(1)

    def answer() -> None:
        connection, _ = server.accept()
        connection.sendall(b"answered\n")
        connection.close()

    threading.Thread(target=answer, daemon=True).start()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "state.json").write_text("{}")
    channel = AgentChannel(hook_socket=path_, token="t", run_dir=run_dir, state_file=run_dir / "state.json",
                           tasks_file=ralph_project.tasks_path, hook_command=("true",))
    reply = (f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path_)!r}); "
             "print(s.recv(100).decode().strip())")
    (ralph_project.path / "reply.py").write_text(reply)
    script = (f"python3 reply.py; rm -f {path_}; echo rm=$?; "
              f"(echo x > {run_dir}/state.json) 2>/dev/null; echo state=$?")
    outcome, lines = run_in(runner, ralph_project.path, ["sh", "-c", script], channel=channel)
    server.close()
    assert lines[0] == "answered", lines
    assert "rm=0" not in lines and "state=0" not in lines, lines
    assert path_.exists() and (run_dir / "state.json").read_text() == "{}"


def test_the_runner_leaves_nothing_behind(bwrap_available: None, ralph_project: RalphProject) -> None:
    runner = make_runner(ralph_project.path, network="allowlist", allow_hosts=["example.invalid:443"])
    runner.prepare(ralph_project.path)
    run_in(runner, ralph_project.path, ["sh", "-c", "mkdir -p d/e && chmod 000 d && echo x"])
    runner.run_command("true", ralph_project.path, 60)
    state = runner._state
    runner.cleanup()
    assert not state.exists()


# -- what the agent may leave in its checkout for the next sandbox ------------------------------------


def test_a_link_in_place_of_a_toolchain_entry_neither_breaks_the_next_sandbox_nor_is_followed(
        bwrap_available: None, ralph_project: RalphProject, tmp_path: Path) -> None:
    path = ralph_project.path
    (path / ".gitignore").write_text(".venv\n")  # a link named .venv is ignored too (`.venv/` would not)
    ralph_project.commit_all("ignore the venv")
    (path / ".venv" / "bin").mkdir(parents=True)
    (path / ".venv" / "bin" / "marker").write_text("the project's venv\n")
    target = tmp_path / "made-by-a-mount"
    runner = make_runner(path, network="none")
    runner.prepare(path)
    try:
        # inside, the entry is a mount point the agent cannot move; here the test plays an agent that got
        # a link or a file into its place in the checkout (bwrap would refuse to mount onto it, or follow it)
        planted = runner._state / "checkout" / ".venv"
        results = []
        plants = (lambda: planted.symlink_to(f"../../../../../../../../oldroot{target}"),
                  lambda: planted.symlink_to(target), lambda: planted.write_text("a file"))
        for plant in plants:
            for run in (lambda: run_in(runner, path, ["sh", "-c", "cat .venv/bin/marker"])[1],
                        lambda: runner.run_command("cat .venv/bin/marker", path, 60).output.splitlines()):
                if planted.is_symlink() or planted.is_file():
                    planted.unlink()
                elif planted.is_dir():
                    planted.rmdir()
                plant()
                results.append(run())
    finally:
        runner.cleanup()
    assert results == [["the project's venv"]] * 6, results
    assert not target.exists()


def test_nothing_of_the_loops_process_is_open_in_the_sandbox(runner: Any, ralph_project: RalphProject) -> None:
    outcome, lines = run_in(runner, ralph_project.path, ["sh", "-c", "ls /proc/self/fd | sort -n | tr '\\n' ' '"])
    assert lines[0].split() == ["0", "1", "2", "3"], lines  # stdin, stdout, stderr and ls's own directory


def test_private_directories_are_limited_in_size(bwrap_available: None, ralph_project: RalphProject) -> None:
    runner = make_runner(ralph_project.path, network="none", tmpfs_size="8m")
    runner.prepare(ralph_project.path)
    try:
        outcome, lines = run_in(runner, ralph_project.path,
                                ["sh", "-c", "dd if=/dev/zero of=/tmp/big bs=1M count=20 2>/dev/null; echo rc=$?; "
                                             "du -m /tmp/big | cut -f1"])
    finally:
        runner.cleanup()
    assert lines[0] != "rc=0" and int(lines[1]) <= 8, lines


def test_open_reaches_other_hosts_through_the_proxy_but_never_this_machines_loopback(bwrap_available: None,
                                                                          ralph_project: RalphProject) -> None:
    address = this_machines_address()
    require(address is not None, "this machine has no address besides loopback")
    path = ralph_project.path
    server = ThreadingHTTPServer(("0.0.0.0", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    (path / "fetch.py").write_text(FETCH)
    (path / "connect.py").write_text(CONNECT)
    runner = make_runner(path, network="open")
    runner.prepare(path)
    try:
        outside = runner.run_command(f"python3 fetch.py http://{address}:{port}/", path, 60).output
        loopback = runner.run_command(f"python3 fetch.py http://127.0.0.1:{port}/", path, 60).output
        named = runner.run_command(f"python3 connect.py localhost {port}", path, 60).output
    finally:
        runner.cleanup()
        server.shutdown()
    assert outside == "got hello from this machine\n", outside  # this machine's own address on the network: a host
    assert loopback.startswith("failed URLError"), loopback
    assert named.startswith("HTTP/1.1 403") and "is this machine" in named, named


CONNECT = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', 3128))\n"
    "s.sendall(('CONNECT %s:%s HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' % (sys.argv[1], sys.argv[2])).encode())\n"
    "print(s.recv(1000).decode().replace('\\r', ''))\n"
)


def test_gate_check_names_what_the_sandbox_lacks_and_the_fix(bwrap_available: None, ralph_project: RalphProject) -> None:
    import pwd

    path = ralph_project.path
    (path / ".gitignore").write_text(".venv\nbuild/\n")
    ralph_project.commit_all("ignore")
    (path / ".venv" / "bin").mkdir(parents=True)
    hidden_python = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pyenv-for-a-test" / "bin" / "python3"
    (path / ".venv" / "bin" / "python").symlink_to(hidden_python)  # a venv made from a Python under the home
    (path / "build").mkdir()
    (path / "build" / "tool").write_text("#!/bin/sh\n")
    (path / "build" / "tool").chmod(0o755)
    runner = make_runner(path, network="none")
    checks = runner.gate_check(["timeout 60 git --version", ".venv/bin/python -m pytest", "build/tool",
                                "ralph-no-such-program-here", "python3 -m ralph_no_such_module"])
    failed = {check.what.split("`")[1]: check for check in checks if check.ok is False}
    assert set(failed) == {".venv/bin/python -m pytest", "build/tool", "ralph-no-such-program-here",
                           "python3 -m ralph_no_such_module"}, checks
    venv = failed[".venv/bin/python -m pytest"]
    assert f"a link to {hidden_python}" in venv.what and "under a path the sandbox hides" in venv.what
    assert 'ro_binds = ["~/.pyenv-for-a-test"]' in venv.fix or f'ro_binds = ["{hidden_python.parent.parent}"]' in venv.fix
    assert "is ignored by git" in failed["build/tool"].what and 'toolchain = ["build"]' in failed["build/tool"].fix
    assert "not installed on this machine" in failed["ralph-no-such-program-here"].what
    assert "has no module ralph_no_such_module" in failed["python3 -m ralph_no_such_module"].what
    assert runner.gate_check(["timeout 60 git --version"])[0].ok is True


def test_a_connection_flood_from_the_sandbox_is_bounded(bwrap_available: None, ralph_project: RalphProject,
                                                        listener: ThreadingHTTPServer) -> None:
    from ralph_plugins.runners.bwrap.relay import MAX_CONNECTIONS

    path = ralph_project.path
    port = listener.server_port
    runner = make_runner(path, network="allowlist", allow_hosts=[f"127.0.0.1:{port}"])
    runner.prepare(path)
    flood = ("import socket, sys, time\n"
             "held = []\n"
             "for _ in range(int(sys.argv[2])):\n"
             "    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
             "    held.append(s)\n"
             "time.sleep(1.5)\n"
             "print('held', len(held))\n")
    (path / "flood.py").write_text(flood)
    (path / "fetch.py").write_text(FETCH)
    try:
        result = runner.run_command(f"python3 flood.py {port} {MAX_CONNECTIONS + 40}", path, 60)
        refused = runner.relay().refused
        after = runner.run_command(f"python3 fetch.py http://127.0.0.1:{port}/", path, 60)
    finally:
        runner.cleanup()
    assert "held" in result.output, result.output
    assert refused >= 40, refused  # beyond the bound: closed at once, no thread of the loop's
    assert after.output == "got hello from this machine\n", after.output  # the relay still serves afterwards


def test_a_capture_the_agent_inflated_is_cut_off_and_refused(bwrap_available: None, ralph_project: RalphProject,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from ralph.api.workspace import WorkspaceRefused
    from ralph_plugins.runners.bwrap import runner as bwrap_runner

    monkeypatch.setattr(bwrap_runner, "MAX_CAPTURE_BYTES", 1 << 20)  # 1 MB here: 2 GB in a run
    seen: list[int] = []
    real = bwrap_runner._bounded_run

    def watched(*args: Any, **kw: Any) -> Any:
        code, out, err = real(*args, **kw)
        seen.append(len(out))
        return code, out, err

    monkeypatch.setattr(bwrap_runner, "_bounded_run", watched)
    runner = make_runner(ralph_project.path, network="none")
    runner.prepare(ralph_project.path)
    before = ralph_project.git("rev-parse", "HEAD")
    try:
        with pytest.raises(WorkspaceRefused):
            run_in(runner, ralph_project.path, ["sh", "-c", "head -c 8000000 /dev/urandom > big.bin; echo made"])
    finally:
        runner.cleanup()
    assert max(seen) <= (1 << 20) + (1 << 20), seen  # read no further than the bound (and one chunk)
    assert not (ralph_project.path / "big.bin").exists() and ralph_project.git("rev-parse", "HEAD") == before


def test_no_user_namespace_and_no_terminal_inside(runner: Any, ralph_project: RalphProject) -> None:
    from ralph_plugins.runners.bwrap.probe import probe

    require(probe().features.disable_userns, "this bubblewrap has no --disable-userns (0.8 and later)")
    script = "unshare --user --map-root-user true 2>/dev/null; echo userns=$?; (exec 3</dev/tty) 2>/dev/null; echo tty=$?"
    outcome, lines = run_in(runner, ralph_project.path, ["sh", "-c", script])
    out = dict(line.split("=", 1) for line in lines)
    assert out["userns"] != "0", lines  # nothing can be remounted or unhidden from a namespace of its own
    assert out["tty"] != "0", lines  # a new session without a terminal: no TIOCSTI into the person's
