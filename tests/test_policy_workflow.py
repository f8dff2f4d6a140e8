"""The policy owns its workflow: a third-party policy's own state fields and states are checked in a loop
and, from the marker the loop wrote, outside one; the final check, the snapshot and the story states
shown to people are the policy's, not the review policy's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from ralph.contracts import Policy, StoryState
from ralph.testing import RalphProject, ReplayScript, commit, say, set_fields, story
from ralph.testing.replay import run as run_command
from tests.fakedists import FakeDists

QA_MODULE = """
    from ralph.api import Policy, hookimpl
    from ralph.api.policies import Selection
    from ralph.api.policies import ModeRules, Transition

    def _stage(story):
        return getattr(story, "stage", None)

    TABLE = {
        "implement": ModeRules((
            Transition("unfinished", lambda old, new: _stage(old) == _stage(new) and old.passes == new.passes),
            Transition("build", lambda old, new: _stage(old) is None and _stage(new) == "built" and not new.passes),
        ), split=True),
        "review": ModeRules((
            Transition("verify", lambda old, new: _stage(old) == "built" and _stage(new) == "verified" and new.passes),
        )),
    }

    class QaPolicy(Policy):
        '''A third-party workflow: its own state field (``stage``, an extra key of the story) and states.'''

        name = "qa"
        description = "build, then verify (a test policy)"
        state_fields = ("passes", "stage")
        initial_state = {"passes": False, "stage": None}
        table = TABLE

        def select(self, tasks):
            for s in tasks.userStories:
                if _stage(s) != "verified":
                    return Selection("review" if _stage(s) == "built" else "implement", s.id, "qa")
            return None

        def is_complete(self, tasks):
            return all(_stage(s) == "verified" for s in tasks.userStories)

        def prompt_section(self, selection, tasks):
            return f"- Mode: {selection.mode}"

        def story_state(self, story):
            return _stage(story) or "not built"

    @hookimpl
    def ralph_register_policies(register):
        register(QaPolicy)
"""


@pytest.fixture
def qa(fake_dists: FakeDists) -> FakeDists:
    fake_dists.add({"fake-qa": "ralph_fake_qa"}, {"ralph_fake_qa": QA_MODULE}, name="fake_qa",
                   declared={"ralph.policies": {"fake-qa.qa": "ralph_fake_qa:QaPolicy"}})
    return fake_dists


def test_a_third_party_policys_own_fields_are_checked_in_a_loop_and_outside_one(
    qa: FakeDists, ralph_project: RalphProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    aside = tmp_path / "aside"
    aside.mkdir()
    ralph_project.write_stories([story("US-001")])
    replay = ReplayScript()
    replay.iteration(  # verifying in an implement iteration: not one of the table's transitions
        1, run_command(f"cp .ralph-active {aside}/marker.json"), set_fields("US-001", stage="verified", passes=True, notes="n"),
        commit("feat: [US-001] - skip the build"), run_command(f"cp ralph/tasks.json {aside}/tasks.json"), say("done"),
    )
    replay.iteration(2, set_fields("US-001", stage="built"), commit("feat: [US-001] - build"), say("built"))
    replay.iteration(3, set_fields("US-001", stage="verified", passes=True, notes="ok"), commit("review: [US-001] - ok"), say("ok"))
    env = {"RALPH_REPLAY_SCRIPT": str(replay.write(tmp_path / "script.json")), "PYTHONPATH": str(qa.root)}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--policy", "qa", "-n", "3", env=env)

    assert result.returncode == 0, result.stderr + result.stdout
    undone = [e for e in ralph_project.events("violation") if e["check"] == "transitions"]
    assert [(e["iteration"], e["story"]) for e in undone] == [(1, "US-001")] and "stage" in undone[0]["message"]
    started = [e["mode"] for e in ralph_project.events("iteration_started")]
    assert started == ["implement", "implement", "review"]  # the cheat was undone: US-001 had to be built first
    final = ralph_project.story("US-001")
    assert (final["stage"], final["passes"]) == ("verified", True)
    # the story's state in the policy's own words, as reports and the dashboard show it
    assert [s["state"] for s in ralph_project.summary()["stories"]] == ["verified"]
    states = ralph_project.events("story_states")
    assert [s["state"] for s in states[0]["stories"]] == ["not built"]
    # an event whenever a state changes, also when only the policy's own field moved (iteration 2: `stage`)
    assert [[s["state"] for s in e["stories"]] for e in states] == [["not built"], ["built"], ["verified"]]

    # the marker the loop wrote: the policy, its state fields, each story's state (stage absent, not yet set)
    marker = json.loads((aside / "marker.json").read_text())
    assert (marker["policy"], marker["stateFields"]) == ("qa", ["passes", "stage"])
    assert marker["preIterationSnapshot"] == {"US-001": {"passes": False}}
    # outside a loop, the Stop hook judges the same cheat from that marker, with the policy's own table
    from ralph.hooks.answers import handle_without_loop

    shutil.copy(aside / "marker.json", ralph_project.path / ".ralph-active")
    shutil.copy(aside / "tasks.json", ralph_project.tasks_path)
    monkeypatch.setenv("RALPH_STATE_DIR", str(ralph_project.state_dir))
    answered = handle_without_loop({"hook_event_name": "Stop", "cwd": str(ralph_project.path), "session_id": "s"},
                                   {"RALPH_HOOK_DAEMON": "0"})
    assert answered.get("decision") == "block", answered
    blocked = [line for line in answered["reason"].splitlines() if line.startswith("- [transitions]")]
    assert blocked and "US-001" in blocked[0] and "stage" in blocked[0], answered["reason"]


class Staged(Policy):
    """A policy of its own states, for the unit tests below."""

    name = "staged"
    state_fields = ("passes", "stage")
    initial_state = {"passes": False, "stage": None}

    def select(self, tasks):  # type: ignore[no-untyped-def]
        return None

    def is_complete(self, tasks):  # type: ignore[no-untyped-def]
        return False

    def prompt_section(self, selection, tasks):  # type: ignore[no-untyped-def]
        return ""


def test_the_snapshot_carries_the_policys_fields_and_a_field_the_story_lacks_as_absent() -> None:
    from ralph.tasks import TaskList

    tasks = TaskList.model_validate({"project": "p", "branchName": "b", "description": "", "userStories": [
        story("US-001", stage="built"), story("US-002")]})
    snapshot = Staged(SimpleNamespace()).snapshot(tasks)  # type: ignore[arg-type]
    built, fresh = snapshot["US-001"], snapshot["US-002"]
    assert built.as_dict() == {"passes": False, "stage": "built"} and built.stage == "built"
    assert fresh.as_dict() == {"passes": False} and fresh.carries("stage") and getattr(fresh, "stage", None) is None
    assert fresh == StoryState.from_dict({"passes": False}, ["passes", "stage"]) != StoryState(passes=False)
    assert hash(built) == hash(StoryState.from_dict(built.as_dict(), built.fields))
    with pytest.raises(AttributeError):
        built.passes = True  # type: ignore[misc]


def test_the_one_pass_snapshot_is_each_storys_state_of_and_an_own_state_of_is_still_asked() -> None:
    from ralph.tasks import TaskList

    tasks = TaskList.model_validate({"project": "p", "branchName": "b", "description": "", "userStories": [
        story("US-001", stage="built"), story("US-002"), story("US-003", stage=["a", "list"]),
        story("US-004", stage="built"), story("US-005", stage={"nested": [1]})]})
    policy = Staged(SimpleNamespace())  # type: ignore[arg-type]
    snapshot = policy.snapshot(tasks)
    one_by_one = {s.id: policy.state_of(s) for s in tasks.userStories}
    assert list(snapshot) == list(one_by_one) and snapshot == one_by_one
    assert snapshot["US-001"] is snapshot["US-004"] is one_by_one["US-001"]  # interned as before
    assert snapshot["US-003"].stage == ["a", "list"] and snapshot["US-002"].carries("stage")

    class Own(Staged):
        def state_of(self, story):  # type: ignore[no-untyped-def]
            return StoryState(passes=story.id == "US-002")

    assert {k: v.as_dict() for k, v in Own(SimpleNamespace()).snapshot(tasks).items()} == {  # type: ignore[arg-type]
        s.id: {"passes": s.id == "US-002"} for s in tasks.userStories}


def test_the_final_check_reopens_a_story_the_policys_way() -> None:
    from ralph_plugins.policies.review import ReviewPolicy
    from ralph_plugins.policies.skip_review import SkipReviewPolicy

    settings = SimpleNamespace(config=SimpleNamespace(review_cap=5))
    review, skip = ReviewPolicy(settings), SkipReviewPolicy(settings)  # type: ignore[arg-type]
    assert (review.reopen_mode, skip.reopen_mode, Staged.reopen_mode) == ("review-fix", "implement", "implement")
    approved = SimpleNamespace(passes=True, reviewStatus="approved", reviewCount=1, reviewFeedback="")
    review.reopen(approved)
    assert review.send_back(approved, review.reopen_mode, "verify", None) == ["reviewStatus → changes_requested"]
    assert (approved.passes, approved.reviewStatus) == (False, "changes_requested")
    done = SimpleNamespace(passes=True, reviewStatus=None, reviewCount=0, reviewFeedback="")
    skip.reopen(done)  # nothing of its own: send_back puts the initial state back
    assert skip.send_back(done, skip.reopen_mode, "verify", None) == ["passes true → false"] and done.passes is False
