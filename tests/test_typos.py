"""Issue 22 item 7: typos are caught with "did you mean".

A misspelt task-list key (``depends_on``, ``prority``, a top-level ``verifyCommand``) used to be
kept silently as the person's own field, so the story ran without its dependency, its priority or
its gates; now ``ralph run``, ``--dry-run`` and ``ralph plan --check`` warn and name the key it
probably means (nothing in the file is changed).  A misspelt config key names the closest key
instead of listing all of them.  Every case through the CLI as typed (the replay agent).
"""

from __future__ import annotations

import json
from pathlib import Path

from ralph.testing.project import RalphProject, story
from ralph.testing.replay import replay_env

from test_loop_robustness import IMPLEMENT


def typo_list(project: RalphProject) -> str:
    """A task list with three typos; returns its text as written."""
    data = {
        "project": "demo", "branchName": "ralph/demo", "description": "typos",
        "verifyCommand": ["false"],  # the gate the person wanted: it would fail every story
        "userStories": [
            {**story("US-001", "First", priority=2), "depends_on": ["US-002"]},
            {**story("US-002", "Second", priority=1), "prority": 9, "estimate": "S"},
        ],
    }
    text = json.dumps(data, indent=2) + "\n"
    project.tasks_path.write_text(text)
    project.commit_all("typos")
    return text


EXPECTED = [
    "ralph/tasks.json: verifyCommand: not a key ralph reads (kept, ignored); did you mean `verifyCommands`?",
    "ralph/tasks.json: userStories[0] (US-001).depends_on: not a key ralph reads (kept, ignored); did you mean `dependsOn`?",
    "ralph/tasks.json: userStories[1] (US-002).prority: not a key ralph reads (kept, ignored); did you mean `priority`?",
]


def test_run_dry_run_and_plan_check_warn_about_misspelt_task_list_keys(ralph_project: RalphProject, tmp_path: Path) -> None:
    text = typo_list(ralph_project)
    env = replay_env(tmp_path / "script.json", {1: IMPLEMENT})
    dry = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    for line in EXPECTED:
        assert f"warning: {line}" in dry.stderr, dry.stderr
    assert "estimate" not in dry.stderr  # a key of the person's own, like nothing ralph reads: silent

    check = ralph_project.run("plan", "--check")
    assert check.returncode == 0, check.stdout  # warnings only
    for line in EXPECTED:
        assert f"warning: {line.removeprefix('ralph/tasks.json: ')}" in check.stdout, check.stdout

    run = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=env)
    for line in EXPECTED:
        assert f"warning: {line}" in run.stderr, run.stderr
    warned = ralph_project.events("preflight_warnings")
    assert warned and any("depends_on" in w["what"] for w in warned[0]["warnings"])
    assert "depends_on" in ralph_project.git("show", "HEAD:ralph/tasks.json")  # the person's keys are kept
    assert json.loads(ralph_project.git("show", "main:ralph/tasks.json")) == json.loads(text)


def test_a_missing_field_with_a_misspelt_key_beside_it_says_so(ralph_project: RalphProject, tmp_path: Path) -> None:
    data = json.loads(ralph_project.tasks_path.read_text())
    bad = story("US-001")
    bad["prority"] = bad.pop("priority")
    data["userStories"] = [bad]
    ralph_project.tasks_path.write_text(json.dumps(data, indent=2))
    ralph_project.commit_all("missing priority")
    env = replay_env(tmp_path / "script.json", {})
    for args in (["run", "--runner", "direct", "--agent", "replay", "--dry-run"], ["plan", "--check"]):
        result = ralph_project.run(*args, env=env)
        assert result.returncode in (1, 2)
        assert ("userStories[0] (US-001).priority: required field is missing (`prority` is there: a misspelling "
                "of `priority`?)") in result.stdout + result.stderr


def test_a_misspelt_config_key_names_the_closest_key_not_all_of_them(ralph_project: RalphProject) -> None:
    ralph_project.write_stories([story("US-001")])
    for written, meant in (("max_iteration = 3", "max_iterations"), ("[claud]\nbinary = 'x'", "claude"),
                           ("[quality]\nenabeld = true", "enabled"), ("reviewCap = 2", "review_cap")):
        (ralph_project.path / "ralph.toml").write_text(written + "\n")
        for command in (["run", "--dry-run"], ["doctor"], ["plan", "--check"]):
            result = ralph_project.run(*command)
            out = result.stdout + result.stderr
            assert result.returncode in (1, 2) and f"did you mean `{meant}`?" in out, (command, out)
            assert "known keys" not in out and "max_cost" not in out  # no list of every key
    (ralph_project.path / "ralph.toml").write_text("colour = 'red'\n")
    result = ralph_project.run("run", "--dry-run")
    assert result.returncode == 2
    assert "unknown key `colour`; remove it or check its spelling" in result.stderr


def test_every_problem_of_a_config_file_is_reported_at_once(ralph_project: RalphProject) -> None:
    """Two typos (and more) in one file: each named with its file, key and suggestion in one go,
    not one per run; the core's keys, a plugin section's and a value alike."""
    ralph_project.write_stories([story("US-001")])
    config = ralph_project.path / "ralph.toml"
    config.write_text("max_iteration = 3\nreviewcap = 2\ntimeout = 0\ncolour = 'red'\n"
                      "[claude]\nbinray = 'x'\n[quality]\nenabeld = true\nsoft_timeout = -1\n")
    expected = [
        f"{config}: unknown key `max_iteration`; did you mean `max_iterations`?",
        f"{config}: unknown key `reviewcap`; did you mean `review_cap`?",
        f"{config}: unknown key `colour`; remove it or check its spelling",
        f"{config}: `timeout` must be a number > 0.0 (got 0)",
        f"{config}: unknown key `claude.binray`; did you mean `binary`?",
        f"{config}: `quality.soft_timeout` must be a number > 0.0 (got -1)",
        f"{config}: unknown key `quality.enabeld`; did you mean `enabled`?",
    ]
    run = ralph_project.run("run", "--dry-run")
    assert run.returncode == 2
    assert run.stderr.splitlines() == ["ralph: error: " + expected[0], *expected[1:]], run.stderr
    for command in (["doctor"], ["plan", "--check"]):
        result = ralph_project.run(*command)
        out = result.stdout + result.stderr
        assert result.returncode in (1, 2), (command, out)
        assert [line for line in expected if line not in out] == [], (command, out)
