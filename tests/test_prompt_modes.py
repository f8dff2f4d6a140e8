"""Mode-specific prompts: each mode's prompt carries its own rules, and every rule its checks enforce.

The meta-tests are driven from the review policy's transition table
(``ralph_plugins.policies.review.TRANSITIONS``), from which the loop derives its checks
(Check 2.5, ``ralph.transitions``): the derived checks must agree exactly with the table over
a whole space of story states, and every phrase a transition lists must be in the prompt
rendered for its mode.  Dropping a rule from the template fails here.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from ralph.config import RalphConfig
from ralph.contracts import Selection
from ralph.errors import UsageError
from ralph.loop.listcheck import check_list
from ralph.loop.prompt import render_prompt, select_sections
from ralph.settings import Settings
from ralph.tasks import TaskList
from ralph.templates import render, template_text
from ralph.testing.project import story
from ralph_plugins.policies.review import EVERY_MODE, TRANSITIONS, ReviewPolicy
from ralph_plugins.policies.skip_review import SkipReviewPolicy

MODES = ("implement", "review", "review-fix")
START = {
    "implement": {"passes": False, "reviewStatus": None, "reviewCount": 0, "reviewFeedback": ""},
    "review": {"passes": False, "reviewStatus": "needs_review", "reviewCount": 1, "reviewFeedback": ""},
    "review-fix": {"passes": False, "reviewStatus": "changes_requested", "reviewCount": 1, "reviewFeedback": "1. typo"},
}
LEGACY = Path(__file__).parent / "data" / "prompt-all-modes.md"
"""The shipped prompt.md before it had per-mode sections: what existing projects still have."""


def _policy(cls: type = ReviewPolicy, **config: Any) -> Any:
    return cls(Settings(project_dir=Path("."), config=RalphConfig(**config), plugin_config={}))


def _tasks(**fields: Any) -> TaskList:
    return TaskList.model_validate(
        {"project": "p", "branchName": "b", "description": "d", "verifyCommands": ["pytest -q"],
         "userStories": [story("US-001", "Greeting", **fields), story("US-002", "Other", priority=2)]}
    )  # fmt: skip


def _render(mode: str, template: str | None = None, policy: Any = None, skip: bool = False) -> str:
    tasks = _tasks(**START[mode])
    return render_prompt(
        template if template is not None else template_text("prompt.md"),
        iteration=2, max_iterations=9, ralph_dir="ralph", review_cap=3, skip_review=skip,
        policy=policy or _policy(), selection=Selection(mode, "US-001", "test"), tasks=tasks, feedback=[],
    )  # fmt: skip


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- the table agrees with the checks ------------------------------------------------------------

STATES = list(itertools.product([False, True], [None, "needs_review", "changes_requested", "approved"], [0, 1, 2, 3], ["", "feedback"]))


@pytest.mark.parametrize("mode", MODES)
def test_transition_table_is_exactly_what_the_checks_allow(mode: str) -> None:
    """The checks are derived from the table: in the loop (the selected story known) and in the Stop
    hook outside one (the snapshot, which does not record reviewFeedback)."""
    policy = _policy()
    before = _tasks(**START[mode])
    old = before.story("US-001")
    for passes, status, count, feedback in STATES:
        after = _tasks(passes=passes, reviewStatus=status, reviewCount=count, reviewFeedback=feedback,
                       notes="n" if passes else "")  # fmt: skip
        new = after.story("US-001")
        in_table = [t.name for t in TRANSITIONS[mode] if t.allows(old, new)]
        in_loop = not check_list(before, after, "US-001", policy=policy, mode=mode).violations
        assert in_loop == bool(in_table), (mode, (passes, status, count, feedback), in_table)
        if feedback == old.reviewFeedback:
            outside = not policy.transition_violations(mode, before.snapshot(), after)
            assert outside == bool(in_table), (mode, (passes, status, count, feedback), in_table)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_rules_are_enforced(mode: str) -> None:
    policy = _policy()
    before = _tasks(**START[mode])
    other_changed = _tasks(**START[mode])
    other_changed.userStories[1].reviewStatus = "approved"
    assert policy.transition_violations(mode, before.snapshot(), other_changed)
    added = _tasks(**START[mode])
    added.userStories.append(added.userStories[1].model_copy(update={"id": "US-003", "passes": True, "notes": "x"}))
    assert policy.transition_violations(mode, before.snapshot(), added)


def test_table_covers_every_mode_of_the_policy() -> None:
    assert set(TRANSITIONS) == set(MODES)
    assert all(t.prompt for transitions in TRANSITIONS.values() for t in transitions)


# -- each mode's prompt states its rules -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_prompt_teaches_every_rule_of_its_checks(mode: str) -> None:
    prompt = _flat(_render(mode))
    for transition in TRANSITIONS[mode]:
        for phrase in transition.prompt:
            assert _flat(phrase) in prompt, f"{mode} prompt lost the rule for {transition.name!r}: {phrase!r}"
    for phrase in EVERY_MODE:
        assert _flat(phrase) in prompt, f"{mode} prompt lost {phrase!r}"


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_prompt_leaves_out_the_other_modes(mode: str) -> None:
    prompt = _render(mode)
    steps = {"implement": "## Step 3-implement", "review": "## Step 3-review:", "review-fix": "## Step 3-review-fix"}
    for other, heading in steps.items():
        assert (heading in prompt) is (other == mode), (mode, heading)
    assert "ralph:" not in prompt  # no marker reaches the agent
    assert "## Skip-Review Mode" not in prompt
    every_mode = select_sections(template_text("prompt.md"), {*MODES, "with-review"})
    assert len(prompt[: prompt.index("## This iteration")]) < len(every_mode) * 0.7
    # shared parts every mode needs
    for needle in ("# Ralph Loop iteration 2 of 9", "## Step 1: Orient", "## Step 4: Document Progress",
                   "## Step 6: Commit & Signal", "## Hard Rules", "<promise>COMPLETE</promise>", "`ralph/prd.md`"):
        assert needle in prompt, (mode, needle)  # fmt: skip


def test_commit_message_of_each_mode() -> None:
    assert "`feat: [US-xxx] - [Title]`" in _render("implement")
    review = _render("review")
    assert "`review: [US-xxx] - approved`" in review and "`review: [US-xxx] - changes requested`" in review
    assert "`fix: [US-xxx] - address review feedback`" in _render("review-fix")
    assert "review: [US-xxx]" not in _render("implement")


def test_skip_review_prompt() -> None:
    prompt = _render("implement", policy=_policy(SkipReviewPolicy), skip=True)
    flat = _flat(prompt)
    for phrase in ("## Skip-Review Mode", "set `passes: true` yourself", "`reviewStatus` stays `null`",
                   "`reviewCount` stays `0`", "Step 3-review and Step 3-review-fix never"):
        assert _flat(phrase) in flat, phrase  # fmt: skip
    assert '`"needs_review"`' not in prompt and "never set `passes: true`" not in prompt
    assert "Skip review: **true**" in prompt


def test_the_loop_section_carries_the_story_and_the_progress_excerpt() -> None:
    tasks = _tasks(**START["review-fix"])
    prompt = render_prompt(
        template_text("prompt.md"), iteration=1, max_iterations=5, ralph_dir="ralph", review_cap=5,
        skip_review=False, policy=_policy(), selection=Selection("review-fix", "US-001", "t"), tasks=tasks,
        feedback=["the gate failed"], tasks_file="ralph/tasks.json", progress="## Codebase Patterns\n- use uv",
        progress_file="ralph/progress.txt", progress_archive="ralph/progress-archive.txt",
    )  # fmt: skip
    section = prompt[prompt.index("## This iteration"):]
    assert '"id": "US-001"' in section and '"reviewFeedback": "1. typo"' in section
    assert "US-002" not in section  # only the selected story
    assert "- verifyCommands: `pytest -q`" in section
    assert "- use uv" in section and "`ralph/progress-archive.txt`" in section
    assert section.index("- use uv") < section.index("the gate failed")
    assert '"failed"' not in section


# -- template markers ------------------------------------------------------------------------------


def test_marked_sections_nest_and_unknown_names_are_errors() -> None:
    text = "a\n<!-- ralph:if review implement -->\nb\n<!-- ralph:if skip-review -->\nc\n<!-- ralph:end -->\n<!-- ralph:end -->\nd\n"
    assert select_sections(text, {"review", "with-review"}) == "a\nb\nd\n"
    assert select_sections(text, {"implement", "skip-review"}) == "a\nb\nc\nd\n"
    assert select_sections(text, {"review-fix", "skip-review"}) == "a\nd\n"
    note = "x\n<!-- ralph:note\nexplains {{things}}\n-->\ny\n"
    assert select_sections(note, {"review"}) == "x\ny\n"
    for bad, where in [
        ("<!-- ralph:if reviw -->\nx\n<!-- ralph:end -->\n", "line 1: unknown section name reviw"),
        ("x\n<!-- ralph:end -->\n", "line 2: `<!-- ralph:end -->` without"),
        ("x\n<!-- ralph:if review -->\n", "line 2: `ralph:if` block is never closed"),
        ("x <!-- ralph:if review --> y\n", "line 1: not a valid `ralph:` marker"),
        ("<!-- ralph: my own note -->\n", "line 1: not a valid `ralph:` marker"),
    ]:
        with pytest.raises(UsageError, match=re.escape(where)):
            select_sections(bad, {"review"}, "ralph/prompt.md")


@pytest.mark.parametrize("mode", MODES)
def test_a_prompt_without_markers_is_sent_whole(mode: str) -> None:
    legacy = LEGACY.read_text(encoding="utf-8")
    values = {"RALPH_ITERATION": "2", "RALPH_MAX_ITERATIONS": "9", "RALPH_DIR": "ralph", "RALPH_REVIEW_CAP": "3",
              "RALPH_SKIP_REVIEW": "false"}  # fmt: skip
    prompt = _render(mode, template=legacy)
    assert prompt.startswith(render(legacy, values).rstrip() + "\n\n## This iteration")


def test_bad_markers_stop_the_run_before_it_starts(ralph_project) -> None:
    prompt_md = ralph_project.ralph_dir / "prompt.md"
    prompt_md.write_text(prompt_md.read_text() + "\n<!-- ralph:if reviews -->\nx\n<!-- ralph:end -->\n")
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--dry-run")
    assert result.returncode == 2
    assert "prompt.md line" in result.stderr and "unknown section name reviews" in result.stderr


@pytest.mark.real_claude
def test_a_project_with_the_old_all_modes_prompt_still_runs(ralph_project, scripted_model, claude_binary, claude_agent_env) -> None:
    from ralph.testing.model_server import IterationScript
    from ralph.testing.scripting import approve_turns, implement_turns

    (ralph_project.ralph_dir / "prompt.md").write_text(LEGACY.read_text(encoding="utf-8"))
    ralph_project.write_stories([story("US-001", "Greeting file")])
    script = IterationScript({1: implement_turns("US-001", "hello.txt", "hello"), 2: approve_turns("US-001", 1)})
    server = scripted_model(script)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=claude_agent_env(server.url))
    assert result.returncode == 0, result.stdout + result.stderr
    first = next(r.first_user_text for r in server.requests if script.key_of(r) == 1)
    # the whole prompt, all three modes, exactly as the project wrote it, then the loop's section
    assert "## Step 3-review-fix: Address Review Feedback (Review-Fix mode only)" in first
    assert "## Skip-Review Mode" in first and "Mode: **implement**" in first and '"id": "US-001"' in first
    assert ralph_project.story("US-001")["passes"] is True
