"""What ``ralph run`` settles before iteration 1, beyond the schema: the task-list graph, the
prompt to use, the story a ``--story`` run is limited to, and the branch the loop works on.

Each function raises a :class:`ralph.errors.RalphError` (exit 2) naming the file, the stories
and the fix; none of them writes to the project except :func:`checkout_work_branch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from ralph.agenttext import quote
from ralph.errors import TaskListError, UsageError
from ralph.tasks import TaskList

if TYPE_CHECKING:
    from ralph.contracts import Check, Policy

__all__ = [
    "BUILTIN_PROMPT_NOTE",
    "input_warnings",
    "policy_story_fields",
    "archive_failure_branches",
    "PromptSource",
    "checkout_work_branch",
    "graph_errors",
    "load_prompt",
    "only_story_scope",
    "check_only_story",
    "seed_tokens",
    "unselectable_reason",
]

BUILTIN_PROMPT_NOTE = "no prompt.md in {dir}: using ralph's built-in prompt (`ralph init --ralph-dir {dir}` adds a copy to edit)"
"""The note shown when a ralph directory has no prompt.md (``{dir}``: the directory)."""


# -- the task-list graph ------------------------------------------------------------------------


def graph_errors(tasks: TaskList) -> list[str]:
    """Duplicate ids, ``dependsOn`` naming unknown stories, and dependency cycles (each printed)."""
    from ralph.tasks import find_cycles

    errors: list[str] = []
    seen: dict[str, int] = {}
    for story in tasks.userStories:
        seen[story.id] = seen.get(story.id, 0) + 1
    for story_id, count in seen.items():
        if count > 1:
            errors.append(f"story id {story_id!r} is used by {count} stories: give each story its own id")
    for story in tasks.userStories:
        for dep in story.dependsOn:
            if dep == story.id:
                errors.append(f"{story.id} depends on itself (dependsOn lists {dep!r}): remove it")
            elif dep not in seen:
                errors.append(f"{story.id} depends on {dep!r}, which is not a story in this task list: fix dependsOn")
    graph = {s.id: [d for d in s.dependsOn if d in seen and d != s.id] for s in tasks.userStories}
    for cycle in find_cycles(graph):
        errors.append(
            "dependency cycle: " + " -> ".join([*cycle, cycle[0]]) + " (none of these stories can ever start): "
            "remove one of these dependsOn entries"
        )
    return errors


def unselectable_reason(tasks: TaskList, policy: Policy | bool) -> str:
    """Why no story can be selected, for a person (never empty): the policy's own explanation.

    A bool (the older form) stands for the shipped policies: True for ``review``, False for ``skip-review``.
    """
    if isinstance(policy, bool):
        from ralph.config import RalphConfig
        from ralph.plugin.manager import PluginHost
        from ralph.settings import Settings

        chosen = PluginHost().policies.get("review" if policy else "skip-review")
        return chosen(Settings(project_dir=Path.cwd(), config=RalphConfig())).unselectable_reason(tasks)
    return policy.unselectable_reason(tasks)


def input_warnings(tasks: TaskList, tasks_path: Path, project_dir: Path, policy: Policy) -> list[Check]:
    """What is wrong in the person's files without stopping the run, as warnings: task-list keys
    that look like a misspelt key ralph reads (``depends_on``, ``prority``, ``verifyCommand``)."""
    from ralph.contracts import Check
    from ralph.loop.prompt import relative_dir
    from ralph.tasks import misspelt_keys

    shown = relative_dir(tasks_path, project_dir)
    return [
        Check(None, f"{shown}: {line}", f"rename the key in {shown} (ralph ignores it as it is)")
        for line in misspelt_keys(tasks, policy_story_fields(policy))
    ]


def policy_story_fields(policy: Policy) -> list[str]:
    """The story fields ``policy`` reads besides ralph's: its state fields and the fields its modes may set."""
    return [*policy.state_fields, *(name for rules in (policy.table or {}).values() for name in rules.fields)]


# -- the prompt ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptSource:
    """The prompt template of a run and where it came from."""

    text: str
    builtin: bool
    """True when the ralph directory has no prompt.md and ralph's shipped prompt is used."""


def load_prompt(ralph_dir: Path, progress_name: str) -> PromptSource:
    """``<ralph_dir>/prompt.md``, or ralph's built-in prompt when the folder has none.

    The built-in prompt names ``progress.txt``; where the loop's progress log is
    ``progress.md`` (seed 001's PRD folders) it names that file instead.
    """
    from ralph.templates import template_text

    path = ralph_dir / "prompt.md"
    if path.is_file():
        from ralph.tasks import read_task_text

        try:
            return PromptSource(read_task_text(path), builtin=False)
        except TaskListError as exc:
            raise UsageError(str(exc).replace("task-list file", "prompt file")) from None
    if path.exists():
        raise UsageError(f"{path} is not a file: remove or rename it")
    text = template_text("prompt.md")
    if progress_name != "progress.txt":
        text = text.replace("progress.txt", progress_name)
    return PromptSource(text, builtin=True)


def check_prd(prompt: PromptSource, ralph_dir: Path, project_dir: Path) -> None:
    """UsageError when the folder's own prompt tells the agent to read ``prd.md`` and there is none
    (seed 004: the loop checks its files before iteration 1); the message names the fixes.

    A folder run with the built-in prompt (an adopted one without a ``prompt.md``, such as
    snarktank's ``prd.json``) may go without: its task list is the whole spec (docs/migrating.md)."""
    path = ralph_dir / "prd.md"
    if prompt.builtin or "prd.md" not in prompt.text or path.is_file():
        return
    from ralph.loop.prompt import relative_dir

    shown = relative_dir(path, project_dir)
    if path.exists() or path.is_symlink():
        raise UsageError(f"{shown} is not a regular file, and the prompt tells the agent to read it: replace it "
                         "with the PRD (nothing was started)")
    raise UsageError(
        f"{shown} is missing, and the prompt tells the agent to read it: restore it (`git checkout HEAD -- {shown}` "
        f"if it was committed) or write one (`ralph init` adds the template, nothing else), then commit it "
        "(nothing was started)"
    )


def seed_tokens(
    story_id: str | None, tasks: TaskList, tasks_path: Path, progress_path: Path, ralph_dir: Path
) -> dict[str, str]:
    """Seed 001's prompt tokens: ``{{STORY_ID}}``, ``{{STORY_TITLE}}`` (a JSON string), ``{{PLAN_PATH}}``,
    ``{{PROGRESS_PATH}}`` (absolute paths) and ``{{PRD_NUMBER}}`` (N of ``.ralph/PRD-N``, else empty)."""
    story = tasks.story(story_id or "")
    match = re.fullmatch(r"PRD-(\d+)", ralph_dir.name)
    return {
        "STORY_ID": story_id or "",
        # the title is task-list text (a split lets the agent write it): quoted, so it never starts a line
        "STORY_TITLE": quote(story.title, 300) if story is not None else "",
        "PLAN_PATH": str(tasks_path),
        "PROGRESS_PATH": str(progress_path),
        "PRD_NUMBER": match.group(1) if match else "",
    }


# -- ralph run --story ID --------------------------------------------------------------------------


def check_only_story(tasks: TaskList, story_id: str, tasks_path: Path) -> None:
    """UsageError unless ``story_id`` exists, is not failed, and every story it depends on is done."""
    story = tasks.story(story_id)
    if story is None:
        known = ", ".join(s.id for s in tasks.userStories[:20]) or "none"
        raise UsageError(f"--story {story_id}: no such story in {tasks_path} (stories: {known})")
    if story.failed:
        raise UsageError(
            f"--story {story_id}: the story is marked failed ({story.failureReason or 'no reason recorded'}); "
            f"set \"failed\": false in {tasks_path.name} to try it again"
        )
    done = {s.id for s in tasks.userStories if s.done}
    missing = [dep for dep in story.dependsOn if dep not in done]
    if missing:
        raise UsageError(
            f"--story {story_id}: it depends on {', '.join(missing)}, not done yet; run "
            + (f"`ralph run --story {missing[0]}` first" if len(missing) == 1 else "those first")
            + " (or plain `ralph run`)"
        )


def only_story_scope(tasks: TaskList, story_id: str | None) -> TaskList:
    """The task list as a policy should see it for a ``--story`` run: that story alone.

    Its ``dependsOn`` is dropped (they were checked done before the run), so the policy's
    readiness rule does not treat them as unknown stories.
    """
    if story_id is None:
        return tasks
    story = tasks.story(story_id)
    if story is None:
        return tasks.model_copy(update={"userStories": []})
    return tasks.model_copy(update={"userStories": [story.model_copy(update={"dependsOn": []})]})


# -- the branch ---------------------------------------------------------------------------------------


def work_branch_plan(project_dir: Path, branch: str) -> tuple[str, str] | None:
    """(action, description) to get onto ``branch``, or None when nothing is to be done.

    Nothing is done when ``branch`` is empty, already checked out, or when the project is a
    linked worktree (``ralph run --parallel`` and hand-made worktrees choose their branch
    deliberately).  ``action`` is ``checkout`` (the branch exists) or ``create`` (from HEAD).
    """
    from ralph.gitutil import current_branch, git

    branch = branch.strip()
    if not branch or _linked_worktree(project_dir):
        return None
    current = current_branch(project_dir)
    if current == branch:
        return None
    valid = git(project_dir, "check-ref-format", "--branch", branch, check=False)
    if valid.returncode != 0:
        raise UsageError(f"branchName {branch!r} in the task list is not a valid git branch name: fix branchName")
    exists = git(project_dir, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False).returncode == 0
    here = current or "the detached HEAD"
    if exists:
        return "checkout", f"switching from {here} to the task list's branch {branch}"
    return "create", f"creating the task list's branch {branch} from {here} and switching to it"


def checkout_work_branch(project_dir: Path, branch: str, tasks_path: Path) -> str | None:
    """Get onto the task list's ``branchName`` (see :func:`work_branch_plan`); returns what was done.

    The working tree is clean when this runs (the loop checked), so switching loses nothing; an
    existing branch without the task list is switched back and refused.
    """
    from ralph.gitutil import current_branch, git, head

    plan = work_branch_plan(project_dir, branch)
    if plan is None:
        return None
    action, description = plan
    before = current_branch(project_dir) or head(project_dir)
    args = ["checkout", "-q", branch] if action == "checkout" else ["checkout", "-q", "-b", branch]
    result = git(project_dir, *args, check=False)
    if result.returncode != 0:
        raise UsageError(f"could not switch to branchName {branch!r}: {result.stderr.strip()}")
    if not tasks_path.is_file() and before:
        git(project_dir, "checkout", "-q", before, check=False)
        raise UsageError(
            f"branch {branch} (branchName of the task list) has no {tasks_path.name}; stayed on {before}: "
            f"merge your ralph directory into {branch}, or change branchName"
        )
    return description


# -- failure branches of earlier runs ------------------------------------------------------------------

FAIL_PREFIX = "wip/ralph-fail-"
ARCHIVE_PREFIX = "wip/archive/"


def _linked_worktree(project_dir: Path) -> bool:
    from ralph.gitutil import git

    paths = git(project_dir, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir", check=False)
    dirs = paths.stdout.split()
    return paths.returncode == 0 and len(dirs) == 2 and Path(dirs[0]) != Path(dirs[1])


def archive_failure_branches(project_dir: Path) -> list[tuple[str, str]]:
    """Rename the ``wip/ralph-fail-*`` branches earlier runs left to ``wip/archive/ralph-fail-*``.

    Never deletes: the work stays reachable under the new name (an existing archive name gets a
    ``-2``, ``-3`` ... suffix).  Skipped in a linked worktree, whose loops share the branches with
    the main one.  Returns (old, new) per renamed branch.
    """
    from ralph.gitutil import git

    if _linked_worktree(project_dir):
        return []
    listed = git(project_dir, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{FAIL_PREFIX}*", check=False)
    renamed: list[tuple[str, str]] = []
    for old in listed.stdout.split():
        target = ARCHIVE_PREFIX + old.removeprefix("wip/")
        candidate, n = target, 1
        while git(project_dir, "rev-parse", "--verify", "-q", f"refs/heads/{candidate}", check=False).returncode == 0:
            n += 1
            candidate = f"{target}-{n}"
        if git(project_dir, "branch", "-m", old, candidate, check=False).returncode == 0:
            renamed.append((old, candidate))
    return renamed
