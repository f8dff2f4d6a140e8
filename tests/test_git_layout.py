"""The loop's git never runs while the git directory holds an entry git would write (or read) through.

git appends to reflogs and rewrites ``COMMIT_EDITMSG`` in place, following a symlink or a hard link to a
host file; it reads refs through a symlink.  Each case here plants such an entry and shows, with plain git
as the control, that git does write through it, and that ralph's git refuses (outside a run: nothing
changed) or removes the entry and stops (in a run).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from ralph import gitutil
from ralph.gitmeta import GitLayout, discover
from ralph.gitutil import GitMetadataChanged
from ralph.testing.project import GIT_IDENTITY


def plain_git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env={**os.environ, **GIT_IDENTITY})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    plain_git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    plain_git(path, "add", "-A")
    plain_git(path, "commit", "-qm", "first")
    yield path
    gitutil.unprotect(path)


def commit_something(repo: Path, git=gitutil.git) -> None:  # type: ignore[no-untyped-def]
    (repo / "a.txt").write_text((repo / "a.txt").read_text() + "more\n")
    git(repo, "commit", "-qam", "loop commit\n\nbody line")


PLANTED = ["COMMIT_EDITMSG", "logs/HEAD", "logs/refs/heads/main", "refs/heads/main", "index.lock", "packed-refs"]
WRITTEN_THROUGH = {"COMMIT_EDITMSG", "logs/HEAD", "logs/refs/heads/main"}
"""What plain git writes through (the control); it reads a ref or packed-refs through a link and fails on index.lock."""


@pytest.mark.parametrize("name", PLANTED)
def test_a_symlink_git_would_follow_is_refused_outside_a_run(repo: Path, tmp_path: Path, name: str) -> None:
    canary = tmp_path / "bashrc"
    canary.write_text("# host file\n")
    entry = repo / ".git" / name
    saved = entry.read_bytes() if entry.exists() else None
    entry.unlink(missing_ok=True)
    entry.symlink_to(canary)
    with pytest.raises(GitMetadataChanged) as refused:
        commit_something(repo)
    message = str(refused.value)
    assert f".git/{name} is a symlink" in message and "\n" not in message and "rm .git/" in message
    assert entry.is_symlink() and canary.read_text() == "# host file\n"  # nothing changed, nothing written
    if name in WRITTEN_THROUGH:  # the control: plain git writes through the link
        entry.unlink()
        if saved is not None:
            entry.write_bytes(saved)
        entry.unlink()
        entry.symlink_to(canary)
        commit_something(repo, git=lambda r, *a: plain_git(r, *a))
        assert canary.read_text() != "# host file\n"


@pytest.mark.parametrize("name", PLANTED)
def test_in_a_run_the_entry_is_removed_and_the_run_stops(repo: Path, tmp_path: Path, name: str) -> None:
    canary = tmp_path / "bashrc"
    canary.write_text("# host file\n")
    gitutil.protect(repo)
    entry = repo / ".git" / name
    entry.unlink(missing_ok=True)
    entry.symlink_to(canary)
    with pytest.raises(GitMetadataChanged, match=f".git/{name} is a symlink .removed them."):
        commit_something(repo)
    assert not os.path.lexists(entry) and canary.read_text() == "# host file\n"
    with pytest.raises(GitMetadataChanged):  # sticky: the run stops
        gitutil.head(repo)


def test_hard_links_fifos_and_sockets(repo: Path, tmp_path: Path) -> None:
    canary = tmp_path / "bashrc"
    canary.write_text("# host file\n")
    log = repo / ".git" / "logs" / "HEAD"
    log.unlink()
    os.link(canary, log)
    with pytest.raises(GitMetadataChanged, match="logs/HEAD is a file with 2 hard links"):
        gitutil.head(repo)
    log.unlink()
    (repo / ".git" / "COMMIT_EDITMSG").unlink(missing_ok=True)
    os.mkfifo(repo / ".git" / "COMMIT_EDITMSG")  # git would block opening it
    with pytest.raises(GitMetadataChanged, match="COMMIT_EDITMSG is a fifo"):
        gitutil.head(repo)
    (repo / ".git" / "COMMIT_EDITMSG").unlink()
    # what git itself makes is fine: the fsmonitor daemon's socket, hard-linked objects (clone --local)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(repo / ".git" / "fsmonitor--daemon.ipc"))
        packs = repo / ".git" / "objects" / "pack"
        plain_git(repo, "gc", "-q")
        pack = next(packs.glob("*.pack"))
        os.link(pack, tmp_path / "shared.pack")
        assert gitutil.head(repo)
    # hooks/ is not looked into (its own fingerprint watches it; the loop's git never runs hooks)
    (repo / ".git" / "hooks" / "pre-commit").symlink_to(tmp_path / "mine")
    assert gitutil.head(repo)


def test_discovery_finds_a_worktree_s_git_dir_and_its_common_dir(repo: Path, tmp_path: Path) -> None:
    plain_git(repo, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side")
    assert discover(tmp_path / "wt" / "sub" / "..") == [(repo / ".git").resolve()]  # worktrees/wt is inside it
    assert discover(repo) == [(repo / ".git").resolve()]
    layout = GitLayout(discover(tmp_path / "wt"))
    assert layout.problems() == []
    (repo / ".git" / "worktrees" / "wt" / "ORIG_HEAD").unlink(missing_ok=True)
    (repo / ".git" / "worktrees" / "wt" / "ORIG_HEAD").symlink_to(tmp_path / "x")
    assert [(p.name, what) for p, what in layout.problems()] == [("ORIG_HEAD", "a symlink")]
    with pytest.raises(GitMetadataChanged, match="ORIG_HEAD is a symlink"):
        gitutil.head(tmp_path / "wt")


def test_a_git_on_path_inside_the_project_never_runs(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = tmp_path / "canary"
    planted = repo / "node_modules" / ".bin" / "git"
    planted.parent.mkdir(parents=True)
    planted.write_text(f"#!/bin/sh\necho ran >> {canary}\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted.parent}:.:{os.environ['PATH']}")
    assert gitutil.git_program(repo) != str(planted)
    assert gitutil.head(repo)  # the real git answered
    assert not canary.exists()
