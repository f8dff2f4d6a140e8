"""The task-list whitelist, unit level: every check derived from the policy's table (docs/design.md, trust boundary rule 4).

``check_list(before, after, selected, policy=..., mode=...)`` is what the loop applies after every
iteration and in every Stop answer; ``ListCheck.apply`` plus ``Policy.restore_state`` is its undo.
The same attacks through the real Claude Code CLI: tests/test_whitelist_claude.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ralph import tasks as model
from ralph.config import RalphConfig
from ralph.contracts import ModeRules, Policy, Selection, StoryHistory, Transition
from ralph.loop.listcheck import CHECK, check_list
from ralph.settings import Settings
from ralph.tasks import TaskList
from ralph.testing.project import story
from ralph.transitions import state_changes
from ralph_plugins.policies.review import ReviewPolicy
from ralph_plugins.policies.skip_review import SkipReviewPolicy

SETTINGS = Settings(project_dir=Path("."), config=RalphConfig(review_cap=3))
REVIEW, SKIP = ReviewPolicy(SETTINGS), SkipReviewPolicy(SETTINGS)


def tasks(*stories: dict[str, Any]) -> TaskList:
    return TaskList.model_validate(
        {"project": "P", "branchName": "ralph/p", "description": "d", "verifyCommands": [], "userStories": list(stories)}
    )


BEFORE = tasks(
    story("US-001", acceptanceCriteria=["passwords are hashed", "login form shows errors"]),
    story("US-002", priority=2, acceptanceCriteria=["exports CSV"]),
    story("US-003", priority=3, acceptanceCriteria=["imports CSV"], dependsOn=["US-002"]),
)


def after(**changes: Any) -> TaskList:
    """BEFORE with per-story changes (``US_002={...}``) and ``added=[...]`` stories at the end."""
    stories = [{**s.model_dump(), **changes.get(s.id.replace("-", "_"), {})} for s in BEFORE.userStories]
    return tasks(*stories, *changes.get("added", []))


def repaired(result: Any, policy: Policy, now: TaskList, before: TaskList = BEFORE) -> TaskList:
    """What the loop writes back: the list check's undo, then the state fields of each story a violation names."""
    fixed = result.apply(before, now)
    ids = {v.story_id for v in result.violations if v.undoable and v.story_id and v.check != CHECK}
    for s in fixed.userStories:
        if s.id in ids:
            policy.restore_state(s, before.story(s.id))
    return fixed


def checks(result: Any) -> list[tuple[str, str | None]]:
    return sorted((v.check, v.story_id) for v in result.violations)


# -- what got through on main -----------------------------------------------------------------------


def test_skip_review_passes_on_every_story_keeps_only_the_selected_one() -> None:
    now = after(**{sid: {"passes": True, "notes": "done"} for sid in ("US_001", "US_002", "US_003")})
    result = check_list(BEFORE, now, "US-001", policy=SKIP, mode="implement")
    assert checks(result) == [(CHECK, "US-002"), (CHECK, "US-003"), ("transitions", "US-002"), ("transitions", "US-003")]
    fixed = repaired(result, SKIP, now)
    assert [(s.id, s.passes, s.notes) for s in fixed.userStories] == [("US-001", True, "done"), ("US-002", False, ""), ("US-003", False, "")]


def test_implement_submitting_another_story_for_review_is_undone() -> None:
    now = after(US_002={"reviewStatus": "needs_review"})
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [("transitions", "US-002")]
    assert "not this iteration's story (US-001)" in result.violations[0].message
    assert repaired(result, REVIEW, now).story("US-002").reviewStatus is None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"failed": True, "failureReason": "[ralph] stopped: stuck at the tests gate"}, id="failed"),
        pytest.param({"dependsOn": ["US-999"]}, id="unknown-dependency"),
        pytest.param({"priority": 0}, id="priority"),
        pytest.param({"notes": "done"}, id="notes"),
        pytest.param({"mine": "an extra key"}, id="extra-key"),
    ],
)
@pytest.mark.parametrize("mode", ["implement", "review", "review-fix"])
def test_any_change_to_another_story_is_undone(change: dict[str, Any], mode: str) -> None:
    now = after(US_002=change)
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode=mode)
    assert (CHECK, "US-002") in checks(result)
    assert repaired(result, REVIEW, now).story("US-002").model_dump() == BEFORE.story("US-002").model_dump()


def test_loop_only_fields_of_the_selected_story_are_undone() -> None:
    now = after(US_001={"failed": True, "failureReason": "gave up", "notes": "blocked"})
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-001")] and "only the loop sets them" in result.violations[0].message
    fixed = repaired(result, REVIEW, now).story("US-001")
    assert (fixed.failed, fixed.failureReason, fixed.notes) == (False, "", "blocked")  # notes is the mode's


@pytest.mark.parametrize("change", [{"priority": 9}, {"dependsOn": ["US-002"]}, {"title": "Easier"}])
def test_the_selected_story_changes_only_its_mode_fields(change: dict[str, Any]) -> None:
    now = after(US_001={**change, "reviewStatus": "needs_review"})
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-001")]
    fixed = repaired(result, REVIEW, now).story("US-001")
    assert fixed.reviewStatus == "needs_review"  # the legal part stands
    assert fixed.model_dump() == {**BEFORE.story("US-001").model_dump(), "reviewStatus": "needs_review"}


# -- splits ---------------------------------------------------------------------------------------------


def split(*criteria: str, **fields: Any) -> TaskList:
    return after(
        US_001={"acceptanceCriteria": ["login form shows errors"], "title": "Login form"},
        added=[story("US-001-2", acceptanceCriteria=list(criteria), dependsOn=["US-001"], **fields)],
    )


def test_a_split_that_moves_the_criterion_word_for_word_is_legal() -> None:
    now = split("passwords  are\nhashed")
    assert check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement").violations == []


@pytest.mark.parametrize("moved", ["out of scope: passwords are hashed", "passwords are hashed (if time allows)", "Passwords are hashed"])
def test_a_split_whose_new_criterion_is_not_the_dropped_one_is_undone(moved: str) -> None:
    now = split(moved)
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-001"), (CHECK, "US-001-2")]
    assert repaired(result, REVIEW, now).model_dump() == BEFORE.model_dump()


@pytest.mark.parametrize("mode", ["review", "review-fix"])
def test_only_a_mode_that_may_split_adds_stories(mode: str) -> None:
    now = split("passwords are hashed")
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode=mode)
    assert (CHECK, "US-001-2") in checks(result) and (CHECK, "US-001") in checks(result)
    assert repaired(result, REVIEW, now).model_dump() == BEFORE.model_dump()


def test_a_new_story_that_is_no_split_is_removed() -> None:
    now = after(added=[story("US-004", acceptanceCriteria=["file exists"], passes=True, notes="x")])
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-004")] and result.drop == ["US-004"]
    assert repaired(result, REVIEW, now).model_dump() == BEFORE.model_dump()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"passes": True, "reviewStatus": "approved", "notes": "x"}, ("transitions", "US-001-2"), id="approved"),
        pytest.param({"failed": True, "failureReason": "x"}, (CHECK, "US-001-2"), id="loop-fields"),
    ],
)
def test_a_split_off_story_starts_in_the_initial_state(fields: dict[str, Any], expected: tuple[str, str]) -> None:
    now = split("passwords are hashed", **fields)
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [expected]
    new = repaired(result, REVIEW, now).story("US-001-2")
    assert (new.passes, new.reviewStatus, new.failed, new.failureReason) == (False, None, False, "")
    assert new.acceptanceCriteria == ["passwords are hashed"]  # the split itself stands


@pytest.mark.parametrize("deps", [["US-999"], ["US-001-2"]])
def test_a_split_off_story_depends_only_on_stories_of_the_list(deps: list[str]) -> None:
    now = after(
        US_001={"acceptanceCriteria": ["login form shows errors"]},
        added=[story("US-001-2", acceptanceCriteria=["passwords are hashed"], dependsOn=deps)],
    )
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-001"), (CHECK, "US-001-2")]  # the split fails as a whole
    assert repaired(result, REVIEW, now).model_dump() == BEFORE.model_dump()


def test_split_off_stories_that_wait_on_each_other_are_removed() -> None:
    three = ["passwords are hashed", "login form shows errors", "sessions expire"]
    before = tasks(story("US-001", acceptanceCriteria=three))
    now = tasks(
        story("US-001", acceptanceCriteria=["login form shows errors"]),
        story("US-001-2", acceptanceCriteria=["passwords are hashed"], dependsOn=["US-001-3"]),
        story("US-001-3", acceptanceCriteria=["sessions expire"], dependsOn=["US-001-2"]),
    )
    result = check_list(before, now, "US-001", policy=REVIEW, mode="implement")
    assert {"US-001-2", "US-001-3"} <= set(result.drop) and "cycle" in " ".join(v.message for v in result.violations)
    assert repaired(result, REVIEW, now, before).model_dump() == before.model_dump()


def test_a_split_makes_at_most_one_story_per_moved_criterion() -> None:
    many = [story(f"US-001-{n}", acceptanceCriteria=["passwords are hashed"], dependsOn=["US-001"]) for n in range(2, 3000)]
    now = after(US_001={"acceptanceCriteria": ["login form shows errors"]}, added=many)
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert len(result.drop) == len(many) - 1 and "at most one new story per criterion" in result.violations[-1].message
    assert [s.id for s in repaired(result, REVIEW, now).userStories] == ["US-001", "US-002", "US-003", "US-001-2"]


def test_a_split_off_story_waiting_on_a_removed_one_goes_too() -> None:
    chain = [story(f"US-001-{n}", acceptanceCriteria=["passwords are hashed"], dependsOn=[f"US-001-{n + 1}"]) for n in range(2, 900)]
    chain[-1]["acceptanceCriteria"] = ["made up"]
    now = after(US_001={"acceptanceCriteria": ["login form shows errors"]}, added=chain)
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert sorted(result.drop) == sorted(s["id"] for s in chain)
    assert repaired(result, REVIEW, now).model_dump() == BEFORE.model_dump()


def test_criteria_added_to_the_selected_story_are_undone() -> None:
    now = after(US_001={"acceptanceCriteria": ["passwords are hashed", "login form shows errors", "a new idea"]})
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-001")] and "added or reworded" in result.violations[0].message


# -- the list as a whole -------------------------------------------------------------------------------


def test_reordered_stories_go_back_in_order() -> None:
    now = tasks(*[s.model_dump() for s in reversed(BEFORE.userStories)])
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert result.reorder and checks(result) == [(CHECK, None)]
    assert [s.id for s in repaired(result, REVIEW, now).userStories] == ["US-001", "US-002", "US-003"]


def test_a_copy_of_a_story_is_removed() -> None:
    fake = {**BEFORE.story("US-002").model_dump(), "passes": True, "reviewStatus": "approved", "reviewCount": 1, "notes": "x"}
    now = tasks(fake, *[s.model_dump() for s in BEFORE.userStories])
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert result.copies == ["US-002"]
    assert repaired(result, REVIEW, now).model_dump() == BEFORE.model_dump()


def test_person_only_fields_are_undone_and_never_a_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert model.PERSON_FIELDS == ("allowTestChanges",)
    allowed = ["tests/test_login.py"]
    before = tasks(*[{**s.model_dump(), "allowTestChanges": allowed} if s.id == "US-002" else s.model_dump() for s in BEFORE.userStories])
    # the agent allows itself, on its own story, on another one, and on a story it splits off
    mine = {**before.story("US-001").model_dump(), "allowTestChanges": ["tests/"], "acceptanceCriteria": ["login form shows errors"]}
    now = tasks(
        mine,
        {**before.story("US-002").model_dump(), "allowTestChanges": ["tests/", "conftest.py"]},
        before.story("US-003").model_dump(),
        story("US-001-2", acceptanceCriteria=["passwords are hashed"], allowTestChanges=["tests/"]),
    )
    wide = type("Wide", (ReviewPolicy,), {"table": {"implement": ModeRules(REVIEW.table["implement"].transitions, frozenset({"notes", "allowTestChanges"}), True)}})
    result = check_list(before, now, "US-001", policy=wide(SETTINGS), mode="implement")
    assert checks(result) == [(CHECK, "US-001"), (CHECK, "US-001-2"), (CHECK, "US-002")]
    assert all("only a person sets it" in v.message for v in result.violations)
    fixed = repaired(result, REVIEW, now, before)
    assert [s.allowTestChanges for s in fixed.userStories] == [[], allowed, [], []]
    assert fixed.story("US-001-2") is not None  # the split stands


def test_a_person_only_field_is_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "PERSON_FIELDS", (*model.PERSON_FIELDS, "reviewer"))  # the one line
    now = after(US_001={"reviewer": "me", "reviewStatus": "needs_review"}, US_002={"reviewer": "me"})
    result = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement")
    assert checks(result) == [(CHECK, "US-001"), (CHECK, "US-002")]
    assert all("only a person sets it" in v.message for v in result.violations)
    fixed = repaired(result, REVIEW, now)
    assert [getattr(s, "reviewer", None) for s in fixed.userStories] == [None, None, None]
    assert fixed.story("US-001").reviewStatus == "needs_review"


# -- the table is the single source ---------------------------------------------------------------------


def test_the_loop_and_the_stop_hook_outside_a_loop_judge_alike() -> None:
    """The in-loop check (selected known) and the snapshot check (outside a loop) come from one table."""
    now = after(US_001={"reviewStatus": "needs_review"})
    loop = check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement").violations
    outside = REVIEW.transition_violations("implement", BEFORE.snapshot(), now)
    assert loop == outside == []
    now = after(US_001={"passes": True, "notes": "x"})
    loop = [v.message for v in check_list(BEFORE, now, "US-001", policy=REVIEW, mode="implement").violations]
    outside = [v.message for v in REVIEW.transition_violations("implement", BEFORE.snapshot(), now)]
    assert loop == outside and "passes false → true" in loop[0]


QA_TABLE = {
    "implement": ModeRules(
        (Transition("unfinished", lambda old, new: getattr(old, "stage", None) == getattr(new, "stage", None)
                    and old.passes == new.passes),
         Transition("build", lambda old, new: getattr(old, "stage", None) is None and getattr(new, "stage", None) == "built"
                    and not new.passes)),
        split=True,
    ),
    "review": ModeRules(
        (Transition("verify", lambda old, new: getattr(old, "stage", None) == "built" and getattr(new, "stage", None) == "verified"
                    and new.passes),),
    ),
}  # fmt: skip


class QaPolicy(Policy):
    """A third-party policy: its own state field (``stage``, an extra key) and its own table."""

    name = "qa"
    state_fields = ("passes", "stage")
    initial_state = {"passes": False, "stage": None}
    table = QA_TABLE

    def select(self, tasks: TaskList) -> Selection | None:
        for s in tasks.userStories:
            stage = getattr(s, "stage", None)
            if stage != "verified":
                return Selection("review" if stage == "built" else "implement", s.id)
        return None

    def is_complete(self, tasks: TaskList) -> bool:
        return all(getattr(s, "stage", None) == "verified" for s in tasks.userStories)

    def prompt_section(self, selection: Selection, tasks: TaskList) -> str:
        return f"- Mode: {selection.mode}"


def test_a_third_party_policy_gets_the_whitelist_from_its_table() -> None:
    qa = QaPolicy(SETTINGS)
    assert check_list(BEFORE, after(US_001={"stage": "built"}), "US-001", policy=qa, mode="implement").violations == []
    # verifying in an implement iteration, touching another story's stage, a split-off story already verified
    cheat = after(US_001={"stage": "verified", "passes": True, "notes": "x"}, US_002={"stage": "built"})
    result = check_list(BEFORE, cheat, "US-001", policy=qa, mode="implement")
    assert checks(result) == [("transitions", "US-001"), ("transitions", "US-002")]
    fixed = repaired(result, qa, cheat)
    assert [(getattr(s, "stage", None), s.passes) for s in fixed.userStories[:2]] == [(None, False), (None, False)]
    new = split("passwords are hashed", stage="verified")
    assert checks(check_list(BEFORE, new, "US-001", policy=qa, mode="implement")) == [("transitions", "US-001-2")]
    # a review that gives no verdict; the review mode splits nothing; a mode the table does not name changes nothing
    built = after(US_001={"stage": "built"})
    undecided = check_list(built, built, "US-001", policy=qa, mode="review").violations
    assert [v.message for v in undecided] == [
        "A review iteration must change the state of its story US-001 as one of its transitions says (verify); it left it unchanged."
    ]
    assert (CHECK, "US-001-2") in checks(check_list(BEFORE, split("passwords are hashed"), "US-001", policy=qa, mode="review"))
    assert checks(check_list(BEFORE, after(US_001={"notes": "x"}), "US-001", policy=qa, mode="review-fix")) == [(CHECK, "US-001"), ("transitions", "US-001")]


def test_a_policy_without_a_table_is_asked_itself() -> None:
    class Legacy(QaPolicy):
        table = None

        def transition_violations(self, mode: Any, before: Any, tasks: TaskList) -> list[Any]:
            from ralph.contracts import Violation

            return [Violation("transitions", "legacy says no", "US-001", undoable=True)]

    result = check_list(BEFORE, after(US_001={"notes": "x"}), "US-001", policy=Legacy(SETTINGS), mode="implement")
    assert [v.message for v in result.violations] == ["legacy says no"]


def test_state_changes_name_the_transition_that_allowed_it() -> None:
    now = after(US_001={"reviewStatus": "needs_review"})
    [change] = state_changes(REVIEW, "implement", {s.id: s for s in BEFORE.userStories}, now.userStories, "US-001")
    assert (change.kind, change.legal, change.transition) == ("selected", True, "submit for review")


def test_select_next_sees_each_storys_history() -> None:
    class Avoid(QaPolicy):
        def select_next(self, tasks: TaskList, history: Any = None) -> Selection | None:
            fresh = [s for s in tasks.userStories if history(s.id).failures == 0]
            return Selection("implement", fresh[0].id) if fresh else None

    histories = {"US-001": StoryHistory("US-001", {"implement": 3}, failures=3, stuck=3)}
    choice = Avoid(SETTINGS).select_next(BEFORE, lambda sid: histories.get(sid, StoryHistory(sid)))
    assert choice is not None and choice.story_id == "US-002"
    assert REVIEW.select_next(BEFORE) == REVIEW.select(BEFORE)  # the default: select()


def test_loop_histories_count_iterations_and_gate_attempts(tmp_path: Path) -> None:
    from ralph.loop.history import StoryHistories
    from ralph.loop.records import IterationRecord
    from ralph.loop.storyledger import StoryLedger

    ledger = StoryLedger(tmp_path, 5)
    ledger.state("US-001").record_failure("tests", "FAILED test_a", 1, False, ["a.py"])
    keeper = type("Keeper", (), {"state": staticmethod(ledger.state)})()
    records = [IterationRecord(1, "implement", "US-001"), IterationRecord(2, "review", "US-002"), IterationRecord(3, "implement", "US-001")]
    history = StoryHistories(records, keeper)("US-001")  # type: ignore[arg-type]
    assert history.iterations == {"implement": 2} and history.failures == 1
    assert [(a.gate, a.exit_code) for a in history.attempts] == [("tests", 1)]


def test_a_run_whose_last_iteration_broke_a_rule_says_so() -> None:
    from ralph.loop.finish import unselectable_end

    done = tasks(story("US-001", passes=True, reviewStatus="approved", reviewCount=1, notes="x"))
    code, reason = unselectable_end(done, REVIEW)
    assert code == 1 and "every story is done, but the iteration that finished them broke a rule" in reason
    assert unselectable_end(tasks(story("US-001", dependsOn=["US-009"])), REVIEW)[1].startswith("no story can be selected:")


def test_the_shipped_policies_send_back_and_explain() -> None:
    s = BEFORE.story("US-001").model_copy(update={"passes": True, "notes": "x"})
    assert SKIP.send_back(s, "implement", "tests", BEFORE.story("US-001")) == ["passes true → false"] and not s.passes
    done = tasks(story("US-001", passes=True, notes="x"))
    assert "passes=true but no approval" in REVIEW.unselectable_reason(done)
    assert SKIP.unselectable_reason(done) == "the policy selects none of the stories in their current state"
