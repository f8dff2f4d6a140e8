"""Guards ask the runner whether it isolates the agent (``Runner.isolates``), never its name.

Two third-party runners, both running the agent on this machine through ``run_process``, differ
only in ``isolates``; a real loop with the replay agent makes a PreToolUse call to the loop's hook
server, as the agent-side hook client does, with a command the guards deny only when nothing
isolates the agent (direct mode: unparseable shell).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from ralph.testing import RalphProject, ReplayScript, commit, run, say, set_fields, story

RUNNERS = """
    import dataclasses
    from ralph.api import Availability, Runner, hookimpl
    from ralph.api.process import run_process

    class Outside(Runner):
        name = "outside"          # not "direct", and does not isolate

        def availability(self):
            return Availability.yes()

        def run(self, spec, on_line, timeout, cancel):
            return run_process(spec, on_line, timeout, cancel)

    class Boxed(Outside):
        name = "boxed"
        isolates = True           # what the guards trust (the test runs it on the host all the same)

    @hookimpl
    def ralph_register_runners(register):
        register(Outside)
        register(Boxed)
"""

CALL_HOOK = """
    import json, os, socket, sys
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.environ["RALPH_HOOK_SOCKET"])
    payload = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "session_id": "s",
               "tool_input": {"command": "echo 'unterminated"}, "cwd": os.getcwd()}
    s.sendall(json.dumps({"payload": payload, "token": os.environ["RALPH_HOOK_TOKEN"]}).encode() + b"\\n")
    with open(sys.argv[1], "w") as out:
        out.write(s.makefile().readline())
"""

MET = say('```json\n{"verdict": "met", "unmet": [], "extra": []}\n```')


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    info = site / "isolation_runners-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: isolation-runners\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ralph]\nisolation = isolation_runners\n")
    (site / "isolation_runners.py").write_text(textwrap.dedent(RUNNERS))
    return {"PYTHONPATH": str(site)}


@pytest.mark.parametrize(("runner", "denied"), [("outside", True), ("boxed", False)])
def test_guards_follow_the_runners_isolates_property(ralph_project: RalphProject, tmp_path: Path,
                                                     env: dict[str, str], runner: str, denied: bool) -> None:
    ralph_project.write_stories([story("US-001")])
    caller, answer = tmp_path / "call_hook.py", tmp_path / "answer.json"
    caller.write_text(textwrap.dedent(CALL_HOOK))
    script = ReplayScript().extra_call("spec", None, MET).iteration(
        1, run(f"{sys.executable} {caller} {answer}"), set_fields("US-001", passes=True, notes="done"),
        commit("feat: [US-001] - a"), say("done"))
    env["RALPH_REPLAY_SCRIPT"] = str(script.write(tmp_path / "script.json"))
    result = ralph_project.run("run", "--runner", runner, "--agent", "replay", "--skip-review", "-n", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert ralph_project.events("run_started")[0]["runner"] == runner
    output = json.loads(answer.read_text())["output"]
    decision = output.get("hookSpecificOutput", {}).get("permissionDecision")
    assert (decision == "deny") is denied, output
    if denied:
        assert output["hookSpecificOutput"]["permissionDecisionReason"].startswith("[unparseable]")
