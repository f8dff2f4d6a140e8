"""The person's refs kept for a run (unit level: ``ralph.loop.personrefs.RefGuard`` on a real repository).

End to end through the real CLI: tests/test_person_refs_claude.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ralph.loop.personrefs import RefGuard, read_refs
from ralph.loop.records import IterationRecord
from ralph.testing.project import GIT_IDENTITY


def sh(repo: Path, *args: str) -> str:
    env = {**__import__("os").environ, **GIT_IDENTITY}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name + "\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", name)
    return sh(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    sh(path, "init", "-q", "-b", "main")
    commit(path, "a")
    sh(path, "checkout", "-q", "-b", "run")
    return path


def guard(repo: Path, tmp_path: Path) -> tuple[RefGuard, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    refs = RefGuard(repo, tmp_path / "mirror.git", lambda kind, **data: events.append((kind, data)))
    refs.start(run_dir)
    return refs, events


def test_an_untouched_repository_passes_and_the_record_lists_the_protected_refs(repo: Path, tmp_path: Path) -> None:
    sh(repo, "tag", "v1")
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    commit(repo, "work on the run branch")
    assert refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set()) == [] and events == []
    assert set(refs.protected) == {"refs/heads/main", "refs/tags/v1"} and refs.branch == "refs/heads/run"
    assert '"refs/heads/main"' in (tmp_path / "run" / "refs.json").read_text()


def test_deleted_branch_tag_and_stash_come_back_even_after_gc(repo: Path, tmp_path: Path) -> None:
    sh(repo, "checkout", "-q", "-b", "idea")
    idea = commit(repo, "idea")
    sh(repo, "tag", "-a", "-m", "release", "v2")
    tag = sh(repo, "rev-parse", "v2")
    sh(repo, "checkout", "-q", "run")
    (repo / "a").write_text("stashed\n")
    sh(repo, "stash", "-q")
    stash = sh(repo, "rev-parse", "refs/stash")
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    for args in (["branch", "-D", "idea"], ["tag", "-d", "v2"], ["stash", "drop", "-q"],
                 ["reflog", "expire", "--expire=now", "--all"], ["gc", "-q", "--prune=now"]):
        sh(repo, *args)
    assert subprocess.run(["git", "cat-file", "-e", idea], cwd=repo).returncode != 0  # really gone

    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert violation.check == "person-refs" and "idea deleted" in violation.message
    assert (sh(repo, "rev-parse", "idea"), sh(repo, "rev-parse", "v2"), sh(repo, "rev-parse", "refs/stash")) == (idea, tag, stash)
    assert sh(repo, "show", f"{idea}:idea") == "idea"
    kind, data = events[0]
    assert kind == "refs_restored" and {r["ref"] for r in data["refs"]} == {"refs/heads/idea", "refs/tags/v2", "refs/stash"}
    assert all(r["moved_to"] is None for r in data["refs"]) and data["failed"] == []
    assert not [name for name in read_refs(repo) if name.startswith("refs/ralph-restore/")]


def test_a_moved_branch_is_put_back_and_where_it_went_is_kept(repo: Path, tmp_path: Path) -> None:
    main = sh(repo, "rev-parse", "main")
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    evil = commit(repo, "evil")
    sh(repo, "update-ref", "refs/heads/main", evil)
    refs.check(IterationRecord(3, "implement", "US-001"), checkpoint, set())
    assert sh(repo, "rev-parse", "main") == main
    (moved,) = events[0][1]["refs"]
    assert moved["moved_to"] == evil and moved["kept_as"] == "refs/ralph-kept/iteration-003/heads/main"
    assert sh(tmp_path / "mirror.git", "rev-parse", moved["kept_as"]) == evil


def test_head_on_another_branch_goes_back_with_the_tree(repo: Path, tmp_path: Path) -> None:
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    sh(repo, "checkout", "-q", "main")
    commit(repo, "landed-on-main")
    (repo / "loose").write_text("untracked\n")
    violations = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert {v.check for v in violations} == {"person-refs", "run-branch"}
    assert sh(repo, "symbolic-ref", "HEAD") == "refs/heads/run"
    assert not (repo / "landed-on-main").exists() and not (repo / "loose").exists()
    assert sh(repo, "status", "--porcelain") == ""
    head = next(data for kind, data in events if kind == "head_restored")
    assert head["how"] == "moved" and Path(head["saved"].split(" (")[0].removeprefix("a copy is in ")).is_file()


def test_a_rewritten_run_branch_gets_the_tree_on_top_of_the_checkpoint(repo: Path, tmp_path: Path) -> None:
    refs, events = guard(repo, tmp_path)
    commit(repo, "accepted")
    refs.refresh()
    checkpoint = sh(repo, "rev-parse", "HEAD")
    sh(repo, "reset", "-q", "--hard", "HEAD~1")
    commit(repo, "rewritten")
    (violation,) = refs.check(IterationRecord(2, "implement", "US-001"), checkpoint, set())
    assert violation.check == "run-branch"
    assert sh(repo, "rev-parse", "HEAD~1") == checkpoint
    assert sorted(sh(repo, "ls-tree", "--name-only", "HEAD").split()) == ["a", "rewritten"]
    assert events[0][1]["how"] == "rewritten"


def test_the_loops_own_new_refs_join_at_the_next_refresh(repo: Path, tmp_path: Path) -> None:
    refs, _ = guard(repo, tmp_path)
    sh(repo, "branch", "wip/ralph-fail-US-001")  # made by the loop (tier 3) between iterations
    refs.refresh()
    assert "refs/heads/wip/ralph-fail-US-001" in refs.protected
    sh(repo, "branch", "-D", "wip/ralph-fail-US-001")
    refs.check(IterationRecord(2, "implement", "US-001"), sh(repo, "rev-parse", "HEAD"), set())
    assert "wip/ralph-fail-US-001" in sh(repo, "branch", "--list", "wip/*")


def test_a_refresh_right_after_a_clean_check_reads_no_refs_and_a_move_since_is_still_put_back(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ralph.loop import personrefs

    sh(repo, "tag", "v1")
    refs, events = guard(repo, tmp_path)
    reads: list[Path] = []
    real = personrefs.read_refs
    monkeypatch.setattr(personrefs, "read_refs", lambda project: reads.append(project) or real(project))
    checkpoint = sh(repo, "rev-parse", "HEAD")
    assert refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set(), after_agent=False) == []
    sh(repo, "tag", "-f", "v1", checkpoint + "^{tree}")  # moved between the gates' check and the refresh
    refs.refresh()
    assert len(reads) == 1  # the check's own read, not a second one
    assert refs.check(IterationRecord(2, "implement", "US-001"), checkpoint, set())
    assert sh(repo, "rev-parse", "v1") == checkpoint and events[-1][0] == "refs_restored"

    sh(repo, "branch", "wip/ralph-fail-US-001")  # the loop's own, made after the last check (a final check)
    refs.read_again()
    refs.refresh()
    assert len(reads) == 3 and "refs/heads/wip/ralph-fail-US-001" in refs.protected


def test_a_branch_of_the_persons_other_worktree_may_move_forward_only(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    sh(repo, "worktree", "add", "-q", "-b", "mine", str(other), "main")
    sh(repo, "tag", "v1")
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    mine = commit(other, "the person commits there")
    sh(repo, "tag", "-d", "v1")  # while the agent deletes a tag
    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert "v1 deleted" in violation.message and "mine" not in violation.message
    assert sh(repo, "rev-parse", "mine") == mine and sh(repo, "rev-parse", "v1") == checkpoint
    sh(repo, "update-ref", "refs/heads/mine", "main")  # rewound
    assert refs.check(IterationRecord(2, "implement", "US-001"), checkpoint, set())[0].check == "person-refs"
    assert sh(repo, "rev-parse", "mine") == mine


def test_remote_tracking_refs_are_not_the_runs_to_keep(repo: Path, tmp_path: Path) -> None:
    sh(repo, "update-ref", "refs/remotes/origin/main", "main")
    refs, _ = guard(repo, tmp_path)
    sh(repo, "update-ref", "-d", "refs/remotes/origin/main")
    assert refs.check(IterationRecord(1, "implement", "US-001"), sh(repo, "rev-parse", "HEAD"), set()) == []


def test_a_tip_whose_object_was_deleted_by_hand_comes_back(repo: Path, tmp_path: Path) -> None:
    sh(repo, "checkout", "-q", "-b", "idea")
    idea = commit(repo, "idea")
    sh(repo, "checkout", "-q", "run")
    refs, events = guard(repo, tmp_path)
    loose = repo / ".git" / "objects" / idea[:2] / idea[2:]
    loose.chmod(0o644)
    loose.unlink()  # the ref is unchanged; the commit it names is gone
    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), sh(repo, "rev-parse", "HEAD"), set())
    assert violation.check == "person-refs"
    assert sh(repo, "cat-file", "-t", idea) == "commit" and sh(repo, "rev-parse", "idea") == idea
    assert events[0][1]["refs"][0]["moved_to"] is None


def test_a_ref_made_a_link_to_the_run_branch_is_put_back_without_moving_the_run_branch(repo: Path, tmp_path: Path) -> None:
    main = sh(repo, "rev-parse", "main")
    refs, _ = guard(repo, tmp_path)
    checkpoint = commit(repo, "run work")
    refs.refresh()
    sh(repo, "symbolic-ref", "refs/heads/main", "refs/heads/run")
    refs.check(IterationRecord(2, "implement", "US-001"), checkpoint, set())
    assert sh(repo, "rev-parse", "run") == checkpoint and sh(repo, "rev-parse", "main") == main
    assert subprocess.run(["git", "symbolic-ref", "-q", "refs/heads/main"], cwd=repo).returncode != 0


def test_the_object_copy_never_follows_a_link_or_opens_a_fifo(repo: Path, tmp_path: Path) -> None:
    from ralph.loop.objectcopy import ObjectCopy

    secret = tmp_path / "host-secret"
    secret.write_text("the person's private key\n")
    objects = repo / ".git" / "objects"
    os = __import__("os")
    # fan-out folders no object of the repository uses (its hashes change with the commit times)
    free = [name for name in (f"{n:02x}" for n in range(256)) if not (objects / name).exists()]
    fanout, linked = free[0], free[1]
    (objects / fanout).mkdir()
    planted = [objects / fanout / ("c" * 38), objects / fanout / ("d" * 38), objects / linked]
    os.symlink(secret, planted[0])
    os.mkfifo(planted[1])
    os.symlink(tmp_path, planted[2])  # a linked fan-out folder
    copy = ObjectCopy(objects, tmp_path / "copy")
    copied = copy.update()
    assert copied > 0 and copy.update() == 0  # each once
    assert not (tmp_path / "copy" / fanout / ("c" * 38)).exists()
    assert not (tmp_path / "copy" / fanout / ("d" * 38)).exists()
    assert not (tmp_path / "copy" / linked).exists()
    head = sh(repo, "rev-parse", "HEAD")
    assert (tmp_path / "copy" / head[:2] / head[2:]).is_file()
    for path in planted:
        path.unlink()
    sh(repo, "gc", "-q")  # objects packed: the pack joins the copy, .idx last
    assert copy.update() >= 2 and list((tmp_path / "copy" / "pack").glob("pack-*.idx"))


@pytest.mark.parametrize("how", ["moved", "packed and moved", "a symlink", "a hard link", "none moved"])
def test_a_stop_where_git_cannot_run_names_the_moved_refs_from_their_files(
    how: str, repo: Path, tmp_path: Path
) -> None:
    """Without git (the metadata stop could not undo the change) the refs' own files are read: a moved loose or
    packed ref is named, and so is one whose file is a link (its value cannot be read without following it)."""
    sh(repo, "tag", "v1")
    if how == "packed and moved":
        sh(repo, "pack-refs", "--all")
    refs, _ = guard(repo, tmp_path)
    other = commit(repo, "elsewhere")
    loose = repo / ".git" / "refs" / "heads" / "main"
    if how in ("moved", "packed and moved"):
        loose.parent.mkdir(parents=True, exist_ok=True)
        loose.write_text(other + "\n")  # a loose ref shadows the packed one
    elif how == "a symlink":
        target = tmp_path / "outside-main"
        target.write_text(loose.read_text())  # the same value, read only through the link
        loose.unlink()
        loose.symlink_to(target)
    elif how == "a hard link":
        (tmp_path / "outside-main").hardlink_to(loose)
    assert refs._moved_without_git() == ([] if how == "none moved" else ["refs/heads/main"])


# -- the refs only another worktree of the person's has ---------------------------------------------------------


def other_worktree(repo: Path, tmp_path: Path, *args: str) -> tuple[Path, str]:
    """A worktree of the person's beside the run's (detached on a commit only it names, with a bisect ref and a
    refs/worktree/ ref there), and that commit."""
    wt = tmp_path / "person-wt"
    sh(repo, "worktree", "add", "-q", *(args or ("--detach",)), str(wt), "main")
    mine = sh(wt, "commit-tree", "HEAD^{tree}", "-m", "only here")
    if not args:
        sh(wt, "update-ref", "--no-deref", "HEAD", mine)
    for name in ("refs/bisect/bad", "refs/worktree/keep"):
        sh(wt, "update-ref", name, mine)
    return wt, mine


def test_the_refs_only_another_worktree_has_are_put_back(repo: Path, tmp_path: Path) -> None:
    wt, mine = other_worktree(repo, tmp_path)
    refs, events = guard(repo, tmp_path)
    assert {"worktrees/person-wt/HEAD", "worktrees/person-wt/refs/bisect/bad",
            "worktrees/person-wt/refs/worktree/keep"} <= set(refs.protected)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    elsewhere = sh(repo, "commit-tree", "HEAD^{tree}", "-m", "elsewhere")
    sh(wt, "update-ref", "--no-deref", "HEAD", elsewhere)
    sh(wt, "update-ref", "refs/bisect/bad", elsewhere)
    sh(wt, "update-ref", "-d", "refs/worktree/keep")
    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert violation.check == "person-refs" and "worktrees/person-wt/HEAD moved" in violation.message
    assert [sh(wt, "rev-parse", name) for name in ("HEAD", "refs/bisect/bad", "refs/worktree/keep")] == [mine] * 3
    shown = {r["ref"]: r for r in events[0][1]["refs"]}
    assert shown["worktrees/person-wt/refs/worktree/keep"]["moved_to"] is None
    assert sh(tmp_path / "mirror.git", "rev-parse", shown["worktrees/person-wt/HEAD"]["kept_as"]) == elsewhere
    assert '"worktrees/person-wt/": "' + str(wt) in (tmp_path / "run" / "refs.json").read_text()


def test_another_worktrees_head_on_a_branch_goes_back_to_it_and_a_detached_one_may_move_forward(
    repo: Path, tmp_path: Path
) -> None:
    wt, mine = other_worktree(repo, tmp_path, "-b", "mine")
    detached = tmp_path / "detached"
    sh(repo, "worktree", "add", "-q", "--detach", str(detached), "main")
    refs, _ = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    sh(wt, "symbolic-ref", "HEAD", "refs/heads/main")  # switched to another branch
    ahead = commit(detached, "the person commits on their detached HEAD")
    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert "worktrees/person-wt/HEAD moved" in violation.message and "detached" not in violation.message
    assert sh(wt, "symbolic-ref", "HEAD") == "refs/heads/mine" and sh(detached, "rev-parse", "HEAD") == ahead
    sh(detached, "update-ref", "--no-deref", "HEAD", "main")  # rewound
    assert refs.check(IterationRecord(2, "implement", "US-001"), checkpoint, set())
    assert sh(detached, "rev-parse", "HEAD") == ahead


def test_the_main_worktrees_head_is_protected_from_a_run_in_a_linked_one(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    sh(repo, "worktree", "add", "-q", "-b", "linked-run", str(linked), "main")
    sh(repo, "update-ref", "refs/bisect/bad", "main")  # the main worktree's own
    refs, _ = guard(linked, tmp_path)
    assert {"main-worktree/HEAD", "main-worktree/refs/bisect/bad"} <= set(refs.protected)
    assert not [name for name in refs.protected if name.startswith("worktrees/")]  # the run's own worktree
    checkpoint = sh(linked, "rev-parse", "HEAD")
    sh(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    sh(repo, "update-ref", "-d", "refs/bisect/bad")
    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert "main-worktree/HEAD moved" in violation.message and "main-worktree/refs/bisect/bad deleted" in violation.message
    assert sh(repo, "symbolic-ref", "HEAD") == "refs/heads/run" and sh(repo, "rev-parse", "refs/bisect/bad")


def test_ralphs_own_worktrees_and_one_the_agent_adds_are_not_the_persons(repo: Path, tmp_path: Path) -> None:
    common = repo / ".git"
    sh(repo, "worktree", "add", "-q", "--detach", str(common / "ralph-worktrees" / "PRD-1"), "main")
    refs, events = guard(repo, tmp_path)
    assert refs.others == [] and not [name for name in refs.protected if "/HEAD" in name]
    checkpoint = sh(repo, "rev-parse", "HEAD")
    sh(common / "ralph-worktrees" / "PRD-1", "update-ref", "--no-deref", "HEAD", checkpoint)
    sh(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "agents"), "main")  # during the run
    sh(tmp_path / "agents", "update-ref", "refs/bisect/bad", checkpoint)
    assert refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set()) == [] and events == []


@pytest.mark.parametrize("how", ["worktree remove --force", "rm of its git directory"])
def test_a_removed_worktree_of_the_persons_stops_the_run_naming_it(how: str, repo: Path, tmp_path: Path) -> None:
    """Its refs cannot be put back (git would write them into a new, broken git directory): the run stops, the
    message names the worktree, its refs' values and how to make it again; no git directory is made."""
    import shutil

    from ralph.errors import UsageError

    wt, mine = other_worktree(repo, tmp_path)
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    if how == "worktree remove --force":
        sh(repo, "worktree", "remove", "--force", str(wt))
    else:
        shutil.rmtree(repo / ".git" / "worktrees" / "person-wt")
    with pytest.raises(UsageError) as stop:
        refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    message = str(stop.value)
    assert f"the person's worktree {wt} was removed" in message and f"HEAD was {mine}" in message
    assert f"refs/bisect/bad was {mine}" in message and f"`git worktree add {wt} {mine}`" in message
    assert "refs.json" in message
    assert not (repo / ".git" / "worktrees" / "person-wt").exists()
    assert set(events[-1][1]["failed"]) == {"worktrees/person-wt/HEAD", "worktrees/person-wt/refs/bisect/bad",
                                            "worktrees/person-wt/refs/worktree/keep"}


def test_a_stop_where_git_cannot_run_names_another_worktrees_moved_refs(repo: Path, tmp_path: Path) -> None:
    wt, mine = other_worktree(repo, tmp_path)
    refs, _ = guard(repo, tmp_path)
    assert refs._moved_without_git() == []
    (repo / ".git" / "worktrees" / "person-wt" / "refs" / "bisect" / "bad").write_text(sh(repo, "rev-parse", "main") + "\n")
    (repo / ".git" / "worktrees" / "person-wt" / "HEAD").write_text("ref: refs/heads/main\n")
    assert refs._moved_without_git() == ["worktrees/person-wt/HEAD", "worktrees/person-wt/refs/bisect/bad"]


def test_without_other_worktrees_the_guard_starts_no_other_git_process(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most projects have no other worktree: a check runs the git it ran before (one listing; none while the key
    holds); with one there is one git process more (its tips' objects looked for), none while the key holds."""
    import time

    from ralph.loop import personrefs, refkey

    commands: list[str] = []
    real = personrefs.git
    monkeypatch.setattr(personrefs, "git", lambda project, *args, **kw: commands.append(args[0]) or real(project, *args, **kw))

    def checked(refs: RefGuard) -> list[str]:
        commands.clear()
        assert refs.check(IterationRecord(1, "implement", "US-001"), sh(repo, "rev-parse", "HEAD"), set()) == []
        return list(commands)

    def settle() -> None:
        time.sleep(refkey.RACY_NS / 1e9 + 0.1)

    refs, _ = guard(repo, tmp_path)
    assert checked(refs) == ["for-each-ref"]
    settle()
    checked(refs)
    assert checked(refs) == []  # keyed: no git at all

    other_worktree(repo, tmp_path)
    refs, _ = guard(repo, tmp_path)
    assert checked(refs) == ["for-each-ref", "cat-file"]
    settle()
    checked(refs)
    assert checked(refs) == []  # their files are in the key too


@pytest.mark.parametrize("what", ["commondir", "config.worktree", ".git file"])
def test_the_files_that_say_where_the_persons_worktree_is_are_put_back(what: str, repo: Path, tmp_path: Path) -> None:
    """Repointing the person's worktree (at another repository: its refs then read as the agent wants, its config is
    the agent's) or making it look like ralph's own for the next run is put back and named, its refs untouched."""
    wt, mine = other_worktree(repo, tmp_path)
    admin = repo / ".git" / "worktrees" / "person-wt"
    target = {"commondir": admin / "commondir", "gitdir": admin / "gitdir", "config.worktree": admin / "config.worktree",
              ".git file": wt / ".git"}[what]
    before = target.read_bytes() if target.exists() else None
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    target.write_text({"commondir": str(tmp_path / "agents-copy") + "\n",
                       "gitdir": str(repo / ".git" / "ralph-worktrees" / "x" / ".git") + "\n",
                       "config.worktree": "[core]\n\tfsmonitor = /tmp/x\n",
                       ".git file": f"gitdir: {tmp_path / 'agents-admin'}\n"}[what])
    (violation,) = refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert violation.check == "person-refs" and str(target) in violation.message
    assert (target.read_bytes() if target.exists() else None) == before
    assert events[-1] == ("worktree_files_restored", {"iteration": 1, "paths": [str(target)]})
    assert sh(wt, "rev-parse", "HEAD") == mine
    assert refs.check(IterationRecord(2, "implement", "US-001"), checkpoint, set()) == []


def test_a_worktree_id_with_any_character_git_allows_is_the_persons(repo: Path, tmp_path: Path) -> None:
    from ralph.loop import worktreerefs

    for folder in ("fix#12", ".hidden-wt", "wt@home"):
        sh(repo, "worktree", "add", "-q", "--detach", str(tmp_path / folder), "main")
    found = worktreerefs.find(repo / ".git", repo / ".git", repo / ".git" / "ralph-worktrees")
    assert {w.prefix for w in found} == {f"worktrees/{name}/" for name in os.listdir(repo / ".git" / "worktrees")}
    assert len(found) == 3


def test_a_gitdir_file_naming_another_folder_is_put_back_and_stops_the_run(repo: Path, tmp_path: Path) -> None:
    """Its ``gitdir`` names another folder: the worktree was made again elsewhere under its id (another index and
    reflog), or forged to look like ralph's own for the next run.  Put back, and the run stops naming it."""
    from ralph.errors import UsageError

    wt, _mine = other_worktree(repo, tmp_path)
    gitdir = repo / ".git" / "worktrees" / "person-wt" / "gitdir"
    before = gitdir.read_bytes()
    refs, _events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    gitdir.write_text(str(repo / ".git" / "ralph-worktrees" / "x" / ".git") + "\n")
    with pytest.raises(UsageError, match=f"the person's worktree {wt} was removed or made again elsewhere"):
        refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
    assert gitdir.read_bytes() == before


def test_the_persons_worktree_removed_and_made_again_under_its_id_stops_the_run(repo: Path, tmp_path: Path) -> None:
    import shutil

    from ralph.errors import UsageError

    wt, mine = other_worktree(repo, tmp_path)
    refs, _events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    shutil.rmtree(repo / ".git" / "worktrees" / "person-wt")
    sh(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "elsewhere" / "person-wt"), mine)
    assert (repo / ".git" / "worktrees" / "person-wt").is_dir()
    with pytest.raises(UsageError, match=f"the person's worktree {wt} was removed"):
        refs.check(IterationRecord(1, "implement", "US-001"), checkpoint, set())
