"""``RalphProject.run``'s result: a ``CompletedProcess`` with assertions on what the run did (docs/plugins.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ralph.testing import RalphProject, RunResult, commit, replay_env, say, set_fields, story

DOCS = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"


def _documented_example() -> str:
    section = DOCS.read_text(encoding="utf-8").split("## Testing a plugin", 1)[1].split("\n## ", 1)[0]
    block = next(b for b in re.findall(r"```python\n(.*?)```", re.sub(r"(?m)^  ", "", section), re.S)
                 if "run_replay" in b)
    return block


def test_the_documented_example_passes(ralph_project: RalphProject, tmp_path: Path) -> None:
    namespace = {"story": story, "replay_env": replay_env, "set_fields": set_fields, "commit": commit, "say": say}
    exec(_documented_example(), namespace)  # noqa: S102 - the docs' own code, as a plugin author copies it
    namespace["test_my_runner_completes_a_story"](ralph_project, tmp_path)


def test_the_result_is_still_a_completed_process(ralph_project: RalphProject) -> None:
    result = ralph_project.run("--version")
    assert isinstance(result, subprocess.CompletedProcess) and isinstance(result, RunResult)
    assert result.returncode == 0 and result.stdout and result.stderr == ""
    assert result.assert_exit(0) is result


def test_a_failed_assertion_names_the_exit_code_and_shows_the_output(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001", "Greet")])
    env = replay_env(tmp_path / "script.json", {1: [say("nothing done")]})
    result = ralph_project.run_replay("--skip-review", "-n", "1", env=env)
    result.assert_exit(1).assert_story("US-001", passes=False)
    with pytest.raises(AssertionError, match=r"expected exit code 0; it exited 1\n--- stdout \(end\)\n"):
        result.assert_complete()
    with pytest.raises(AssertionError, match=r"story US-001: expected \{'passes': True\}, has \{'passes': False\}"):
        result.assert_story("US-001", passes=True)
    with pytest.raises(AssertionError, match="the task list has no story 'US-404'"):
        result.assert_story("US-404")
    started = result.assert_event("iteration_started", iteration=1)
    assert started["kind"] == "iteration_started"
    with pytest.raises(AssertionError, match=r"no 'iteration_started' event with \{'iteration': 2\}"):
        result.assert_event("iteration_started", iteration=2)
