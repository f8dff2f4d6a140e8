"""``ralph run --parallel --engine ray``: whole loops as Ray actors, one per PRD (or story group).

Each loop runs on a node in a clone made from a bundle of the current commit,
with the user's ``ralph run`` options (its own runner and agent on that node).
Its branch comes back as a bundle onto ``ralph/parallel/<unit>`` in the project;
nothing is merged or pushed, and one loop failing (or its node dying) does not
stop the others.  What each loop records on its node (its events, state and
summary) comes back with its output and is mirrored into this machine's state
directory, where ``ralph serve`` shows the fleet's loops (``ralph.api.fleet.FleetMirror``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ralph.api import Availability, FleetEngine, section_or_default
from ralph.api.fleet import Unit

EXIT_INTERRUPTED = 130
EXIT_NODE_LOST = 2


class FleetLoopActor:
    """One whole ``ralph run`` in a private clone on one node."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ralph-fleet-"))
        self.repo = self.root / "clone"
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._process: subprocess.Popen[str] | None = None
        self._exit: int | None = None
        self._record: Any = None
        """What the loop's run directory holds that the head has not been sent yet (``NodeRecord``)."""

    def where(self) -> dict[str, Any]:
        """Node, host, pid and clone path of this loop."""
        import socket

        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
                "pid": os.getpid(), "clone": str(self.repo)}

    def start(self, state: Any, branch: str, unit: dict[str, Any], run_args: list[str], env: dict[str, str]) -> None:
        """Clone from ``state``, prepare the unit (a story group's task list) and start ``ralph run``."""
        from ralph.api.fleet import UNIT_ENV, NodeRecord, write_group_tasks
        from ralph.api.workspace import apply, init_checkout

        self._record = NodeRecord(self.root / "state")

        init_checkout(self.repo)
        apply(self.repo, state, branch)  # the loop's own state: applied as received, the clone's .git made fresh
        for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
            if key in env:
                os.environ[key] = env[key]
        unit_obj = Unit(unit["name"], unit["ralph_dir"], unit["kind"], tuple(unit["stories"]))
        if unit_obj.kind == "group":
            write_group_tasks(self.repo, unit_obj)
        argv = [sys.executable, "-P", "-m", "ralph.cli.main", "run", "--project-dir", str(self.repo),
                "--ralph-dir", unit_obj.ralph_dir, *run_args]
        full_env = {**os.environ, **env, "RALPH_STATE_DIR": str(self.root / "state"), UNIT_ENV: unit_obj.name}
        self._process = subprocess.Popen(
            argv, cwd=self.repo, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, encoding="utf-8", errors="replace", bufsize=1,
            start_new_session=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        for line in process.stdout:
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        code = process.wait()
        with self._cond:
            self._exit = code
            self._cond.notify_all()

    def poll(self, wait: float) -> dict[str, Any]:
        """New output lines, the exit code once the loop ended, and what its run directory recorded since
        the last poll (events, state.json, summary.json: read after the exit, so the last poll has it all)."""
        with self._cond:
            self._cond.wait_for(lambda: self._lines or self._exit is not None, timeout=wait)
            lines, self._lines = self._lines, []
            code = self._exit
        record = self._record.read() if self._record is not None else {}
        return {"lines": lines, "exit": code, "record": record}

    def interrupt(self, hard: bool = False) -> None:
        """Ctrl-C for the loop (it stops its agent and cleans up); ``hard`` kills it."""
        if self._process is not None and self._process.poll() is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL if hard else signal.SIGINT)
            except ProcessLookupError:
                pass

    def result(self, base: str) -> dict[str, Any]:
        """The loop's branch (commits since ``base``), its summary, and whether anything was left uncommitted."""
        from ralph.api.workspace import capture

        state = capture(self.repo, [base])
        summaries = sorted((self.root / "state").rglob("summary.json"))
        summary = json.loads(summaries[-1].read_text(encoding="utf-8")) if summaries else {}
        return {"state": state, "summary": summary, "uncommitted": bool(state.diff or state.untracked_names)}

    def close(self) -> None:
        """Stop the loop if it still runs and remove the clone."""
        import shutil

        self.interrupt(hard=True)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class _Loop:
    unit: Unit
    actor: Any
    where: dict[str, Any] = field(default_factory=dict)
    pending: Any = None
    exit: int | None = None
    note: str = ""
    stories: str = ""
    started: bool = False
    closed: bool = False
    mirror_failed: bool = False


class RayFleet(FleetEngine):
    """Each loop of ``--parallel`` as a Ray actor on a cluster node."""

    name = "ray"
    description = "one loop per PRD (or story group) as a Ray actor on a cluster node; branches come back as bundles"

    def availability(self) -> Availability:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            from .runner import NO_RAY

            return Availability.no(NO_RAY)
        return Availability.yes()

    def config(self) -> Any:
        from .config import RayConfig

        return section_or_default(self.settings, "ray", RayConfig)

    def run(self, project_dir: Path, units: list[Unit], base_commit: str, run_args: list[str], out: TextIO,
            err: TextIO) -> int:
        import ray

        from ralph.api.workspace import capture

        from .cluster import actor_options, connect
        from .runner import _forwarded_env

        from ralph.api.fleet import FleetMirror

        cfg = self.config()
        connection = connect(cfg)
        interrupts = {"count": 0}
        previous = _install_interrupts(interrupts)
        loops: list[_Loop] = []
        self.mirror = FleetMirror(project_dir, getattr(self.settings.config, "state_dir", None) if self.settings else None)
        try:
            state = capture(project_dir)
            env = _forwarded_env(cfg.env)
            remote: Any = ray.remote(FleetLoopActor)
            remote = remote.options(**actor_options(cfg, max_concurrency=4))
            for unit in units:  # all placed at once; Ray starts each when a node has room
                actor = remote.remote()
                loops.append(_Loop(unit, actor, pending=actor.where.remote()))
            out.write(f"ralph: {len(loops)} loops submitted to the Ray cluster at {connection.address}; their records: "
                      f"{self.mirror.path} (ralph serve shows them)\n")
            out.flush()
            self._follow(project_dir, loops, state, base_commit, run_args, env, interrupts, out)
        finally:
            _restore_interrupts(previous)
            for loop in loops:
                _close(loop)
            connection.close()
            self.mirror.close()
        _summary(loops, out)
        if interrupts["count"]:
            return EXIT_INTERRUPTED
        failed = [loop.exit for loop in loops if loop.exit]
        return max(failed) if failed else 0

    def _follow(self, project_dir: Path, loops: list[_Loop], state: Any, base_commit: str, run_args: list[str],
                env: dict[str, str], interrupts: dict[str, int], out: Any) -> None:
        """Start each loop when its actor is placed, stream its lines, bring its branch back when it ends."""
        import ray
        from ray.exceptions import RayActorError

        cfg = self.config()
        sent = 0
        while True:
            active = [loop for loop in loops if loop.exit is None]
            if not active:
                return
            if interrupts["count"] > sent:
                sent = interrupts["count"]
                for loop in active:
                    if loop.started:
                        loop.actor.interrupt.remote(hard=sent > 1)
                    else:  # not started yet: it never will
                        loop.exit, loop.note = EXIT_INTERRUPTED, "interrupted before it started"
                        _close(loop)
                continue
            for loop in active:
                if loop.pending is None:
                    loop.pending = loop.actor.poll.remote(cfg.poll_seconds)
            ready, _ = ray.wait([loop.pending for loop in active], num_returns=1, timeout=1.0)
            for loop in active:
                if loop.pending not in ready:
                    continue
                ref, loop.pending = loop.pending, None
                try:
                    answer = ray.get(ref)
                    if not loop.started:
                        self._start(loop, answer, state, run_args, env, out)
                        continue
                except RayActorError as exc:
                    loop.exit, loop.note = EXIT_NODE_LOST, f"node lost: {_first_line(exc)}"
                    out.write(f"[{loop.unit.name}] ralph: the loop's node was lost; the other loops go on\n")
                    _close(loop)
                    continue
                for line in answer["lines"]:
                    out.write(f"[{loop.unit.name}] {line}\n")
                self._keep(loop, answer.get("record"), out)
                if answer["exit"] is not None:
                    code = answer["exit"]
                    self._bring_back(project_dir, loop, base_commit)
                    loop.exit = loop.exit or (128 - code if code < 0 else code)
                    _close(loop)  # frees the node for the next loop
            out.flush()

    def _keep(self, loop: _Loop, record: Any, out: Any) -> None:
        """Mirror what the loop recorded since the last poll; a failure to is said once, and the fleet goes on."""
        try:
            self.mirror.add(loop.unit.name, record)
        except (OSError, ValueError) as exc:
            if not loop.mirror_failed:
                loop.mirror_failed = True
                out.write(f"[{loop.unit.name}] ralph: warning: its record is not mirrored for ralph serve: {exc}\n")

    def _start(self, loop: _Loop, where: dict[str, Any], state: Any, run_args: list[str], env: dict[str, str],
               out: Any) -> None:
        import ray

        unit = loop.unit
        loop.where, loop.started = where, True
        unit_dict = {"name": unit.name, "ralph_dir": unit.ralph_dir, "kind": unit.kind, "stories": list(unit.stories)}
        ray.get(loop.actor.start.remote(state, unit.branch, unit_dict, run_args, env), timeout=self.config().call_timeout)
        out.write(f"ralph: {unit.name}: loop on node {where['node_id'][:12]} ({where['hostname']}) -> {unit.branch}\n")

    def _bring_back(self, project_dir: Path, loop: _Loop, base_commit: str) -> None:
        import ray

        from ralph.api.workspace import receive_branch

        try:
            result = ray.get(loop.actor.result.remote(base_commit), timeout=self.config().call_timeout)
            outcome = receive_branch(project_dir, result["state"], loop.unit.branch)
        except Exception as exc:  # noqa: BLE001 - reported for this loop only
            loop.note = f"branch not brought back: {_first_line(exc)}"
            loop.exit = EXIT_NODE_LOST
            return
        stories = result["summary"].get("stories") or []
        loop.stories = f"{sum(1 for s in stories if s.get('passes'))}/{len(stories)}" if stories else "-"
        loop.note = f"branch {outcome}" + ("; uncommitted changes on the node were not brought back"
                                           if result["uncommitted"] else "")


def _close(loop: _Loop) -> None:
    import ray

    if loop.closed:
        return
    loop.closed = True
    try:
        ray.get(loop.actor.close.remote(), timeout=30)
    except Exception:  # noqa: BLE001 - the node may be gone; the actor is killed either way
        pass
    try:
        ray.kill(loop.actor)
    except Exception:  # noqa: BLE001
        pass


def _summary(loops: list[_Loop], out: Any) -> None:
    rows = [("loop", "node", "exit", "stories", "branch", "")]
    for loop in loops:
        rows.append((loop.unit.name, loop.where.get("node_id", "?")[:12], str(loop.exit), loop.stories or "-",
                     loop.unit.branch, loop.note))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    out.write("\nralph: fleet finished (engine ray)\n")
    for row in rows:
        out.write("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + f"  {row[5]}".rstrip() + "\n")
    if loops:
        out.write(f"nothing was merged or pushed: review each branch and merge it yourself (e.g. git merge {loops[0].unit.branch})\n")
    out.flush()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _install_interrupts(interrupts: dict[str, int]) -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handle(_signum: int, _frame: Any) -> None:
        interrupts["count"] += 1

    return {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_interrupts(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


__all__ = ["FleetLoopActor", "RayFleet"]
