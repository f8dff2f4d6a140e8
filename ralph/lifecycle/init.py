"""``ralph init``: scaffold a project's ralph directory from the shipped templates.

Creates ``<project>/<ralph_dir>/`` with ``prompt.md``, ``prd.md``, ``tasks.json`` and
``progress.txt``, and makes sure ``.ralph-active`` is listed in ``<project>/.gitignore``.
Everything is computed first and written afterwards, each file atomically; when the command
refuses (existing files without ``force``), nothing at all is written.

Stdlib only, cheap to import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path, PurePosixPath

from ralph.errors import RalphError, UsageError
from ralph import safeio
from ralph.ralphfiles import TASK_LIST_FILES
from ralph.templates import render, template_text

__all__ = [
    "SCAFFOLD_FILES", "GITIGNORE_ENTRY", "InitResult", "init_project", "slugify", "check_repository",
    "commit_init", "next_steps", "no_run_active", "refuse_nested_loop", "refuse_second_loop",
]

#: Files written into the ralph directory: (file name in the project, template name).
SCAFFOLD_FILES: tuple[tuple[str, str], ...] = (
    ("prompt.md", "prompt.md"),
    ("prd.md", "prd.md"),
    ("tasks.json", "tasks.json"),
    ("progress.txt", "progress.txt"),
)

#: The line ``ralph init`` makes sure ``.gitignore`` contains.
GITIGNORE_ENTRY = ".ralph-active"


@dataclass
class InitResult:
    """What :func:`init_project` did, for the CLI to report."""

    project_dir: Path
    """The project directory (resolved)."""
    ralph_dir: Path
    """The ralph directory that was created or filled (absolute)."""
    project_name: str
    """The name written into progress.txt, prd.md and tasks.json ``project``."""
    branch_name: str | None
    """The ``branchName`` written into tasks.json (None when an existing task list was kept)."""
    files_written: list[Path] = field(default_factory=list)
    """Absolute paths of the scaffold files written, in order."""
    overwritten: list[Path] = field(default_factory=list)
    """The subset of ``files_written`` that existed before (only possible with ``force``)."""
    kept: list[tuple[Path, str]] = field(default_factory=list)
    """Files of an existing loop that were left as they are, with the reason (shown to the user)."""
    backups: list[tuple[Path, Path]] = field(default_factory=list)
    """(replaced file, its backup copy) for every file ``force`` replaced."""
    gitignore_changed: bool = False
    """True if ``.ralph-active`` was added to ``.gitignore`` (creating it if needed)."""
    next_steps: list[str] = field(default_factory=list)
    """Human-readable next steps, one per item, for the CLI to print as a numbered list."""
    adopted_from: str | None = None
    """The other Ralph tool whose loop was taken over (``ralph-claude-code``, ``ralph-orchestrator``)."""
    imported: list[str] = field(default_factory=list)
    """What was taken over from it (and left out), one line each."""
    task_file: str = "tasks.json"
    """The task list's file name (another format's, when one was there)."""


def slugify(name: str) -> str:
    """Turn a feature name into a branch-name slug: ``"Add Login!"`` -> ``"add-login"``.

    Lower-case ASCII letters, digits, ``.`` and ``_`` are kept; every other run of
    characters becomes one ``-``; leading and trailing separators are dropped.
    """
    slug = re.sub(r"[^a-z0-9._]+", "-", name.strip().lower())
    slug = re.sub(r"\.{2,}", ".", slug)  # git refuses ".." in ref names
    return slug.strip("-._")


def init_project(
    project_dir: Path,
    name: str | None = None,
    ralph_dir: str = "ralph",
    force: bool = False,
    today: date | None = None,
) -> InitResult:
    """Scaffold ``<project_dir>/<ralph_dir>/`` from the shipped templates.

    - ``prompt.md`` is copied as is (the loop fills its ``{{RALPH_*}}`` tokens each iteration).
    - ``prd.md`` and ``progress.txt`` get ``{{PROJECT_NAME}}`` (``name``, else the project
      directory's name) and ``{{DATE}}`` (``today``, else the current date, ISO format).
    - ``tasks.json`` gets ``project`` set to the project name and, when ``name`` is given,
      ``branchName`` set to ``ralph/<slug of name>``.
    - ``.ralph-active`` is appended to ``<project_dir>/.gitignore`` unless already listed
      (the file is created if missing).

    A directory that already holds a loop (snarktank/ralph's ``prd.json`` + ``prompt.md`` +
    ``progress.txt``, seed 001's ``plan.md`` + ``progress.md``, or an earlier ``ralph init``)
    gets only what is missing: existing files are kept and listed in ``kept``, and no
    ``tasks.json`` is written beside another task list.  With ``force`` the scaffold files that
    exist are replaced, each first copied to ``<ralph_dir>/init-backup-<time>/`` (``backups``);
    a task list in another format is still kept.

    Raises :class:`ralph.errors.UsageError`, writing nothing, when ``project_dir`` is not an
    existing directory, ``ralph_dir`` is not a relative path inside the project, or ``name`` has
    no usable characters.  Checking for a git repository is :func:`check_repository`'s job.
    """
    project_dir = Path(project_dir)
    if not project_dir.exists():
        raise UsageError(f"project directory {project_dir} does not exist")
    if not project_dir.is_dir():
        raise UsageError(f"project directory {project_dir} is not a directory")
    project_dir = project_dir.resolve()

    rel = PurePosixPath(str(ralph_dir).replace("\\", "/"))
    if (
        not str(ralph_dir).strip()
        or rel.is_absolute()
        or Path(ralph_dir).is_absolute()
        or ".." in rel.parts
    ):
        raise UsageError(
            f"ralph directory {ralph_dir!r} must be a relative path inside the project (e.g. 'ralph')"
        )
    target_dir = project_dir / rel
    if target_dir.exists() and not target_dir.is_dir():
        raise UsageError(f"{target_dir} exists and is not a directory")
    refuse_second_loop(project_dir, rel.as_posix())

    if name is not None and not name.strip():
        name = None
    project_name = name.strip() if name is not None else project_dir.name
    branch_name: str | None = None
    if name is not None:
        slug = slugify(name)
        if not slug:
            raise UsageError(
                f"--name {name!r} has no letters or digits to build a branch name from"
            )
        branch_name = f"ralph/{slug}"

    existing = [fname for fname, _ in SCAFFOLD_FILES if (target_dir / fname).exists()]
    for fname in existing:
        if not (target_dir / fname).is_file():
            raise UsageError(f"{target_dir / fname} exists and is not a file: remove or rename it")
    own_list = _other_task_list(target_dir)
    progress_md = (target_dir / "progress.md").is_file() and not (target_dir / "progress.txt").exists()

    # -- compute everything first ------------------------------------------------------
    values = {
        "DATE": (today or date.today()).isoformat(),
        "PROJECT_NAME": project_name,
    }
    contents: dict[str, str] = {}
    kept: list[tuple[Path, str]] = []
    memory = _contradicting_memory(target_dir, project_dir)
    if memory:
        kept.append((target_dir / "CLAUDE.md", f"Claude Code reads it whenever the agent works in this folder, and it "
                     f"tells the agent to set passes: true itself ({memory}): runs here use policy skip-review "
                     "until you move it out of the folder"))
    for fname, template in SCAFFOLD_FILES:
        if fname == "tasks.json" and own_list is not None:
            kept.append((target_dir / own_list, "your task list: ralph reads it as it is, so no tasks.json was added beside it"))
            continue
        if fname == "progress.txt" and progress_md:
            kept.append((target_dir / "progress.md", "your progress log: the loop appends to it"))
            continue
        if fname in existing and not force:
            kept.append((target_dir / fname, "already there (--force replaces it, keeping a backup)"))
            continue
        text = template_text(template)
        if fname == "tasks.json":
            text = _render_tasks(text, project_name, branch_name)
        elif fname != "prompt.md":
            text = render(text, values)
        contents[fname] = text
    from ralph.lifecycle.adopt import FRANKBRIA, adopt

    adoption = adopt(project_dir, values["DATE"]) if own_list is None else None
    if adoption is not None:
        if adoption.tool == FRANKBRIA and rel.parts[:1] == (".ralph",):
            raise UsageError(
                f"{project_dir / '.ralph'} is ralph-claude-code's folder: ralph's loop goes into a folder of its own "
                "(plain `ralph init` makes ralph/ and takes over .ralph/fix_plan.md and PROMPT.md; nothing was written)"
            )
        if "prd.md" in contents and adoption.prd is not None:
            contents["prd.md"] = adoption.prd
        if "tasks.json" in contents:
            contents["tasks.json"] = adoption.tasks_text(contents["tasks.json"])

    gitignore = project_dir / ".gitignore"
    if gitignore.exists() and not gitignore.is_file():
        raise UsageError(f"{gitignore} exists and is not a file")
    for path in [*(target_dir / fname for fname, _ in SCAFFOLD_FILES), gitignore]:
        found = safeio.check(path, project_dir)
        if found is not None:
            raise UsageError(
                f"{found.rel} is {found.what}: `ralph init` never writes through one (it could land outside the "
                "project); replace it with a regular file or folder and run again (nothing was written)"
            )
    new_gitignore = _gitignore_with_entry(gitignore, project_dir)

    # -- then write (backups of replaced files first) ------------------------------------
    safeio.make_dirs(target_dir, project_dir)
    backups: list[tuple[Path, Path]] = []
    replacing = [fname for fname in contents if fname in existing]
    if replacing:
        backup_dir = _backup_dir(target_dir)
        safeio.make_dirs(backup_dir, project_dir)
        for fname in replacing:
            copy = backup_dir / fname
            safeio.write_bytes(copy, project_dir, safeio.read_bytes(target_dir / fname, project_dir))
            backups.append((target_dir / fname, copy))
    written: list[Path] = []
    overwritten: list[Path] = []
    for fname, _ in SCAFFOLD_FILES:
        if fname not in contents:
            continue
        path = target_dir / fname
        if fname in existing:
            overwritten.append(path)
        safeio.write_text(path, project_dir, contents[fname])
        written.append(path)
    if new_gitignore is not None:
        safeio.write_bytes(gitignore, project_dir, new_gitignore)

    final_branch = json.loads(contents["tasks.json"])["branchName"] if "tasks.json" in contents else None
    return InitResult(
        project_dir=project_dir,
        ralph_dir=target_dir,
        project_name=project_name,
        branch_name=final_branch,
        files_written=written,
        overwritten=overwritten,
        kept=kept,
        backups=backups,
        gitignore_changed=new_gitignore is not None,
        next_steps=_next_steps(rel.as_posix(), own_list or "tasks.json", adopted=adoption is not None),
        adopted_from=adoption.tool if adoption is not None else None,
        imported=adoption.report if adoption is not None else [],
        task_file=own_list or "tasks.json",
    )


def _contradicting_memory(target_dir: Path, project_dir: Path) -> str | None:
    """The first line of the folder's ``CLAUDE.md`` (snarktank's prompt for Claude Code) telling the agent
    to set ``passes: true`` itself, which ralph's review cycle forbids; None when there is none."""
    from ralph.loop.foreignprompt import instructions

    try:
        text = safeio.read_text(target_dir / "CLAUDE.md", project_dir)
    except (OSError, safeio.UnsafePath, UnicodeDecodeError, ValueError):
        return None
    found = instructions(text, "CLAUDE.md", ("reviewStatus", "reviewCount", "reviewFeedback"))
    return f"line {found[0].line}" if found else None


def _other_task_list(target_dir: Path) -> str | None:
    """The name of a task list in another format than tasks.json (prd.json, plan.md), if one is there."""
    if (target_dir / "tasks.json").exists():
        return None
    for name in TASK_LIST_FILES[1:]:
        if (target_dir / name).is_file():
            return name
    return None


def _backup_dir(target_dir: Path) -> Path:
    import time

    base = target_dir / f"init-backup-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def check_repository(project_dir: Path) -> None:
    """UsageError unless ``project_dir`` is inside a git repository.

    ``ralph init`` does not run ``git init`` for the user: a loop commits every iteration, so the
    repository (and where its root is) is a choice for the person, not a side effect.
    """
    import subprocess

    result = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir"], cwd=project_dir, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise UsageError(
            f"{project_dir} is not inside a git repository: ralph commits every iteration's work, so run "
            f"`git init` there first (nothing was written)"
        )


@contextmanager
def no_run_active(project_dir: Path) -> Iterator[None]:
    """Hold the project's run lock while init writes: a ``ralph run`` reads and checks these files the whole
    run (a change would be taken for its agent's), so init waits for no run and refuses while one is active.
    Also keeps a run from starting halfway through init's writes."""
    from ralph.errors import LockedError
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    lock = ProjectLock(git_dir(project_dir))
    try:
        lock.acquire()
    except LockedError:
        holder = lock.holder()
        who = f" (pid {holder.get('pid')}, started {holder.get('started')})" if holder.get("pid") else ""
        raise LockedError(
            f"a `ralph run` is active in {project_dir}{who}: it reads and checks the loop's files until it ends, "
            f"and a change now would be taken for its agent's; let it finish or stop it (Ctrl-C in its terminal, or "
            f"kill {holder.get('pid', '<pid>')}), then run `ralph init` again; nothing was written"
        ) from None
    try:
        yield
    finally:
        lock.release()


def refuse_nested_loop(project_dir: Path) -> None:
    """UsageError when a folder above ``project_dir``, up to its repository's top level, already holds
    a Ralph loop: a second loop inside that project would be a second source of truth, found or not
    depending on where ralph is run from.  Names the loop and the project."""
    from ralph.ralphfiles import loop_folders, repository_top

    top = repository_top(project_dir)
    if top is None or top == project_dir:
        return
    for directory in project_dir.parents:
        found = loop_folders(directory)
        if found:
            raise UsageError(
                f"{directory} already has a Ralph loop ({directory / found[0]}); {project_dir} is inside that "
                f"project, so ralph finds that loop from here: use it (run ralph from anywhere in the project), "
                f"or `ralph init -d {directory}` to complete it; nothing was written"
            )
        if directory == top:
            return


def refuse_second_loop(project_dir: Path, ralph_dir: str) -> None:
    """UsageError when ``project_dir`` already holds a loop in another folder than ``ralph_dir``: a
    second task list beside it would be run or not depending on which folder a command names.
    ``.ralph/PRD-N/`` folders are the one way to keep loops side by side (``ralph run --parallel``)."""
    from ralph.configfile import find_config_file
    from ralph.ralphfiles import holds_loop, loop_folders

    existing = loop_folders(project_dir)
    try:
        _, table = find_config_file(project_dir)
    except RalphError:
        table = {}
    configured = table.get("ralph_dir")
    if isinstance(configured, str) and configured.strip() and not Path(configured).is_absolute():
        configured = PurePosixPath(configured).as_posix()
        if configured not in existing and holds_loop(project_dir / configured):
            existing.append(configured)
    others = [folder for folder in existing if folder != ralph_dir]
    if not others:
        return
    if _PRD_FOLDER.fullmatch(ralph_dir) and all(_PRD_FOLDER.fullmatch(folder) for folder in others):
        return
    raise UsageError(
        f"{project_dir} already has a Ralph loop ({project_dir / others[0]}); a second one in {ralph_dir}/ would be "
        f"a second task list, run or not depending on which folder a command names: work in that loop "
        f"(`ralph init --ralph-dir {others[0]}` adds what it lacks; --force replaces its files, keeping a backup), "
        f"or keep loops side by side as .ralph/PRD-N/ folders (`ralph run --parallel`); nothing was written"
    )


_PRD_FOLDER = re.compile(r"\.ralph/PRD-[1-9][0-9]*")


def commit_init(project_dir: Path, result: InitResult) -> str:
    """Commit exactly what init wrote (and ``.gitignore``); returns the new commit's short hash."""
    from ralph.gitutil import commit_paths, git

    paths = list(result.files_written) + [copy for _, copy in result.backups]
    if result.gitignore_changed:
        paths.append(project_dir / ".gitignore")
    if not paths:
        raise UsageError("nothing to commit: ralph init wrote no file")
    error = commit_paths(project_dir, paths, f"ralph init: {result.project_name}")
    if error:
        raise UsageError(f"ralph init wrote its files but could not commit them: {error}")
    return git(project_dir, "rev-parse", "--short", "HEAD").stdout.strip()


def _render_tasks(text: str, project_name: str, branch_name: str | None) -> str:
    """The tasks.json template with ``project`` (and ``branchName``) filled in.

    Keeps the template's key order, 2-space indentation and a trailing newline.
    """
    data = json.loads(text)
    data["project"] = project_name
    if branch_name is not None:
        data["branchName"] = branch_name
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _gitignore_with_entry(gitignore: Path, project_dir: Path) -> bytes | None:
    """The new ``.gitignore`` content with ``.ralph-active`` appended, or None if already listed.

    Works on bytes so that whatever the file holds (any encoding, CRLF line ends) is kept
    exactly; the entry uses the file's line ending.
    """
    try:
        current = safeio.read_bytes(gitignore, project_dir)
    except FileNotFoundError:
        current = b""
    entry = GITIGNORE_ENTRY.encode()
    for line in current.splitlines():
        if line.strip() in (entry, b"/" + entry):
            return None
    newline = b"\r\n" if b"\r\n" in current else b"\n"
    if current and not current.endswith(b"\n"):
        current += newline
    return current + entry + newline


def next_steps(result: InitResult, committed: bool = False) -> list[str]:
    """What to do after ``ralph init`` (``committed``: ``--commit`` committed what it wrote), one item per step."""
    rel_dir = result.ralph_dir.relative_to(result.project_dir).as_posix()
    return _next_steps(rel_dir, result.task_file, adopted=result.adopted_from is not None, committed=committed)


def _next_steps(rel_dir: str, task_file: str = "tasks.json", adopted: bool = False, committed: bool = False) -> list[str]:
    """What to do after ``ralph init``, one item per step (``adopted``: prd.md and the stories were taken over;
    ``committed``: init's own files are committed, so only the person's edits are left to commit)."""
    if adopted:
        first = [
            f"Read {rel_dir}/prd.md and {rel_dir}/{task_file} (taken over, see above) and fix what the import got "
            "wrong; `ralph plan --check` checks the stories (`ralph plan` can rewrite them from prd.md).",
        ]
    else:
        first = [
            f"Edit {rel_dir}/prd.md: describe what to build and why, the goals and non-goals, "
            "the technical design and the constraints every story must respect.",
            f"Create the stories: run `ralph plan` (or `/ralph-plan` inside Claude Code), or fill "
            f"{rel_dir}/{task_file} by hand. Every story needs acceptance criteria; `ralph plan --check` checks them.",
        ]
    return [
        *first,
        f"Optionally list the checks the loop runs after each iteration (tests, lint, "
        f"typecheck) in `verifyCommands` in {rel_dir}/{task_file}.",
        (f"Commit your edits: `git add {rel_dir} && git commit -m \"ralph: plan\"` (what init wrote is committed "
         "already; `ralph run` starts only on a clean working tree)." if committed else
         f"Commit: `git add {rel_dir} .gitignore && git commit -m \"ralph: plan\"` "
         "(`ralph run` starts only on a clean working tree; `ralph init --commit` commits what init wrote)."),
        "Preview with `ralph run --dry-run`, then start the loop with `ralph run`.",
    ]
