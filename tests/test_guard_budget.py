"""The guards' analysis does bounded work per call: a verdict and a work counter, never a clock.

Every command here is built as data and only handed to ``analyze`` or to the guards; nothing runs
it.  The time and memory these inputs cost are printed by ``benchmarks/hook_latency.py`` (not
asserted: the machine is shared).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from guard_corpus import HOME, project_tree
from ralph.plugin.manager import PluginHost
from ralph.shell import analyze
from ralph.shell.budget import MAX_STEPS, MAX_VALUE
from ralph.shell.grammar import MAX_PIPES
from ralph.shell.sedscript import read_sed
from ralph.testing.hooks import make_event

STALL = "a=x;" + "a=$a$a;" * 24 + "echo $a"
"""The issue's stalling command: 200 characters doubling a value 24 times (8.4 s and 723 MB before budgets)."""

EXPANSIONS = {
    "stall": STALL,
    "stall-30": "a=x;" + "a=$a$a;" * 30 + "git push",
    "references": "a=" + "x" * MAX_VALUE + "; echo " + "$a" * 40_000,
    "brace-sequence": "echo {1..99999999} && git status",
    "brace-product": "echo " + "{a,b}" * 40,
    "nested-for": "for a in 1 2 3 4 5 6 7 8; do " * 10 + "echo $a" + "; done" * 10,
    "eval-tree": "a='eval $a;eval $a;eval $a;eval $a'; eval $a",
    "nested-functions": "f(){ " * 3000 + "x" + "; }" * 3000,
    "open-braces": "echo " + "{" * 90_000,
    "brackets": "echo " + "[" * 90_000,
    "many-cd": "cd a;" * 19_000 + "rm -f b",
}


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(environ={})


def rules(host: PluginHost, project: Path, command: str, isolated: bool = False) -> list[str]:
    from ralph.contracts import LoopView

    loop = None
    if isolated:
        loop = LoopView(runner="docker-sandbox", isolates=True, mode="implement", story_id="US-001",
                        ralph_dir=project / "ralph", run_dir=project.parent / "run", protected_paths=[],
                        checkpoint=None)
    payload: dict[str, Any] = {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(project)}
    event = make_event("PreToolUse", payload, project, project.parent / "state", loop=loop, environ={"HOME": HOME})
    return [d.rule for result in host.pm.hook.ralph_pre_tool_use(event=event) for d in (result or [])]


@pytest.mark.parametrize("name", list(EXPANSIONS))
def test_expansions_stop_at_the_budget_and_are_denied_in_direct_mode(host: PluginHost, tmp_path: Path,
                                                                    name: str) -> None:
    command = EXPANSIONS[name]
    result = analyze(command, str(tmp_path))
    assert result.steps <= MAX_STEPS + 400_000  # one spend may overshoot by what it counts at once
    assert result.opaque or result.unparseable, name
    project = project_tree(tmp_path)
    got = rules(host, project, command)
    assert "opaque-code" in got or "unparseable" in got
    sandboxed = rules(host, project, command, isolated=True)
    assert "opaque-code" not in sandboxed and "unparseable" not in sandboxed


def test_the_stalling_command_names_what_stopped_the_analysis(tmp_path: Path) -> None:
    result = analyze(STALL, str(tmp_path))
    (finding,) = result.opaque
    assert f"grows past {MAX_VALUE} characters" in finding.construct and finding.advice
    assert result.steps < MAX_STEPS  # stopped by the value limit, long before the step limit
    assert analyze("a=x;" + "a=$a$a;" * 10 + "echo $a", str(tmp_path)).opaque == []  # 1 KB values are followed


def test_a_big_ordinary_command_is_analysed_in_full(host: PluginHost, tmp_path: Path) -> None:
    heredoc = "cat > src/data.py <<'EOF'\n" + "VALUES = [1, 2, 3]  # a | b | c\n" * 2500 + "EOF\n"
    loops = ("if [ -f a ]; then rm -f build/a.o; fi; for f in src/*.py; do python -m py_compile \"$f\"; done; "
             * 400)
    for command in (heredoc, loops):
        assert len(command) > 35_000
        result = analyze(command, str(tmp_path))
        assert result.opaque == [] and result.unparseable is None
        assert result.steps < MAX_STEPS * 2 // 3
        assert rules(host, project_tree(tmp_path / str(len(command))), command) == []


def test_a_command_with_too_many_pipes_is_not_parsed(tmp_path: Path) -> None:
    # tree-sitter's error recovery is quadratic in an open pipeline: this one is refused before it parses
    result = analyze("x|" * (MAX_PIPES + 1) + "x && '", str(tmp_path))
    assert result.unparseable == f"more than {MAX_PIPES} pipes (`|`) in one command"
    assert analyze("v=1;" + "x|" * 8000 + "x", str(tmp_path)).unparseable is not None
    # pipes in quoted text and heredocs are not pipes
    table = "cat > t.md <<'EOF'\n" + "| a | b | c |\n" * 400 + "EOF\n"
    assert analyze(table, str(tmp_path)).unparseable is None
    assert analyze("echo '" + "|" * 5000 + "'", str(tmp_path)).unparseable is None
    # ... unless they are in code run there
    assert analyze('echo "$(' + "x|" * 600 + 'x)"', str(tmp_path)).unparseable is not None


def test_sed_scripts_are_read_in_one_pass() -> None:
    assert not read_sed("s/foo/bar/g").executes
    assert read_sed("s/[/]/X/e").executes  # the delimiter inside a bracket expression is literal
    assert read_sed("1!s/a/b/;2e echo hi").executes
    assert read_sed("/x/ { s|a|b|e }").executes
    assert not read_sed("s/x/e/").executes  # `e` in the replacement is text
    assert read_sed("s/a/b/w /home/agent/.bashrc").writes == ["/home/agent/.bashrc"]
    assert read_sed("w out.txt\nr in.txt").writes == ["out.txt"]
    assert not read_sed("s/a/b/ unknown").readable
    crafted = "".join("s" + chr(0x4E00 + i) for i in range(30_000))  # backtracked for seconds as a regex
    assert not read_sed(crafted).readable


def test_the_hook_server_refuses_an_oversized_request(tmp_path: Path) -> None:
    from ralph.hooks.server import MAX_REQUEST_BYTES, HookServer

    seen: list[dict[str, Any]] = []
    server = HookServer(lambda request: seen.append(request) or {}).start()
    try:
        for size, refused in ((1000, False), (MAX_REQUEST_BYTES + 10, True)):
            payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "x" * size}}
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(server.path))
                try:
                    conn.sendall(json.dumps({"payload": payload}).encode() + b"\n")
                except BrokenPipeError:
                    pass  # the server answered and closed before reading the rest
                conn.shutdown(socket.SHUT_WR)
                answer = json.loads(conn.makefile("rb").readline())
            assert ("larger than" in answer.get("error", "")) is refused
    finally:
        server.stop()
    assert len(seen) == 1


def test_a_slow_call_does_not_hold_up_the_next(tmp_path: Path) -> None:
    """The server answers each connection in its own thread: a call still being answered (here one that
    waits on an event) does not keep the next call from its answer."""
    import threading

    from ralph.hooks.server import HookServer

    release, entered = threading.Event(), threading.Event()

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        if request["payload"].get("slow"):
            entered.set()
            release.wait(60)
        return {"answered": request["payload"]["n"]}

    def ask(payload: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(server.path))
            conn.sendall(json.dumps({"payload": payload}).encode() + b"\n")
            conn.shutdown(socket.SHUT_WR)
            return json.loads(conn.makefile("rb").readline())

    server = HookServer(respond).start()
    answers: list[dict[str, Any]] = []
    try:
        slow = threading.Thread(target=lambda: answers.append(ask({"n": 1, "slow": True})))
        slow.start()
        assert entered.wait(60)  # call 1 is being answered ...
        assert ask({"n": 2}) == {"output": {"answered": 2}}  # ... and call 2 gets its answer meanwhile
        assert answers == []
        release.set()
        slow.join(60)
        assert answers == [{"output": {"answered": 1}}]
    finally:
        release.set()
        server.stop()
