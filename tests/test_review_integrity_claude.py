"""A review changes no code, and "complete" means the gates pass on the final tree: a scripted
agent (through the real Claude Code CLI) changes code in a review and approves, or approves a tree
that fails ``verifyCommands``; the loop undoes the one and does not end "complete" on the other
(Trust boundary rule 4; ``ralph/loop/reviewtree.py``, ``GateKeeper.final_check``).

The commands are built here in Python and travel as JSON to the model server.  The docker-sandbox
variants run the same attacks with the agent and the gates in the sandbox.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any, Callable

import pytest

from ralph.testing.model_server import IterationScript, Turn, text, tool
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import python_line as py

pytestmark = pytest.mark.real_claude

CHECK = "import sys, os\nok = open('US-001.txt').read() == 'hello' and not os.path.exists('build/flag')\n" \
        "sys.exit(0 if ok else 'US-001.txt must say hello, and no build/flag')\n"


EDIT_TASKS = (
    "import json,sys;p='ralph/tasks.json';d=json.load(open(p));"
    "exec(json.loads(sys.argv[1]));open(p,'w').write(json.dumps(d,indent=2)+'\\n')"
)


def set_fields(story_id: str, **fields: Any) -> str:
    return py(EDIT_TASKS, f"[s.update({fields!r}) for s in d['userStories'] if s['id']=={story_id!r}]")


def commit(message: str) -> str:
    return f"git add -A && git commit -q -m {shlex.quote(message)}"


def iteration(*commands: str, say: str = "Done.") -> list[Turn]:
    return [Turn([tool("Bash", {"command": c, "description": "step"})]) for c in commands] + [Turn([text(say)])]


def implement(story_id: str) -> list[Turn]:
    return iteration(f"printf hello > {story_id}.txt", set_fields(story_id, reviewStatus="needs_review"),
                     commit(f"feat: [{story_id}] - implement"))


def approve(story_id: str, count: int, *before: str) -> list[Turn]:
    return iteration(
        *before,
        set_fields(story_id, reviewStatus="approved", passes=True, reviewCount=count, notes="reviewed"),
        commit(f"review: [{story_id}] - approved"),
        say="Approved. <promise>COMPLETE</promise>",
    )


def fix(story_id: str, *commands: str) -> list[Turn]:
    return iteration(*commands, set_fields(story_id, reviewStatus="needs_review", reviewFeedback=""),
                     commit(f"fix: [{story_id}] - review feedback"))


def project_with_check(project: RalphProject) -> None:
    (project.path / "check.py").write_text(CHECK)
    (project.path / ".gitignore").write_text("build/\n")
    project.write_stories([story("US-001")], verifyCommands=["python3 check.py"])


RUNNERS = ["direct", pytest.param("docker-sandbox", id="sandbox", marks=pytest.mark.slow),
           pytest.param("bwrap", marks=pytest.mark.slow)]
CLAUDE_TEST_ENV = ["CLAUDE_CODE_MAX_RETRIES", "API_TIMEOUT_MS"]


@pytest.fixture
def run_loop(request: pytest.FixtureRequest, ralph_project: RalphProject, scripted_model: Any, claude_binary: Any,
             claude_agent_env: Any) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``result = run_loop(runner, script, *args)``: ``ralph run`` with the real CLI, in ``runner``."""

    def run(runner: str, script: IterationScript, *args: str) -> subprocess.CompletedProcess[str]:
        host = "127.0.0.1"
        if runner == "bwrap":
            request.getfixturevalue("bwrap_available")
        if runner == "docker-sandbox":
            request.getfixturevalue("sandbox_project")
            host = request.getfixturevalue("gateway")
            lines = ["[docker-sandbox]", 'network = "allowlist"', f"env = {json.dumps(CLAUDE_TEST_ENV)}"]
            (ralph_project.path / "ralph.toml").write_text("\n".join(lines) + "\n")
            ralph_project.commit_all("sandbox config")
        server = scripted_model(script, host=host)
        return ralph_project.run("run", "--runner", runner, "--agent", "claude", "--timeout", "180", *args,
                                 env=claude_agent_env(server.url), timeout=900)

    return run


# the docker fixtures, for the sandbox cases (requested lazily above)
import test_docker_sandbox as _docker  # noqa: E402

docker_client, gateway, sandbox_image, sandbox_project = (
    _docker.docker_client, _docker.gateway, _docker.sandbox_image, _docker.sandbox_project)


def review_that_changes_code(project: RalphProject, run_loop: Any, runner: str) -> None:
    project_with_check(project)
    tamper = "printf helo > US-001.txt && printf 'print(1)\\n' > extra.py"
    script = IterationScript({1: implement("US-001"), 2: approve("US-001", 1, tamper), 3: approve("US-001", 1)})
    result = run_loop(runner, script, "-n", "3")

    assert result.returncode == 0, result.stdout + result.stderr  # complete, by the honest third iteration
    # iteration 2's code change was undone and its approval did not count ...
    assert (project.path / "US-001.txt").read_text() == "hello" and not (project.path / "extra.py").exists()
    assert [e["mode"] for e in project.events("iteration_started")] == ["implement", "review", "review"]
    (undone,) = project.events("review_changes_undone")
    assert undone["iteration"] == 2 and sorted(undone["paths"]) == ["US-001.txt", "extra.py"] and undone["saved"]
    violations = [v for v in project.events("violation") if v["check"] == "review-changed-code"]
    assert [v["iteration"] for v in violations] == [2]
    assert (project.path / "US-001.txt").read_text() == "hello" and not (project.path / "extra.py").exists()
    finished = {e["iteration"]: e for e in project.events("iteration_finished")}
    assert finished[2]["stories_done"] == 0 and finished[3]["stories_done"] == 1
    # ... and was told to the next review, which approved the honest tree: one review counted
    prompt3 = (project.run_dirs()[-1] / "iteration-003.prompt.md").read_text(encoding="utf-8")
    assert "A review changes no code" in prompt3
    final = project.story("US-001")
    assert final["passes"] is True and final["reviewStatus"] == "approved" and final["reviewCount"] == 1
    assert [(e["gate"], e["passed"]) for e in project.events("final_gate")] == [("test-integrity", True), ("tests", True)]
    log = project.git("log", "--format=%s")
    assert log.count("review: [US-001] - approved") == 1  # the tampering review's commit is not in the history
    assert project.git("status", "--porcelain") == ""


HIDE = (
    "printf 'print(1)\\n' > evil.py && printf 'evil.py\\n' >> .gitignore"  # a new file, listed in .gitignore
    " && mkdir -p pkg && printf '*\\n' > pkg/.gitignore && printf 'x = 1\\n' > pkg/__init__.py"  # a directory ignoring itself
)


def review_that_hides_code(project: RalphProject, run_loop: Any, runner: str) -> None:
    project_with_check(project)
    script = IterationScript({1: implement("US-001"), 2: approve("US-001", 1, HIDE), 3: approve("US-001", 1)})
    result = run_loop(runner, script, "-n", "3")

    # main: the loop could not undo evil.py and stopped ("put them back by hand"), the file left in the tree
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (project.path / "evil.py").exists() and not (project.path / "pkg").exists()
    assert (project.path / ".gitignore").read_text() == "build/\n"
    (undone,) = project.events("review_changes_undone")
    # on its own checkout (a sandbox) what the review's .gitignore hides never comes back: only that file is undone
    hidden = [] if runner in ("bwrap", "docker-sandbox") else ["evil.py", "pkg/.gitignore", "pkg/__init__.py"]
    assert undone["iteration"] == 2 and sorted(undone["paths"]) == [".gitignore", *hidden]
    assert [e["mode"] for e in project.events("iteration_started")] == ["implement", "review", "review"]
    assert project.story("US-001")["reviewCount"] == 1 and project.git("status", "--porcelain", "--ignored") == ""


def approval_of_a_tree_that_fails(project: RalphProject, run_loop: Any, runner: str) -> None:
    project_with_check(project)
    if runner != "direct":
        return approval_of_a_tree_that_fails_in_a_sandbox(project, run_loop, runner)
    # build/ is ignored: not code, so the review may leave it; but the tests fail on the tree it approves
    script = IterationScript({
        1: implement("US-001"),
        2: approve("US-001", 1, "mkdir -p build && touch build/flag"),
        3: fix("US-001", "rm -rf build"),
        4: approve("US-001", 2),
    })
    result = run_loop(runner, script, "-n", "4")

    assert result.returncode == 0, result.stdout + result.stderr
    started = [(e["iteration"], e["mode"]) for e in project.events("iteration_started")]
    assert started == [(1, "implement"), (2, "review"), (3, "review-fix"), (4, "review")]
    assert not (project.path / "build").exists()
    finals = [e for e in project.events("final_gate") if e["gate"] == "tests"]
    assert [(e["iteration"], e["passed"]) for e in finals] == [(2, False), (4, True)]
    # the story-start tests ran on each final tree too (build/ is ignored: not in their tree, so they passed)
    assert [(e["iteration"], e["passed"]) for e in project.events("final_gate") if e["gate"] == "test-integrity"] == [
        (2, True), (4, True)]
    assert "$ python3 check.py" in finals[0]["output"] and "no build/flag" in finals[0]["output"]
    (failed,) = project.events("final_check_failed")
    assert failed["iteration"] == 2 and failed["story"] == "US-001"
    prompt3 = (project.run_dirs()[-1] / "iteration-003.prompt.md").read_text(encoding="utf-8")
    assert "no build/flag" in prompt3  # the verbatim output of the failed final gate
    assert project.story("US-001")["reviewCount"] == 2 and project.story("US-001")["passes"] is True


def approval_of_a_tree_that_fails_in_a_sandbox(project: RalphProject, run_loop: Any, runner: str) -> None:
    """In a sandbox the ignored ``build/flag`` the review leaves stays in its own checkout: ignored files never
    travel, so the tree the loop checks and the person gets is the one the tests gate passed. The final
    check runs there (in the sandbox) and passes, and the person's tree passes ``check.py``."""
    script = IterationScript({1: implement("US-001"), 2: approve("US-001", 1, "mkdir -p build && touch build/flag")})
    result = run_loop(runner, script, "-n", "4")

    assert result.returncode == 0, result.stdout + result.stderr
    started = [(e["iteration"], e["mode"]) for e in project.events("iteration_started")]
    assert started == [(1, "implement"), (2, "review")]
    finals = [(e["iteration"], e["gate"], e["passed"], e["where"]) for e in project.events("final_gate")]
    assert finals == [(2, "test-integrity", True, "sandbox"), (2, "tests", True, "sandbox")], finals
    assert not project.events("final_check_failed") and not (project.path / "build").exists()
    checked = subprocess.run(["python3", "check.py"], cwd=project.path, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert project.story("US-001")["reviewCount"] == 1 and project.story("US-001")["passes"] is True


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_review_that_changes_code_is_undone_and_its_verdict_not_accepted(
    ralph_project: RalphProject, run_loop: Any, runner: str
) -> None:
    review_that_changes_code(ralph_project, run_loop, runner)


@pytest.mark.parametrize("runner", RUNNERS)
def test_code_a_review_hides_from_git_is_undone_and_the_run_goes_on(
    ralph_project: RalphProject, run_loop: Any, runner: str
) -> None:
    review_that_hides_code(ralph_project, run_loop, runner)


QUICK_TEST = (
    "import os\nimport unittest\n\nfrom calc import add\n\n\n"
    "class CalcTest(unittest.TestCase):\n"
    "    @unittest.skipIf(os.path.exists('.quick'), 'a quick run on this machine (touch .quick) skips it')\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def approval_of_code_only_a_skipped_test_passes(project: RalphProject, run_loop: Any, runner: str) -> None:
    """The person's test skips itself when an ignored marker file exists; the agent writes the marker and
    wrong code. The tests gate sees the skip (its tests are the agent's tree), the look of the test-integrity
    gate sees no test path touched; the story-start tests, run once more on the final tree (no ignored
    file in it), fail."""
    (project.path / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (project.path / "tests").mkdir()
    (project.path / "tests" / "test_calc.py").write_text(QUICK_TEST)
    (project.path / ".gitignore").write_text(".quick\n__pycache__/\n")
    project.write_stories([story("US-001", "Add numbers", acceptanceCriteria=["add(a, b) returns the sum"])],
                          verifyCommands=["python3 -m unittest discover -s tests"])
    code = "printf 'def add(a, b):\\n    return a %s b\\n' > calc.py"
    if runner != "direct":
        return skipped_test_in_a_sandbox(project, run_loop, runner, code)
    script = IterationScript({
        1: iteration(code % "-", "touch .quick", set_fields("US-001", reviewStatus="needs_review"),
                     commit("feat: [US-001] - add")),
        2: approve("US-001", 1),
        3: fix("US-001", code % "+"),
        4: approve("US-001", 2),
    })
    result = run_loop(runner, script, "-n", "4")

    # main: exit 0 after iteration 2, "complete" with add(2, 3) == -1
    assert result.returncode == 0, result.stdout + result.stderr
    assert [e["mode"] for e in project.events("iteration_started")] == ["implement", "review", "review-fix", "review"]
    finals = [(e["iteration"], e["gate"], e["passed"]) for e in project.events("final_gate")]
    assert finals == [(2, "test-integrity", False), (4, "test-integrity", True), (4, "tests", True)], finals
    failed = next(e for e in project.events("final_gate") if not e["passed"])
    assert "AssertionError: -1 != 5" in failed["output"], failed["output"]
    assert [e["gate"] for e in project.events("final_check_failed")] == ["test-integrity"]
    assert "return a + b" in (project.path / "calc.py").read_text() and project.story("US-001")["passes"] is True


def skipped_test_in_a_sandbox(project: RalphProject, run_loop: Any, runner: str, code: str) -> None:
    """In a sandbox the ignored ``.quick`` never reaches a gate: every ship-in clears what the agent left
    ignored in its checkout, so the tests gate runs the test (it fails on the wrong code) and sends the story
    back before any review; the next implement iteration's right code is the one approved."""
    script = IterationScript({
        1: iteration(code % "-", "touch .quick", set_fields("US-001", reviewStatus="needs_review"),
                     commit("feat: [US-001] - add")),
        2: iteration(code % "+", set_fields("US-001", reviewStatus="needs_review"), commit("fix: [US-001] - add")),
        3: approve("US-001", 1),
    })
    result = run_loop(runner, script, "-n", "4")

    assert result.returncode == 0, result.stdout + result.stderr
    assert [e["mode"] for e in project.events("iteration_started")] == ["implement", "implement", "review"]
    gates = [e for e in project.events("gate") if e["gate"] == "tests"]
    assert [(e["iteration"], e["passed"], e["where"]) for e in gates] == [(1, False, "sandbox"), (2, True, "sandbox")]
    assert "AssertionError: -1 != 5" in gates[0]["output"], gates[0]["output"]  # run, not skipped
    finals = [(e["iteration"], e["gate"], e["passed"]) for e in project.events("final_gate")]
    assert finals == [(3, "test-integrity", True), (3, "tests", True)], finals
    assert not project.events("final_check_failed") and not (project.path / ".quick").exists()
    assert "return a + b" in (project.path / "calc.py").read_text() and project.story("US-001")["passes"] is True


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_run_is_not_complete_while_only_a_skipped_test_passes_on_the_final_tree(
    ralph_project: RalphProject, run_loop: Any, runner: str
) -> None:
    approval_of_code_only_a_skipped_test_passes(ralph_project, run_loop, runner)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_run_is_not_complete_while_the_final_tree_fails_the_gates(
    ralph_project: RalphProject, run_loop: Any, runner: str
) -> None:
    approval_of_a_tree_that_fails(ralph_project, run_loop, runner)
    if runner == "docker-sandbox":
        assert {e["where"] for e in ralph_project.events("final_gate")} == {"sandbox"}


def test_a_run_that_finds_every_story_done_checks_the_tree_first(ralph_project: RalphProject, run_loop: Any) -> None:
    """An earlier run may have ended (killed) between an approval and its final check."""
    (ralph_project.path / "check.py").write_text(CHECK)
    (ralph_project.path / "US-001.txt").write_text("helo")
    done = story("US-001", passes=True, reviewStatus="approved", reviewCount=1, notes="approved earlier")
    ralph_project.write_stories([done], verifyCommands=["python3 check.py"])
    script = IterationScript({1: fix("US-001", "printf hello > US-001.txt"), 2: approve("US-001", 2)})
    result = run_loop("direct", script, "-n", "3")

    assert result.returncode == 0, result.stdout + result.stderr
    assert [e["mode"] for e in ralph_project.events("iteration_started")] == ["review-fix", "review"]
    finals = [(e["iteration"], e["gate"], e["passed"]) for e in ralph_project.events("final_gate")]
    # at the start the story's start is not known (an earlier run forgot it): test-integrity takes HEAD as the
    # start (no test there: nothing for its trusted run); the review-fix is where the story starts now
    assert finals == [(0, "test-integrity", True), (0, "tests", False), (2, "test-integrity", True),
                      (2, "tests", True)], finals
    assert (ralph_project.path / "US-001.txt").read_text() == "hello"
