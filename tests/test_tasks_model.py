"""The task list model: Check 1 messages, the tasks.json store's round trip, story selection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.errors import TaskListError
from ralph.jsonpatch import decode_json
from ralph.settings import Settings
from ralph.tasks import TaskList, parse_tasks, structural_problems
from ralph.testing.project import story as base_story
from ralph_plugins.policies.review import ReviewPolicy
from ralph_plugins.stores.tasks_json import TasksJsonStore

SOURCE = "ralph/tasks.json"


def story(sid: str = "US-001", **fields: Any) -> dict[str, Any]:
    """One seed 000 §8 story at its initial state unless overridden."""
    return base_story(sid, **{"acceptanceCriteria": ["it works"], **fields})


def task_data(*stories: dict[str, Any]) -> dict[str, Any]:
    return {"project": "demo", "branchName": "ralph/demo", "description": "", "verifyCommands": [],
            "userStories": list(stories)}


def tasks_of(*stories: dict[str, Any]) -> TaskList:
    return parse_tasks(task_data(*stories), SOURCE)


def parse_error(data: Any) -> str:
    with pytest.raises(TaskListError) as info:
        parse_tasks(data, SOURCE)
    return str(info.value)


# -- Check 1 messages --------------------------------------------------------------------


def _missing(key: str) -> dict[str, Any]:
    data = story("US-007")
    del data[key]
    return data


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (_missing("title"), "userStories[1] (US-007).title: required field is missing"),
        (_missing("passes"), "userStories[1] (US-007).passes: required field is missing"),
        (_missing("reviewFeedback"), "userStories[1] (US-007).reviewFeedback: required field is missing"),
        (story("US-007", title=3), "userStories[1] (US-007).title: must be a string"),
        (story("US-007", passes="yes"), "userStories[1] (US-007).passes: must be true or false"),
        (story("US-007", passes=1), "userStories[1] (US-007).passes: must be true or false"),
        (story("US-007", priority="high"), "userStories[1] (US-007).priority: must be a number"),
        (story("US-007", reviewCount=True), "userStories[1] (US-007).reviewCount: must be a non-negative integer"),
        (story("US-007", reviewCount=-1), "userStories[1] (US-007).reviewCount: must be an integer >= 0"),
        (story("US-007", acceptanceCriteria=[]), "userStories[1] (US-007).acceptanceCriteria: must not be empty"),
        (story("US-007", acceptanceCriteria="x"), "userStories[1] (US-007).acceptanceCriteria: must be an array"),
        (
            story("US-007", reviewStatus="approve"),
            'userStories[1] (US-007).reviewStatus: must be null or one of "needs_review", "changes_requested", '
            '"approved"',
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_check1_message_names_file_story_and_field(bad: dict[str, Any], expected: str) -> None:
    assert parse_error(task_data(story("US-001"), bad)) == f"{SOURCE}: {expected}"


def test_story_without_id_is_named_by_index() -> None:
    bad = _missing("id")
    assert parse_error(task_data(bad)) == f"{SOURCE}: userStories[0].id: required field is missing"


def test_top_level_problems() -> None:
    assert parse_error([]) == f"{SOURCE}: (top level): must be a JSON object"
    data = task_data()
    del data["branchName"]
    data["userStories"] = {}
    assert parse_error(data).splitlines() == [
        f"{SOURCE}: branchName: required field is missing",
        f"{SOURCE}: userStories: must be an array",
    ]


def test_every_problem_is_reported_once() -> None:
    message = parse_error(task_data(story("US-001", priority=None, reviewCount=-2)))
    assert message.splitlines() == [
        f"{SOURCE}: userStories[0] (US-001).priority: must be a number",
        f"{SOURCE}: userStories[0] (US-001).reviewCount: must be an integer >= 0",
    ]


def test_structural_problems_duplicate_ids_and_empty_notes() -> None:
    tasks = tasks_of(
        story("US-001"),
        story("US-002", passes=True, reviewStatus="approved", reviewCount=1, notes=""),
        story("US-001", title="copy"),
        story("US-003", passes=True, reviewStatus="approved", reviewCount=1, notes="did it"),
    )
    assert structural_problems(tasks) == [
        ("US-002", "Story US-002 has passes=true but empty notes: document what was done in notes."),
        ("US-001", "Duplicate story id 'US-001': every story needs a unique id."),
    ]


def test_structural_problems_none_for_a_good_list() -> None:
    assert structural_problems(tasks_of(story("US-001"), story("US-002"))) == []


# -- the tasks.json store ----------------------------------------------------------------


def rich_file(indent: int) -> str:
    data = {
        "project": "demo",
        "x-owner": {"team": "core", "tags": ["a", "b"]},
        "branchName": "ralph/demo",
        "description": "Ünïcode stays",
        "userStories": [
            {
                "priority": 2,
                "id": "US-001",
                "title": "first",
                "acceptanceCriteria": ["one", "two"],
                "passes": False,
                "reviewStatus": None,
                "reviewCount": 0,
                "reviewFeedback": "",
                "estimate": 3.5,
                "links": {"issue": 12},
            },
            {"id": "US-002", **{k: v for k, v in story("US-002").items() if k != "id"}, "custom": None},
        ],
        "verifyCommands": ["pytest -q"],
        "trailer": True,
    }
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("indent", [2, 4])
def test_render_unchanged_is_byte_for_byte(indent: int) -> None:
    raw = rich_file(indent)
    store = TasksJsonStore()
    tasks = store.parse(raw, Path(SOURCE))
    assert store.render(tasks, raw) == raw


@pytest.mark.parametrize("indent", [2, 4])
def test_render_keeps_order_indent_and_unknown_keys_when_a_field_changes(indent: int) -> None:
    raw = rich_file(indent)
    store = TasksJsonStore()
    tasks = store.parse(raw, Path(SOURCE))
    tasks.userStories[0].reviewStatus = "needs_review"
    out = store.render(tasks, raw)
    expected = raw.replace('"reviewStatus": null,\n', '"reviewStatus": "needs_review",\n', 1)
    assert expected != raw
    assert out == expected
    reread = json.loads(out)
    assert list(reread) == ["project", "x-owner", "branchName", "description", "userStories", "verifyCommands",
                            "trailer"]
    assert reread["userStories"][0]["links"] == {"issue": 12}
    assert reread["userStories"][1]["custom"] is None


def test_unknown_fields_survive_on_the_model() -> None:
    tasks = TasksJsonStore().parse(rich_file(2), Path(SOURCE))
    assert tasks.model_extra == {"x-owner": {"team": "core", "tags": ["a", "b"]}, "trailer": True}
    assert tasks.userStories[0].model_extra == {"estimate": 3.5, "links": {"issue": 12}}


def test_render_without_previous_file_uses_two_spaces() -> None:
    tasks = tasks_of(story())
    out = TasksJsonStore().render(tasks, None)
    assert out.startswith('{\n  "project": "demo",\n')
    assert json.loads(out) == task_data(story())


def test_store_parse_names_the_file_on_bad_json() -> None:
    with pytest.raises(TaskListError) as info:
        TasksJsonStore().parse('{"project": ', Path("ralph/tasks.json"))
    assert str(info.value).startswith("ralph/tasks.json: not valid JSON at line 1 column 13:")


def _with_extra(member: str) -> str:
    """A one-story list whose story also holds ``member`` (raw JSON text, may be malformed on purpose)."""
    text = json.dumps(task_data(story(notes="n", passes=True)))
    return text[:-3] + ", " + member + "}]}"


_GOOD = json.dumps(task_data(story()))
_TRICKY_TEXTS = [
    _GOOD, " \n" + _GOOD + "\n\t", "\ufeff" + _GOOD, _GOOD + "x", _GOOD.replace(", ", ",\u00a0", 1),
    *(_with_extra(f'"x": {value}') for value in (
        "NaN", "-Infinity", "1e400", "123456789012345678901234567890", "1.0000000000000002", "-0.0", "1E5",
        '"\\ud800"', '"\\udc00\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"', '"a\x01b"', '"\\q"', "01", "+1",
        ".5", "[" * 300 + "]" * 300, "[" * 5000 + "]" * 5000, '{"k": 1, "k": 2}')),
    _with_extra('"passes": false'), _with_extra('"\\u0070asses": false'), _with_extra('"reviewCount": 1.0'),
    _with_extra('"priority": true'), _with_extra('"priority": 2.5'), _with_extra('"reviewStatus": "APPROVED"'),
    _with_extra('"id": ""'), _with_extra('"acceptanceCriteria": "one"'), _with_extra("}"),
    '{"project": ', "[]", '{"project": "p", "project": 5}',
]


def _outcome(parse: Any, raw: str) -> Any:
    """What a parse gives, comparable across parsers: values with their types, which fields were set, or the
    error's words."""
    try:
        tasks = parse(raw)
    except TaskListError as exc:
        return ("error", type(exc).__name__, str(exc))
    stories = [(repr(s.model_dump()), sorted(s.model_fields_set), repr(s.model_extra)) for s in tasks.userStories]
    return (repr(tasks.model_dump()), sorted(tasks.model_fields_set), stories)


@pytest.mark.parametrize("raw", _TRICKY_TEXTS, ids=range(len(_TRICKY_TEXTS)))
def test_store_parse_is_the_decode_then_validate_path(raw: str) -> None:
    """The store validates JSON as pydantic reads it (faster); whatever the text, it yields what decoding it with
    json and validating the result yields: the same values and types, the same fields set, the same error."""
    source = Path("ralph/tasks.json")
    fast = _outcome(lambda text: TasksJsonStore().parse(text, source), raw)
    slow = _outcome(lambda text: parse_tasks(decode_json(text, source), str(source)), raw)
    assert fast == slow


# -- story selection ---------------------------------------------------------------------


@pytest.fixture
def policy(tmp_path: Path) -> ReviewPolicy:
    return ReviewPolicy(Settings(project_dir=tmp_path, config=RalphConfig(review_cap=5)))


def pick(policy: ReviewPolicy, *stories: dict[str, Any]) -> tuple[str, str | None] | None:
    selection = policy.select(tasks_of(*stories))
    return None if selection is None else (selection.mode, selection.story_id)


APPROVED = {"passes": True, "reviewStatus": "approved", "reviewCount": 1, "notes": "done"}
REJECTED = {"reviewStatus": "changes_requested", "reviewCount": 1, "reviewFeedback": "fix"}


def test_mode_priority_review_fix_then_review_then_implement(policy: ReviewPolicy) -> None:
    todo = story("US-001", priority=1)
    waiting = story("US-002", priority=5, reviewStatus="needs_review")
    rejected = story("US-003", priority=9, **REJECTED)
    assert pick(policy, todo, waiting, rejected) == ("review-fix", "US-003")
    assert pick(policy, todo, waiting) == ("review", "US-002")
    assert pick(policy, todo) == ("implement", "US-001")


def test_priority_order_with_file_order_ties(policy: ReviewPolicy) -> None:
    stories = [story("US-001", priority=3), story("US-002", priority=2), story("US-003", priority=2),
               story("US-004", priority=2.5)]
    assert pick(policy, *stories) == ("implement", "US-002")
    assert pick(policy, *reversed(stories)) == ("implement", "US-003")
    reviews = [story("US-001", priority=4, reviewStatus="needs_review"),
               story("US-002", priority=1, reviewStatus="needs_review"),
               story("US-003", priority=1, reviewStatus="needs_review")]
    assert pick(policy, *reviews) == ("review", "US-002")
    fixes = [story("US-001", priority=2, **REJECTED), story("US-002", priority=2, **REJECTED)]
    assert pick(policy, *fixes) == ("review-fix", "US-001")


def test_depends_on_is_respected(policy: ReviewPolicy) -> None:
    base = story("US-001", priority=5)
    dependent = story("US-002", priority=1, dependsOn=["US-001"])
    assert pick(policy, base, dependent) == ("implement", "US-001")
    assert pick(policy, story("US-001", priority=5, **APPROVED), dependent) == ("implement", "US-002")
    # a dependency awaiting review is not done yet
    assert pick(policy, story("US-001", reviewStatus="needs_review"), dependent) == ("review", "US-001")


def test_unknown_dependency_counts_as_unmet(policy: ReviewPolicy) -> None:
    blocked = story("US-001", priority=1, dependsOn=["US-999"])
    free = story("US-002", priority=7)
    assert pick(policy, blocked, free) == ("implement", "US-002")
    assert pick(policy, blocked) is None


def test_none_when_all_done(policy: ReviewPolicy) -> None:
    tasks = tasks_of(story("US-001", **APPROVED), story("US-002", **APPROVED))
    assert policy.select(tasks) is None
    assert policy.is_complete(tasks) is True


def test_ten_thousand_stories(policy: ReviewPolicy) -> None:
    stories = [story(f"US-{n:05d}", priority=n % 97 + 1, dependsOn=[f"US-{n - 1:05d}"] if n % 2 else [])
               for n in range(10_000)]
    for n in range(0, 10_000, 3):
        stories[n].update(APPROVED)
    # the best open story with its dependency met: priority 1 is n % 97 == 0
    expected = min(
        (s for n, s in enumerate(stories) if not s["passes"] and all(stories[n - 1]["passes"] for _ in s["dependsOn"])),
        key=lambda s: s["priority"],
    )
    assert pick(policy, *stories) == ("implement", expected["id"])
    assert expected["priority"] == 1
    stories[7777].update(REJECTED)
    stories[4242].update(reviewStatus="needs_review")
    assert pick(policy, *stories) == ("review-fix", "US-07777")


# -- ready_stories: the C-speed key is the old Python key ------------------------------------------


def _ready_reference(tasks: TaskList, candidates: list[Any]) -> list[Any]:
    """``ready_stories`` as it was written first (a Python key per story): the fast one must match it exactly."""
    done = {s.id for s in tasks.userStories if s.done}
    ready = [s for s in candidates if not s.failed and not s.waiting and all(dep in done for dep in s.dependsOn)]
    order = {id(s): index for index, s in enumerate(tasks.userStories)}
    ready.sort(key=lambda s: (s.priority, order.get(id(s), 0)))
    return ready


@pytest.mark.parametrize("seed", range(300))
def test_ready_stories_matches_the_reference_on_random_lists(seed: int) -> None:
    import random

    from ralph.tasks import ready_stories

    rng = random.Random(seed)
    count = rng.randint(0, 25)
    ids = [f"US-{index:03d}" for index in range(count)]
    nan = float("nan")  # json.loads hands out one NaN object: ties by identity in a tuple key
    priorities = [1, 2, 2, 3, 1.5, 2.0, -1, nan, float("inf")]
    stories = [
        story(sid, priority=rng.choice(priorities), passes=rng.random() < 0.3,
              notes="done" if rng.random() < 0.5 else "", failed=rng.random() < 0.1, waiting=rng.random() < 0.1,
              dependsOn=rng.sample(ids + ["US-999"], k=min(len(ids), rng.randint(0, 2))))
        for sid in ids
    ]
    tasks = TaskList.model_validate(task_data(*stories))
    if tasks.userStories and rng.random() < 0.3:
        tasks.userStories.append(tasks.userStories[0])  # one story object listed twice
    candidates = [s for s in tasks.userStories if not s.passes]
    if rng.random() < 0.5:
        rng.shuffle(candidates)
    if rng.random() < 0.3:  # a candidate the list does not hold (position 0), and a duplicate candidate
        candidates.append(TaskList.model_validate(task_data(story("US-X", priority=rng.choice(priorities)))).userStories[0])
        candidates += candidates[:1]
    got = ready_stories(tasks, candidates)
    want = _ready_reference(tasks, candidates)
    assert [id(s) for s in got] == [id(s) for s in want]
    # the policies pick the first without sorting them all: the very same story object, or None
    from ralph.tasks import first_ready

    first = first_ready(tasks, candidates)
    assert (id(first) if first is not None else None) == (id(want[0]) if want else None)
