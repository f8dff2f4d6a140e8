"""A review changes no code (unit level: ``ralph.loop.reviewtree`` on a real repository).

End to end through the real CLI (direct and docker-sandbox): tests/test_review_integrity_claude.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ralph.loop.records import IterationRecord
from ralph.loop.reviewtree import ReviewFreeze, WorkTree, changes_code
from ralph.testing.project import GIT_IDENTITY


def sh(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout.strip()


class Notes:
    def __init__(self, progress: Path) -> None:
        self.path = progress
        self.noted: list[str] = []

    def progress(self) -> Path:
        return self.path

    def note(self, record: Any, message: str, subject: str = "") -> None:
        self.noted.append(message)


class TaskFile:
    def __init__(self, path: Path) -> None:
        self.path = path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    (path / "ralph").mkdir(parents=True)
    (path / "src").mkdir()
    sh(path, "init", "-q", "-b", "main")
    (path / "ralph" / "tasks.json").write_text("{}\n")
    (path / "ralph" / "progress.txt").write_text("log\n")
    (path / "src" / "app.py").write_text("print('app')\n")
    (path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(path / "run.sh", 0o755)
    os.symlink("src/app.py", path / "link")
    (path / ".gitignore").write_text("build/\n")
    sh(path, "add", "-A")
    sh(path, "commit", "-q", "-m", "start")
    (path / "notes.txt").write_text("untracked before\n")
    return path


def freeze(repo: Path, tmp_path: Path) -> tuple[ReviewFreeze, list[tuple[str, dict[str, Any]]], Notes]:
    events: list[tuple[str, dict[str, Any]]] = []
    notes = Notes(repo / "ralph" / "progress.txt")
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    review = ReviewFreeze(repo, TaskFile(repo / "ralph" / "tasks.json"), notes, lambda k, **d: events.append((k, d)))  # type: ignore[arg-type]
    review.before_iteration(run_dir, "review")
    return review, events, notes


def test_only_gated_modes_change_code() -> None:
    assert changes_code("implement") and changes_code("review-fix") and not changes_code("review")


def test_a_review_that_only_writes_the_task_list_and_log_passes(repo: Path, tmp_path: Path) -> None:
    review, events, _ = freeze(repo, tmp_path)
    (repo / "ralph" / "tasks.json").write_text('{"approved": true}\n')
    (repo / "ralph" / "progress.txt").write_text("log\nreviewed\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("ignored\n")
    sh(repo, "commit", "-qam", "review")
    assert review.after_iteration(IterationRecord(2, "review", "US-001"), sh(repo, "rev-parse", "HEAD~1"), tmp_path / "run") == []
    assert events == []


def test_every_kind_of_code_change_is_undone_and_the_log_kept(repo: Path, tmp_path: Path) -> None:
    checkpoint = sh(repo, "rev-parse", "HEAD")
    review, events, _ = freeze(repo, tmp_path)
    (repo / "src" / "app.py").write_text("print('changed')\n")  # a tracked file
    os.chmod(repo / "run.sh", 0o644)  # a mode
    (repo / "link").unlink()
    os.symlink("/etc/passwd", repo / "link")  # a link retargeted
    (repo / "notes.txt").write_text("changed untracked\n")  # an untracked file that was there
    (repo / "new" / "deep").mkdir(parents=True)
    (repo / "new" / "deep" / "x.py").write_text("x\n")  # a new file in new folders
    (repo / ".gitignore").unlink()  # and one deleted
    (repo / "ralph" / "progress.txt").write_text("log\nthe review's note\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "review: approved (and some code)")

    (violation,) = review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run")
    assert violation.check == "review-changed-code" and "src/app.py" in violation.message
    assert sh(repo, "rev-parse", "HEAD") == checkpoint  # the iteration's commit dropped
    assert (repo / "src" / "app.py").read_text() == "print('app')\n"
    assert os.stat(repo / "run.sh").st_mode & 0o111 and os.readlink(repo / "link") == "src/app.py"
    assert (repo / "notes.txt").read_text() == "untracked before\n" and (repo / ".gitignore").is_file()
    assert not (repo / "new").exists()
    assert (repo / "ralph" / "progress.txt").read_text() == "log\nthe review's note\n"  # allowed: kept
    kind, data = next(e for e in events if e[0] == "review_changes_undone")
    assert sorted(data["paths"]) == [".gitignore", "link", "new/deep/x.py", "notes.txt", "run.sh", "src/app.py"]
    assert Path(data["saved"].split(" (")[0].removeprefix("a copy is in ")).is_file()


def test_a_forged_index_does_not_hide_a_change(repo: Path, tmp_path: Path) -> None:
    """The project's index says the file is as committed (stat-clean, old blob): the loop's own index is not fooled."""
    checkpoint = sh(repo, "rev-parse", "HEAD")
    review, _, _ = freeze(repo, tmp_path)
    (repo / "src" / "app.py").write_text("print('sneaky')\n")
    blob = sh(repo, "rev-parse", "HEAD:src/app.py")
    sh(repo, "update-index", "--cacheinfo", f"100644,{blob},src/app.py")
    sh(repo, "update-index", "--assume-unchanged", "src/app.py")
    assert sh(repo, "status", "--porcelain", "--untracked-files=no") == ""  # git itself sees nothing
    (violation,) = review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run")
    assert "src/app.py" in violation.message and (repo / "src" / "app.py").read_text() == "print('app')\n"


def test_a_change_behind_the_ignore_file_is_still_seen(repo: Path, tmp_path: Path) -> None:
    checkpoint = sh(repo, "rev-parse", "HEAD")
    review, _, _ = freeze(repo, tmp_path)
    (repo / ".gitignore").write_text("build/\nsrc/\n")
    (repo / "src" / "app.py").write_text("print('hidden')\n")
    (violation,) = review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run")
    assert (repo / "src" / "app.py").read_text() == "print('app')\n" and (repo / ".gitignore").read_text() == "build/\n"
    assert ".gitignore" in violation.message


def test_worktree_trees_are_content_hashes(repo: Path, tmp_path: Path) -> None:
    tree = WorkTree(repo, tmp_path / "index")
    first = tree.tree()
    (repo / "src" / "app.py").write_text("print('x')\n")
    second = tree.tree()
    (repo / "src" / "app.py").write_text("print('app')\n")
    assert tree.tree() == first != second and tree.changed(first, second) == ["src/app.py"]


def test_ignored_test_code_a_review_plants_or_changes_is_undone(repo: Path, tmp_path: Path) -> None:
    """An ignored conftest.py decides a test run as much as a tracked one: a review may not write it."""
    (repo / ".gitignore").write_text("build/\nconftest.py\nlocal_tests/\n")
    (repo / "local_tests").mkdir()
    (repo / "local_tests" / "test_mine.py").write_text("def test_mine(): assert True\n")
    sh(repo, "commit", "-qam", "ignore local test code")
    checkpoint = sh(repo, "rev-parse", "HEAD")
    review, events, _ = freeze(repo, tmp_path)
    (repo / "conftest.py").write_text("import os\nos._exit(0)\n")
    (repo / "local_tests" / "test_mine.py").write_text("def test_mine(): pass\n")
    (violation,) = review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run")
    assert "conftest.py" in violation.message and not (repo / "conftest.py").exists()
    assert (repo / "local_tests" / "test_mine.py").read_text() == "def test_mine(): assert True\n"
    assert sorted(next(d for k, d in events if k == "review_changes_undone")["paths"]) == [
        "conftest.py", "local_tests/test_mine.py"]
