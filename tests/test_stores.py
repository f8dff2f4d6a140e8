"""Task stores: tasks.json (default), prd.json (seed 003) and plan.md (seed 001).

Every store maps its format to the one model and writes back only what changed:
the round trips here compare whole files byte for byte.  The last tests run the
real loop (replay agent, real git) against prd.json and plan.md projects and
check the loop's own repair of the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ralph.errors import TaskListError
from ralph.testing.project import RalphProject
from ralph_plugins.stores.plan_md import PlanMdStore
from ralph_plugins.stores.prd_json import PrdJsonStore
from ralph_plugins.stores.tasks_json import TasksJsonStore

# A prd.json as a person (or another Ralph tool) writes it: 4-space indent, short stories
# on one line, an unknown top-level key, no review fields, a non-ASCII title.
PRD_JSON = """{
    "project": "Shop",
    "branchName": "ralph/shop",
    "description": "Checkout flow",
    "x-owner": {"team": "payments", "tags": ["a", "b"]},
    "userStories": [
        {"id": "US-001", "title": "Cart total", "acceptanceCriteria": ["Total shows 2 decimals"], "priority": 1, "passes": false, "notes": ""},
        {
            "id": "US-002",
            "title": "Café receipt",
            "description": "Email a receipt.",
            "acceptanceCriteria": ["Receipt email has the order number", "Sent within 1 minute"],
            "priority": 2,
            "passes": false,
            "notes": "",
            "dependsOn": ["US-001"]
        }
    ]
}
"""

PLAN_MD = """# Plan: Search filters
Branch: ralph/search-filters
Verify: `pytest -q`
Verify: ruff check .

Some context a person wrote.  It is not a story.

## Stories
- [x] US-001: Add the status column <!-- ralph: {"reviewStatus": "approved", "reviewCount": 1} -->
- [ ] US-002: Filter dropdown
* [ ] US-003: Remember the filter

## Checklist for the release
- [ ] Note: tell support
- [ ] update the changelog

```markdown
- [ ] US-999: an example inside a code fence is not a story
```

### US-001: Add the status column
A status column on the items table.

**Acceptance criteria:**
- Column `status` exists with values active/done
- Migration runs forward and back

**Notes:** column added in 0003_status.py

### US-002: Filter dropdown
The list page gets a dropdown that filters by status.

**Acceptance criteria:**
- Dropdown has options: All, Active, Done
- [ ] Choosing Active hides done items

**Depends on:** US-001

### US-003: Remember the filter
Depends on: US-002, US-001
"""


# -- prd.json ---------------------------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_prd_json_round_trip_is_byte_identical(newline: str) -> None:
    raw = PRD_JSON.replace("\n", newline)
    store = PrdJsonStore()
    tasks = store.parse(raw, Path("prd.json"))
    assert store.render(tasks, raw) == raw


def test_prd_json_missing_review_fields_map_to_defaults() -> None:
    tasks = PrdJsonStore().parse(PRD_JSON, Path("prd.json"))
    first, second = tasks.userStories
    assert (first.reviewStatus, first.reviewCount, first.reviewFeedback) == (None, 0, "")
    assert second.dependsOn == ["US-001"] and second.title == "Café receipt"
    assert tasks.verifyCommands == [] and tasks.model_extra == {"x-owner": {"team": "payments", "tags": ["a", "b"]}}


def test_prd_json_writes_only_the_changed_values() -> None:
    store = PrdJsonStore()
    tasks = store.parse(PRD_JSON, Path("prd.json"))
    one, two = tasks.userStories
    one.passes = True
    one.notes = "Rounded with Decimal"
    two.reviewStatus = "needs_review"  # a field the file does not have: added, after the last key
    two.reviewCount = 0  # default: not added
    expected = PRD_JSON.replace(
        '"priority": 1, "passes": false, "notes": ""}',
        '"priority": 1, "passes": true, "notes": "Rounded with Decimal"}',
    ).replace(
        '            "dependsOn": ["US-001"]\n',
        '            "dependsOn": ["US-001"],\n            "reviewStatus": "needs_review"\n',
    )
    assert expected != PRD_JSON
    assert store.render(tasks, PRD_JSON) == expected
    again = store.parse(expected, Path("prd.json"))
    assert again.userStories[1].reviewStatus == "needs_review" and again.userStories[0].passes is True


def test_prd_json_existing_review_fields_are_updated_in_place_and_kept_at_default() -> None:
    raw = PRD_JSON.replace('"passes": false, "notes": ""}', '"passes": false, "reviewCount": 2, "notes": ""}')
    store = PrdJsonStore()
    tasks = store.parse(raw, Path("prd.json"))
    tasks.userStories[0].reviewCount = 0
    assert store.render(tasks, raw) == raw.replace('"reviewCount": 2', '"reviewCount": 0')


def test_prd_json_story_added_and_removed() -> None:
    from ralph.tasks import Story

    store = PrdJsonStore()
    tasks = store.parse(PRD_JSON, Path("prd.json"))
    new = Story(
        id="US-003", title="Refunds", acceptanceCriteria=["Refund button on paid orders"], priority=3,
        passes=False, reviewStatus=None, reviewCount=0, reviewFeedback="",
    )
    tasks.userStories = [tasks.userStories[1], new]  # US-001 removed, US-003 appended
    text = store.render(tasks, PRD_JSON)
    data = json.loads(text)
    assert [s["id"] for s in data["userStories"]] == ["US-002", "US-003"]
    assert "reviewStatus" not in data["userStories"][1]  # the file's convention: no default review fields
    assert data["x-owner"] == {"team": "payments", "tags": ["a", "b"]}
    # US-002's block is untouched text
    block = PRD_JSON[PRD_JSON.index('        {\n            "id": "US-002"'): PRD_JSON.index('        }\n    ]')]
    assert block in text
    assert text.startswith(PRD_JSON[: PRD_JSON.index('        {"id": "US-001"')])


def test_prd_json_invalid_story_id_names_file_line_and_field() -> None:
    raw = PRD_JSON.replace('"id": "US-002"', '"id": "US 2; rm -rf /"')
    with pytest.raises(TaskListError) as caught:
        PrdJsonStore().parse(raw, Path("ralph/prd.json"))
    message = str(caught.value)
    assert message.startswith("ralph/prd.json:9: userStories[1] (US 2; rm -rf /).id: ")
    assert "'US 2; rm -rf /' is not a valid story id" in message


def test_prd_json_schema_and_syntax_errors_name_the_field() -> None:
    store = PrdJsonStore()
    with pytest.raises(TaskListError, match=r"prd.json: userStories\[0\] \(US-001\).acceptanceCriteria: must not be empty"):
        store.parse(PRD_JSON.replace('["Total shows 2 decimals"]', "[]"), Path("prd.json"))
    with pytest.raises(TaskListError, match="prd.json: not valid JSON at line 4"):
        store.parse(PRD_JSON.replace('"ralph/shop",', '"ralph/shop"'), Path("prd.json"))


# -- plan.md ------------------------------------------------------------------------------------


def test_plan_md_parses_stories_blocks_and_preamble() -> None:
    tasks = PlanMdStore().parse(PLAN_MD, Path(".ralph/PRD-1/plan.md"))
    assert (tasks.project, tasks.branchName, tasks.verifyCommands) == (
        "Search filters", "ralph/search-filters", ["pytest -q", "ruff check ."],
    )
    one, two, three = tasks.userStories
    assert [s.id for s in tasks.userStories] == ["US-001", "US-002", "US-003"]  # not "Note", not US-999
    assert (one.passes, one.reviewStatus, one.reviewCount, one.priority) == (True, "approved", 1, 1)
    assert one.notes == "column added in 0003_status.py"
    assert one.acceptanceCriteria == ["Column `status` exists with values active/done", "Migration runs forward and back"]
    assert two.description == "The list page gets a dropdown that filters by status."
    assert two.acceptanceCriteria == ["Dropdown has options: All, Active, Done", "Choosing Active hides done items"]
    assert (two.dependsOn, two.passes, two.priority) == (["US-001"], False, 2)
    assert three.dependsOn == ["US-002", "US-001"]
    assert three.acceptanceCriteria == ["Remember the filter"]  # no criteria: the title stands in


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_plan_md_round_trip_is_byte_identical(newline: str) -> None:
    raw = PLAN_MD.replace("\n", newline)
    store = PlanMdStore()
    assert store.render(store.parse(raw, Path("plan.md")), raw) == raw


def test_plan_md_write_changes_only_the_story_line() -> None:
    store = PlanMdStore()
    tasks = store.parse(PLAN_MD, Path("plan.md"))
    two = tasks.userStories[1]
    two.reviewStatus, two.reviewCount, two.passes, two.notes = "approved", 2, True, "done --> shipped"
    text = store.render(tasks, PLAN_MD)
    before, after = PLAN_MD.splitlines(keepends=True), text.splitlines(keepends=True)
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert changed == [
        (
            "- [ ] US-002: Filter dropdown\n",
            '- [x] US-002: Filter dropdown <!-- ralph: {"reviewStatus": "approved", "reviewCount": 2, '
            '"notes": "done --\\u003e shipped"} -->\n',
        )
    ]
    again = store.parse(text, Path("plan.md")).userStories[1]
    assert (again.passes, again.reviewStatus, again.reviewCount, again.notes) == (True, "approved", 2, "done --> shipped")


def test_plan_md_back_to_defaults_removes_the_comment() -> None:
    store = PlanMdStore()
    tasks = store.parse(PLAN_MD, Path("plan.md"))
    one = tasks.userStories[0]
    one.passes, one.reviewStatus, one.reviewCount = False, None, 0
    text = store.render(tasks, PLAN_MD)
    assert text == PLAN_MD.replace(
        '- [x] US-001: Add the status column <!-- ralph: {"reviewStatus": "approved", "reviewCount": 1} -->\n',
        "- [ ] US-001: Add the status column\n",
    )


def test_plan_md_new_story_is_appended_with_a_block() -> None:
    from ralph.tasks import Story

    store = PlanMdStore()
    tasks = store.parse(PLAN_MD, Path("plan.md"))
    tasks.userStories.append(
        Story(id="US-004", title="Clear filter", acceptanceCriteria=["A Clear link resets to All"], priority=4,
              passes=False, reviewStatus=None, reviewCount=0, reviewFeedback="", dependsOn=["US-002"])
    )
    text = store.render(tasks, PLAN_MD)
    assert "* [ ] US-003: Remember the filter\n* [ ] US-004: Clear filter\n" in text
    assert text.startswith(PLAN_MD[: PLAN_MD.index("* [ ] US-003")])
    assert text.endswith("### US-004: Clear filter\n\n**Acceptance criteria:**\n- A Clear link resets to All\n\n**Depends on:** US-002\n")
    parsed = store.parse(text, Path("plan.md")).story("US-004")
    assert parsed is not None and parsed.acceptanceCriteria == ["A Clear link resets to All"] and parsed.dependsOn == ["US-002"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("- [ ] US-002: Filter dropdown", "- [ ] US-0x2;rm: Filter dropdown"), r"plan.md:10: id: 'US-0x2;rm' is not a valid story id"),
        (("- [ ] US-002: Filter dropdown", "- [ ] US-001: Filter dropdown"), r"plan.md:10: id: duplicate story id 'US-001' \(also on line 9\)"),
        (('{"reviewStatus": "approved", "reviewCount": 1}', '{"reviewStatus": approved}'), r"plan.md:9: ralph comment: not valid JSON"),
        (('{"reviewStatus": "approved", "reviewCount": 1}', '{"passes": true}'), r"plan.md:9: ralph comment: 'passes' belongs in the Markdown"),
        (("**Depends on:** US-001", "**Depends on:** step one"), r"plan.md:\d+: dependsOn: 'step' is not a valid story id"),
        (("* [ ] US-003: Remember the filter\n", ""), r"plan.md:\d+: story block US-003: no story line for it"),
        (('{"reviewStatus": "approved", "reviewCount": 1}', '{"reviewStatus": "great"}'), r"plan.md: line 9: userStories\[0\] \(US-001\).reviewStatus: must be null or one of"),
    ],
)
def test_plan_md_errors_name_file_line_and_field(edit: tuple[str, str], expected: str) -> None:
    raw = PLAN_MD.replace(*edit)
    assert raw != PLAN_MD
    with pytest.raises(TaskListError, match=expected):
        PlanMdStore().parse(raw, Path("plan.md"))


def test_plan_md_without_stories_is_an_error() -> None:
    with pytest.raises(TaskListError, match=r"plan.md: userStories: no story lines found"):
        PlanMdStore().parse("# Plan\n\nNothing yet.\n", Path("plan.md"))


# -- tasks.json (the default store) -------------------------------------------------------------


def test_tasks_json_round_trip_of_the_init_template(ralph_project: RalphProject) -> None:
    ralph_project.write_stories([{"id": "US-001", "title": "A", "description": "", "acceptanceCriteria": ["a"], "priority": 1,
                                  "passes": False, "reviewStatus": None, "reviewCount": 0, "reviewFeedback": "",
                                  "notes": "", "dependsOn": [], "owner": "me"}], commit=False)
    raw = ralph_project.tasks_path.read_text(encoding="utf-8")
    store = TasksJsonStore()
    tasks = store.parse(raw, ralph_project.tasks_path)
    assert store.render(tasks, raw) == raw
    tasks.userStories[0].reviewStatus = "needs_review"
    assert store.render(tasks, raw) == raw.replace('"reviewStatus": null', '"reviewStatus": "needs_review"')


def test_tasks_json_keeps_hand_formatting() -> None:
    raw = PRD_JSON.replace('"notes": ""}', '"reviewStatus": null, "reviewCount": 0, "reviewFeedback": "", "notes": ""}').replace(
        '"notes": "",\n            "dependsOn"', '"notes": "",\n            "reviewStatus": null,\n            "reviewCount": 0,\n            "reviewFeedback": "",\n            "dependsOn"'
    )
    store = TasksJsonStore()
    assert store.render(store.parse(raw, Path("tasks.json")), raw) == raw


def test_every_store_is_registered_and_detected(tmp_path: Path) -> None:
    from ralph.plugin.manager import PluginHost

    host = PluginHost()
    assert {"tasks-json", "prd-json", "plan-md"} <= set(host.stores.names())
    for name, filename in (("prd-json", "prd.json"), ("plan-md", "plan.md")):
        store = host.stores.get(name)()
        assert store.filename == filename and not store.detect(tmp_path)
        (tmp_path / filename).write_text("x")
        assert store.detect(tmp_path)


# -- through the real loop ------------------------------------------------------------------------


def _edit_script(tmp_path: Path, path: Path, old: str, new: str) -> str:
    script = tmp_path / f"edit-{abs(hash((old, new)))}.py"
    script.write_text(
        "import pathlib\n"
        f"p = pathlib.Path({str(path)!r})\n"
        f"t = p.read_text(encoding='utf-8')\n"
        f"assert {old!r} in t\n"
        f"p.write_text(t.replace({old!r}, {new!r}), encoding='utf-8')\n"
    )
    return f"{sys.executable} {script}"


def _loop_with_store(project: RalphProject, tmp_path: Path, filename: str, text: str, illegal: tuple[str, str], legit: tuple[str, str]):  # type: ignore[no-untyped-def]
    """One implement iteration that makes an illegal change (passes=true) and a legitimate one."""
    project.tasks_path.unlink()
    path = project.ralph_dir / filename
    path.write_text(text, encoding="utf-8")
    project.commit_all(f"use {filename}")
    actions = [
        {"write": {"path": "feature.txt", "content": "x"}},
        {"run": _edit_script(tmp_path, path, *legit)},
        {"run": _edit_script(tmp_path, path, *illegal)},
        {"commit": "feat: [US-001] - cart total"},
        {"say": "done"},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": actions}}))
    result = project.run(
        "run", "--runner", "direct", "--agent", "replay", "-n", "1", env={"RALPH_REPLAY_SCRIPT": str(script)}
    )
    return result, path


def test_loop_repairs_prd_json_without_reformatting_it(ralph_project: RalphProject, tmp_path: Path) -> None:
    legit = ('"acceptanceCriteria": ["Total shows 2 decimals"], "priority": 1, "passes": false, "notes": ""',
             '"acceptanceCriteria": ["Total shows 2 decimals"], "priority": 1, "passes": false, "notes": "wip: rounding"')
    illegal = ('"passes": false, "notes": "wip: rounding"', '"passes": true, "notes": "wip: rounding"')
    result, path = _loop_with_store(ralph_project, tmp_path, "prd.json", PRD_JSON, illegal, legit)
    assert result.returncode == 1, result.stderr
    assert "undid illegal review-field changes on US-001" in result.stderr
    # the agent's legitimate edit stays, the illegal one is undone, every other byte is the user's
    assert path.read_text(encoding="utf-8") == PRD_JSON.replace(*legit)
    assert ralph_project.events("transition_undone")[0]["stories"] == ["US-001"]
    assert "loop repaired the task list" in ralph_project.git("log", "-1", "--format=%s")


def test_loop_repairs_plan_md_without_reformatting_it(ralph_project: RalphProject, tmp_path: Path) -> None:
    plan = PLAN_MD.replace("- [x] US-001: Add the status column <!-- ralph: {\"reviewStatus\": \"approved\", \"reviewCount\": 1} -->",
                           "- [ ] US-001: Add the status column")
    legit = ("**Notes:** column added in 0003_status.py", "**Notes:** started the migration")
    illegal = ("- [ ] US-001: Add the status column", "- [x] US-001: Add the status column")
    result, path = _loop_with_store(ralph_project, tmp_path, "plan.md", plan, illegal, legit)
    assert result.returncode == 1, result.stderr
    assert "undid illegal review-field changes on US-001" in result.stderr
    assert path.read_text(encoding="utf-8") == plan.replace(*legit)
