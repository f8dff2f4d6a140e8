"""``ralph run --parallel``: independent loops, each in its own git worktree.

Units (what runs in parallel):

- PRD mode (default): every ``.ralph/PRD-N/`` folder of the project is a unit.
- Story-group mode (``--groups``): the stories of ONE ralph directory, split into the
  connected components of their ``dependsOn`` graph.  Each group's worktree gets a task
  list holding only its stories, written by ralph when the worktree is created and
  committed on the worktree's branch.

For each unit ralph creates (or, on a rerun, reuses) a git worktree at
``<git common dir>/ralph-worktrees/<unit>`` (inside ``.git``: hidden from the main
working tree and from ``git status``) on the branch ``ralph/parallel/<unit>``, started
from the current HEAD.  Then it starts one child ``ralph run`` per worktree, all at once,
with the user's run options.  A worktree has its own git directory, so each child has
its own run lock; run directories are keyed by project path, so each child has its own
run directory; each unit's progress file lives in its own folder of its own worktree.
No file is written by two loops.

ralph never merges the branches back and never pushes: that is the user's job.

Stdlib only at import time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

from ralph.errors import UsageError
from ralph.fleetunit import BRANCH_PREFIX, UNIT_ENV, Unit

if TYPE_CHECKING:
    from ralph.contracts import FleetEngine

__all__ = [
    "BRANCH_PREFIX",
    "METADATA_NAME",
    "UNIT_ENV",
    "WORKTREES_DIR",
    "Unit",
    "WorktreeInfo",
    "clean_worktrees",
    "list_worktrees",
    "passthrough_args",
    "plan_units",
    "run_parallel",
    "story_groups",
    "write_group_tasks",
    "worktrees_root",
]

WORKTREES_DIR = "ralph-worktrees"
METADATA_NAME = "ralph-parallel.json"
"""Kept in the worktree's own git directory (``<common>/worktrees/<id>/``): private to the
worktree, invisible to the agent's working tree, removed with the worktree."""

EXIT_INTERRUPTED = 130
_PRD_NAME = re.compile(r"PRD-([1-9][0-9]{0,5})")

Echo = Callable[[str], None]


# -- git helpers -----------------------------------------------------------------------------


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    from ralph.gitutil import git  # hardened, after the git metadata check

    result = git(cwd, *args, check=False)
    if check and result.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed in {cwd}: {(result.stderr or result.stdout).strip()}")
    return result


def _toplevel(project_dir: Path) -> Path:
    from ralph.gitutil import git_dir

    git_dir(project_dir)  # the clear "not a git repository" error
    return Path(_git(project_dir, "rev-parse", "--show-toplevel").stdout.strip()).resolve()


def worktrees_root(project_dir: Path) -> Path:
    """``<git common dir>/ralph-worktrees``: where ralph puts its worktrees."""
    from ralph.gitutil import common_dir

    return common_dir(project_dir).resolve() / WORKTREES_DIR


def _registered_worktrees(project_dir: Path) -> list[dict[str, str]]:
    """``git worktree list --porcelain`` as dicts (``worktree``, ``branch``, ``HEAD``, ``locked`` ...)."""
    out = _git(project_dir, "worktree", "list", "--porcelain").stdout
    entries: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in out.splitlines():
        if not line.strip():
            if current:
                entries.append(current)
            current = {}
            continue
        key, _, value = line.partition(" ")
        current[key] = value
    if current:
        entries.append(current)
    return entries


# -- planning the units ------------------------------------------------------------------------


def story_groups(stories: list[Any]) -> list[list[str]]:
    """Connected components of the ``dependsOn`` graph (edges taken as undirected).

    Components and the ids inside them keep the task list's order; a ``dependsOn`` naming
    an unknown id is ignored here (``ralph plan --check`` reports it).
    """
    order = [story.id for story in stories]
    known = set(order)
    parent = {story_id: story_id for story_id in order}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for story in stories:
        for dep in story.dependsOn:
            if dep in known:
                a, b = find(story.id), find(dep)
                if a != b:
                    parent[max(a, b, key=order.index)] = min(a, b, key=order.index)
    groups: dict[str, list[str]] = {}
    for story_id in order:
        groups.setdefault(find(story_id), []).append(story_id)
    return list(groups.values())


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name).strip("_-") or "ralph"


def _prd_units(project_dir: Path) -> list[Unit]:
    from ralph.lifecycle.plan import PRD_ROOT

    root = project_dir / PRD_ROOT
    found = [p for p in root.glob("PRD-*") if p.is_dir() and _PRD_NAME.fullmatch(p.name)] if root.is_dir() else []
    found.sort(key=lambda p: int(p.name[4:]))
    return [Unit(p.name, f"{PRD_ROOT}/{p.name}") for p in found]


def plan_units(project_dir: Path, groups: bool = False, ralph_dir: str | None = None, prd: str | None = None) -> list[Unit]:
    """The units of ``ralph run --parallel`` (UsageError when there are fewer than 2)."""
    project_dir = project_dir.resolve()
    if not groups:
        if ralph_dir or prd:
            raise UsageError(
                "--parallel runs every .ralph/PRD-N/ folder; --ralph-dir and --prd only go with --groups "
                "(split that one task list into independent story groups)"
            )
        units = _prd_units(project_dir)
        if len(units) < 2:
            from ralph.lifecycle.plan import PRD_ROOT

            what = f"only {units[0].ralph_dir}" if units else f"no PRD-N folder under {project_dir / PRD_ROOT}"
            hint = f"; run it alone with `ralph run --prd {units[0].name[4:]}`" if units else ""
            raise UsageError(
                f"--parallel needs at least 2 units and found {what}{hint} "
                "(or use --groups to split one task list into independent story groups)"
            )
        return units
    if ralph_dir and prd:
        raise UsageError("--prd and --ralph-dir both name the ralph directory; give one")
    from ralph.loop.storechoice import choose_store
    from ralph.lifecycle.plan import load_task_list, prd_dir
    from ralph.session import open_session

    if prd is not None:
        ralph_dir = str(prd_dir(project_dir, prd, must_exist=True))
    session = open_session(project_dir, {"ralph_dir": ralph_dir})
    source = session.settings.ralph_dir
    if not source.is_dir():
        raise UsageError(f"{source} does not exist: run `ralph init` first (or pass --ralph-dir / --prd)")
    store = choose_store(session.settings, session.host)
    tasks_path = store.path(source)
    tasks = load_task_list(store, tasks_path)
    components = story_groups(tasks.userStories)
    try:
        rel = source.resolve().relative_to(project_dir).as_posix()
    except ValueError:
        raise UsageError(f"{source} is outside the project {project_dir}; a worktree only holds the project") from None
    if len(components) < 2:
        what = (
            f"{len(tasks.userStories)} stor{'y' if len(tasks.userStories) == 1 else 'ies'} forming one group"
            if components
            else "no stories"
        )
        raise UsageError(
            f"--parallel --groups needs at least 2 independent story groups; {tasks_path} has {what} "
            "(stories linked through dependsOn stay in one group); run it with plain `ralph run`"
        )
    prefix = _safe(source.name)
    return [Unit(f"{prefix}-{_safe(ids[0])}", rel, "group", tuple(ids)) for ids in components]


# -- worktrees -------------------------------------------------------------------------------


@dataclass
class Worktree:
    unit: Unit
    path: Path
    """The worktree root."""
    project_dir: Path
    """The project directory inside the worktree (the root, unless the project is a subdirectory)."""
    created: bool


def _base(project_dir: Path) -> tuple[str | None, str]:
    """(current branch or None when detached, HEAD commit)."""
    from ralph.gitutil import current_branch, head

    commit = head(project_dir)
    if commit is None:
        raise UsageError(f"{project_dir} has no commit yet; commit your ralph folders first")
    return current_branch(project_dir), commit


def _tracked(project_dir: Path, rel: str) -> bool:
    return bool(_git(project_dir, "ls-tree", "-d", "--name-only", "HEAD", "--", rel, check=False).stdout.strip())


def _worktree_git_dir(path: Path) -> Path:
    return Path(_git(path, "rev-parse", "--absolute-git-dir").stdout.strip())


def read_metadata(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((_worktree_git_dir(path) / METADATA_NAME).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, UsageError):
        return {}


def _exclude_marker(project_dir: Path) -> None:
    """Keep ``.ralph-active`` out of git in every worktree (``info/exclude`` of the common dir)."""
    from ralph.gitutil import ensure_excluded
    from ralph.loop.activestate import MARKER_NAME

    ensure_excluded(project_dir, MARKER_NAME)


def ensure_worktree(project_dir: Path, unit: Unit, base_branch: str | None, base_commit: str) -> Worktree:
    """Create the unit's worktree and branch, or reuse them (a rerun continues their work)."""
    top = _toplevel(project_dir)
    sub = project_dir.resolve().relative_to(top)
    path = worktrees_root(project_dir) / unit.name
    registered = {Path(e["worktree"]).resolve(): e for e in _registered_worktrees(project_dir)}
    entry = registered.get(path.resolve()) if path.exists() else None
    if entry is not None:
        branch = entry.get("branch", "").removeprefix("refs/heads/")
        if branch != unit.branch:
            raise UsageError(
                f"{path} is a worktree on {branch or 'a detached HEAD'}, not {unit.branch}; "
                "remove it with `ralph worktrees --clean` first"
            )
        created = False
    else:
        if path.exists():
            if any(path.iterdir()):
                raise UsageError(f"{path} exists but is not a git worktree; move it away first")
            path.rmdir()
        _git(project_dir, "worktree", "prune")  # forget worktrees whose directory was deleted by hand
        path.parent.mkdir(parents=True, exist_ok=True)
        has_branch = _git(project_dir, "rev-parse", "--verify", "-q", f"refs/heads/{unit.branch}", check=False)
        if has_branch.returncode == 0:
            _git(project_dir, "worktree", "add", "-q", str(path), unit.branch)
        else:
            _git(project_dir, "worktree", "add", "-q", "-b", unit.branch, str(path), base_commit)
        created = True
        metadata = {
            "unit": unit.name,
            "kind": unit.kind,
            "ralph_dir": unit.ralph_dir,
            "stories": list(unit.stories),
            "project_subdir": sub.as_posix(),
            "base_branch": base_branch,
            "base_commit": base_commit,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        from ralph.fsutil import atomic_write_text

        atomic_write_text(_worktree_git_dir(path) / METADATA_NAME, json.dumps(metadata, indent=2) + "\n")
    inner = path / sub
    if not (inner / unit.ralph_dir).is_dir():
        raise UsageError(f"{inner / unit.ralph_dir} does not exist in the worktree of {unit.name}")
    if created and unit.kind == "group":
        write_group_tasks(inner, unit)
    return Worktree(unit, path, inner, created)


def write_group_tasks(project_dir: Path, unit: Unit) -> None:
    """Write the group's task list (only its stories) and commit it on the unit's branch."""
    from ralph import safeio
    from ralph.loop.storechoice import choose_store
    from ralph.lifecycle.plan import load_task_list
    from ralph.session import open_session

    session = open_session(project_dir, {"ralph_dir": unit.ralph_dir})
    store = choose_store(session.settings, session.host)
    tasks_path = store.path(session.settings.ralph_dir)
    raw = safeio.read_text(tasks_path, project_dir)  # a committed link to a host file is refused, never read
    tasks = load_task_list(store, tasks_path)
    keep = set(unit.stories)
    subset = tasks.model_copy(update={"userStories": [s for s in tasks.userStories if s.id in keep]})
    text = store.render(subset, raw)  # keeps the file's formatting where the store can ...
    try:
        same = store.parse(text, tasks_path).model_dump(mode="json") == subset.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - any doubt: write it afresh
        same = False
    if not same:  # ... else the list written afresh
        text = store.render(subset, None)
    safeio.write_text(tasks_path, project_dir, text)
    rel = tasks_path.relative_to(project_dir).as_posix()
    _git(project_dir, "add", "--", rel)
    message = f"ralph: story group {unit.name} ({', '.join(unit.stories)}): task list holds only these stories"
    result = _git(project_dir, "commit", "-q", "--no-verify", "-m", message, "--", rel, check=False)
    if result.returncode != 0 and "nothing" not in (result.stdout + result.stderr):
        raise UsageError(f"could not commit the task list of {unit.name}: {(result.stderr or result.stdout).strip()}")


# -- the run -------------------------------------------------------------------------------------


def passthrough_args(ctx: Any, skip: set[str]) -> list[str]:
    """Rebuild the command line of the options the user gave ``ralph run`` (except ``skip``)."""
    import click

    args: list[str] = []
    seen: set[str] = set()
    for param in ctx.command.params:  # the command's order, not the command line's
        name = param.name
        value = ctx.params.get(name)
        if name is None or name in skip or name in seen or value is None or value is False:
            continue
        seen.add(name)
        options = [p for p in ctx.command.params if isinstance(p, click.Option) and p.name == name]
        if ctx.get_parameter_source(name) == click.core.ParameterSource.DEFAULT:
            continue
        option = next((o for o in options if o.is_flag and o.flag_value == value), None) if len(options) > 1 else None
        option = option or options[0]
        flag = next((o for o in option.opts if o.startswith("--")), option.opts[0])
        if option.is_flag:
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args


class _Pump(threading.Thread):
    """Copy a child's stream to ours, each line prefixed with ``[unit]``."""

    def __init__(self, prefix: str, source: Any, target: TextIO, lock: Any) -> None:
        super().__init__(daemon=True)
        self.prefix, self.source, self.target, self.lock = prefix, source, target, lock

    def run(self) -> None:
        for raw in iter(self.source.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self.lock:
                self.target.write(f"{self.prefix} {line}\n")
                self.target.flush()
        self.source.close()


@dataclass
class _Child:
    worktree: Worktree
    process: subprocess.Popen[bytes]
    pumps: list[_Pump] = field(default_factory=list)


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


def run_parallel(
    project_dir: Path,
    run_args: list[str],
    *,
    groups: bool = False,
    ralph_dir: str | None = None,
    prd: str | None = None,
    dry_run: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    engine: str | None = None,
) -> int:
    """Plan, create the worktrees, run one child ``ralph run`` per unit; the overall exit code.

    ``engine`` names a fleet engine plugin (``ray``) that runs the loops elsewhere instead of
    in local worktrees; ``None`` or ``worktrees`` is the local default.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    project_dir = project_dir.resolve()
    _toplevel(project_dir)
    from ralph.gitutil import dirty_paths

    units = plan_units(project_dir, groups=groups, ralph_dir=ralph_dir, prd=prd)
    dirty = dirty_paths(project_dir)
    if dirty:
        shown = "\n".join(f"  {line}" for line in dirty[:20]) + ("\n  ..." if len(dirty) > 20 else "")
        raise UsageError(
            "the main working tree has uncommitted changes; --parallel starts every worktree from the "
            f"current commit, so commit or stash them first:\n{shown}"
        )
    for unit in units:
        if not _tracked(project_dir, unit.ralph_dir):
            raise UsageError(
                f"{unit.ralph_dir} is not in the current commit (ignored by .gitignore?); a worktree only "
                "holds committed files: commit it first"
            )
    base_branch, base_commit = _base(project_dir)
    fleet = _fleet_engine(project_dir, engine)
    if fleet is not None:
        if dry_run:
            return _show_plan(out, f"{len(units)} loops on engine {engine} from {base_branch or base_commit[:12]}",
                              units, lambda unit: f"branch {unit.branch}", "started")
        return fleet.run(project_dir, units, base_commit, run_args, out, err)
    root = worktrees_root(project_dir)
    if dry_run:
        return _show_plan(out, f"{len(units)} units from {base_branch or base_commit[:12]}",
                          units, lambda unit: f"{root / unit.name} on {unit.branch}", "created or run")
    _exclude_marker(project_dir)
    worktrees = []
    for unit in units:
        wt = ensure_worktree(project_dir, unit, base_branch, base_commit)
        state = "created" if wt.created else "reused"
        out.write(f"ralph: {unit.name}: worktree {wt.path} on {unit.branch} ({state})\n")
        worktrees.append(wt)
    out.flush()
    return _run_children(worktrees, run_args, out, err)


def _show_plan(out: TextIO, what: str, units: list[Unit], where: Callable[[Unit], str], nothing_was: str) -> int:
    """The ``--dry-run`` answer: the plan (``what``, then each unit's ralph directory, stories and
    ``where(unit)`` it would run) and what was not done; exit code 0."""
    out.write(f"parallel plan: {what}\n")
    for unit in units:
        stories = f" stories {', '.join(unit.stories)}" if unit.stories else ""
        out.write(f"  {unit.name}: {unit.ralph_dir}{stories} -> {where(unit)}\n")
    out.write(f"nothing was {nothing_was} (--dry-run)\n")
    return 0


def _fleet_engine(project_dir: Path, engine: str | None) -> FleetEngine | None:
    """The fleet engine plugin named ``engine`` (None for the local worktrees)."""
    if engine in (None, "worktrees"):
        return None
    from ralph.session import open_session
    from ralph.errors import UnavailableError

    session = open_session(project_dir, {})
    names = ["worktrees", *session.host.fleet_engines.names()]
    if engine not in names:
        raise UsageError(f"unknown --engine {engine!r}; available: {', '.join(names)}")
    chosen = session.host.fleet_engines.get(engine)(session.settings)
    available = chosen.availability()
    if not available.ok:
        raise UnavailableError(f"engine {engine!r} cannot be used: {available.reason}")
    return chosen


def _run_children(worktrees: list[Worktree], run_args: list[str], out: TextIO, err: TextIO) -> int:
    lock = threading.RLock()  # the signal handler may run (even nested) while the main thread writes
    children: list[_Child] = []
    interrupts = {"count": 0}

    def forward(signum: int, _frame: Any) -> None:
        interrupts["count"] += 1
        for child in children:
            if child.process.poll() is not None:
                continue
            try:
                if interrupts["count"] == 1:
                    child.process.send_signal(signum)
                else:  # a second Ctrl-C: stop waiting for clean shutdowns
                    os.killpg(child.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        with lock:
            if interrupts["count"] == 1:
                err.write(f"ralph: {signal.Signals(signum).name}: stopping {len(children)} loops (again to kill them)\n")
            else:
                err.write("ralph: killing the loops\n")
            err.flush()

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, forward)
    try:
        for wt in worktrees:
            argv = [
                sys.executable, "-P", "-m", "ralph.cli.main", "run",
                "--project-dir", str(wt.project_dir),
                "--ralph-dir", wt.unit.ralph_dir,
                *run_args,
            ]  # fmt: skip
            env = {**os.environ, UNIT_ENV: wt.unit.name}
            process = subprocess.Popen(
                argv,
                cwd=wt.project_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # Ctrl-C reaches the children once, through us
            )
            child = _Child(wt, process)
            prefix = f"[{wt.unit.name}]"
            child.pumps = [_Pump(prefix, process.stdout, out, lock), _Pump(prefix, process.stderr, err, lock)]
            for pump in child.pumps:
                pump.start()
            children.append(child)
            if interrupts["count"]:  # interrupted while starting: stop this one too
                process.send_signal(signal.SIGINT)
        for child in children:
            child.process.wait()
            for pump in child.pumps:
                pump.join(timeout=10)
    finally:
        for child in children:  # only if we are leaving abnormally
            if child.process.poll() is None:
                try:
                    os.killpg(child.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.process.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    codes = [_exit_status(child.process.returncode) for child in children]
    out.write("\nralph: parallel run finished\n")
    for child, code in zip(children, codes):
        out.write(f"  {child.worktree.unit.name}: exit {code}  branch {child.worktree.unit.branch}  {child.worktree.path}\n")
    out.write(
        "nothing was merged or pushed: review each branch and merge it yourself "
        f"(e.g. git merge {children[0].worktree.unit.branch}); clean up with `ralph worktrees --clean`\n"
    )
    out.flush()
    if interrupts["count"]:
        return EXIT_INTERRUPTED
    failed = [code for code in codes if code != 0]
    return max(failed) if failed else 0


# -- ralph worktrees -----------------------------------------------------------------------------


@dataclass
class WorktreeInfo:
    unit: str
    path: Path
    branch: str | None
    base: str | None
    """The branch (or commit) the worktree came from."""
    ahead: int | None
    behind: int | None
    running: bool
    dirty: list[str]
    state: str
    """``never run``, ``running``, ``complete``/... (the last run's reason), ``stopped``."""
    exit_code: int | None
    run_dir: Path | None
    git_locked: bool
    exists: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "path": str(self.path),
            "branch": self.branch,
            "base": self.base,
            "ahead": self.ahead,
            "behind": self.behind,
            "running": self.running,
            "dirty": self.dirty,
            "state": self.state,
            "exit_code": self.exit_code,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "git_locked": self.git_locked,
        }


def _last_run(project_dir: Path, running: bool) -> tuple[str, int | None, Path | None]:
    from ralph.configfile import state_dir_setting
    from ralph.loop.rundir import latest_run

    run_dir = latest_run(project_dir, state_dir_setting(project_dir))
    if running:
        return "running", None, run_dir
    if run_dir is None:
        return "never run", None, None
    summary_path = run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "stopped (no summary: the run was killed)", None, run_dir
    return str(summary.get("reason", "finished")), summary.get("exit_code"), run_dir


def list_worktrees(project_dir: Path) -> list[WorktreeInfo]:
    """ralph's worktrees of the repository containing ``project_dir``."""
    from ralph.gitutil import dirty_paths
    from ralph.loop.lock import ProjectLock

    project_dir = project_dir.resolve()
    _toplevel(project_dir)
    root = worktrees_root(project_dir).resolve()
    infos = []
    for entry in _registered_worktrees(project_dir):
        path = Path(entry["worktree"]).resolve()
        if path.parent != root:
            continue
        branch = entry["branch"].removeprefix("refs/heads/") if "branch" in entry else None
        exists = path.is_dir() and "prunable" not in entry
        if not exists:
            infos.append(WorktreeInfo(path.name, path, branch, None, None, None, False, [], "missing (prunable)",
                                      None, None, "locked" in entry, False))
            continue
        meta = read_metadata(path)
        inner = path / meta.get("project_subdir", "")
        running = ProjectLock(_worktree_git_dir(path)).is_held()
        state, code, run_dir = _last_run(inner, running)
        base = meta.get("base_branch") or meta.get("base_commit")
        ahead = behind = None
        if base and branch:
            counts = _git(path, "rev-list", "--left-right", "--count", f"{base}...{branch}", check=False)
            if counts.returncode == 0 and len(counts.stdout.split()) == 2:
                behind, ahead = (int(n) for n in counts.stdout.split())
        dirty = [line for line in dirty_paths(path) if not line.endswith(".ralph-active")]
        infos.append(WorktreeInfo(meta.get("unit", path.name), path, branch, base, ahead, behind, running,
                                  dirty, state, code, run_dir, "locked" in entry, True))
    return infos


def format_worktrees(infos: list[WorktreeInfo]) -> str:
    if not infos:
        return "no ralph worktrees (ralph run --parallel creates them)"
    rows = [("unit", "branch", "vs base", "lock", "tree", "last run", "path")]
    for info in infos:
        versus = f"+{info.ahead}/-{info.behind} {info.base}" if info.ahead is not None else "-"
        lock = "held" if info.running else "free"
        tree = "dirty" if info.dirty else ("missing" if not info.exists else "clean")
        state = info.state if info.exit_code is None else f"{info.state} (exit {info.exit_code})"
        rows.append((info.unit, info.branch or "-", versus, lock, tree, state, str(info.path)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1] for row in rows
    )


def clean_worktrees(
    project_dir: Path,
    units: tuple[str, ...] = (),
    *,
    force: bool = False,
    delete_branches: bool = False,
    echo: Echo = print,
) -> int:
    """Remove finished worktrees; 0 when every selected one was removed, else 1.

    A worktree whose loop holds its run lock is never removed.  A dirty (or ``git worktree
    lock``-ed) one only with ``force``.  A branch is deleted only with ``delete_branches``
    and only when it is merged into the branch it came from.
    """
    project_dir = project_dir.resolve()
    infos = list_worktrees(project_dir)
    if units:
        unknown = sorted(set(units) - {info.unit for info in infos})
        if unknown:
            have = ", ".join(info.unit for info in infos) or "none"
            raise UsageError(f"no ralph worktree named {', '.join(unknown)} (existing: {have})")
        infos = [info for info in infos if info.unit in units]
    if not infos:
        echo("no ralph worktrees to clean")
        return 0
    refused = 0
    for info in infos:
        if info.running:
            echo(f"kept {info.unit}: a `ralph run` is active in it (stop it first)")
            refused += 1
            continue
        if info.exists and (info.dirty or info.git_locked) and not force:
            why = "has uncommitted changes: " + ", ".join(line[3:] for line in info.dirty[:8]) if info.dirty else "is locked (git worktree lock)"
            echo(f"kept {info.unit}: it {why}; commit them, or pass --force to discard them")
            refused += 1
            continue
        if info.exists:
            args = ["worktree", "remove"] + (["--force", "--force"] if force else []) + [str(info.path)]
            result = _git(project_dir, *args, check=False)
            if result.returncode != 0:
                echo(f"kept {info.unit}: git worktree remove failed: {(result.stderr or result.stdout).strip()}")
                refused += 1
                continue
        echo(f"removed worktree {info.unit} ({info.path}); branch {info.branch} kept" if not delete_branches
             else f"removed worktree {info.unit} ({info.path})")
        if delete_branches and info.branch:
            _delete_branch(project_dir, info, echo)
    _git(project_dir, "worktree", "prune", check=False)
    root = worktrees_root(project_dir)
    try:
        root.rmdir()  # only when empty
    except OSError:
        pass
    return 1 if refused else 0


def _delete_branch(project_dir: Path, info: WorktreeInfo, echo: Echo) -> None:
    from ralph.gitutil import current_branch, head

    base = info.base or current_branch(project_dir) or head(project_dir)
    merged = _git(project_dir, "merge-base", "--is-ancestor", f"refs/heads/{info.branch}", str(base), check=False)
    if merged.returncode != 0:
        echo(f"kept branch {info.branch}: not merged into {base} (merge it, or delete it with git branch -D)")
        return
    result = _git(project_dir, "branch", "-D", str(info.branch), check=False)
    if result.returncode == 0:
        echo(f"deleted branch {info.branch} (merged into {base})")
    else:
        echo(f"kept branch {info.branch}: {(result.stderr or result.stdout).strip()}")
