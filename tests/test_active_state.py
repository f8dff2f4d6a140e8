"""state.json and the .ralph-active marker (ralph.loop.activestate): what they hold, written without
serialising an unchanged snapshot again."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ralph.contracts import Selection, StoryState
from ralph.loop.activestate import ActiveState
from ralph.loop.records import IterationRecord


@pytest.fixture
def state(tmp_path: Path) -> ActiveState:
    project = tmp_path / "project"
    (project / "ralph").mkdir(parents=True)
    settings = SimpleNamespace(config=SimpleNamespace(max_iterations=10, review_cap=5), project_dir=project,
                               ralph_dir=project / "ralph")
    runner = SimpleNamespace(isolates=False, name="direct")
    policy = SimpleNamespace(uses_review=True, name="review", state_fields=("passes", "reviewStatus", "reviewCount"))
    return ActiveState(settings, runner, policy, SimpleNamespace(name="tasks-json"), project / "ralph" / "tasks.json")  # type: ignore[arg-type]


def snapshot(count: int, approved: set[str] = frozenset()) -> dict[str, StoryState]:  # type: ignore[assignment]
    return {f"US-{n:03d}": StoryState(f"US-{n:03d}" in approved, "approved" if f"US-{n:03d}" in approved else None,
                                      1 if f"US-{n:03d}" in approved else 0) for n in range(count)}


def test_both_files_hold_the_iteration_and_each_storys_state(state: ActiveState, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record, selection = IterationRecord(3, "implement", "US-001"), Selection("implement", "US-001")
    state.write(run_dir, record, selection, snapshot(3, {"US-000"}))
    marker = json.loads(state.marker.read_text())
    trusted = json.loads((run_dir / "state.json").read_text())
    expected = {"US-000": {"passes": True, "reviewStatus": "approved", "reviewCount": 1},
                "US-001": {"passes": False, "reviewStatus": None, "reviewCount": 0},
                "US-002": {"passes": False, "reviewStatus": None, "reviewCount": 0}}
    assert marker["preIterationSnapshot"] == trusted["preIterationSnapshot"] == expected
    assert (marker["iteration"], marker["iterationMode"], marker["story"], marker["skipReview"], marker["reviewCap"]) == (
        3, "implement", "US-001", False, 5)
    assert (marker["policy"], marker["stateFields"]) == ("review", ["passes", "reviewStatus", "reviewCount"])
    assert trusted["tasksPath"] == str(state.tasks_path) and trusted["runDir"] == marker["runDir"] == str(run_dir)
    assert state.written == state.marker.read_bytes()


def test_an_unchanged_snapshot_is_not_serialised_again_and_a_change_is_written(
    state: ActiveState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record, selection = IterationRecord(1, "implement", "US-001"), Selection("implement", "US-001")
    state.write(run_dir, record, selection, snapshot(50))
    serialised: list[object] = []
    real = StoryState.as_dict
    monkeypatch.setattr(StoryState, "as_dict", lambda self: serialised.append(self) or real(self))
    state.write(run_dir, record, selection, snapshot(50))  # equal, not the same objects (a new iteration's)
    assert serialised == []
    state.write(run_dir, record, selection, snapshot(50, {"US-007"}))
    assert serialised == [StoryState(True, "approved", 1)]  # only the story whose state changed
    written = json.loads(state.marker.read_text())["preIterationSnapshot"]
    assert written["US-007"] == {"passes": True, "reviewStatus": "approved", "reviewCount": 1}
    assert written == {sid: s.as_dict() for sid, s in snapshot(50, {"US-007"}).items()}
