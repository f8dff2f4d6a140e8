"""The person's-changes look between iterations (``ralph.loop.personchanges.PersonChanges``) on a real repository.

End to end through the real CLI (the person edits the task list while the loop waits out a usage limit):
tests/test_first_day.py::test_item9_a_change_between_iterations_is_the_persons_never_the_agents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from ralph.loop import personchanges
from ralph.loop.personchanges import PersonChanges
from test_person_refs import commit, repo, sh  # noqa: F401 - the fixture


@pytest.fixture
def looks(calls_to: Callable[[object, str], list[Path]]) -> list[Path]:
    """Each ``git status`` the look takes."""
    return calls_to(personchanges, "tree_status")


def gap(repo: Path) -> PersonChanges:  # noqa: F811
    return PersonChanges(repo, lambda: [repo / "a"], lambda: [])


def test_the_first_look_takes_a_status_and_finds_nothing(repo: Path, looks: list[Path]) -> None:  # noqa: F811
    status, changed = gap(repo).look()
    assert changed == [] and status.head == sh(repo, "rev-parse", "HEAD") and looks == [repo]


def test_right_after_the_iteration_the_look_is_its_status_and_no_git_call(repo: Path, looks: list[Path]) -> None:  # noqa: F811
    changes = gap(repo)
    changes.iteration_over()
    (repo / "new.txt").write_text("untracked\n")
    status, changed = changes.look()
    assert len(looks) == 1 and changed == [] and "new.txt" not in status.untracked  # the gap has no width
    status, changed = changes.look()  # once only: a second look asks git again
    assert len(looks) == 2 and "new.txt" in status.untracked


def test_after_a_wait_a_persons_edit_and_commit_are_found(repo: Path, looks: list[Path]) -> None:  # noqa: F811
    changes = gap(repo)
    changes.iteration_over()
    changes.waiting()
    (repo / "a").write_text("the person's edit\n")
    assert changes.look()[1] == ["a"] and len(looks) == 2
    changes.iteration_over()
    changes.waiting()
    commit(repo, "b")
    assert changes.look()[1] == ["HEAD (a commit or a checkout)"]
