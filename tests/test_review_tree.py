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
from ralph.loop.reviewtree import ReviewFreeze, TreeView, changes_code
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


def test_tree_views_compare_by_content(repo: Path, tmp_path: Path) -> None:
    view = TreeView(repo, tmp_path / "view")
    first = view.freeze()
    (repo / "src" / "app.py").write_text("print('x')\n")
    second = view.scan()
    (repo / "src" / "app.py").write_text("print('app')\n")
    assert view.changed(first, view.scan()) == [] and view.changed(first, second) == ["src/app.py"]


# -- what the review writes decides nothing about what is compared ------------------------------------------


def _hide_behind_gitignore(repo: Path) -> None:
    (repo / "src" / "evil.py").write_text("x\n")
    (repo / ".gitignore").write_text("build/\n.env\nsrc/evil.py\n")


def _hide_behind_info_exclude(repo: Path) -> None:
    (repo / "src" / "evil.py").write_text("x\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("src/evil.py\n")


def _self_ignoring_directory(repo: Path) -> None:
    (repo / "src" / "evil").mkdir()
    (repo / "src" / "evil" / ".gitignore").write_text("*\n")
    (repo / "src" / "evil" / "__init__.py").write_text("x\n")


def _ignore_file_in_a_subdirectory(repo: Path) -> None:
    (repo / "src" / "pkg" / "c.py").write_text("c\n")
    (repo / "src" / "pkg" / ".gitignore").write_text("c.py\n")


def _nested_repository(repo: Path, commit: bool) -> None:
    nested = repo / "src" / "vendored"
    nested.mkdir()
    (nested / "mod.py").write_text("x\n")
    sh(nested, "init", "-q")
    if commit:
        sh(nested, "add", "-A")
        sh(nested, "commit", "-q", "-m", "x")


def _directory_replaced(repo: Path, by: str) -> None:
    import shutil

    shutil.rmtree(repo / "src" / "pkg")
    if by == "file":
        (repo / "src" / "pkg").write_text("not a package\n")
    else:
        os.symlink("/etc", repo / "src" / "pkg")


def _file_replaced_by_directory(repo: Path) -> None:
    (repo / "src" / "app.py").unlink()
    (repo / "src" / "app.py").mkdir()
    (repo / "src" / "app.py" / "x.py").write_text("x\n")


def _file_replaced_by_fifo(repo: Path) -> None:
    (repo / "src" / "app.py").unlink()
    os.mkfifo(repo / "src" / "app.py")


def _ignored_bytecode_and_start_up_files(repo: Path) -> None:
    (repo / "src" / "sitecustomize.pyc").write_bytes(b"\x00 sourceless bytecode")  # *.pyc is ignored
    (repo / "src" / "local_settings.py").write_text("APPROVE = True\n")  # so is local_settings.py


HIDING_PLACES = {
    "a .gitignore entry": _hide_behind_gitignore,
    "info/exclude": _hide_behind_info_exclude,
    "a .gitignore that ignores its own directory": _self_ignoring_directory,
    "a .gitignore in a subdirectory": _ignore_file_in_a_subdirectory,
    "a nested repository with a commit": lambda repo: _nested_repository(repo, True),
    "a nested repository without one": lambda repo: _nested_repository(repo, False),
    "a directory replaced by a file": lambda repo: _directory_replaced(repo, "file"),
    "a directory replaced by a symlink": lambda repo: _directory_replaced(repo, "link"),
    "a file replaced by a directory": _file_replaced_by_directory,
    "a file replaced by a fifo": _file_replaced_by_fifo,
    "ignored bytecode and settings": _ignored_bytecode_and_start_up_files,
}


@pytest.fixture
def siblings(tmp_path: Path) -> Path:
    """A project with a package, a .gitignore (build/, .env, *.pyc, local_settings.py) and an ignored .env."""
    path = tmp_path / "siblings"
    (path / "ralph").mkdir(parents=True)
    (path / "src" / "pkg").mkdir(parents=True)
    sh(path, "init", "-q", "-b", "main")
    (path / "ralph" / "tasks.json").write_text("{}\n")
    (path / "ralph" / "progress.txt").write_text("log\n")
    (path / "src" / "app.py").write_text("print('app')\n")
    (path / "src" / "pkg" / "a.py").write_text("a\n")
    (path / "src" / "pkg" / "b.py").write_text("b\n")
    (path / ".gitignore").write_text("build/\n.env\n*.pyc\nlocal_settings.py\n")
    sh(path, "add", "-A")
    sh(path, "commit", "-q", "-m", "start")
    (path / ".env").write_text("SECRET=mine\n")
    (path / "build").mkdir()
    (path / "build" / "out.o").write_text("object\n")
    return path


@pytest.mark.parametrize("hide", HIDING_PLACES.values(), ids=HIDING_PLACES.keys())
def test_a_code_change_a_review_hides_is_undone_and_the_run_goes_on(siblings: Path, tmp_path: Path, hide: Any) -> None:
    """Each one made the loop stop (it could not undo what it found) or let the change through."""
    checkpoint = sh(siblings, "rev-parse", "HEAD")
    review, events, _ = freeze(siblings, tmp_path)
    hide(siblings)
    (violation,) = review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run")
    assert violation.check == "review-changed-code"
    assert sh(siblings, "status", "--porcelain", "--ignored") == "!! .env\n!! build/".strip()
    assert (siblings / "src" / "app.py").read_text() == "print('app')\n" and (siblings / "src" / "pkg" / "a.py").is_file()
    assert (siblings / ".env").read_text() == "SECRET=mine\n" and (siblings / "build" / "out.o").is_file()
    assert not (siblings / "src" / "evil").exists() and not (siblings / "src" / "vendored").exists()
    assert [k for k, _ in events].count("review_changes_undone") == 1


def test_what_was_ignored_when_the_review_started_is_never_touched(siblings: Path, tmp_path: Path) -> None:
    """Un-ignoring a file does not make it the review's: the loop puts .gitignore back and leaves the file."""
    checkpoint = sh(siblings, "rev-parse", "HEAD")
    review, events, _ = freeze(siblings, tmp_path)
    (siblings / ".gitignore").write_text("*.pyc\n")  # .env and build/ no longer ignored
    (violation,) = review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run")
    assert ".gitignore" in violation.message and ".env" not in violation.message
    assert (siblings / ".env").read_text() == "SECRET=mine\n" and (siblings / "build" / "out.o").read_text() == "object\n"
    assert next(d for k, d in events if k == "review_changes_undone")["paths"] == [".gitignore"]


def test_a_review_that_rewrites_bytecode_caches_only_is_no_violation(siblings: Path, tmp_path: Path) -> None:
    """Running code writes __pycache__: put back quietly (a forged one could run instead of its source)."""
    cache = siblings / "src" / "__pycache__"
    cache.mkdir()
    (cache / "app.cpython-311.pyc").write_bytes(b"before")
    checkpoint = sh(siblings, "rev-parse", "HEAD")
    review, events, _ = freeze(siblings, tmp_path)
    (cache / "app.cpython-311.pyc").write_bytes(b"forged bytecode with the source's header")
    (cache / "new.cpython-311.pyc").write_bytes(b"new")
    assert review.after_iteration(IterationRecord(2, "review", "US-001"), checkpoint, tmp_path / "run") == []
    assert (cache / "app.cpython-311.pyc").read_bytes() == b"before" and not (cache / "new.cpython-311.pyc").exists()
    assert events == []


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
