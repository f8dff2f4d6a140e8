"""The task-list whitelist through the real Claude Code CLI: scripted agents that cheat with the task list.

Each case is what got through on main (issue 20, item 1): the agent's change outside its
policy's whitelist ended "complete" on wrong or missing work, or made stories silently drop
out.  Now the change is undone, logged as a violation, told to the next iteration, and the
run does not end "complete" on it.  The edits are Python statements built here as data; they
reach the CLI only as tool inputs.  Unit level: tests/test_whitelist.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, ModelRequest, ScriptedModelServer, Turn, text
from ralph.testing.project import RalphProject, story

from test_trust_loop_claude import commit, edit_tasks, iteration, requests_of, set_fields

pytestmark = pytest.mark.real_claude


def write_file(name: str, content: str) -> str:
    return f"printf %s {json.dumps(content)} > {name}"


def violations(project: RalphProject, story_id: str) -> list[dict[str, Any]]:
    return [v for v in project.events("violation") if v["story"] == story_id]


# -- skip-review: passes on every story ------------------------------------------------------------------


def skip_review_cheat() -> IterationScript:
    """Iteration 1 implements US-001 and sets passes on every story; iteration 2 implements US-002 honestly."""
    everything = "[s.update(passes=True, notes='done') for s in d['userStories']]"
    honest = iteration(
        write_file("US-002.txt", "csv"), set_fields("US-002", passes=True, notes="exports CSV"),
        commit("feat: [US-002] - export"), say="Implemented US-002.",
    )  # fmt: skip
    cheat = iteration(write_file("US-001.txt", "hello"), edit_tasks(everything), commit("feat: [US-001] - all done"),
                      say="All done <promise>COMPLETE</promise>")  # fmt: skip
    # the spec gate's reviewer (on by default under skip-review): a fresh session, no iteration number
    met = [Turn([text('Checked.\n```json\n{"verdict": "met", "unmet": [], "extra": []}\n```')])]
    return IterationScript({1: cheat, 2: honest}, default=met)


def assert_skip_review_cheat_undone(project: RalphProject, result: Any, server: Any, script: IterationScript) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert project.summary()["iterations"] == 2  # main ended "complete" after iteration 1, US-002 never written
    assert (project.path / "US-002.txt").read_text() == "csv"
    assert sorted(v["check"] for v in violations(project, "US-002") if v["iteration"] == 1) == ["task-list", "transitions"]
    first = [e for e in project.events("transition_undone") if e["iteration"] == 1]
    assert first and first[0]["stories"] == ["US-002"]
    assert "Story US-002 is not this iteration's story (US-001)" in requests_of(server, script, 2)
    assert project.story("US-001")["passes"] and project.story("US-002")["notes"] == "exports CSV"


RUNNERS = ["direct", pytest.param("docker-sandbox", id="sandbox", marks=pytest.mark.slow),
           pytest.param("bwrap", marks=pytest.mark.slow)]


@pytest.fixture
def run_in(request: pytest.FixtureRequest, ralph_project: RalphProject, claude_binary: Path, claude_agent_env: Any) -> Any:
    """``result, server = run_in(runner, script, *args)``: ``ralph run`` with the real CLI, direct or in the sandbox."""
    servers: list[ScriptedModelServer] = []

    def run(runner: str, script: Any, *args: str) -> tuple[Any, ScriptedModelServer]:
        host = "127.0.0.1"
        if runner == "bwrap":
            request.getfixturevalue("bwrap_available")
        if runner == "docker-sandbox":
            request.getfixturevalue("sandbox_project")
            host = request.getfixturevalue("gateway")
            lines = ["[docker-sandbox]", 'network = "allowlist"', 'env = ["CLAUDE_CODE_MAX_RETRIES", "API_TIMEOUT_MS"]']
            (ralph_project.path / "ralph.toml").write_text("\n".join(lines) + "\n")
            ralph_project.commit_all("sandbox config")
        server = ScriptedModelServer(script, host=host).start()
        servers.append(server)
        result = ralph_project.run(
            "run", "--runner", runner, "--agent", "claude", "--timeout", "120", *args,
            env=claude_agent_env(server.url), timeout=600,
        )  # fmt: skip
        return result, server

    yield run
    for server in servers:
        server.stop()


# the docker fixtures, for the sandbox case (requested lazily above)
import test_docker_sandbox as _docker  # noqa: E402

docker_client, gateway, sandbox_image, sandbox_project = (
    _docker.docker_client, _docker.gateway, _docker.sandbox_image, _docker.sandbox_project)


@pytest.mark.parametrize("runner", RUNNERS)
def test_skip_review_passes_on_every_story_is_undone(ralph_project, run_in, runner: str) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2, acceptanceCriteria=["exports CSV"])])
    script = skip_review_cheat()
    result, server = run_in(runner, script, "--skip-review", "-n", "2")
    assert_skip_review_cheat_undone(ralph_project, result, server, script)


# -- review: another story submitted; loop-only fields; unknown dependencies ---------------------------------


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_implement_iteration_cannot_submit_another_story(ralph_project, run_in, runner: str) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2, acceptanceCriteria=["exports CSV"])])
    submit_other = iteration(
        write_file("US-001.txt", "hello"), set_fields("US-002", reviewStatus="needs_review"),
        commit("feat: [US-002] - implement"), say="Implemented.",
    )  # fmt: skip
    approve_other = iteration(
        set_fields("US-002", reviewStatus="approved", passes=True, reviewCount=1, notes="reviewed"),
        commit("review: [US-002] - approved"), say="Approved.",
    )  # fmt: skip
    script = IterationScript({1: submit_other, 2: approve_other})
    result, server = run_in(runner, script, "-n", "2")

    assert result.returncode == 1, result.stderr  # iterations exhausted
    other = ralph_project.story("US-002")
    assert (other["passes"], other["reviewStatus"], other["reviewCount"]) == (False, None, 0)  # main: approved, never built
    assert [v["iteration"] for v in violations(ralph_project, "US-002") if v["check"] == "transitions"] == [1, 2]
    assert [e["mode"] for e in ralph_project.events("iteration_started")] == ["implement", "implement"]
    assert "not this iteration's story (US-001)" in requests_of(server, script, 1)  # the Stop answer, same session
    assert "not this iteration's story (US-001)" in requests_of(server, script, 2)  # the next prompt
    assert "complete" not in ralph_project.summary()["reason"]


@pytest.mark.parametrize("runner", RUNNERS)
def test_loop_only_fields_and_dependencies_of_other_stories_are_restored(ralph_project, run_in, runner: str) -> None:
    ralph_project.write_stories(
        [story("US-001"), story("US-002", priority=2), story("US-003", priority=3, dependsOn=["US-002"])]
    )
    fake = "[ralph] stopped at tier 3: the tests gate failed 5 times with the same error"
    drop_out = edit_tasks(
        f"[s.update(failed=True, failureReason={fake!r}) for s in d['userStories'] if s['id']=='US-002'];"
        "[s.update(dependsOn=['US-999']) for s in d['userStories'] if s['id']=='US-003']"
    )
    script = IterationScript({
        1: iteration(write_file("US-001.txt", "hello"), drop_out, set_fields("US-001", reviewStatus="needs_review"),
                     commit("feat: [US-001] - implement"), say="Implemented."),
        2: iteration(set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
                     commit("review: [US-001] - approved"), say="Approved."),
    })  # fmt: skip
    result, server = run_in(runner, script, "-n", "2")

    assert result.returncode == 1, result.stderr  # main: exit 3, "finished with failed stories: US-002"
    assert "failed stories" not in ralph_project.summary()["reason"]
    second, third = ralph_project.story("US-002"), ralph_project.story("US-003")
    assert (second["failed"] if "failed" in second else False, second.get("failureReason", "")) == (False, "")
    assert third["dependsOn"] == ["US-002"]
    restored = ralph_project.events("task_list_restored")
    assert restored and restored[0]["reverted_fields"] == {"US-002": ["failed", "failureReason"], "US-003": ["dependsOn"]}
    told = requests_of(server, script, 2)
    assert "only the loop sets them" in told and "Story US-003's dependsOn changed" in told
    assert ralph_project.story("US-001")["passes"] is True  # the legal work stands
    assert ralph_project.git("status", "--porcelain") == ""


# -- a split whose new criterion negates the dropped one -------------------------------------------------------

HASHED = "passwords are hashed"


class HonestReviewer:
    """The scripted agent, except that a review iteration approves only when the story it is shown no
    longer asks for hashed passwords (a fresh-context reviewer checks the criteria it is given)."""

    def __init__(self, script: IterationScript, reject: list[Turn]) -> None:
        self.script = script
        self.reject = reject

    def __call__(self, request: ModelRequest) -> Any:
        first = request.first_user_text
        if "Mode: **review**" in first and json.dumps(HASHED) in first[first.index("## This iteration"):]:
            index = request.assistant_turns
            return self.reject[index] if index < len(self.reject) else self.reject[-1]
        return self.script(request)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_split_that_negates_the_dropped_criterion_is_undone(ralph_project, run_in, runner: str) -> None:
    ralph_project.write_stories([story("US-001", "Login", acceptanceCriteria=[HASHED, "the login form shows errors"])])
    split = edit_tasks(
        "s=d['userStories'][0];s['acceptanceCriteria']=['the login form shows errors'];"
        f"d['userStories'].append(dict(s,id='US-001-2',title='Hashing',acceptanceCriteria=['out of scope: {HASHED}'],"
        "priority=2,dependsOn=['US-001']))"
    )
    def review(story_id: str, count: int) -> list[Turn]:
        return iteration(set_fields(story_id, reviewStatus="approved", passes=True, reviewCount=count, notes="ok"),
                         commit(f"review: [{story_id}] - approved"), say="Approved.")  # fmt: skip
    script = IterationScript({
        1: iteration(write_file("login.py", "form"), split, set_fields("US-001", reviewStatus="needs_review"),
                     commit("feat: [US-001] - login form (split)"), say="Split and implemented."),
        2: review("US-001", 1),
        3: iteration(set_fields("US-001-2", reviewStatus="needs_review"), commit("feat: [US-001-2] - nothing to do"),
                     say="Out of scope."),
        4: review("US-001-2", 1),
    })  # fmt: skip
    reject = iteration(
        set_fields("US-001", reviewStatus="changes_requested", reviewCount=1, reviewFeedback="1. passwords are stored in clear"),
        commit("review: [US-001] - changes requested"), say="Changes requested.",
    )  # fmt: skip
    result, server = run_in(runner, HonestReviewer(script, reject), "-n", "4")

    assert result.returncode == 1, result.stdout + result.stderr  # main: exit 0, complete without hashing
    tasks = ralph_project.tasks()["userStories"]
    assert [s["id"] for s in tasks] == ["US-001"]
    assert tasks[0]["acceptanceCriteria"] == [HASHED, "the login form shows errors"] and tasks[0]["passes"] is False
    found = {(v["check"], v["story"]) for v in ralph_project.events("violation") if v["iteration"] == 1}
    assert found == {("task-list", "US-001"), ("task-list", "US-001-2")}
    assert "word for word" in requests_of(server, script, 2)
    assert [e["dropped"] for e in ralph_project.events("task_list_restored")] == [["US-001-2"]]


# -- a third party's policy gets the whitelist from its table ------------------------------------------------------

QA_POLICY = '''
from ralph.api import Policy, hookimpl
from ralph.api.policies import Selection
from ralph.api.policies import ModeRules, Transition

RALPH_API = "2"


def _stage(story):
    return getattr(story, "stage", None)


class QaPolicy(Policy):
    """Implement builds a story (stage "built"), review verifies it (stage "verified", passes)."""

    name = "qa"
    uses_review = True
    state_fields = ("passes", "stage")
    initial_state = {"passes": False, "stage": None}
    table = {
        "implement": ModeRules((
            Transition("unfinished", lambda old, new: _stage(old) == _stage(new) and old.passes == new.passes),
            Transition("build", lambda old, new: _stage(old) is None and _stage(new) == "built" and not new.passes),
        ), split=True),
        "review": ModeRules((
            Transition("verify", lambda old, new: _stage(old) == "built" and _stage(new) == "verified" and new.passes),
        )),
    }

    def select(self, tasks):
        for story in tasks.userStories:
            if _stage(story) == "built":
                return Selection("review", story.id, "built")
        for story in tasks.userStories:
            if _stage(story) is None:
                return Selection("implement", story.id, "open")
        return None

    def is_complete(self, tasks):
        return all(_stage(s) == "verified" and s.passes for s in tasks.userStories)

    def prompt_section(self, selection, tasks):
        return f"- Mode: **{selection.mode}** (qa)\\n- Story: **{selection.story_id}**"


@hookimpl
def ralph_register_policies(register):
    register(QaPolicy)
'''


def test_a_third_party_policy_gets_the_whitelist_from_its_table(
    ralph_project, scripted_model, claude_binary, claude_agent_env, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "ralph_qa-1.0.dist-info").mkdir(parents=True)
    (site / "ralph_qa-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ralph-qa\nVersion: 1.0\n")
    (site / "ralph_qa-1.0.dist-info" / "entry_points.txt").write_text("[ralph]\nqa = ralph_qa_policy\n")
    (site / "ralph_qa_policy.py").write_text(textwrap.dedent(QA_POLICY))
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)])
    script = IterationScript({
        # builds US-001 and marks US-002 verified (and passing) on the way
        1: iteration(write_file("US-001.txt", "hello"), set_fields("US-001", stage="built"),
                     set_fields("US-002", stage="verified", passes=True, notes="x"), commit("feat: [US-001] - build"),
                     say="Built."),
        2: iteration(set_fields("US-001", stage="verified", passes=True, notes="ok"), commit("qa: [US-001] - verified"),
                     say="Verified."),
    })  # fmt: skip
    server = scripted_model(script)
    result = ralph_project.run(
        "run", "--runner", "direct", "--agent", "claude", "--timeout", "120", "--policy", "qa", "-n", "2",
        env={**claude_agent_env(server.url), "PYTHONPATH": str(site)}, timeout=600,
    )

    assert result.returncode == 1, result.stdout + result.stderr  # without the whitelist: complete after iteration 2
    assert ralph_project.story("US-001")["stage"] == "verified"
    other = ralph_project.story("US-002")
    assert other["passes"] is False and "stage" not in other
    assert sorted(v["check"] for v in violations(ralph_project, "US-002")) == ["task-list", "transitions"]
    assert "Story US-002 is not this iteration's story (US-001)" in requests_of(server, script, 2)
