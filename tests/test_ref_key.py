"""The ref guard reuses git's last listing of the refs only while nothing it came from changed
(``ralph.loop.refkey``): every way the agent can change the refs or their tips' objects still reaches git.

Real repositories; the guard's git reads are counted.  ``settle`` waits out the key's 2-second window for
entries changed just now (as an agent session does), so the reuse is really in play when the attack comes.
End to end through the real CLI: tests/test_person_refs_claude.py (a ref moved in place, size and mtime kept).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import pytest

from ralph.gitutil import GitMetadataChanged
from ralph.loop import personrefs, refkey
from ralph.loop.records import IterationRecord
from test_person_refs import commit, guard, repo, sh  # noqa: F401 - the fixture

RECORD = IterationRecord(1, "implement", "US-001")


def settle() -> None:
    time.sleep(refkey.RACY_NS / 1e9 + 0.1)


@pytest.fixture
def reads(calls_to: Callable[[object, str], list[Path]]) -> list[Path]:
    """Each ``for-each-ref`` listing the guard asks git for."""
    return calls_to(personrefs, "read_refs")


def keyed(repo: Path, tmp_path: Path, reads: list[Path]) -> tuple[personrefs.RefGuard, str, list]:  # noqa: F811
    """A guard whose last listing is keyed and reused (proven: a check that reads nothing)."""
    sh(repo, "tag", "v1")
    refs, events = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    settle()
    assert refs.check(RECORD, checkpoint, set()) == []  # keyed now
    count = len(reads)
    assert refs.check(RECORD, checkpoint, set()) == [] and len(reads) == count  # reused: no git
    return refs, checkpoint, events


def move_in_place(path: Path, old: str, new: str) -> None:
    """Rewrite ``old`` to ``new`` (same length) inside ``path`` in place, its size and mtime kept."""
    info = os.stat(path)
    data = path.read_bytes()
    assert old.encode() in data and len(old) == len(new)
    with open(path, "r+b") as handle:
        handle.write(data.replace(old.encode(), new.encode()))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (info.st_size, info.st_mtime_ns, info.st_ino)
    settle()  # the agent waits: its change is past the window where it would be read again anyway


def test_a_branch_moved_in_place_with_its_size_and_mtime_kept_is_put_back(repo: Path, tmp_path: Path,  # noqa: F811
                                                                         reads: list[Path]) -> None:
    refs, checkpoint, events = keyed(repo, tmp_path, reads)
    main = sh(repo, "rev-parse", "main")
    other = sh(repo, "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "elsewhere")
    move_in_place(repo / ".git" / "refs" / "heads" / "main", main, other)
    (violation,) = refs.check(RECORD, checkpoint, set())
    assert violation.check == "person-refs" and "main moved" in violation.message
    assert sh(repo, "rev-parse", "main") == main and events[-1][0] == "refs_restored"


def test_packed_refs_rewritten_in_place_or_replaced_are_read_again(repo: Path, tmp_path: Path,  # noqa: F811
                                                                  reads: list[Path]) -> None:
    sh(repo, "tag", "v2")
    sh(repo, "tag", "v3")
    sh(repo, "pack-refs", "--all")
    refs, checkpoint, events = keyed(repo, tmp_path, reads)
    packed = repo / ".git" / "packed-refs"
    tag = sh(repo, "rev-parse", "v2")
    other = sh(repo, "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "elsewhere")
    move_in_place(packed, f"{tag} refs/tags/v2", f"{other} refs/tags/v2")
    (violation,) = refs.check(RECORD, checkpoint, set())
    assert "v2 moved" in violation.message and sh(repo, "rev-parse", "v2") == tag

    settle()  # (the restore wrote v2 as a loose ref)
    for _ in range(2):  # the first listing has other tips than the key was taken for: the second is keyed
        assert refs.check(RECORD, checkpoint, set()) == []
    count = len(reads)
    assert refs.check(RECORD, checkpoint, set()) == [] and len(reads) == count
    replacement = tmp_path / "packed-refs"
    replacement.write_bytes(packed.read_bytes().replace(f"{tag} refs/tags/v3\n".encode(), b""))
    info = os.stat(packed)
    os.utime(replacement, ns=(info.st_atime_ns, info.st_mtime_ns))
    os.replace(replacement, packed)  # another file, its mtime the old one's
    settle()
    (violation,) = refs.check(RECORD, checkpoint, set())
    assert "v3 deleted" in violation.message and sh(repo, "rev-parse", "v3") == tag


def test_a_symlinked_ref_reaches_git_and_its_layout_check(repo: Path, tmp_path: Path,  # noqa: F811
                                                         reads: list[Path]) -> None:
    refs, checkpoint, _ = keyed(repo, tmp_path, reads)
    outside = tmp_path / "outside"
    outside.write_text(sh(repo, "rev-parse", "HEAD") + "\n")
    os.symlink(outside, repo / ".git" / "refs" / "heads" / "planted")
    with pytest.raises(GitMetadataChanged, match="planted is a symlink"):
        refs.check(RECORD, checkpoint, set())


def test_a_deleted_tip_object_is_found_though_no_ref_changed(repo: Path, tmp_path: Path,  # noqa: F811
                                                            reads: list[Path]) -> None:
    sh(repo, "checkout", "-q", "-b", "idea")
    idea = commit(repo, "idea")
    sh(repo, "checkout", "-q", "run")
    refs, checkpoint, events = keyed(repo, tmp_path, reads)
    loose = repo / ".git" / "objects" / idea[:2] / idea[2:]
    loose.chmod(0o644)
    loose.unlink()
    settle()
    (violation,) = refs.check(RECORD, checkpoint, set())
    assert "idea deleted" in violation.message and sh(repo, "cat-file", "-t", idea) == "commit"


def test_a_new_ref_is_listed(repo: Path, tmp_path: Path, reads: list[Path]) -> None:  # noqa: F811
    refs, checkpoint, _ = keyed(repo, tmp_path, reads)
    count = len(reads)
    sh(repo, "branch", "new-one")
    refs.check(RECORD, checkpoint, set(), after_agent=False)
    assert len(reads) == count + 1
    refs.read_again()
    refs.refresh()
    assert "refs/heads/new-one" in refs.protected


def test_no_key_for_what_is_not_plain_or_changed_just_now(repo: Path, tmp_path: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    head = sh(repo, "rev-parse", "HEAD")
    with pytest.raises(refkey.NoKey):
        refkey.ref_key(repo, {head})  # the refs were written just now
    later = time.time_ns() + 60 * 10**9
    monkeypatch.setattr(refkey, "_now", lambda: later)  # from here on nothing is "just now": the layout decides
    refkey.ref_key(repo, {head})
    with pytest.raises(refkey.NoKey):
        refkey.ref_key(repo, {""})  # a tip whose object is missing: git says which
    dotgit = repo / ".git"
    for make, undo in [
        (lambda: (dotgit / "reftable").mkdir(), lambda: (dotgit / "reftable").rmdir()),
        (lambda: (dotgit / "objects" / "info" / "alternates").write_text("/elsewhere\n"),
         lambda: (dotgit / "objects" / "info" / "alternates").unlink()),
        (lambda: os.mkfifo(dotgit / "refs" / "tags" / "fifo"), lambda: (dotgit / "refs" / "tags" / "fifo").unlink()),
        (lambda: (dotgit / "refs" / "heads" / "odd").write_text("ref: ORIG_HEAD\n"),
         lambda: (dotgit / "refs" / "heads" / "odd").unlink()),
    ]:
        make()
        with pytest.raises(refkey.NoKey):
            refkey.ref_key(repo, {head})
        undo()
        refkey.ref_key(repo, {head})


def test_a_swapped_git_directory_gives_another_key(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    head = sh(repo, "rev-parse", "HEAD")
    settle()
    before = refkey.ref_key(repo, {head})
    os.rename(repo / ".git", tmp_path / "moved.git")
    (repo / ".git").write_text(f"gitdir: {tmp_path / 'moved.git'}\n")  # the same refs, reached through a gitfile
    settle()
    assert refkey.ref_key(repo, {head}) != before


def test_thousands_of_loose_refs_are_listed_by_git_without_a_walk_first(repo: Path, tmp_path: Path,  # noqa: F811
                                                                        reads: list[Path],
                                                                        calls_to: Callable[[object, str], list[Path]],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refkey, "MAX_ENTRIES", 5)
    for number in range(6):
        sh(repo, "tag", f"t{number}")
    refs, _ = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    settle()
    walks = calls_to(refkey, "ref_key")
    for _ in range(3):
        assert refs.check(RECORD, checkpoint, set()) == []
    assert len(walks) == 1 and len(reads) == 4  # the start's listing and one per check


def test_a_symbolic_ref_to_head_is_never_reused(repo: Path, tmp_path: Path, reads: list[Path]) -> None:  # noqa: F811
    # git lists it with HEAD's branch as its target: it resolves through HEAD, which the key leaves out
    (repo / ".git" / "refs" / "heads" / "follows-head").write_text("ref: HEAD\n")
    refs, _ = guard(repo, tmp_path)
    checkpoint = sh(repo, "rev-parse", "HEAD")
    settle()
    for _ in range(3):
        refs.check(RECORD, checkpoint, set())
    assert len(reads) == 4  # the start's listing and one per check


def test_a_linked_worktree_keys_its_own_per_worktree_refs(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    """A linked worktree's git dir lies inside the common dir (``<common>/worktrees/<id>``), and git lists its
    per-worktree refs (``refs/worktree/``, ``refs/bisect/``) from there: a move of one changes the key."""
    linked = tmp_path / "linked"
    sh(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    sh(linked, "update-ref", "refs/worktree/keep", "HEAD")
    sh(linked, "update-ref", "refs/bisect/bad", "HEAD")
    tip = sh(linked, "rev-parse", "HEAD")
    settle()
    before = refkey.ref_key(linked, [tip])
    own = Path(sh(linked, "rev-parse", "--absolute-git-dir"))
    assert any(str(own / "refs" / "worktree" / "keep") == entry[0] for entry in before)
    for ref in ("refs/worktree/keep", "refs/bisect/bad"):
        move_in_place(own / ref, tip[:8], "0" * 8)
        assert refkey.ref_key(linked, [tip]) != before, ref
        before = refkey.ref_key(linked, [tip])
