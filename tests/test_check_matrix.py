"""Seed 004 §6.2: the stop-check matrix (Check 1, 2, 2.5, 3), one case per line.

Every case goes through ``PluginHost().validate`` so the real, entry-point
registered validators (schema, invariants, transitions, git-clean) and the real
policies answer, exactly as the loop and the Stop hook ask them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.contracts import ValidationContext, Violation
from ralph.errors import TaskListError
from ralph.plugin.manager import PluginHost
from ralph.testing.project import story as base_story
from ralph.settings import Settings
from ralph.tasks import TaskList, parse_tasks
from ralph_plugins.policies.review import ReviewPolicy
from ralph_plugins.policies.skip_review import SkipReviewPolicy

SOURCE = "ralph/tasks.json"


def story(sid: str = "US-001", **fields: Any) -> dict[str, Any]:
    """One seed 000 §8 story at its initial state unless overridden."""
    return base_story(sid, **{"acceptanceCriteria": ["it works"], **fields})


def task_data(*stories: dict[str, Any]) -> dict[str, Any]:
    return {
        "project": "demo",
        "branchName": "ralph/demo",
        "description": "a demo feature",
        "verifyCommands": [],
        "userStories": list(stories),
    }


def tasks_of(*stories: dict[str, Any]) -> TaskList:
    return parse_tasks(task_data(*stories), SOURCE)


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(environ={})


def check(
    host: PluginHost,
    project: Path,
    data: dict[str, Any],
    *,
    mode: str | None = "implement",
    before: TaskList | None | str = "same",
    policy: type = ReviewPolicy,
    check_git: bool = False,
) -> list[Violation]:
    """Validate ``data`` the way the loop does: parse, snapshot, ask every validator.

    ``before="same"`` snapshots ``data`` itself (no transition), ``None`` means no snapshot.
    """
    try:
        tasks: TaskList | None = parse_tasks(data, SOURCE)
        error = None
    except TaskListError as exc:
        tasks, error = None, str(exc)
    if before == "same":
        before = tasks
    settings = Settings(project_dir=project, config=RalphConfig(review_cap=5))
    chosen = policy(settings)
    context = ValidationContext(
        project_dir=project,
        tasks_path=project / "ralph" / "tasks.json",
        raw=json.dumps(data, indent=2),
        tasks=tasks,
        parse_error=error,
        policy=chosen,
        mode=mode,  # type: ignore[arg-type]
        snapshot=chosen.snapshot(before) if isinstance(before, TaskList) else None,
        review_cap=5,
        check_git=check_git,
    )
    return host.validate(context)


def checks(violations: list[Violation]) -> list[str]:
    return sorted(v.check for v in violations)


def only(violations: list[Violation], name: str) -> Violation:
    found = [v for v in violations if v.check == name]
    assert len(found) == 1, [(v.check, v.message) for v in violations]
    return found[0]


def test_the_four_checks_are_registered_validators(host: PluginHost) -> None:
    names = {info.name for info in host.infos if not info.error and not info.disabled}
    assert {"schema", "invariants", "transitions", "git-clean"} <= names


# -- Check 1: schema ----------------------------------------------------------------------


def test_check1_valid_task_list_passes(host: PluginHost, tmp_path: Path) -> None:
    data = task_data(story("US-001"), story("US-002", reviewStatus="needs_review"))
    assert check(host, tmp_path, data) == []


def _without(key: str) -> dict[str, Any]:
    data = story("US-002")
    del data[key]
    return data


CHECK1 = [
    pytest.param(
        task_data(story("US-001"), _without("title")),
        "ralph/tasks.json: userStories[1] (US-002).title: required field is missing",
        id="missing-required-field",
    ),
    pytest.param(
        task_data(story("US-001"), story("US-001", title="again")),
        "Duplicate story id 'US-001': every story needs a unique id.",
        id="duplicate-ids",
    ),
    pytest.param(
        task_data(story("US-001", passes=True, reviewStatus="approved", reviewCount=1, notes="  ")),
        "Story US-001 has passes=true but empty notes: document what was done in notes.",
        id="passes-true-empty-notes",
    ),
    pytest.param(
        task_data(story("US-001", reviewStatus="done")),
        'ralph/tasks.json: userStories[0] (US-001).reviewStatus: must be null or one of "needs_review", '
        '"changes_requested", "approved"',
        id="invalid-reviewStatus",
    ),
    pytest.param(
        task_data(story("US-001", reviewCount=-1)),
        "ralph/tasks.json: userStories[0] (US-001).reviewCount: must be an integer >= 0",
        id="reviewCount-negative",
    ),
]


@pytest.mark.parametrize(("data", "message"), CHECK1)
def test_check1_blocks(host: PluginHost, tmp_path: Path, data: dict[str, Any], message: str) -> None:
    violations = check(host, tmp_path, data)
    assert checks(violations) == ["schema"]
    assert violations[0].message == message


def test_check1_missing_file_blocks(host: PluginHost, tmp_path: Path) -> None:
    settings = Settings(project_dir=tmp_path, config=RalphConfig(review_cap=5))
    context = ValidationContext(
        project_dir=tmp_path,
        tasks_path=tmp_path / "ralph" / "tasks.json",
        raw=None,
        tasks=None,
        parse_error=None,
        policy=ReviewPolicy(settings),
        mode="implement",
        snapshot={},
        review_cap=5,
        check_git=False,
    )
    violation = only(host.validate(context), "schema")
    assert violation.message == f"{tmp_path / 'ralph' / 'tasks.json'} does not exist: restore the task list."


# -- Check 2: review invariants --------------------------------------------------------


CHECK2 = [
    pytest.param(
        story(passes=True, reviewStatus=None, notes="done"),
        "Story US-001 has passes=true but reviewStatus is 'null', not 'approved'. Only review iterations "
        "may approve stories. Set passes back to false or complete the review cycle.",
        id="passes-true-status-null",
    ),
    pytest.param(
        story(passes=True, reviewStatus="needs_review", notes="done"),
        "Story US-001 has passes=true but reviewStatus is 'needs_review', not 'approved'.",
        id="passes-true-needs_review",
    ),
    pytest.param(
        story(passes=True, reviewStatus="changes_requested", reviewFeedback="fix it", notes="done"),
        "Story US-001 has passes=true but reviewStatus is 'changes_requested', not 'approved'.",
        id="passes-true-changes_requested",
    ),
    pytest.param(
        story(reviewStatus="changes_requested", reviewCount=1, reviewFeedback=" "),
        "Story US-001 has reviewStatus 'changes_requested' but empty reviewFeedback",
        id="changes_requested-empty-feedback",
    ),
    pytest.param(
        story(passes=False, reviewStatus="approved", reviewCount=1),
        "Story US-001 has reviewStatus 'approved' but passes=false: these fields must be in sync",
        id="approved-passes-false",
    ),
    pytest.param(
        story(reviewStatus="needs_review", reviewCount=7),
        "Story US-001 has reviewCount 7, above the review cap (5) + 1",
        id="reviewCount-above-cap-plus-one",
    ),
]


@pytest.mark.parametrize(("one", "message"), CHECK2)
def test_check2_blocks(host: PluginHost, tmp_path: Path, one: dict[str, Any], message: str) -> None:
    violations = check(host, tmp_path, task_data(one))
    assert checks(violations) == ["invariants"]
    assert violations[0].message.startswith(message)
    assert violations[0].story_id == "US-001"


@pytest.mark.parametrize(
    "one",
    [
        pytest.param(story(passes=True, reviewStatus="approved", reviewCount=1, notes="done"), id="approved"),
        pytest.param(story(reviewStatus="needs_review", reviewCount=6), id="reviewCount-at-cap-plus-one"),
    ],
)
def test_check2_passes(host: PluginHost, tmp_path: Path, one: dict[str, Any]) -> None:
    assert check(host, tmp_path, task_data(one)) == []


def test_skip_review_skips_check2_and_check25(host: PluginHost, tmp_path: Path) -> None:
    before = tasks_of(story())
    after = task_data(story(passes=True, notes="implemented"))  # what skip-review implement does
    violations = check(host, tmp_path, after, before=before, policy=SkipReviewPolicy)
    assert violations == []
    # the same change in review mode is blocked twice over
    assert checks(check(host, tmp_path, after, before=before)) == ["invariants", "transitions"]


def test_skip_review_still_runs_check1(host: PluginHost, tmp_path: Path) -> None:
    after = task_data(story(passes=True, notes=""))
    violations = check(host, tmp_path, after, before=tasks_of(story()), policy=SkipReviewPolicy)
    assert checks(violations) == ["schema"]


def test_skip_review_without_snapshot_gives_no_warning(host: PluginHost, tmp_path: Path) -> None:
    data = task_data(story(passes=True, notes="done"))
    assert check(host, tmp_path, data, before=None, policy=SkipReviewPolicy) == []


# -- Check 2.5: transitions ----------------------------------------------------------------

IMPLEMENT = "Implement iterations cannot set passes=true or approve stories. Only review iterations may approve."
REVIEW = "Review iteration made illegal transition on story"
FIX = "Review-fix iterations cannot approve stories. Story US-001 must go back to needs_review for re-review."

REVIEWING = story(reviewStatus="needs_review")
REJECTED = story(reviewStatus="changes_requested", reviewCount=1, reviewFeedback="handle the empty case")

CHECK25 = [
    # implement
    pytest.param(
        "implement", [story()], [story(passes=True, notes="done")],
        ["invariants", "transitions"],
        [f"{IMPLEMENT} Story US-001 had illegal transition: passes false → true."],
        id="implement-passes-false-to-true",
    ),
    pytest.param(
        "implement", [story()], [story(reviewStatus="approved")],
        ["invariants", "transitions"],
        [f"{IMPLEMENT} Story US-001 had illegal transition: reviewStatus null → 'approved'."],
        id="implement-status-null-to-approved",
    ),
    pytest.param(
        "implement", [story()], [story(reviewCount=1)],
        ["transitions"],
        [f"{IMPLEMENT} Story US-001 had illegal transition: reviewCount 0 → 1."],
        id="implement-reviewCount-0-to-1",
    ),
    pytest.param(
        "implement", [story()], [story(reviewStatus="needs_review")], [], [],
        id="implement-null-to-needs_review-legal",
    ),
    pytest.param(
        "implement", [story(reviewStatus="needs_review")],
        [story(reviewStatus="needs_review"), story("US-002")], [], [],
        id="implement-new-story-initial-state-legal",
    ),
    pytest.param(
        "implement", [story()], [story(), story("US-002", passes=True, notes="done")],
        ["invariants", "transitions"],
        ["New story US-002 added in an implement iteration must start at passes=false, reviewStatus=null, "
         "reviewCount=0 (found passes=true, reviewStatus=null, reviewCount=0)."],
        id="implement-new-story-passes-true",
    ),
    pytest.param(
        "implement", [story(), story("US-002")],
        [story(reviewStatus="needs_review"), story("US-002", reviewStatus="needs_review")],
        ["transitions"],
        [f"{IMPLEMENT} Story US-002 had illegal transition: a second story set to needs_review "
         "(one story per iteration)."],
        id="implement-two-stories-submitted",
    ),
    # review
    pytest.param(
        "review", [REVIEWING], [story(passes=True, reviewStatus="approved", reviewCount=1, notes="ok")], [], [],
        id="review-legal-approval",
    ),
    pytest.param(
        "review", [REVIEWING],
        [story(reviewStatus="changes_requested", reviewCount=1, reviewFeedback="missing tests")], [], [],
        id="review-legal-rejection",
    ),
    pytest.param(
        "review", [REVIEWING], [story(passes=True, reviewStatus="approved", reviewCount=0, notes="ok")],
        ["transitions"],
        [f"{REVIEW} US-001: reviewCount 0 → 0 (must increase by exactly 1)."],
        id="review-reviewCount-unchanged",
    ),
    pytest.param(
        "review", [REVIEWING, story("US-002", reviewStatus="needs_review")],
        [story(passes=True, reviewStatus="approved", reviewCount=1, notes="ok"),
         story("US-002", passes=True, reviewStatus="approved", reviewCount=1, notes="ok")],
        ["transitions", "transitions"],
        [f"{REVIEW} US-001: review fields of more than one story changed (US-001, US-002); a review "
         "iteration evaluates exactly one story.",
         f"{REVIEW} US-002: review fields of more than one story changed (US-001, US-002); a review "
         "iteration evaluates exactly one story."],
        id="review-two-stories-changed",
    ),
    pytest.param(
        "review", [REVIEWING], [story(reviewStatus="changes_requested", reviewCount=1, reviewFeedback="")],
        ["invariants", "transitions"],
        [f"{REVIEW} US-001: verdict reviewStatus='changes_requested', passes=false: must be \"approved\" "
         'with passes=true, or "changes_requested" with passes=false and non-empty reviewFeedback.'],
        id="review-rejection-without-feedback",
    ),
    # review-fix
    pytest.param(
        "review-fix", [REJECTED], [story(reviewStatus="needs_review", reviewCount=1, reviewFeedback="")], [], [],
        id="review-fix-legal-resubmit",
    ),
    pytest.param(
        "review-fix", [REJECTED],
        [story(passes=True, reviewStatus="changes_requested", reviewCount=1, reviewFeedback="x", notes="d")],
        ["invariants", "transitions"],
        [f"{FIX} Illegal transition: passes false → true."],
        id="review-fix-passes-changed",
    ),
    pytest.param(
        "review-fix", [REJECTED], [story(reviewStatus="needs_review", reviewCount=2, reviewFeedback="")],
        ["transitions"],
        [f"{FIX} Illegal transition: reviewStatus 'changes_requested' → 'needs_review'; reviewCount 1 → 2."],
        id="review-fix-reviewCount-changed",
    ),
    pytest.param(
        "review-fix", [REJECTED], [story(reviewStatus="approved", reviewCount=1, reviewFeedback="")],
        ["invariants", "transitions"],
        [f"{FIX} Illegal transition: reviewStatus 'changes_requested' → 'approved'."],
        id="review-fix-status-to-approved",
    ),
    pytest.param(
        "review-fix", [REJECTED], [story(reviewStatus="needs_review", reviewCount=1, reviewFeedback="still here")],
        ["transitions"],
        [f"{FIX} Illegal transition: reviewFeedback must be cleared when resubmitting."],
        id="review-fix-feedback-not-cleared",
    ),
]


@pytest.mark.parametrize(("mode", "before", "after", "expected_checks", "messages"), CHECK25)
def test_check25_transitions(
    host: PluginHost,
    tmp_path: Path,
    mode: str,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    expected_checks: list[str],
    messages: list[str],
) -> None:
    violations = check(host, tmp_path, task_data(*after), mode=mode, before=tasks_of(*before))
    assert checks(violations) == expected_checks
    transitions = [v for v in violations if v.check == "transitions"]
    assert [v.message for v in transitions] == messages
    assert all(v.undoable for v in transitions)


def test_missing_snapshot_skips_check25_with_warning_and_check2_still_runs(
    host: PluginHost, tmp_path: Path
) -> None:
    data = task_data(story(passes=True, reviewStatus="approved", reviewCount=0, notes="x"), story("US-002", passes=True, notes="y"))
    violations = check(host, tmp_path, data, before=None)
    assert checks(violations) == ["invariants", "transitions"]
    warning = only(violations, "transitions")
    assert warning.severity == "warning" and not warning.is_error
    assert warning.message.startswith("Warning:")
    assert "transition check (2.5) skipped" in warning.message
    assert only(violations, "invariants").story_id == "US-002"


def test_missing_mode_also_skips_check25(host: PluginHost, tmp_path: Path) -> None:
    violations = check(host, tmp_path, task_data(story(reviewCount=3)), mode=None, before=tasks_of(story()))
    assert checks(violations) == ["transitions"]
    assert only(violations, "transitions").severity == "warning"


# -- Check 3: uncommitted changes ------------------------------------------------------------


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "T")
    (tmp_path / "ralph").mkdir()
    (tmp_path / "ralph" / "tasks.json").write_text(json.dumps(task_data(story()), indent=2) + "\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "start")
    return tmp_path


def test_check3_clean_tree_passes(host: PluginHost, repo: Path) -> None:
    assert check(host, repo, task_data(story()), check_git=True) == []


def test_check3_uncommitted_changes_block_with_commit_instructions(host: PluginHost, repo: Path) -> None:
    (repo / "app.py").write_text("print('hi')\n")
    (repo / "ralph" / "tasks.json").write_text("{}\n")
    violation = only(check(host, repo, task_data(story()), check_git=True), "git-clean")
    assert "?? app.py" in violation.message
    assert " M ralph/tasks.json" in violation.message
    assert "update ralph/progress.txt with what was accomplished" in violation.message
    assert "CLAUDE.md or .claude/rules/" in violation.message
    assert "commit ALL changes, including progress.txt and the task list" in violation.message


def test_check3_off_when_check_git_false(host: PluginHost, repo: Path) -> None:
    (repo / "app.py").write_text("x\n")
    assert check(host, repo, task_data(story()), check_git=False) == []
