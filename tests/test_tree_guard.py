"""The tree guard around the gates (ralph.loop.treeguard) on real repositories: what a read-only session
changed is found and undone, from one ``git status`` on a clean tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ralph import gitutil
from ralph.gitutil import tree_status
from ralph.loop.treeguard import TreeSnapshot
from ralph.testing.project import GIT_IDENTITY


def plain_git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    plain_git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    (path / "with space.txt").write_text("s\n")
    plain_git(path, "add", "-A")
    plain_git(path, "commit", "-qm", "first")
    return path


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []
    real = gitutil.git

    def counted(project: Path, *args: str, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(project, *args, **kwargs)

    monkeypatch.setattr("ralph.loop.treeguard.git", counted)
    monkeypatch.setattr("ralph.gitutil.git", counted)
    return calls


def test_status_reads_head_tracked_and_untracked_like_the_separate_commands(repo: Path) -> None:
    (repo / "a.txt").write_text("two\n")
    (repo / "with space.txt").unlink()
    (repo / "new dir" / "deep").mkdir(parents=True)
    (repo / "new dir" / "deep" / "n.txt").write_text("n\n")
    (repo / "ignored.log").write_text("i\n")
    (repo / ".gitignore").write_text("*.log\n")
    status = tree_status(repo)
    assert status.head == plain_git(repo, "rev-parse", "HEAD").strip()
    assert sorted(status.tracked) == sorted(plain_git(repo, "diff", "--name-only", "-z", "HEAD").split("\0")[:-1])
    listed = plain_git(repo, "ls-files", "-z", "--others", "--exclude-standard").split("\0")[:-1]
    assert sorted(status.untracked) == sorted(listed) == [".gitignore", "new dir/deep/n.txt"]


def test_a_clean_tree_costs_one_git_call_each_way(repo: Path, git_calls: list[tuple[str, ...]]) -> None:
    snapshot = TreeSnapshot.take(repo)
    assert snapshot.changes() == []
    assert [call[0] for call in git_calls] == ["status", "status"]


@pytest.mark.parametrize("dirty", [False, True], ids=["clean-before", "uncommitted-work-before"])
def test_every_kind_of_change_is_found_and_undone(repo: Path, dirty: bool) -> None:
    if dirty:  # the implementer's uncommitted work and an untracked file: kept as they were
        (repo / "a.txt").write_text("work in progress\n")
        (repo / "notes.txt").write_text("mine\n")
    snapshot = TreeSnapshot.take(repo)
    (repo / "a.txt").write_text("vandal\n")
    (repo / "with space.txt").write_text("also\n")
    (repo / "created.txt").write_text("x\n")
    if dirty:
        (repo / "notes.txt").write_text("changed\n")
    found = snapshot.changes()
    assert "changed a.txt" in found and "changed with space.txt" in found and "created created.txt" in found
    assert ("changed notes.txt" in found) is dirty
    snapshot.restore()
    assert (repo / "a.txt").read_text() == ("work in progress\n" if dirty else "one\n")
    assert (repo / "with space.txt").read_text() == "s\n"
    assert not (repo / "created.txt").exists()
    assert not dirty or (repo / "notes.txt").read_text() == "mine\n"
    assert snapshot.changes() == []


def test_a_change_to_already_changed_work_is_found(repo: Path) -> None:
    (repo / "a.txt").write_text("work in progress\n")
    snapshot = TreeSnapshot.take(repo)
    assert snapshot.changes() == []
    (repo / "a.txt").write_text("work in progress, and the reviewer's edit\n")  # the same status line as before
    assert snapshot.changes() == ["changed a.txt"]


def test_a_commit_a_staged_change_and_a_deleted_untracked_file_are_found(repo: Path) -> None:
    (repo / "keep.txt").write_text("k\n")
    snapshot = TreeSnapshot.take(repo)
    (repo / "a.txt").write_text("staged\n")
    plain_git(repo, "add", "a.txt")
    (repo / "a.txt").write_text("one\n")  # the work tree as HEAD has it, the index not
    assert snapshot.changes() == ["changed a.txt"]
    plain_git(repo, "reset", "-q")
    (repo / "keep.txt").unlink()
    assert snapshot.changes() == ["deleted keep.txt"]
    (repo / "b.txt").write_text("b\n")
    plain_git(repo, "add", "b.txt")
    plain_git(repo, "commit", "-qm", "the reviewer commits")
    found = snapshot.changes()
    assert found[0].startswith("HEAD moved from ") and "changed b.txt" in found and "deleted keep.txt" in found
    snapshot.restore()
    assert snapshot.changes() == [] and (repo / "keep.txt").read_text() == "k\n" and not (repo / "b.txt").exists()
