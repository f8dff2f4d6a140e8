"""Trusted run inputs, unit level: the whole-list check, the task file's trusted fields,
the protected files' restore, and the hook wiring's pins (docs/design.md, trust boundary rule 3).

The same rules through the real Claude Code CLI: tests/test_trust_loop_claude.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ralph.loop.listcheck import CHECK, check_list, top_level
from ralph.loop.taskfile import TaskFile, unsafe_ids
from ralph.loop.trustedfiles import TrustedFiles
from ralph.hooks.wiring import PINNED, hook_settings, pinned_env, weakening_settings
from ralph.tasks import TaskList
from ralph.testing.project import story


def tasks(*stories: dict, **top: object) -> TaskList:
    data = {"project": "P", "branchName": "ralph/p", "description": "d", "verifyCommands": ["pytest -q"], **top}
    return TaskList.model_validate({**data, "userStories": list(stories)})


BEFORE = tasks(
    story("US-001", acceptanceCriteria=["parses dates", "rejects empty input"]),
    story("US-002", priority=2, acceptanceCriteria=["exports CSV with a header row"]),
    story("US-003", priority=3),
)


def edited(**changes: dict) -> TaskList:
    """BEFORE with per-story field changes (``US_002={...}``); ``None`` deletes the story."""
    stories = []
    for s in BEFORE.userStories:
        change = changes.get(s.id.replace("-", "_"), {})
        if change is None:
            continue
        stories.append({**s.model_dump(), **change})
    return tasks(*stories, *changes.get("added", []))


# -- the matrix ------------------------------------------------------------------------------------


def test_unchanged_list_and_allowed_changes_pass() -> None:
    assert not check_list(BEFORE, BEFORE, "US-001").needed
    # the selected story's notes may change (its state fields are the policy's: tests/test_whitelist.py)
    after = edited(US_001={"notes": "parser in dates.py"})
    result = check_list(BEFORE, after, "US-001")
    assert result.violations == [] and not result.needed


def test_deleted_story_is_a_violation_and_is_put_back_in_place() -> None:
    after = edited(US_002=None)
    result = check_list(BEFORE, after, "US-001")
    assert [v.story_id for v in result.violations] == ["US-002"]
    assert result.violations[0].check == CHECK and "removed" in result.violations[0].message
    repaired = result.apply(BEFORE, after)
    assert [s.id for s in repaired.userStories] == ["US-001", "US-002", "US-003"]
    assert repaired.story("US-002").acceptanceCriteria == ["exports CSV with a header row"]


def test_any_field_of_another_story_is_reverted() -> None:
    after = edited(US_002={"acceptanceCriteria": ["file exists"], "title": "trivial", "notes": "looked at it",
                           "priority": 9, "dependsOn": ["US-001"]})  # fmt: skip
    result = check_list(BEFORE, after, "US-001")
    assert [v.story_id for v in result.violations] == ["US-002"]
    message = result.violations[0].message
    assert all(name in message for name in ("acceptanceCriteria", "title", "notes", "priority", "dependsOn"))
    assert "not this iteration's story" in message
    repaired = result.apply(BEFORE, after)
    assert repaired.model_dump() == BEFORE.model_dump()


def test_split_moves_dropped_criteria_to_new_stories() -> None:
    after = edited(
        US_001={"acceptanceCriteria": ["parses dates"], "title": "Parse dates (slice 1)"},
        added=[story("US-001-2", acceptanceCriteria=["rejects   empty\ninput"], priority=1, dependsOn=["US-001"])],
    )
    result = check_list(BEFORE, after, "US-001")
    assert result.violations == [] and not result.needed


def test_narrowed_without_split_is_reverted() -> None:
    after = edited(US_001={"acceptanceCriteria": ["parses dates"]})
    result = check_list(BEFORE, after, "US-001")
    assert [v.story_id for v in result.violations] == ["US-001"]
    assert "rejects empty input" in result.violations[0].message
    assert result.apply(BEFORE, after).story("US-001").acceptanceCriteria == ["parses dates", "rejects empty input"]


@pytest.mark.parametrize(
    "moved",
    [
        pytest.param("something else", id="another-criterion"),
        pytest.param("out of scope: rejects empty input", id="negated"),
        pytest.param("Rejects empty input", id="other-case"),
        pytest.param("rejects empty input (optional)", id="weakened"),
    ],
)
def test_split_must_move_the_criterion_word_for_word(moved: str) -> None:
    after = edited(
        US_001={"acceptanceCriteria": ["parses dates"]},
        added=[story("US-001-2", acceptanceCriteria=[moved])],
    )
    result = check_list(BEFORE, after, "US-001")
    assert sorted(v.story_id for v in result.violations) == ["US-001", "US-001-2"]
    assert result.drop == ["US-001-2"]
    repaired = result.apply(BEFORE, after)
    assert repaired.model_dump() == BEFORE.model_dump()


def test_selected_title_rewritten_without_split_is_reverted() -> None:
    after = edited(US_001={"title": "Nothing to do"})
    result = check_list(BEFORE, after, "US-001")
    assert result.revert_text == ["US-001"] and "no story was split off" in result.violations[0].message


@pytest.mark.parametrize("bad", ["US-001; rm -rf $HOME", "US 7", "../US-1", "US-1`id`", "7-US"])
def test_new_story_with_unsafe_id_is_removed(bad: str) -> None:
    after = edited(US_001={"acceptanceCriteria": ["parses dates"]},
                   added=[story(bad, acceptanceCriteria=["rejects empty input"]),
                          story("US-001-2", acceptanceCriteria=["rejects empty input"])])  # fmt: skip
    result = check_list(BEFORE, after, "US-001")
    assert result.drop == [bad] and [v.story_id for v in result.violations] == [bad]
    assert "unsafe id" in result.violations[0].message
    assert [s.id for s in result.apply(BEFORE, after).userStories] == ["US-001", "US-002", "US-003", "US-001-2"]


def test_non_story_fields_are_trusted_from_run_start() -> None:
    after = tasks(*[s.model_dump() for s in BEFORE.userStories], verifyCommands=["true"], extra="added")
    result = check_list(BEFORE, after, "US-001", top_level(BEFORE))
    messages = " ".join(v.message for v in result.violations)
    assert "verifyCommands was changed from [\"pytest -q\"] to [\"true\"]" in messages and "extra" in messages
    assert "progress.txt" in messages  # the agent is told where to propose a change
    repaired = result.apply(BEFORE, after)
    assert repaired.verifyCommands == ["pytest -q"] and "extra" not in top_level(repaired)


def test_every_finding_at_once() -> None:
    after = tasks(
        {**BEFORE.userStories[0].model_dump(), "acceptanceCriteria": ["parses dates"]},
        {**BEFORE.userStories[1].model_dump(), "description": "whatever"},
        story("bad id"),
        verifyCommands=[],
    )
    result = check_list(BEFORE, after, "US-001", top_level(BEFORE))
    assert (result.reinsert, sorted(result.revert_text), result.drop) == (["US-003"], ["US-001", "US-002"], ["bad id"])
    repaired = result.apply(BEFORE, after)
    assert repaired.model_dump() == BEFORE.model_dump()


# -- the task file ------------------------------------------------------------------------------------


class _Store:
    """The smallest store: JSON, no formatting kept."""

    name = "fake"

    def parse(self, raw: str, source: Path) -> TaskList:
        return TaskList.model_validate(json.loads(raw))

    def render(self, tasks: TaskList, previous_raw: str | None) -> str:
        return json.dumps(tasks.model_dump(), indent=1) + "\n"


def test_task_file_keeps_last_good_and_trusted_fields(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(BEFORE.model_dump()))
    file = TaskFile(_Store(), path)  # type: ignore[arg-type]
    raw, parsed, error = file.read()
    assert error is None and parsed is not None
    file.accept(raw)
    file.trust(parsed, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "trusted" / "task-list-fields.json").read_text())["verifyCommands"] == ["pytest -q"]
    assert file.verify_commands == ["pytest -q"]
    tampered = tasks(*[s.model_dump() for s in parsed.userStories], verifyCommands=["true"])
    assert file.trusted_view(tampered).verifyCommands == ["pytest -q"]
    assert file.trusted_view(parsed) is parsed
    written = file.persist(tampered)
    assert file.last_good == written == path.read_text()
    path.unlink()
    assert file.read()[0] is None and "does not exist" in (file.read()[2] or "")


def test_shared_reads_reparse_any_edit_and_never_hand_their_parse_to_other_readers(tmp_path: Path) -> None:
    from ralph.loop.taskfile import shared_reads

    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(BEFORE.model_dump()))
    file = TaskFile(_Store(), path)  # type: ignore[arg-type]
    with shared_reads():
        first = file.read()[1]
        assert first is not None and file.read()[1] is first  # the same text: the same parse
    mine = file.read()[1]
    assert mine is not None and mine is not first  # outside: a fresh parse the caller may change
    mine.userStories[0].passes = True
    with shared_reads():
        assert file.read()[1] is first and first.userStories[0].passes is False
    # the agent's edit keeps the size and the modification time: the text is what counts
    stat = path.stat()
    edited = path.read_text().replace('"passes": false', '"passes": true ', 1)
    assert len(edited) == len(path.read_text())
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with shared_reads():
        raw, parsed, error = file.read()
    assert raw == edited and error is None and parsed is not None and parsed is not first
    assert parsed.userStories[0].passes is True


def _containers(value: object, found: dict[int, object]) -> dict[int, object]:
    """Every model, list and dict inside ``value`` by id (what a caller could change in place)."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        found[id(value)] = value
        found[id(value.__dict__)] = value.__dict__
        found[id(value.__pydantic_fields_set__)] = value.__pydantic_fields_set__
        for item in [*value.__dict__.values(), value.__pydantic_extra__]:
            _containers(item, found)
    elif isinstance(value, (list, dict)):
        found[id(value)] = value
        for item in value.values() if isinstance(value, dict) else value:
            _containers(item, found)
    return found


def _exactly(parsed: TaskList) -> list[object]:
    """Everything a parse is made of: type, fields, extra keys and the fields set, of the list and of each story."""
    return [(type(model), model.__dict__, model.__pydantic_extra__, model.__pydantic_fields_set__,
             model.__pydantic_private__) for model in [parsed, *parsed.userStories]]


def test_task_file_reads_of_the_same_text_are_new_parses_sharing_nothing(tmp_path: Path) -> None:
    from ralph_plugins.stores.tasks_json import TasksJsonStore

    path = tmp_path / "tasks.json"
    data = BEFORE.model_dump()
    data["userStories"][0]["mine"] = {"nested": [1, {"deep": ["x"]}], "n": 2.5}  # a person's own key
    data["team"] = ["a", {"b": None}]
    path.write_text(json.dumps(data, indent=2))
    store = TasksJsonStore()
    file = TaskFile(store, path)
    reads = [file.read()[1] for _ in range(4)]  # from the second read on, the loop copies a parse it keeps
    fresh = store.parse(path.read_text(), path)
    for parsed in reads:
        assert parsed is not None and _exactly(parsed) == _exactly(fresh) and parsed.model_dump() == fresh.model_dump()
    seen: dict[int, object] = {}
    for parsed in reads:
        mine = _containers(parsed, {})
        assert not mine.keys() & seen.keys()  # no model, list or dict is in two reads
        seen.update(mine)
    # a caller that changes its list in place changes no later read
    changed = reads[-1]
    assert changed is not None
    changed.userStories[0].passes = True
    changed.userStories[0].acceptanceCriteria.append("added in place")
    changed.userStories[0].model_extra["mine"]["nested"][1]["deep"].append("y")  # type: ignore[index]
    changed.verifyCommands.append("true")
    assert _exactly(file.read()[1]) == _exactly(fresh)  # type: ignore[arg-type]
    # the agent's edit keeps the size and the modification time: the text is what counts
    stat = path.stat()
    edited = path.read_text().replace('"passes": false', '"passes": true ', 1)
    assert len(edited) == len(path.read_text())
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    raw, parsed, error = file.read()
    assert raw == edited and error is None and parsed is not None and parsed.userStories[0].passes is True
    # ... and the text read before it is not trusted either once it is back: read and compared again
    path.write_text(json.dumps(data, indent=2))
    assert _exactly(file.read()[1]) == _exactly(fresh)  # type: ignore[arg-type]


def test_a_parse_that_cannot_be_copied_exactly_is_parsed_at_every_read(tmp_path: Path) -> None:
    from ralph.loop.parsecopy import Uncopyable, fresh_copy

    with pytest.raises(Uncopyable):  # a NaN equals only itself: a shared one would make two reads compare equal
        fresh_copy(tasks(story("US-001", priority=float("nan"))))
    with pytest.raises(Uncopyable):
        fresh_copy({"a": (1, 2)})

    class Counting(_Store):
        parses = 0
        parse_reads_only_its_text = True

        def parse(self, raw: str, source: Path) -> TaskList:
            Counting.parses += 1
            return super().parse(raw, source)

    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(BEFORE.model_dump()).replace('"priority": 1,', '"priority": NaN,', 1))
    file = TaskFile(Counting(), path)  # type: ignore[arg-type]
    for _ in range(3):
        assert file.read()[1] is not None
    assert Counting.parses == 3
    path.write_text(json.dumps(BEFORE.model_dump()))
    for _ in range(3):
        assert file.read()[1] is not None
    assert Counting.parses == 5  # parsed twice, then copied


def test_a_store_that_does_not_say_its_parse_reads_only_its_text_is_parsed_at_every_read(tmp_path: Path) -> None:
    """A third-party store may read more than the text (a folder of story files): equal text proves nothing."""
    class ReadsMore(_Store):
        parses = 0

        def parse(self, raw: str, source: Path) -> TaskList:
            ReadsMore.parses += 1
            return super().parse(raw, source)

    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(BEFORE.model_dump()))
    file = TaskFile(ReadsMore(), path)  # type: ignore[arg-type]
    for _ in range(4):
        assert file.read()[1] is not None
    assert ReadsMore.parses == 4
    from ralph_plugins.stores.plan_md import PlanMdStore
    from ralph_plugins.stores.prd_json import PrdJsonStore
    from ralph_plugins.stores.tasks_json import TasksJsonStore

    assert all(store.parse_reads_only_its_text for store in (PlanMdStore, PrdJsonStore, TasksJsonStore))


def test_unsafe_ids_name_the_story() -> None:
    problems = unsafe_ids(tasks(story("US-001"), story("US-001; rm -rf $HOME")))
    assert len(problems) == 1 and "'US-001; rm -rf $HOME' is not a valid story id" in problems[0]


# -- protected files -----------------------------------------------------------------------------------


def test_trusted_files_restore_changed_deleted_created_and_symlinked(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "ralph").mkdir(parents=True)
    (project / ".claude").mkdir()
    prd, prompt = project / "ralph" / "prd.md", project / "ralph" / "prompt.md"
    settings, local = project / ".claude" / "settings.json", project / ".claude" / "settings.local.json"
    prd.write_text("the PRD\n")
    prompt.write_text("the prompt\n")
    settings.write_text("{}\n")
    trusted = TrustedFiles(project, [prd, prompt, settings, local])
    trusted.save(tmp_path / "run")
    assert (tmp_path / "run" / "trusted" / "ralph__prd.md").read_text() == "the PRD\n"
    assert trusted.restore() == []

    prd.write_text("rewritten\n")
    prompt.unlink()
    local.write_text('{"disableAllHooks": true}')
    outside = tmp_path / "outside.json"
    outside.write_text('{"hooks": {}}')
    settings.unlink()
    settings.symlink_to(outside)
    done = {r.path.name: r.how for r in trusted.restore()}
    assert done == {"prd.md": "changed", "prompt.md": "deleted", "settings.local.json": "created", "settings.json": "replaced"}
    assert prd.read_text() == "the PRD\n" and prompt.read_text() == "the prompt\n"
    assert not local.exists() and not settings.is_symlink() and settings.read_text() == "{}\n"
    assert outside.read_text() == '{"hooks": {}}'  # the symlink's target is not written through
    assert trusted.changed() == []


def test_trusted_files_restore_through_a_symlinked_directory(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / ".claude").mkdir(parents=True)
    settings = project / ".claude" / "settings.json"
    settings.write_text('{"model": "x"}')
    trusted = TrustedFiles(project, [settings])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "settings.json").write_text('{"disableAllHooks": true}')
    os.rename(project / ".claude", tmp_path / "moved")
    (project / ".claude").symlink_to(elsewhere)
    assert [r.how for r in trusted.restore()] == ["replaced"]
    assert not (project / ".claude").is_symlink() and settings.read_text() == '{"model": "x"}'
    assert (elsewhere / "settings.json").read_text() == '{"disableAllHooks": true}'


# -- hook wiring ---------------------------------------------------------------------------------------


def test_hook_settings_pin_what_decides_whether_hooks_run() -> None:
    settings = hook_settings("hook-cmd", pinned_env({"RALPH_HOOK_SOCKET": "/s", "OTHER": "x"}, inherit=False))
    assert settings["disableAllHooks"] is False and settings["allowManagedHooksOnly"] is False
    env = settings["env"]
    assert env["RALPH_HOOK_SOCKET"] == "/s" and "OTHER" not in env and env["PYTHONPATH"] == "" and env["LD_PRELOAD"] == ""
    hooks = settings["hooks"]
    assert hooks["PreToolUse"][0]["hooks"][0]["command"] == "hook-cmd"
    assert "exit 2" in hooks["ConfigChange"][0]["hooks"][0]["command"]


def test_weakening_project_settings_are_named(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"model": "sonnet"}))
    assert weakening_settings(tmp_path) == []
    (tmp_path / ".claude" / "settings.local.json").write_text(
        json.dumps({"disableAllHooks": True, "env": {"RALPH_HOOK_SOCKET": "/tmp/x"}, "hooks": {"PreToolUse": []}})
    )
    found = "\n".join(weakening_settings(tmp_path))
    assert "disableAllHooks = true would switch off ralph's hooks" in found
    assert "env sets RALPH_HOOK_SOCKET" in found and "defines its own hooks (PreToolUse)" in found
    assert set(PINNED) == {"disableAllHooks", "allowManagedHooksOnly"}


def test_the_projects_mcp_servers_are_named_as_not_started(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {}}))
    assert weakening_settings(tmp_path) == []
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"web": {"command": "x"}, "db": {"command": "y"}}}))
    [line] = weakening_settings(tmp_path)
    assert "(db, web) are not started during a loop" in line and "[tool.ralph.claude] mcp_servers" in line


# -- every task-list layout, through the loop (replay agent: scripted file edits, no model) -----------------

PLAN = """# Plan: Shop
Branch: ralph/shop
Verify: `python3 -c pass`

## Stories
- [ ] US-001: Cart total
- [ ] US-002: Checkout

### US-001: Cart total
Shows the total.

**Acceptance criteria:**
- Total shows 2 decimals

### US-002: Checkout
Pays.

**Acceptance criteria:**
- Card is charged once
- Receipt is emailed
"""

PRD = """{
  "project": "Shop",
  "branchName": "ralph/shop",
  "description": "Checkout flow",
  "verifyCommands": ["python3 -c pass"],
  "userStories": [
    {"id": "US-001", "title": "Cart total", "acceptanceCriteria": ["Total shows 2 decimals"], "priority": 1, "passes": false, "notes": ""},
    {"id": "US-002", "title": "Checkout", "acceptanceCriteria": ["Card is charged once"], "priority": 2, "passes": false, "notes": ""}
  ]
}
"""


def _replace_script(tmp_path: Path, path: Path, pairs: list[tuple[str, str]]) -> str:
    """A Python file that applies ``pairs`` to ``path`` (the attack, kept out of any shell line)."""
    script = tmp_path / f"attack-{path.name}.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"p = pathlib.Path({str(path)!r})\n"
        "t = p.read_text(encoding='utf-8')\n"
        f"for old, new in json.loads({json.dumps(json.dumps(pairs))}):\n"
        "    assert old in t, old\n"
        "    t = t.replace(old, new)\n"
        "p.write_text(t, encoding='utf-8')\n"
    )
    import sys

    return f"{sys.executable} {script}"


@pytest.mark.parametrize(
    ("filename", "text", "pairs"),
    [
        (
            "plan.md",
            PLAN,
            [("- Card is charged once\n- Receipt is emailed\n", "- Page loads\n"), ("Verify: `python3 -c pass`", "Verify: `true`")],
        ),
        (
            "prd.json",
            PRD,
            [(',\n    {"id": "US-002", "title": "Checkout", "acceptanceCriteria": ["Card is charged once"], "priority": 2, "passes": false, "notes": ""}', ""),
             ('["python3 -c pass"]', '["true"]')],
        ),
    ],
)
def test_every_layout_gets_its_task_list_and_protected_files_back(ralph_project, tmp_path, filename, text, pairs) -> None:
    ralph_project.tasks_path.unlink()
    path = ralph_project.ralph_dir / filename
    path.write_text(text, encoding="utf-8")
    ralph_project.commit_all(f"use {filename}")
    prd = ralph_project.ralph_dir / "prd.md"
    trusted_prd = prd.read_text()
    actions = [
        {"run": _replace_script(tmp_path, path, pairs)},
        {"run": _replace_script(tmp_path, prd, [(trusted_prd, "EVIL\n")])},
        {"commit": "feat: [US-001] - work"},
        {"say": "done"},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": actions}}))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env={"RALPH_REPLAY_SCRIPT": str(script)})

    assert result.returncode == 1, result.stderr
    assert path.read_text(encoding="utf-8") == text  # byte for byte: the person's text is back
    assert prd.read_text() == trusted_prd
    assert ralph_project.git("status", "--porcelain") == ""
    checks = {(v["check"], v.get("story")) for v in ralph_project.events("violation")}
    assert ("protected-file", None) in checks and ("task-list", None) in checks  # verifyCommands
    assert ("task-list", "US-002") in checks
    assert "undid task-list changes" in result.stderr + result.stdout
