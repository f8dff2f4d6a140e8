"""The lifecycle commands around a loop: ``ralph plan``, ``ralph archive``, ``ralph report``.

Only click is imported here; each command imports what it needs when it runs.
Register them on the main group with ``cli.add_command(plan)`` (and ``archive``,
``report``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

import click

from ralph.cli.common import echo, handles_errors, project_dir_option

__all__ = ["plan", "archive", "report", "COMMANDS"]


def _location_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--prd",
        "prd",
        metavar="N",
        help="Use the folder .ralph/PRD-N/ as the ralph directory (one folder per PRD, numbered).",
    )(func)
    func = click.option("--ralph-dir", help="The ralph directory inside the project.  [default: ralph]")(func)
    return project_dir_option(func)


def _session(project_dir: Path, ralph_dir: str | None, prd: str | None) -> Any:
    """(session, ralph directory) honouring --prd and --ralph-dir."""
    from ralph.errors import UsageError
    from ralph.lifecycle.plan import prd_dir
    from ralph.session import open_session

    project_dir = project_dir.resolve()
    if prd is not None and ralph_dir is not None:
        raise UsageError("--prd and --ralph-dir both name the ralph directory: pass one")
    if prd is not None:
        ralph_dir = prd_dir(project_dir, prd, must_exist=True).relative_to(project_dir).as_posix()
    session = open_session(project_dir, {"ralph_dir": ralph_dir})
    return session, session.settings.ralph_dir


def _store(session: Any, ralph_dir: Path, name: str | None = None, file: Path | None = None) -> Any:
    from ralph.loop.storechoice import store_for

    return store_for(ralph_dir, session.host, name or session.settings.config.task_store, file)


# -- plan -------------------------------------------------------------------------------------


@click.command("plan")
@_location_options
@click.option("--check", is_flag=True, help="Validate the task list (sizing, dependencies, criteria); no agent.")
@click.option("--store", "store_name", help="Task list format for --check: tasks-json, prd-json, plan-md.  [default: detected]")
@click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path), help="Check this task-list file instead.")
@click.option("-m", "--model", help="Model for the interactive planning session.")
@click.option("--print-command", is_flag=True, help="Print the claude command line instead of starting it.")
@handles_errors
def plan(
    project_dir: Path,
    ralph_dir: str | None,
    prd: str | None,
    check: bool,
    store_name: str | None,
    file: Path | None,
    model: str | None,
    print_command: bool,
) -> None:
    """Plan a feature with Claude (the ralph-plan skill), or check a task list.

    \b
    ralph plan            interactive session: writes prd.md and the task list
                          (Mode 1 when prd.md is still the template, else Mode 2)
    ralph plan --check    dependency cycles, unknown dependsOn, stories without
                          verifiable acceptance criteria, oversized stories,
                          fields the schema requires; exit 0 with warnings only,
                          1 when there are errors, 2 when there is nothing to
                          check (no task list, not valid JSON, unreadable)
    ralph plan --print-command
                          print the claude command line (its plugin bundle is
                          kept in ralph's state directory) instead of starting it
    """
    session, rdir = _session(project_dir, ralph_dir, prd)
    if check:
        from ralph.lifecycle.plan import check_task_list, load_task_list
        from ralph.loop.start import policy_story_fields

        store = _store(session, rdir, store_name, file)
        path = file.resolve() if file is not None else store.path(rdir)
        from ralph.errors import TaskSchemaError
        from ralph.lifecycle.plan import Problem

        config = session.settings.config
        try:
            tasks = load_task_list(store, path)
        except TaskSchemaError as exc:  # the file decodes: its schema problems are findings like the others
            lines = str(exc).splitlines()
            echo(f"checked {path} ({store.name}): it does not match the task-list schema")
            for line in lines:
                echo(str(Problem("error", None, line.removeprefix(f"{path}: "))))
            echo(f"{len(lines)} error{'s' if len(lines) != 1 else ''}, 0 warnings")
            sys.exit(1)
        from ralph.wording import counted

        policy = _policy(session)
        problems = check_task_list(tasks, config.max_iterations, uses_review=policy is None or policy.uses_review,
                                   story_fields=policy_story_fields(policy) if policy is not None else [])
        echo(f"checked {path} ({store.name}): {counted(len(tasks.userStories), 'story')}")
        for problem in problems:
            echo(str(problem))
        errors = sum(1 for p in problems if p.severity == "error")
        warnings = len(problems) - errors
        echo(f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}")
        sys.exit(1 if errors else 0)
    from ralph.lifecycle.plan import run_plan_session

    binary = getattr(session.settings.section("claude"), "binary", None)
    sys.exit(run_plan_session(session.settings.project_dir, rdir, model, binary, echo, dry_run=print_command))


def _policy(session: Any) -> Any:
    """The configured policy (None when it cannot be loaded: the check then assumes the default's review cycle)."""
    from ralph.errors import RalphError

    try:
        return session.host.policies.get(session.settings.config.policy)(session.settings)
    except RalphError:
        return None


# -- archive ------------------------------------------------------------------------------------


@click.command("archive")
@_location_options
@click.option("--label", help="Name of the archive folder (after the date).  [default: the branch name]")
@click.option("--no-commit", is_flag=True, help="Move and reset the files but do not commit.")
@handles_errors
def archive(project_dir: Path, ralph_dir: str | None, prd: str | None, label: str | None, no_commit: bool) -> None:
    """Archive a finished loop to ralph-archive/<date>-<label>/ and reset the ralph directory.

    Moves prd.md, the task list and progress.txt, writes summary.md (stories done,
    date range, branch, review analytics), writes fresh templates (prompt.md is kept
    as it is) and commits.  Refuses when no story is complete.
    """
    from ralph.lifecycle.archive import archive_project, describe

    session, rdir = _session(project_dir, ralph_dir, prd)
    store = _store(session, rdir)
    result = archive_project(
        session.settings.project_dir, rdir, store, label=label, commit=not no_commit,
        review_cap=session.settings.config.review_cap, policy=_policy(session),
    )
    for line in describe(result, session.settings.project_dir):
        echo(line)


# -- report ---------------------------------------------------------------------------------------


@click.command("report")
@_location_options
@click.option("--run", "run", metavar="RUN", help="A run directory (name or path).  [default: the latest run]")
@click.option("--all-runs", is_flag=True, help="The current task list over every run of this project.")
@click.option(
    "--html",
    "html_path",
    is_flag=False,
    flag_value="",
    metavar="[FILE]",
    help="Also write a self-contained HTML page: to FILE (a folder: FILE/report.html), or (no FILE) next to the "
    "run's record outside the project.",
)
@handles_errors
def report(project_dir: Path, ralph_dir: str | None, prd: str | None, run: str | None, all_runs: bool, html_path: str | None) -> None:
    """Per story: iterations, reviews, gate failures, time and cost; review analytics.

    Prints a table; with --html also writes one HTML page (no external files) with a
    timeline of the run's iterations.
    """
    from ralph.errors import RalphError
    from ralph.fsutil import atomic_write_text
    from ralph.lifecycle.plan import load_task_list
    from ralph.lifecycle.report import project_report, render_html, render_text

    if run and all_runs:
        from ralph.errors import UsageError

        raise UsageError("--run and --all-runs contradict each other: pass one")
    session, rdir = _session(project_dir, ralph_dir, prd)
    tasks = None
    try:
        store = _store(session, rdir)
        tasks = load_task_list(store, store.path(rdir))
    except RalphError as exc:
        if all_runs:
            raise
        echo(f"ralph: note: no current task list ({str(exc).splitlines()[0]})", err=True)
    config = session.settings.config
    result = project_report(
        session.settings.project_dir, run=run, all_runs=all_runs, tasks=tasks, cap=config.review_cap,
        state_dir=config.state_dir, policy=_policy(session),
    )
    project = session.settings.project_dir
    target = _html_target(project, html_path, result, config.state_dir) if html_path is not None else None
    echo(render_text(result))  # after --html's target is known good: a bad one is one line, nothing else
    if target is not None:
        if target.is_relative_to(project):  # never through a link the agent left in the project
            from ralph import safeio

            safeio.write_text(target, project, render_html(result))
        else:
            atomic_write_text(target, render_html(result))
        echo(f"\nwrote {target}")


def _html_target(project_dir: Path, given: str, result: Any, state_dir: str | None) -> Path:
    """Where ``--html`` writes: FILE as given (warning when it would dirty the project), else the run's record."""
    from ralph.loop.rundir import project_state_dir, runs_dir

    if not given:
        base = runs_dir(project_dir, state_dir) / result.runs[-1] if result.runs else project_state_dir(project_dir, state_dir)
        base.mkdir(parents=True, exist_ok=True)
        return base / "report.html"
    target = Path(os.path.abspath(given))  # not resolved: a symlinked folder in the project is refused, not followed
    if os.path.isdir(target):  # a folder: the page goes into it
        target = target / "report.html"
    from ralph.cli.common import path_problem

    problem = path_problem(target.parent)
    if problem is not None:
        from ralph.errors import UsageError

        raise UsageError(f"--html {given}: {problem}; give a file in an existing folder, or --html alone (the page "
                         "then goes next to the run's record)")
    if target.is_relative_to(project_dir):
        from ralph.gitutil import git

        ignored = git(project_dir, "check-ignore", "-q", str(target), check=False).returncode == 0
        if not ignored:
            echo(
                f"ralph: warning: {given} is inside the project and not ignored by git: `ralph run` refuses to "
                "start while it is uncommitted; add it to .gitignore, or use `--html` alone (it then goes next "
                "to the run's record, outside the project)",
                err=True,
            )
    return target


COMMANDS = (plan, archive, report)
