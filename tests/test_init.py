"""Tests for ``ralph init``: templates, rendering, atomic writes and project scaffolding.

Everything goes through real files in ``tmp_path`` (and a real ``git init`` repository).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from datetime import date
from pathlib import Path

import pytest

from ralph.errors import UsageError
from ralph.fsutil import atomic_write_text
from ralph.lifecycle.init import InitResult, init_project, slugify
from ralph.templates import render, template_text

DAY = date(2024, 5, 17)
FOUR = ("prompt.md", "prd.md", "tasks.json", "progress.txt")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), ``.git`` excluded."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "my-app"
    proj.mkdir()
    return proj


# -- templates.py ------------------------------------------------------------------------


def test_render_replaces_known_tokens_and_keeps_unknown() -> None:
    text = "a {{X}} b {{Y}} c {{X}} {{UNKNOWN}} {X} {{ X }}"
    assert render(text, {"X": "1", "Y": "{{X}}"}) == "a 1 b {{X}} c 1 {{UNKNOWN}} {X} {{ X }}"


def test_render_with_no_values_is_identity() -> None:
    text = template_text("prompt.md")
    assert render(text, {}) == text


def test_template_text_reads_shipped_templates() -> None:
    for name in FOUR:
        assert template_text(name).strip()
    with pytest.raises(FileNotFoundError):
        template_text("no-such-template.md")
    with pytest.raises(FileNotFoundError):
        template_text("../pyproject.toml")


# -- fsutil.py ---------------------------------------------------------------------------


def test_atomic_write_text_creates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    atomic_write_text(path, "one\r\ntwo\n")
    assert path.read_bytes() == b"one\r\ntwo\n"  # no newline translation
    atomic_write_text(path, "three\n")
    assert path.read_text() == "three\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]  # no temp file left


def test_atomic_write_text_keeps_mode_of_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "script.sh"
    path.write_text("old")
    path.chmod(0o751)
    atomic_write_text(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o751


def test_atomic_write_text_new_file_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "n.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "n.txt").stat().st_mode) == 0o644


def test_atomic_write_text_replaces_a_symlink_never_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert real.read_text() == "old"


def test_atomic_write_text_failure_leaves_old_content(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(path, "\udcff")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


# -- the templates themselves ------------------------------------------------------------


def test_tasks_template_matches_seed_structure_exactly() -> None:
    text = template_text("tasks.json")
    data = json.loads(text)
    assert data == {
        "project": "",
        "branchName": "ralph/feature-name",
        "description": "",
        "verifyCommands": [],
        "userStories": [
            {
                "id": "US-001",
                "title": "",
                "description": "",
                "acceptanceCriteria": [],
                "priority": 1,
                "passes": False,
                "reviewStatus": None,
                "reviewCount": 0,
                "reviewFeedback": "",
                "notes": "",
                "dependsOn": [],
            }
        ],
    }
    assert list(data) == ["project", "branchName", "description", "verifyCommands", "userStories"]
    assert list(data["userStories"][0]) == [
        "id", "title", "description", "acceptanceCriteria", "priority", "passes",
        "reviewStatus", "reviewCount", "reviewFeedback", "notes", "dependsOn",
    ]
    # 2-space indentation with a trailing newline, the same bytes init writes back
    assert text == json.dumps(data, indent=2) + "\n"


def test_progress_template_structure() -> None:
    text = template_text("progress.txt")
    assert text.splitlines() == [
        "# Ralph Progress Log",
        "Started: {{DATE}}",
        "PRD: {{PROJECT_NAME}}",
        "",
        "## Codebase Patterns",
        "- (Reusable patterns discovered during this loop)",
        "",
        "---",
    ]
    assert text.endswith("---\n")


def test_prd_template_sections_and_tier_comments() -> None:
    text = template_text("prd.md")
    assert text.splitlines()[0] == "# PRD: {{PROJECT_NAME}}"
    headings = [
        "## 1. Summary",
        "## 2. Problem Statement",
        "## 3. Goals",
        "## 4. Non-Goals",
        "## 5. Background & Context",
        "## 6. Technical Design",
        "### 6a. Database Changes",
        "### 6b. API Contracts",
        "### 6c. Core Logic Changes",
        "### 6d. Frontend Changes",
        "### 6e. Infrastructure / Config Changes",
        "## 7. Constraints",
        "## 8. Edge Cases & Error Handling",
        "## 9. Risks & Mitigations",
        "## 10. Open Questions",
    ]
    lines = text.splitlines()
    positions = [lines.index(h) for h in headings]
    assert positions == sorted(positions)
    for tier in ("S-Patch", "M-Feature", "L-Epic"):
        assert tier in text
    # every numbered section is followed by an HTML comment naming its tier requirement
    sections = re.split(r"^## (?=\d+\. )", text, flags=re.M)[1:]
    assert len(sections) == 10
    for section in sections:
        comment = re.search(r"<!--(.*?)-->", section, flags=re.S)
        assert comment, section.splitlines()[0]
        assert re.search(r"Required|Recommended|Optional", comment.group(1)), section.splitlines()[0]
    for sub in re.split(r"^### ", text, flags=re.M)[1:]:
        assert "<!--" in sub
    assert "lorem" not in text.lower()
    assert "| Scenario | Trigger | Expected Behavior | Error |" in text
    assert "| Risk | Likelihood | Impact | Mitigation |" in text


SECTIONS = [
    "## Step 1: Orient",
    "## Step 2: Select & Determine Mode",
    "## Step 3-implement",
    "## Step 3-review:",
    "## Step 3-review-fix",
    "## Step 4: Document Progress",
    "## Step 5: Consider Memory Updates",
    "## Step 6: Commit & Signal",
    "## Hard Rules",
    "## Skip-Review Mode",
]
"""The prompt template's structural sections, in their order."""

PROMPT_REQUIRED = [
    # header and tokens
    "{{RALPH_ITERATION}}",
    "{{RALPH_MAX_ITERATIONS}}",
    "{{RALPH_DIR}}/tasks.json",
    "{{RALPH_DIR}}/prd.md",
    "{{RALPH_DIR}}/progress.txt",
    "{{RALPH_REVIEW_CAP}}",
    "{{RALPH_SKIP_REVIEW}}",
    # the structural sections
    *SECTIONS,
    # modes and selection
    "Review-Fix > Review > Implement",
    '`reviewStatus: "changes_requested"`',
    '`reviewStatus: "needs_review"`',
    "`dependsOn`",
    "`verifyCommands`",
    "Codebase Patterns",
    "git log",
    "git status",
    "git diff",
    "60%",
    "split",
    "advisory",
    # review decision tree
    "`reviewCount`",
    "increase the story's `reviewCount` by exactly 1",
    "**Approve**",
    "**Changes requested**",
    "**Auto-approve at cap**",
    "`[AUTO-APPROVED AT CAP]`",
    "`reviewFeedback`",
    # commit formats and completion
    "`feat: [US-xxx] - [Title]`",
    "`review: [US-xxx] - approved`",
    "`review: [US-xxx] - changes requested`",
    "`fix: [US-xxx] - address review feedback`",
    "<promise>COMPLETE</promise>",
    # memory
    "CLAUDE.md",
    ".claude/rules/",
    # runtime config and the trust boundary
    ".ralph-active",
    "`reviewCap`",
    "`skipReview`",
    "## This iteration",
    "authoritative",
    "undone",
]


def test_prompt_header_is_first_line() -> None:
    text = template_text("prompt.md")
    assert text.splitlines()[0] == "# Ralph Loop iteration {{RALPH_ITERATION}} of {{RALPH_MAX_ITERATIONS}}"
    rendered = render(text, {"RALPH_ITERATION": "3", "RALPH_MAX_ITERATIONS": "10"})
    assert "iteration 3 of 10" in rendered.splitlines()[0]
    # the scripted model server keys on "iteration N of M": it must occur only in the header
    assert len(re.findall(r"iteration \d+ of \d+", rendered, flags=re.I)) == 1


@pytest.mark.parametrize("needle", PROMPT_REQUIRED)
def test_prompt_contains_required_element(needle: str) -> None:
    assert needle in template_text("prompt.md")


def test_prompt_sections_in_order_and_no_stray_tokens() -> None:
    text = template_text("prompt.md")
    positions = [text.index(h) for h in SECTIONS]
    assert positions == sorted(positions)
    tokens = set(re.findall(r"\{\{([A-Z_]+)\}\}", text))
    assert tokens == {
        "RALPH_ITERATION", "RALPH_MAX_ITERATIONS", "RALPH_DIR", "RALPH_REVIEW_CAP", "RALPH_SKIP_REVIEW",
    }
    # the loop appends the "## This iteration" heading; the template must not start one itself
    assert not re.search(r"^## This iteration", text, flags=re.M)
    # the completion signal is described with both conditions
    step6 = text[text.index("## Step 6"):text.index("## Hard Rules")]
    assert "`passes` is `true`" in step6 and '`reviewStatus` is `"approved"`' in step6
    assert "**both**" in step6


def test_prompt_hard_rules() -> None:
    text = template_text("prompt.md")
    rules = text[text.index("## Hard Rules"):text.index("## Skip-Review Mode")]
    for needle in (
        "One story per iteration",
        "never set `passes: true`",
        "Never weaken tests",
        "document the blocker",
        "is read only",
        "Review iterations do not fix code",
        "address all feedback",
    ):
        assert needle in rules, needle


def test_prompt_skip_review_section() -> None:
    text = template_text("prompt.md")
    section = text[text.index("## Skip-Review Mode"):]
    assert '"skipReview": true' in section
    assert "set `passes: true` yourself" in section
    assert "`reviewStatus` stays `null`" in section
    assert "`reviewCount` stays `0`" in section
    assert "Step 3-review and Step 3-review-fix never" in section


def test_prompt_renders_completely() -> None:
    rendered = render(
        template_text("prompt.md"),
        {
            "RALPH_ITERATION": "1",
            "RALPH_MAX_ITERATIONS": "5",
            "RALPH_DIR": "ralph",
            "RALPH_REVIEW_CAP": "5",
            "RALPH_SKIP_REVIEW": "false",
        },
    )
    assert "{{" not in rendered
    assert "`ralph/tasks.json`" in rendered


# -- init_project ------------------------------------------------------------------------


def test_init_creates_files_with_substitutions(project: Path) -> None:
    result = init_project(project, today=DAY)
    assert isinstance(result, InitResult)
    rdir = project / "ralph"
    assert result.ralph_dir == rdir.resolve()
    assert result.project_name == "my-app"
    assert [p.name for p in result.files_written] == list(FOUR)
    assert all(p.is_file() for p in result.files_written)
    assert result.overwritten == []

    assert (rdir / "prompt.md").read_text() == template_text("prompt.md")  # loop fills its tokens
    progress = (rdir / "progress.txt").read_text()
    assert progress.startswith("# Ralph Progress Log\nStarted: 2024-05-17\nPRD: my-app\n")
    assert "{{" not in progress
    prd = (rdir / "prd.md").read_text()
    assert prd.splitlines()[0] == "# PRD: my-app"
    assert "{{" not in prd

    tasks_text = (rdir / "tasks.json").read_text()
    tasks = json.loads(tasks_text)
    template = json.loads(template_text("tasks.json"))
    assert tasks["project"] == "my-app"
    assert tasks["branchName"] == "ralph/feature-name"  # no --name: left as the template has it
    assert result.branch_name == "ralph/feature-name"
    assert {k: v for k, v in tasks.items() if k != "project"} == {
        k: v for k, v in template.items() if k != "project"
    }
    assert tasks_text == json.dumps(tasks, indent=2) + "\n"


def test_init_with_name_sets_branch_and_names(project: Path) -> None:
    result = init_project(project, name="User Login Flow", today=DAY)
    rdir = project / "ralph"
    tasks_text = (rdir / "tasks.json").read_text()
    tasks = json.loads(tasks_text)
    assert tasks["branchName"] == "ralph/user-login-flow"
    assert tasks["project"] == "User Login Flow"
    assert list(tasks) == list(json.loads(template_text("tasks.json")))  # key order kept
    assert tasks_text == json.dumps(tasks, indent=2) + "\n"
    assert result.branch_name == "ralph/user-login-flow"
    assert "PRD: User Login Flow" in (rdir / "progress.txt").read_text()
    assert (rdir / "prd.md").read_text().startswith("# PRD: User Login Flow\n")


def test_init_defaults_date_to_today(project: Path) -> None:
    init_project(project)
    assert f"Started: {date.today().isoformat()}\n" in (project / "ralph" / "progress.txt").read_text()


def test_init_custom_ralph_dir_and_next_steps(project: Path) -> None:
    result = init_project(project, ralph_dir="docs/ralph", today=DAY)
    assert sorted(p.name for p in (project / "docs" / "ralph").iterdir()) == sorted(FOUR)
    steps = "\n".join(result.next_steps)
    assert len(result.next_steps) == 5
    assert "git add docs/ralph .gitignore && git commit" in result.next_steps[3]
    assert "docs/ralph/prd.md" in result.next_steps[0]
    assert "ralph plan" in steps and "/ralph-plan" in steps
    assert "docs/ralph/tasks.json" in steps and "acceptance criteria" in steps
    assert "verifyCommands" in steps
    assert "ralph run" in result.next_steps[-1] and "--dry-run" in result.next_steps[-1]


@pytest.mark.parametrize("bad", ["/abs/ralph", "../outside", "a/../../b", ""])
def test_init_rejects_ralph_dir_outside_project(project: Path, bad: str) -> None:
    with pytest.raises(UsageError):
        init_project(project, ralph_dir=bad, today=DAY)
    assert snapshot(project) == {}


def test_init_missing_project_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(UsageError, match="nope"):
        init_project(missing)
    assert not missing.exists()


def test_init_project_dir_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        init_project(f)


def test_init_name_without_usable_characters(project: Path) -> None:
    with pytest.raises(UsageError, match="--name"):
        init_project(project, name="!!!", today=DAY)
    assert snapshot(project) == {}


def test_slugify() -> None:
    assert slugify("User Login Flow") == "user-login-flow"
    assert slugify("  Add: OAuth2 / SSO!  ") == "add-oauth2-sso"
    assert slugify("v1..2") == "v1.2"
    assert slugify("feature_x") == "feature_x"
    assert slugify("***") == ""


# -- .gitignore --------------------------------------------------------------------------


def test_gitignore_created_when_absent(project: Path) -> None:
    result = init_project(project, today=DAY)
    assert result.gitignore_changed
    assert (project / ".gitignore").read_text() == ".ralph-active\n"


def test_gitignore_appended_when_entry_missing(project: Path) -> None:
    (project / ".gitignore").write_text("node_modules/\n*.log\n")
    result = init_project(project, today=DAY)
    assert result.gitignore_changed
    assert (project / ".gitignore").read_text() == "node_modules/\n*.log\n.ralph-active\n"


def test_gitignore_without_trailing_newline(project: Path) -> None:
    (project / ".gitignore").write_text("dist")
    init_project(project, today=DAY)
    assert (project / ".gitignore").read_text() == "dist\n.ralph-active\n"


def test_gitignore_crlf_kept(project: Path) -> None:
    (project / ".gitignore").write_bytes(b"dist\r\nbuild")
    init_project(project, today=DAY)
    assert (project / ".gitignore").read_bytes() == b"dist\r\nbuild\r\n.ralph-active\r\n"


@pytest.mark.parametrize("line", [".ralph-active", "/.ralph-active", "  .ralph-active  "])
def test_gitignore_not_duplicated(project: Path, line: str) -> None:
    original = f"build/\n{line}\n*.pyc"
    (project / ".gitignore").write_text(original)
    result = init_project(project, today=DAY)
    assert not result.gitignore_changed
    assert (project / ".gitignore").read_text() == original


def test_gitignore_idempotent_with_force(project: Path) -> None:
    init_project(project, today=DAY)
    result = init_project(project, force=True, today=DAY)
    assert not result.gitignore_changed
    assert (project / ".gitignore").read_text().count(".ralph-active") == 1


def test_gitignore_that_is_a_directory_is_refused(project: Path) -> None:
    (project / ".gitignore").mkdir()
    with pytest.raises(UsageError, match=".gitignore"):
        init_project(project, today=DAY)
    assert not (project / "ralph").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_init_in_real_git_repo(project: Path) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text("*.tmp")
    init_project(project, name="demo", today=DAY)
    (project / ".ralph-active").write_text("{}")
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".ralph-active"], cwd=project, check=False
    )
    assert ignored.returncode == 0
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=project, check=True, capture_output=True, text=True,
    ).stdout.splitlines()
    assert sorted(line[3:] for line in status) == [
        ".gitignore", "ralph/prd.md", "ralph/progress.txt", "ralph/prompt.md", "ralph/tasks.json",
    ]


# -- refusing and forcing ----------------------------------------------------------------


def test_existing_task_list_is_kept_and_only_missing_files_added(project: Path) -> None:
    rdir = project / "ralph"
    rdir.mkdir()
    (rdir / "tasks.json").write_text('{"mine": true}')
    (rdir / "notes.md").write_text("keep me")

    result = init_project(project, name="x", today=DAY)

    assert (rdir / "tasks.json").read_text() == '{"mine": true}'
    assert (rdir / "notes.md").read_text() == "keep me"
    assert [p.name for p in result.files_written] == ["prompt.md", "prd.md", "progress.txt"]
    assert [(p.name, "already there" in why) for p, why in result.kept] == [("tasks.json", True)]
    assert result.overwritten == [] and result.backups == []


def test_second_init_leaves_all_files_byte_identical(project: Path) -> None:
    init_project(project, name="first", today=DAY)
    (project / "ralph" / "prd.md").write_text("# my edited PRD\n")
    before = snapshot(project)
    result = init_project(project, name="second", today=date(2030, 1, 1))
    assert result.files_written == []
    assert sorted(p.name for p, _ in result.kept) == sorted(FOUR)
    assert snapshot(project) == before


def test_empty_existing_ralph_dir_is_fine(project: Path) -> None:
    (project / "ralph").mkdir()
    (project / "ralph" / "README").write_text("other")
    result = init_project(project, today=DAY)
    assert result.overwritten == []
    assert (project / "ralph" / "README").read_text() == "other"


def test_ralph_dir_that_is_a_file_is_refused(project: Path) -> None:
    (project / "ralph").write_text("not a dir")
    with pytest.raises(UsageError, match="not a directory"):
        init_project(project, today=DAY)
    assert (project / "ralph").read_text() == "not a dir"


def test_force_overwrites_the_four_files_and_keeps_others(project: Path) -> None:
    init_project(project, name="first", today=DAY)
    rdir = project / "ralph"
    for name in FOUR:
        (rdir / name).write_text("edited")
    (rdir / "extra.txt").write_text("keep me")
    (rdir / "archive").mkdir()
    (rdir / "archive" / "old.json").write_text("{}")

    result = init_project(project, name="second", force=True, today=date(2030, 1, 1))

    assert [p.name for p in result.overwritten] == list(FOUR)
    assert [(a.name, b.read_text()) for a, b in result.backups] == [(name, "edited") for name in FOUR]
    assert json.loads((rdir / "tasks.json").read_text())["branchName"] == "ralph/second"
    assert "Started: 2030-01-01" in (rdir / "progress.txt").read_text()
    assert (rdir / "prompt.md").read_text() == template_text("prompt.md")
    assert (rdir / "extra.txt").read_text() == "keep me"
    assert (rdir / "archive" / "old.json").read_text() == "{}"
    leftovers = [p.name for p in rdir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.parametrize("where", [".gitignore", "ralph/prd.md", "ralph"])
def test_init_never_writes_through_a_symlink(tmp_path: Path, where: str) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    canary = outside / "rc"
    canary.write_text("host\n")
    link = project / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside if where == "ralph" else canary)
    with pytest.raises(UsageError, match=f"{re.escape(where)} is a symlink: `ralph init` never writes through one"):
        init_project(project, force=True)
    assert sorted(p.name for p in outside.iterdir()) == ["rc"] and canary.read_text() == "host\n"
