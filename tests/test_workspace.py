"""``ralph.workspace``: shipping a git workspace to another checkout and back, on real repositories."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from ralph.testing.project import GIT_IDENTITY
from ralph.workspace import WorkspaceError, capture, head, init_checkout, mirror, receive_branch


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A project with one commit (a text and a binary file) and an empty checkout to ship it to."""
    project, node = tmp_path / "project", tmp_path / "node"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "notes.txt").write_text("one\n")
    (project / "blob.bin").write_bytes(bytes(range(256)))
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "first")
    init_checkout(node)
    mirror(node, capture(project), branch="main")
    return project, node


def test_a_round_trip_brings_back_commits_changes_and_untracked_files(pair) -> None:
    project, node = pair
    shipped = head(project)
    (node / "feature.txt").write_text("feature\n")
    git(node, "add", "feature.txt")
    git(node, "commit", "-q", "-m", "feature")
    (node / "notes.txt").write_text("changed, not committed\n")
    (node / "blob.bin").write_bytes(bytes(reversed(range(256))))
    (node / "scratch.txt").write_text("untracked\n")

    state = capture(node, [shipped])
    assert state.bundle is not None  # only the new commit travels
    mirror(project, state, branch="main", must_descend=shipped)

    assert head(project) == head(node)
    assert git(project, "log", "--format=%s") == "feature\nfirst\n"
    assert (project / "notes.txt").read_text() == "changed, not committed\n"
    assert (project / "blob.bin").read_bytes() == bytes(reversed(range(256)))
    assert (project / "scratch.txt").read_text() == "untracked\n"
    assert git(project, "status", "--porcelain") == git(node, "status", "--porcelain")


def test_nothing_new_ships_no_bundle_and_a_removed_untracked_file_goes_away(pair) -> None:
    project, node = pair
    (node / "scratch.txt").write_text("x\n")
    mirror(project, capture(node, [head(project)]), branch="main")
    assert (project / "scratch.txt").exists()
    (node / "scratch.txt").unlink()
    state = capture(node, [head(project)])
    assert state.bundle is None
    mirror(project, state, branch="main")
    assert not (project / "scratch.txt").exists()
    assert git(project, "status", "--porcelain") == ""


def test_rewritten_history_is_refused_and_the_project_is_left_as_it_was(pair) -> None:
    project, node = pair
    shipped = head(project)
    git(node, "commit", "-q", "--amend", "-m", "rewritten")
    (node / "scratch.txt").write_text("x\n")
    before = (head(project), git(project, "status", "--porcelain"))
    with pytest.raises(WorkspaceError, match="does not descend"):
        mirror(project, capture(node, [shipped]), branch="main", must_descend=shipped)
    assert (head(project), git(project, "status", "--porcelain")) == before
    assert not (project / "scratch.txt").exists()


def test_untracked_files_cannot_land_outside_the_checkout(pair, tmp_path) -> None:
    project, node = pair
    state = capture(node, [head(project)])
    for name, link in (("../escaped.txt", None), ("evil", "/etc/passwd")):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
            archive.addfile(info, io.BytesIO(b""))
        state.untracked, state.untracked_names = buffer.getvalue(), [name]
        with pytest.raises(WorkspaceError, match="outside the checkout"):
            mirror(project, state, branch="main")
    assert not (tmp_path / "escaped.txt").exists() and not (project / "evil").exists()


def test_a_diff_that_does_not_apply_changes_nothing(pair) -> None:
    project, node = pair
    (node / "notes.txt").write_text("node edit\n")
    state = capture(node, [head(project)])
    state.diff = state.diff.replace(b"-one", b"-something else")
    with pytest.raises(WorkspaceError, match="do not apply"):
        mirror(project, state, branch="main")
    assert (project / "notes.txt").read_text() == "one\n"


def test_receive_branch_creates_and_only_moves_forward(pair) -> None:
    project, node = pair
    base = head(project)
    (node / "a.txt").write_text("a\n")
    git(node, "add", "a.txt")
    git(node, "commit", "-q", "-m", "a")
    assert receive_branch(project, capture(node, [base]), "ralph/parallel/PRD-1") == "created"
    assert git(project, "rev-parse", "ralph/parallel/PRD-1").strip() == head(node)
    assert git(project, "status", "--porcelain") == "" and not (project / "a.txt").exists()
    git(node, "reset", "-q", "--hard", base)
    (node / "b.txt").write_text("b\n")
    git(node, "add", "b.txt")
    git(node, "commit", "-q", "-m", "b")
    with pytest.raises(WorkspaceError, match="does not descend"):
        receive_branch(project, capture(node, [base]), "ralph/parallel/PRD-1")
