"""A temporary git project with ``ralph init`` done, for tests of ralph and of plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ralph.scripted.stories import story

__all__ = ["GIT_IDENTITY", "RalphProject", "RunResult", "make_project", "process_alive", "ralph_command", "settings_for",
           "story", "wait_for"]

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test User",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test User",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}
"""A git author and committer for test commits (``{**os.environ, **GIT_IDENTITY}``): no global git config needed."""


def wait_for(condition: Any, timeout: float = 20) -> None:
    """Poll ``condition()`` until it is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def settings_for(project_dir: Path, environ: dict[str, str] | None = None, **overrides: Any) -> Any:
    """The ``Settings`` plugins are constructed with in ``project_dir``: its config file,
    ``RALPH_*`` variables of ``environ`` (default: the process's) and ``overrides`` as
    command-line flags (``runner="nice"``), every installed plugin's section validated."""
    from ralph.session import open_session

    return open_session(project_dir, overrides or None, environ=environ).settings


def ralph_command() -> list[str]:
    """How to start the ralph CLI of this interpreter as a real process."""
    # -P: the project has a ralph/ directory that would shadow the package from the cwd
    return [sys.executable, "-P", "-m", "ralph.cli.main"]


class RunResult(subprocess.CompletedProcess[str]):
    """``ralph ARGS`` as it ran in a :class:`RalphProject` (what :meth:`RalphProject.run` returns): a
    ``CompletedProcess`` (``returncode``, ``stdout``, ``stderr``) with assertions on what the run did.

    Each assertion returns the result, so they chain
    (``project.run_replay().assert_complete().assert_story("US-001", passes=True)``); a failed one
    raises ``AssertionError`` with the exit code and the end of both outputs.
    """

    def __init__(self, done: subprocess.CompletedProcess[str], project: RalphProject) -> None:
        super().__init__(done.args, done.returncode, done.stdout, done.stderr)
        self.project = project

    def assert_exit(self, code: int) -> RunResult:
        """The process exited with ``code`` (``ralph run``'s exit codes: docs/usage.md)."""
        if self.returncode != code:
            self._fail(f"expected exit code {code}")
        return self

    def assert_complete(self) -> RunResult:
        """The loop ended complete: exit code 0 and its ``summary.json`` says why (``complete: ...``)."""
        self.assert_exit(0)
        summary = self.project.summary() if self.project.run_dirs() else {}
        if not str(summary.get("reason", "")).startswith("complete"):
            self._fail(f"expected a complete run, its summary says {summary.get('reason')!r}")
        return self

    def assert_story(self, story_id: str, **fields: Any) -> RunResult:
        """The story ``story_id`` of the task list on disk has these values
        (``passes=True, reviewStatus="approved"``)."""
        try:
            story_now = self.project.story(story_id)
        except StopIteration:
            self._fail(f"the task list has no story {story_id!r}")
        wrong = {name: story_now.get(name) for name, value in fields.items() if story_now.get(name) != value}
        if wrong:
            self._fail(f"story {story_id}: expected {fields}, has {wrong}")
        return self

    def assert_event(self, kind: str, **data: Any) -> dict[str, Any]:
        """The last run emitted an event of ``kind`` whose fields include ``data``; the first such event."""
        for event in self.project.events(kind):
            if all(event.get(name) == value for name, value in data.items()):
                return event
        seen = [{name: event.get(name) for name in data} for event in self.project.events(kind)]
        self._fail(f"no {kind!r} event with {data}" + (f" (the {kind} events have {seen})" if seen else ""))

    def _fail(self, expected: str) -> NoReturn:
        raise AssertionError(f"ralph {' '.join(map(str, self.args[4:]))}: {expected}; it exited {self.returncode}\n"
                             f"--- stdout (end)\n{self.stdout[-3000:]}\n--- stderr (end)\n{self.stderr[-3000:]}")


@dataclass
class RalphProject:
    """A git repository with a ralph directory; helpers to edit it and run ralph."""

    path: Path
    """The project's root (the git work tree)."""
    state_dir: Path
    """ralph's state directory for this project (``RALPH_STATE_DIR``: runs, locks), outside the tree."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for every process started here (``git``, ``run``, ``start``)."""

    @property
    def ralph_dir(self) -> Path:
        """The project's ralph directory (``ralph/``: prompt, task list, progress log)."""
        return self.path / "ralph"

    @property
    def tasks_path(self) -> Path:
        """The task list ``ralph init`` wrote (``ralph/tasks.json``)."""
        return self.ralph_dir / "tasks.json"

    def git(self, *args: str) -> str:
        """Run ``git ARGS`` in the project (test identity, :meth:`process_env`); its stdout.

        Raises ``subprocess.CalledProcessError`` when git fails."""
        result = subprocess.run(
            ["git", *args], cwd=self.path, capture_output=True, text=True, check=True, env=self.process_env()
        )
        return result.stdout

    def process_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of processes started here: this process's, a git identity,
        ``RALPH_STATE_DIR``, :attr:`env`, then ``extra`` (later ones win)."""
        return {**os.environ, **GIT_IDENTITY, "RALPH_STATE_DIR": str(self.state_dir), **self.env, **(extra or {})}

    def write_stories(self, stories: list[dict[str, Any]], commit: bool = True, **top: Any) -> None:
        """Replace the task list's ``userStories`` with ``stories`` (see :func:`story`), set the
        top-level fields ``top`` (``branchName="ralph/x"``), and commit unless ``commit=False``."""
        data = json.loads(self.tasks_path.read_text(encoding="utf-8"))
        data["userStories"] = stories
        data.update(top)
        self.tasks_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        if commit:
            self.commit_all("tasks")

    def tasks(self) -> dict[str, Any]:
        """The task list as it is on disk now (parsed JSON)."""
        return json.loads(self.tasks_path.read_text(encoding="utf-8"))

    def story(self, story_id: str) -> dict[str, Any]:
        """The story ``story_id`` of the task list on disk; ``StopIteration`` when there is none."""
        return next(s for s in self.tasks()["userStories"] if s["id"] == story_id)

    def commit_all(self, message: str) -> None:
        """``git add -A`` and commit with ``message`` (an empty commit when nothing changed)."""
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> RunResult:
        """Run ``ralph ARGS`` as a real process in the project: a :class:`RunResult`."""
        done = subprocess.run(
            [*ralph_command(), *args],
            cwd=self.path,
            env=self.process_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return RunResult(done, self)

    def run_replay(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> RunResult:
        """``ralph run --runner direct --agent replay ARGS``: the loop with the replay agent acting out the
        script that ``env`` names (``RALPH_REPLAY_SCRIPT``, see :func:`replay_env`)."""
        return self.run("run", "--runner", "direct", "--agent", "replay", *args, env=env, timeout=timeout)

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``ralph ARGS`` in the background (for signal and lock tests)."""
        return subprocess.Popen(
            [*ralph_command(), *args],
            cwd=self.path,
            env=self.process_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run_dirs(self) -> list[Path]:
        """The run directories of this project's loops, oldest first (empty before the first run)."""
        from ralph.loop.rundir import runs_dir

        parent = runs_dir(self.path, str(self.state_dir))
        return sorted(p for p in parent.iterdir()) if parent.is_dir() else []

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The last run's loop events (its ``events.jsonl``), only those of ``kind`` when given
        (``"gate_failed"``; docs/plugins.md lists the kinds); empty before the first run."""
        from ralph.loop.rundir import read_events

        runs = self.run_dirs()
        events = read_events(runs[-1]) if runs else []
        return [e for e in events if kind is None or e.get("kind") == kind]

    def summary(self) -> dict[str, Any]:
        """The last run's ``summary.json`` (``exit_code``, ``reason``, ``iterations``, ``stories``, ``usage``, ``report`` ...)."""
        return json.loads((self.run_dirs()[-1] / "summary.json").read_text(encoding="utf-8"))


def make_project(root: Path, name: str = "demo") -> RalphProject:
    """``git init`` + ``ralph init --name NAME`` + a first commit, under ``root``."""
    from ralph.lifecycle.init import init_project

    path = root / "project"
    path.mkdir(parents=True)
    project = RalphProject(path=path, state_dir=root / "state")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    init_project(path, name=name)
    project.commit_all("ralph init")
    return project
