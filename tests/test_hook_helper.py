"""The per-user hook helper (``ralph.hooks.daemon``) never acts for a loop's agent, and the hook client outside a
loop never allows what it did not check.

- a process in another pid namespace (every agent process of a loop on Linux) is refused by the helper; the
  real client there answers in its own process, and its guard still denies;
- the helper starts no program: a request naming a repository whose ``.git/config`` has a clean filter is
  declined (the filter never runs in the helper) and the client answers it itself;
- a helper directory someone opened is made private again, and the guard still denies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ralph.hooks.client import ask_loop, helper_socket

CLIENT = Path(__file__).resolve().parent.parent / "ralph" / "hooks" / "client.py"
PUSH = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash",
        "tool_input": {"command": "git push --force origin HEAD:main"}}


def person_env(tmp_path: Path, runtime: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
            "RALPH_STATE_DIR": str(tmp_path / "state"), "CLAUDE_PROJECT_DIR": str(tmp_path),
            "XDG_RUNTIME_DIR": str(runtime), "RALPH_HOOK_DAEMON_IDLE": "60", **extra}


@pytest.fixture
def helper(tmp_path: Path) -> Any:
    """The person's running hook helper, as the client starts it; yields ``(socket path, environment)``."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = person_env(tmp_path, runtime)
    path = Path(helper_socket(env))
    process = subprocess.Popen([sys.executable, "-P", "-m", "ralph.hooks.daemon", str(path)], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), process.stderr.read().decode() if process.poll() is not None else "no helper socket"
    yield path, env
    process.kill()
    process.wait(30)


def request(payload: dict[str, Any], cwd: Path) -> dict[str, Any]:
    return {"payload": {**payload, "cwd": str(cwd)}, "env": {"HOME": str(cwd), "CLAUDE_PROJECT_DIR": str(cwd)}}


def run_client(payload: dict[str, Any], env: dict[str, str], cwd: Path, *prefix: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run([*prefix, sys.executable, "-S", "-P", str(CLIENT)], input=json.dumps(payload),
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def decision(output: dict[str, Any]) -> str:
    return str(output.get("hookSpecificOutput", {}).get("permissionDecision", "allow"))


def new_pid_namespace() -> list[str]:
    """A command prefix that runs its command in a pid namespace of its own (as a loop runs its agent)."""
    flags = ["--pid", "--fork"] + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])
    probe = subprocess.run(["unshare", *flags, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no pid namespace can be made here: {probe.stderr.strip()}")
    return ["unshare", *flags]


def test_the_helper_answers_the_persons_session(helper: Any, tmp_path: Path) -> None:
    path, _ = helper
    answer = ask_loop(str(path), request(PUSH, tmp_path))
    assert decision(answer["output"]) == "deny"


def test_a_process_in_another_pid_namespace_is_refused_and_its_guard_still_denies(helper: Any, tmp_path: Path) -> None:
    """What a loop's agent sees: the helper refuses it (the kernel says it lives in a pid namespace of its own);
    the real client there answers the push in-process: denied."""
    path, env = helper
    prefix = new_pid_namespace()
    probe = ("import json, sys\nsys.path.insert(0, sys.argv[2])\nfrom client import ask_loop\n"
             "print(json.dumps(ask_loop(sys.argv[1], json.loads(sys.argv[3]))))\n")
    done = subprocess.run([*prefix, sys.executable, "-S", "-c", probe, str(path), str(CLIENT.parent),
                           json.dumps(request(PUSH, tmp_path))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert "output" not in answer and "pid namespace" in answer["refused"], answer
    output, stderr = run_client({**PUSH, "cwd": str(tmp_path)}, env, tmp_path, *prefix)
    assert decision(output) == "deny", (output, stderr)


def decoy(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose own ``.git/config`` has a clean filter that leaves a mark, and a ``.ralph-active``
    so that a Stop runs the checks (``git status`` among them); returns ``(repository, mark)``."""
    repo, mark = tmp_path / "decoy", tmp_path / "filter-ran"
    (repo / "ralph").mkdir(parents=True)
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@a"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], cwd=repo, check=True)
    (repo / ".gitattributes").write_text("a.txt filter=mark\n")
    (tmp_path / "filter.py").write_text(
        "import sys\nopen(sys.argv[1], 'a').write(str(__import__('os').getpid()) + '\\n')\n"
        "sys.stdout.buffer.write(sys.stdin.buffer.read())\n")
    with (repo / ".git" / "config").open("a") as handle:
        handle.write(f'[filter "mark"]\n\tclean = {sys.executable} {tmp_path / "filter.py"} {mark}\n')
    later = time.time() + 30
    os.utime(repo / "a.txt", (later, later))  # stat-dirty: git status runs the file through the filter
    (repo / "ralph" / "tasks.json").write_text(json.dumps({"project": "d", "branchName": "d", "userStories": []}))
    (repo / ".ralph-active").write_text(json.dumps({"policy": "review", "ralphDir": str(repo / "ralph"),
                                                    "store": "tasks-json"}))
    return repo, mark


def test_the_helper_runs_nothing_in_a_directory_a_request_names(helper: Any, tmp_path: Path) -> None:
    """A Stop naming a repository with a clean filter in its ``.git/config``: the helper declines it (its
    answer would start git) and the filter never runs there; guards that start nothing are still answered."""
    path, _ = helper
    repo, mark = decoy(tmp_path)
    stop = {"hook_event_name": "Stop", "session_id": "s", "stop_hook_active": False}
    answer = ask_loop(str(path), request(stop, repo))
    assert "output" not in answer and "starts no program" in answer["declined"], answer
    assert not mark.exists(), f"the repository's clean filter ran in the hook helper: {mark.read_text()}"
    assert decision(ask_loop(str(path), request(PUSH, repo))["output"]) == "deny"


def test_a_declined_request_is_answered_by_the_client_itself(helper: Any, tmp_path: Path) -> None:
    """The person's own Stop in their own project (one with a filter they configured): the client runs the
    checks in its own process, as without a helper."""
    _, env = helper
    repo, mark = decoy(tmp_path)
    output, stderr = run_client({"hook_event_name": "Stop", "session_id": "s", "stop_hook_active": False,
                                 "cwd": str(repo)}, {**env, "CLAUDE_PROJECT_DIR": str(repo)}, repo)
    assert mark.exists(), f"the Stop checks did not run in the client: {output} {stderr}"


def test_a_program_a_plugin_starts_and_swallows_the_refusal_of_is_still_declined() -> None:
    """A guard that catches every Exception around its own subprocess call cannot turn the refusal into an
    answer: the request is declined all the same."""
    from ralph.hooks.daemon import declining, forbid_programs
    from ralph.hooks.server import Declined

    forbid_programs(everywhere=False)  # in this test process: only while an answer is being made

    def guard() -> dict[str, Any]:
        try:
            subprocess.run(["true"], check=False)
        except Exception:  # noqa: BLE001 - what a careless plugin does
            return {}
        return {"ran": True}

    with pytest.raises(Declined, match="starts no program"):
        declining(guard)
    assert subprocess.run(["true"]).returncode == 0, "programs outside an answer were refused too"


@pytest.mark.parametrize("mode", [0o750, 0o777])
def test_a_helper_directory_someone_opened_is_made_private_and_the_guard_still_denies(
        tmp_path: Path, mode: int) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    directory = runtime / f"ralph-hooks-{os.getuid()}"
    directory.mkdir()
    directory.chmod(mode)
    env = person_env(tmp_path, runtime, RALPH_HOOK_DAEMON_IDLE="2")
    output, stderr = run_client({**PUSH, "cwd": str(tmp_path)}, env, tmp_path)
    assert decision(output) == "deny", (output, stderr)
    assert directory.stat().st_mode & 0o777 == 0o700


def test_a_helper_directory_that_is_not_ours_means_an_in_process_answer(tmp_path: Path) -> None:
    """The helper's directory replaced by a link elsewhere: no helper is asked or started there; the client
    answers itself and denies."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (runtime / f"ralph-hooks-{os.getuid()}").symlink_to(elsewhere)
    output, stderr = run_client({**PUSH, "cwd": str(tmp_path)}, person_env(tmp_path, runtime), tmp_path)
    assert decision(output) == "deny", (output, stderr)
    assert "answered in-process" in stderr and not list(elsewhere.iterdir())
    assert elsewhere.stat().st_mode & 0o777 == 0o755
