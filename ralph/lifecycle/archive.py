"""``ralph archive``: put a finished loop away and start the next one clean (seed 000 §10, seed 004 §5.2).

1. Refuses, changing nothing, unless the ralph directory holds a task list with at least
   one completed story, and no ``ralph run`` is active.
2. Moves ``prd.md``, the task list and ``progress.txt`` to
   ``<project>/ralph-archive/<date>-<label or branch>/`` (``-2``, ``-3`` ... if taken).
3. Writes ``summary.md`` there: stories completed vs total, date range, branch, the
   per-story review counts and the review analytics of seed 000.
4. Resets the ralph directory with fresh templates (``prompt.md`` is left exactly as it
   is, customisations included).
5. Commits the archive and the reset (only those paths).

Every read, move and write goes through :mod:`ralph.safeio` below the project: a symlink the agent
left on the way (``ralph-archive``, the ralph directory, a file in it) is refused with a clear line
before anything moves, and never followed, so nothing is written outside the project.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph import safeio
from ralph.contracts import AUTO_APPROVED_PREFIX
from ralph.errors import UsageError
from ralph.wording import counted

if TYPE_CHECKING:
    from ralph.contracts import TaskStore
    from ralph.tasks import TaskList

ARCHIVE_ROOT = "ralph-archive"
PROGRESS = "progress.txt"
PRD = "prd.md"


@dataclass
class ArchiveResult:
    archive_dir: Path
    moved: list[Path]
    written: list[Path]
    completed: int
    total: int
    commit: str | None
    warnings: list[str] = field(default_factory=list)


def archive_project(
    project_dir: Path,
    ralph_dir: Path,
    store: TaskStore,
    label: str | None = None,
    today: date | None = None,
    commit: bool = True,
    review_cap: int = 5,
    policy: Any = None,
) -> ArchiveResult:
    """Archive the loop in ``ralph_dir`` (see the module docstring); ``policy`` words each story's state."""
    from ralph.gitutil import commit_paths, git_dir, head
    from ralph.lifecycle.init import slugify
    from ralph.loop.lock import ProjectLock
    from ralph.errors import TaskListError
    from ralph.lifecycle.plan import load_task_list

    project_dir = project_dir.resolve()
    ralph_dir = Path(os.path.abspath(project_dir / ralph_dir))  # never resolved: a link on the way is refused below
    here = safeio.root_for(ralph_dir / PRD, project_dir)  # the project (the ralph directory's folder if elsewhere)
    found = safeio.kind(ralph_dir, here) if ralph_dir != here else ("dir" if ralph_dir.is_dir() else "absent")
    if found == "absent":
        raise UsageError(f"{ralph_dir} does not exist: nothing to archive (run `ralph init` to start a loop)")
    tasks_path = store.path(ralph_dir)
    root = project_dir / ARCHIVE_ROOT
    _refuse_links([ralph_dir / PRD, tasks_path, ralph_dir / PROGRESS], here)
    _refuse_links([root / "x"], project_dir)
    if commit:
        gdir = git_dir(project_dir)
        if ProjectLock(gdir).is_held():
            raise UsageError("a `ralph run` is active in this project: wait for it to finish before archiving")
    try:
        tasks = load_task_list(store, tasks_path)
    except TaskListError as exc:
        if _lenient_completed(_read(tasks_path, here)) == 0:
            raise UsageError(
                f"nothing completed to archive: no story in {tasks_path} passes (it does not even validate yet: "
                f"{str(exc).splitlines()[0]})"
            ) from None
        raise TaskListError(f"{exc}\n(fix the task list before archiving; nothing was moved)") from None
    total = len(tasks.userStories)
    completed = sum(1 for s in tasks.userStories if s.passes)
    if completed == 0:
        raise UsageError(
            f"nothing completed to archive: 0 of {counted(total, 'story')} in {tasks_path} pass; "
            "finish at least one story (ralph run) before archiving"
        )
    today = today or date.today()
    branch = tasks.branchName.removeprefix("ralph/")
    name = slugify(label or branch or tasks.project or "loop") or "loop"
    target = root / f"{today.isoformat()}-{name}"
    suffix = 2
    while safeio.kind(target, project_dir) != "absent":
        target = root / f"{today.isoformat()}-{name}-{suffix}"
        suffix += 1

    # -- compute everything first -------------------------------------------------------------
    progress_path = ralph_dir / PROGRESS
    progress_text = _read(progress_path, here)
    started = _started(progress_text) or _first_commit_date(project_dir, tasks_path)
    summary = render_summary(tasks, started, today, review_cap, _last_run_line(project_dir, tasks), policy)
    fresh = fresh_files(store, tasks, ralph_dir, today)
    warnings = []
    if completed < total:
        warnings.append(f"{total - completed} of {counted(total, 'story')} {'is' if total - completed == 1 else 'are'} not complete; "
                        f"{'it is' if total - completed == 1 else 'they are'} archived as open")

    # -- then move and write -------------------------------------------------------------------
    safeio.make_dirs(target, project_dir)
    moved = []
    for source in (ralph_dir / PRD, tasks_path, progress_path):
        if safeio.kind(source, here) == "file":
            safeio.move(source, target / source.name, here, target_root=project_dir)
            moved.append(target / source.name)
    kept_progress = target / progress_path.name
    if kept_progress in moved:
        scrubbed = loop_lines_without_paths(progress_text, project_dir)
        if scrubbed != progress_text:  # the loop's own notes of older runs named this machine's paths
            safeio.write_text(kept_progress, project_dir, scrubbed)
    safeio.write_text(target / "summary.md", project_dir, summary)
    written = [target / "summary.md"]
    for path, text in fresh.items():
        safeio.write_text(path, here, text)
        written.append(path)
    sha = None
    if commit:
        paths = [*moved, *written]
        error = commit_paths(project_dir, paths, f"ralph: archive {target.name} ({completed}/{counted(total, 'story')} complete)")
        if error:
            raise UsageError(f"the archive was written to {target} but the commit failed: {error}")
        sha = head(project_dir)
    return ArchiveResult(target, moved, written, completed, total, sha, warnings)


def loop_lines_without_paths(text: str, project_dir: Path) -> str:
    """The progress log with the loop's own notes (``[ralph loop ...]`` lines) free of this machine's
    paths (:func:`ralph.loop.progressnotes.symbolic_paths`); the person's and the agent's lines as they are."""
    from ralph.configfile import state_dir_setting
    from ralph.loop.progressnotes import symbolic_paths
    from ralph.loop.rundir import state_root

    state = state_root(state_dir_setting(project_dir))
    lines = text.split("\n")
    return "\n".join(symbolic_paths(line, project_dir, state) if line.startswith("[ralph loop ") else line
                     for line in lines)


def _refuse_links(paths: list[Path], root: Path) -> None:
    """UsageError naming the first symlink (or special file) on the way to one of ``paths``: nothing moves."""
    for path in paths:
        found = safeio.check(path, root)
        if found is not None:
            raise UsageError(
                f"{found.rel} is {found.what}: `ralph archive` never reads or writes through one (an agent may have "
                f"left it to make the archive land outside the project); remove it and run again (nothing was moved)"
            )


def _read(path: Path, root: Path) -> str:
    """The text of ``path`` read without following links; ``""`` when absent or unreadable."""
    try:
        return safeio.read_text(path, root)
    except (OSError, UnicodeDecodeError):
        return ""


def fresh_files(store: TaskStore, tasks: TaskList, ralph_dir: Path, today: date) -> dict[Path, str]:
    """The reset ralph directory: templates for prd.md, progress.txt and the task list (not prompt.md)."""
    import json

    from ralph.templates import render, template_text

    values = {"DATE": today.isoformat(), "PROJECT_NAME": tasks.project or ralph_dir.parent.name}
    out = {
        ralph_dir / PRD: render(template_text("prd.md"), values),
        ralph_dir / PROGRESS: render(template_text("progress.txt"), values),
    }
    template = json.loads(template_text("tasks.json"))
    template["project"] = values["PROJECT_NAME"]
    if store.name == "tasks-json":
        text = json.dumps(template, indent=2, ensure_ascii=False) + "\n"
    else:
        from ralph.tasks import TaskList

        blank = TaskList.model_validate(
            {**template, "userStories": [{**s, "title": s["title"] or "Describe the first story", "acceptanceCriteria": ["Describe a verifiable outcome"]} for s in template["userStories"]]}
        )
        text = store.render(blank, None)
    out[store.path(ralph_dir)] = text
    return out


def _started(progress: str) -> str | None:
    match = re.search(r"^Started:\s*(\S+)", progress, re.MULTILINE)
    return match.group(1) if match else None


def _first_commit_date(project_dir: Path, path: Path) -> str | None:
    from ralph.gitutil import git

    try:
        result = git(project_dir, "log", "--reverse", "--format=%as", "--", str(path), check=False)
    except OSError:
        return None
    dates = result.stdout.split()
    return dates[0] if dates else None


def _lenient_completed(raw: str) -> int:
    """Completed stories in a task list that does not validate (JSON ``passes`` or ``[x]`` lines)."""
    import json

    try:
        data = json.loads(raw)
    except ValueError:
        return len(re.findall(r"^[ \t]*[-*+][ \t]+\[[xX]\]", raw, re.MULTILINE))
    stories = data.get("userStories") if isinstance(data, dict) else None
    return sum(1 for s in stories if isinstance(s, dict) and s.get("passes") is True) if isinstance(stories, list) else 0


def _last_run_line(project_dir: Path, tasks: TaskList) -> str | None:
    """The latest run, when it ran this task list (same story ids)."""
    import json

    from ralph.configfile import state_dir_setting
    from ralph.loop.rundir import latest_run

    run = latest_run(project_dir, state_dir_setting(project_dir))
    if run is None or not (run / "summary.json").is_file():
        return None
    try:
        data = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    except ValueError:
        return None
    if {s.get("id") for s in data.get("stories", [])} != {s.id for s in tasks.userStories}:
        return None
    return (
        f"Last run: {counted(data.get('iterations'), 'iteration')}, cost ${data.get('cost_usd', 0):.4f}, "
        f"{data.get('reason')} (run {run.name}; `ralph status` and `ralph report --run {run.name}` show it)"
    )


def render_summary(
    tasks: TaskList, started: str | None, today: date, review_cap: int, last_run: str | None, policy: Any = None
) -> str:
    from ralph.lifecycle.report import review_analytics

    done = sum(1 for s in tasks.userStories if s.passes)
    lines = [
        f"# Ralph archive: {tasks.project or 'loop'}",
        "",
        f"- Branch: `{tasks.branchName}`",
        f"- Stories completed: {done} of {len(tasks.userStories)}",
        f"- Date range: {started or 'unknown'} to {today.isoformat()}",
    ]
    if last_run:
        lines.append(f"- {last_run}")
    lines += ["", "## Stories", "", "| Story | Title | State | Reviews |", "| --- | --- | --- | --- |"]
    from ralph.loop.runreport import summary_stories

    for story, shown in zip(tasks.userStories, summary_stories(tasks, policy)):
        title = story.title.replace("|", "\\|")
        lines.append(f"| {story.id} | {title} | {shown['state']} | {story.reviewCount} |")
    analytics = review_analytics(
        [{"id": s.id, "passes": s.passes, "reviewCount": s.reviewCount, "autoApproved": s.reviewFeedback.startswith(AUTO_APPROVED_PREFIX)} for s in tasks.userStories],
        review_cap,
    )
    lines += ["", "## Review analytics", ""] + [f"- {line}" for line in analytics.lines()]
    return "\n".join(lines) + "\n"


def describe(result: ArchiveResult, project_dir: Path) -> list[str]:
    rel = result.archive_dir.relative_to(project_dir.resolve()) if result.archive_dir.is_relative_to(project_dir.resolve()) else result.archive_dir
    out = [f"archived {result.completed}/{counted(result.total, 'completed story', 'completed stories')} to {rel}/"]
    out += [f"warning: {w}" for w in result.warnings]
    out.append("reset prd.md, progress.txt and the task list to fresh templates (prompt.md kept)")
    if result.commit:
        out.append(f"committed {result.commit[:10]}")
    return out


