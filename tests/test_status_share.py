"""One ``git status`` for an iteration's end (``ralph.gitutil.StatusShare``): the ``git-clean`` validator's is the
person's-changes look's while the loop changed nothing in between, and never once anything could have.

The attacker's side: the agent's processes are gone when the read-back takes it (the share is forgotten before
and after the agent's session), but whatever the loop does afterwards — its own writes and commits (a restored
prd.md), a git command that writes, a process it runs, a gate's command or session (the agent's code: it may
rewrite ``.git/index`` in place, stat data kept) — makes the next reader take a new one.  A dirty tree still
fails ``git-clean``, its names quoted as git quotes them (no raw control character reaches the message).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from ralph import gitutil, safeio
from ralph.gitutil import StatusShare, git, tree_status
from ralph.testing import replay
from ralph.testing.project import RalphProject, story
from test_person_refs import commit, repo, sh  # noqa: F401 - the fixture

NASTY_NAMES = [
    "with space.txt",
    'quote".txt',
    "back\\slash.txt",
    "new\nline.txt",
    "esc\x1b[2Jclear.txt",
    "tab\there.txt",
    "bell\x07.txt",
    "caf\u00e9.txt",
    os.fsdecode(b"latin1-\xe9.txt"),  # not UTF-8: decoded as the file system's names are
]
"""File names an agent can leave behind (data: written through Python, never a shell line)."""


@pytest.fixture
def takes(calls_to: Callable[[object, str], list[Any]]) -> list[Any]:
    """Each ``git status`` the share takes."""
    return calls_to(gitutil, "tree_status")


# -- the validator's lines are git's ---------------------------------------------------------------------


def test_the_shared_status_lines_are_git_status_porcelain(repo: Path) -> None:  # noqa: F811
    commit(repo, "tracked.txt")
    commit(repo, "gone.txt")
    (repo / "tracked.txt").write_text("changed\n")
    (repo / "gone.txt").unlink()
    (repo / "staged.txt").write_text("staged\n")
    sh(repo, "add", "staged.txt")
    (repo / "a").write_text("staged, then changed again\n")
    sh(repo, "add", "a")
    (repo / "a").write_text("and again\n")
    for name in NASTY_NAMES:
        (repo / name).write_bytes(b"x\n")
    mine = tree_status(repo).porcelain()
    gits = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True,
                          check=True).stdout.decode("utf-8", "surrogateescape").splitlines()
    assert sorted(mine) == sorted(gits) and len(mine) == 4 + len(NASTY_NAMES)
    assert not any(c in line for line in mine for c in "\n\x1b\x07\t")


def test_a_clean_tree_has_no_lines(repo: Path) -> None:  # noqa: F811
    assert tree_status(repo).porcelain() == []


# -- reused while nothing was noted, never after ----------------------------------------------------------


def test_the_share_is_one_git_call_while_nothing_was_noted(repo: Path, takes: list[Any]) -> None:  # noqa: F811
    share = StatusShare(repo)
    first = share.get()
    assert share.get() is first and len(takes) == 1
    git(repo, "status", "--porcelain")  # reading commands change nothing
    git(repo, "ls-files", "-z")
    git(repo, "rev-parse", "HEAD")
    git(repo, "diff", "--quiet", check=False)
    assert share.get() is first and len(takes) == 1


@pytest.mark.parametrize("change", ["safeio write", "safeio remove", "git add", "git commit", "git reset", "process",
                                    "forget"])
def test_anything_the_loop_does_that_could_change_the_tree_takes_a_new_status(repo: Path, takes: list[Any],  # noqa: F811
                                                                             change: str) -> None:
    share = StatusShare(repo)
    before = share.get()
    if change == "safeio write":
        safeio.write_text(repo / "written.txt", repo, "by the loop\n")
    elif change == "safeio remove":
        safeio.remove(repo / "a", repo)
    elif change == "git add":
        (repo / "new.txt").write_text("new\n")
        # a write the loop does not know about, then the loop's git add: the add alone spoils the share
        git(repo, "add", "new.txt")
    elif change == "git commit":
        (repo / "a").write_text("edited\n")
        git(repo, "commit", "-q", "-am", "the loop's repair commit")
    elif change == "git reset":
        (repo / "a").write_text("edited\n")
        git(repo, "reset", "-q", "--hard", "HEAD")
    elif change == "process":
        from ralph.process import run_shell

        run_shell("printf verify > verify-wrote.txt", repo, 30)  # a verify command that writes
    else:
        (repo / "a").write_text("the agent's last write, before the sweep\n")
        share.forget()
    after = share.get()
    assert len(takes) == 2 and after is not before
    assert after == tree_status(repo)  # now's


def test_a_change_noted_while_the_status_is_taken_spoils_it(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    real = gitutil.tree_status
    calls: list[int] = []

    def racing(project: Path) -> Any:
        calls.append(1)
        status = real(project)
        if len(calls) == 1:  # a write (another thread's) lands after git read the tree, before the share stores it
            safeio.write_text(project / "late.txt", project, "late\n")
        return status

    monkeypatch.setattr(gitutil, "tree_status", racing)
    share = StatusShare(repo)
    assert "late.txt" not in share.get().untracked
    assert "late.txt" in share.get().untracked and len(calls) == 2


def test_a_gate_command_rewriting_the_index_in_place_is_seen(repo: Path, takes: list[Any], tmp_path: Path) -> None:  # noqa: F811
    """The agent's code run by a gate replaces ``.git/index`` in place with its stat data kept: no stat key is
    trusted, the gate's call itself spoils the share."""
    from ralph.loop.gaterunner import _TreeWatch
    from ralph.process import run_shell

    share = StatusShare(repo)
    assert share.get().tracked == []
    index = Path(sh(repo, "rev-parse", "--absolute-git-dir")) / "index"
    staged = tmp_path / "forged-index"
    stamp = tmp_path / "stamp"
    script = (f"touch -r {index} {stamp} && cp {index} {staged} && printf forged > forged.txt && "
              f"GIT_INDEX_FILE={staged} git add forged.txt && rm forged.txt && cat {staged} > {index} && "
              f"touch -r {stamp} {index}")  # the same inode, its times put back

    class Context:
        ask_agent = ask_reviewer = run_command_in = None
        run_command = staticmethod(lambda command, timeout: run_shell(command, repo, timeout))

    watch = _TreeWatch(repo)
    context = watch.guard(Context())  # type: ignore[arg-type]
    context.run_command(script, 30)
    takes.clear()
    now = share.get()
    assert takes == [repo] and "forged.txt" in now.tracked


def test_the_gate_guard_notes_a_change_around_each_call(repo: Path) -> None:  # noqa: F811
    from ralph.loop.gaterunner import _TreeWatch

    seen: list[int] = []

    class Context:
        ask_agent = ask_reviewer = run_command_in = None
        run_command = staticmethod(lambda command, timeout: seen.append(safeio.changes_noted()))

    context = _TreeWatch(repo).guard(Context())  # type: ignore[arg-type]
    before = safeio.changes_noted()
    context.run_command("true", 1)
    assert before < seen[0] < safeio.changes_noted()


# -- through the real CLI ---------------------------------------------------------------------------------


def test_a_dirty_tree_still_fails_git_clean_with_gits_quoting(ralph_project: RalphProject, tmp_path: Path) -> None:
    """The agent leaves untracked files with hostile names and an uncommitted edit: git-clean fails the iteration,
    each name as git status prints it (quoted), no raw control character in the violation."""
    ralph_project.write_stories([story("US-001")], verifyCommands=[])
    left = [replay.write_file(name, "x\n") for name in NASTY_NAMES[:6]]  # JSON carries no undecodable name
    steps = [replay.write_file("a.txt", "a\n"), replay.set_fields("US-001", reviewStatus="needs_review"),
             replay.commit("feat: [US-001] - a"), replay.write_file("a.txt", "edited after the commit\n"),
             *left, replay.say("implemented")]
    env = replay.ReplayScript().default(*steps).env(tmp_path / "script.json")
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1", env=env)
    assert "Traceback" not in result.stderr, result.stderr
    messages = [e["message"] for e in ralph_project.events("violation") if e["check"] == "git-clean"]
    assert len(messages) == 1, ralph_project.events("violation")
    message = messages[0]
    gits = [line for line in message.splitlines() if line.startswith("  ")]
    assert "   M a.txt" in gits
    for expected in ('?? "with space.txt"', '?? "quote\\".txt"', '?? "back\\\\slash.txt"', '?? "new\\nline.txt"',
                     '?? "esc\\033[2Jclear.txt"', '?? "tab\\there.txt"'):
        assert f"  {expected}" in gits, message
    assert not any(c in message for c in "\x1b\t")


@pytest.mark.real_claude
def test_the_loops_own_commit_after_the_read_back_is_no_persons_change(ralph_project, scripted_model, claude_binary,
                                                                       claude_agent_env) -> None:
    """Iteration 1 sets ``passes`` (not the implementer's to set) and commits, then hits a usage limit.  After the
    validators' status (shared) the read-back undoes the change and commits it, then the loop waits: the state it
    left must be taken after its own commit, or the look after the wait takes that commit for a person's (HEAD
    moved) and stops the run."""
    from ralph.testing.model_server import IterationScript, usage_limit_reply
    from ralph.testing.project import wait_for
    from ralph.testing.scripting import bash_turns, commit_command, set_fields_command

    ralph_project.write_stories([story("US-001")], verifyCommands=[])
    commands = ["printf hi > hi.txt", set_fields_command("US-001", reviewStatus="needs_review", passes=True),
                commit_command("feat: [US-001] - hi")]  # passes: not the implementer's to set
    script = IterationScript({1: bash_turns(commands, "implemented")})
    limited = {"left": 2}  # iteration 1's last call and, the limit still on, iteration 2's first

    def responder(request: Any) -> Any:  # iteration 1's last turn: its work is done, then the limit (a wait after it)
        hit = script.key_of(request) == 1 and request.assistant_turns == len(commands)
        if limited["left"] and (hit or limited["left"] < 2):
            limited["left"] -= 1
            return usage_limit_reply(int(time.time()) + 4)
        return script(request)

    server = scripted_model(responder)
    proc = ralph_project.start("run", "--runner", "direct", "--agent", "claude", "-n", "2",
                               env=claude_agent_env(server.url))
    try:
        wait_for(lambda: ralph_project.run_dirs() and ralph_project.events("usage_limit_wait"), timeout=120)
    finally:
        out, err = proc.communicate(timeout=180)
    kinds = [e["kind"] for e in ralph_project.events()]
    assert "usage_limit_wait" in kinds, out + err
    assert "person_changed" not in kinds, out + err
    assert "changed between iterations" not in out + err
    assert json.loads(ralph_project.tasks_path.read_text())["userStories"][0]["passes"] is False  # undone, committed
    assert "undid illegal review-field changes on US-001" in out + err
    assert [e["iteration"] for e in ralph_project.events("iteration_started")][:2] == [1, 2], kinds
