"""Planning: story-id rules, ``--prd N`` folders, ``ralph plan --check`` and the ``ralph plan`` launcher.

- :func:`story_id_problem` is the one story-id rule every store applies.
- :func:`prd_dir` maps ``--prd N`` to ``<project>/.ralph/PRD-N/`` (seed 001).
- :func:`check_task_list` finds sizing and dependency problems without an agent:
  dependency cycles (:func:`ralph.tasks.find_cycles`), unknown or self ``dependsOn``, stories without verifiable
  acceptance criteria, oversized stories, duplicate or malformed ids.
- :func:`plan_command` builds the ``claude`` command line of ``ralph plan``: the
  exported plugin bundle via ``--plugin-dir`` and a first prompt that invokes the
  ralph-plan skill in Mode 1 (prd.md is still the template) or Mode 2.

Stdlib only at import time.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ralph.errors import UsageError
from ralph.ralphfiles import STORY_ID_PATTERN, story_id_problem
from ralph.wording import counted

if TYPE_CHECKING:
    from ralph.contracts import TaskStore
    from ralph.tasks import TaskList

__all__ = [
    "STORY_ID_PATTERN",
    "Problem",
    "check_task_list",
    "load_task_list",
    "plan_command",
    "plan_mode",
    "prd_dir",
    "prd_is_template",
    "story_id_problem",
]

# -- PRD-N folders (seed 001) -------------------------------------------------------------

PRD_ROOT = ".ralph"
_PRD_NUMBER = re.compile(r"[1-9][0-9]{0,5}")


def prd_dir(project_dir: Path, n: int | str, must_exist: bool = False) -> Path:
    """``<project_dir>/.ralph/PRD-<n>/`` for ``--prd N``.

    ``n`` must be a positive integer (an ``int``, or a string of digits without a
    leading zero, at most 6 digits): anything else (``0``, ``-1``, ``../x``, ``1/2``,
    ``01``) raises :class:`UsageError`, so the path can never leave ``.ralph/``.  With
    ``must_exist`` a missing folder raises UsageError listing the PRD folders that exist.
    """
    if isinstance(n, bool) or not isinstance(n, (int, str)):
        raise UsageError(f"--prd must be a positive integer (1 for .ralph/PRD-1/), got {n!r}")
    text = str(n).strip() if isinstance(n, str) else str(n)
    if not _PRD_NUMBER.fullmatch(text):
        raise UsageError(f"--prd must be a positive integer (1 for .ralph/PRD-1/), got {n!r}")
    path = Path(project_dir) / PRD_ROOT / f"PRD-{text}"
    if must_exist and not path.is_dir():
        root = Path(project_dir) / PRD_ROOT
        found = sorted(
            (p.name for p in root.glob("PRD-*") if p.is_dir() and _PRD_NUMBER.fullmatch(p.name[4:])),
            key=lambda name: int(name[4:]),
        ) if root.is_dir() else []
        have = f"existing: {', '.join(found)}" if found else f"there is no PRD folder under {root}"
        raise UsageError(f"{path} does not exist ({have}); create it with prd.md and plan.md first")
    return path


# -- loading a task list ------------------------------------------------------------------


def load_task_list(store: TaskStore, path: Path) -> TaskList:
    """Read and parse ``path`` with ``store`` (TaskListError names the file)."""
    from ralph.errors import TaskListError

    from ralph.tasks import read_task_text

    try:
        raw = read_task_text(path)
    except FileNotFoundError:
        raise TaskListError(f"{path} does not exist") from None
    return store.parse(raw, path)


# -- ralph plan --check ---------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One finding of ``ralph plan --check``."""

    severity: str  # "error" or "warning"
    story_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.story_id}: " if self.story_id else ""
        return f"{self.severity}: {where}{self.message}"


VAGUE_CRITERIA = re.compile(
    r"^(?:it |this |the (?:feature|story|code|change) )?(?:should )?"
    r"(?:works?|is (?:done|implemented|complete|finished)|done|implemented|complete|"
    r"works? (?:correctly|properly|as expected|well|fine)|functions? (?:correctly|properly)|"
    r"as expected|looks? good|tbd|todo|tests? pass(?:es)?|everything works|no bugs)\.?$",
    re.IGNORECASE,
)
MAX_CRITERIA = 8
MAX_DESCRIPTION_SENTENCES = 4
MAX_DESCRIPTION_CHARS = 700


def check_task_list(
    tasks: TaskList, max_iterations: int | None = None, uses_review: bool = True, story_fields: Iterable[str] = ()
) -> list[Problem]:
    """Sizing and dependency problems of ``tasks`` (errors first, in story order), and keys that
    look like a misspelt key ralph reads (``story_fields``: a policy's own story fields, not typos)."""
    from ralph.tasks import find_cycles, misspelt_keys, structural_problems

    problems: list[Problem] = [Problem("warning", None, line) for line in misspelt_keys(tasks, story_fields)]
    stories = tasks.userStories
    if not stories:
        problems.append(Problem("error", None, "the task list has no stories"))
    known = {story.id for story in stories}
    for story_id, message in structural_problems(tasks):
        problems.append(Problem("error", story_id, message))
    for story in stories:
        bad_id = story_id_problem(story.id)
        if bad_id:
            problems.append(Problem("error", story.id, bad_id))
        if not story.title.strip():
            problems.append(Problem("error", story.id, "title is empty: say in a few words what the story delivers"))
        for dep in story.dependsOn:
            if dep == story.id:
                problems.append(Problem("error", story.id, "dependsOn lists the story itself"))
            elif dep not in known:
                problems.append(
                    Problem("error", story.id, f"dependsOn names {dep!r}, which is not a story in this task list")
                )
        problems += _criteria_problems(story)
        problems += _sizing_problems(story)
    for cycle in find_cycles({s.id: [d for d in s.dependsOn if d in known and d != s.id] for s in stories}):
        problems.append(
            Problem(
                "error",
                cycle[0],
                "dependency cycle: " + " -> ".join([*cycle, cycle[0]]) + " (none of these can ever be selected)",
            )
        )
    problems += _order_problems(tasks)
    if not tasks.verifyCommands:
        problems.append(
            Problem("warning", None, "verifyCommands is empty: list the test/lint/typecheck commands every iteration runs")
        )
    if max_iterations is not None:
        open_stories = sum(1 for s in stories if not s.passes)
        per_story = 2 if uses_review else 1
        needed = open_stories * per_story
        if needed > max_iterations:
            problems.append(
                Problem(
                    "warning",
                    None,
                    f"{counted(open_stories, 'open story', 'open stories')} {'needs' if open_stories == 1 else 'need'} at least {counted(needed, 'iteration')} "
                    f"({'implement + review each' if uses_review else 'one each'}), "
                    f"more than max_iterations={max_iterations}: raise --max-iterations",
                )
            )
    problems.sort(key=lambda p: p.severity != "error")
    return problems


def _criteria_problems(story: Any) -> list[Problem]:
    out: list[Problem] = []
    if not story.acceptanceCriteria:
        out.append(Problem("error", story.id, "no acceptance criteria: add at least one a reviewer can check"))
        return out
    title = _normal(story.title)
    for index, criterion in enumerate(story.acceptanceCriteria, 1):
        text = criterion.strip()
        if not text:
            out.append(Problem("error", story.id, f"acceptance criterion {index} is empty"))
        elif VAGUE_CRITERIA.match(text):
            out.append(
                Problem(
                    "error",
                    story.id,
                    f"acceptance criterion {index} is not verifiable: {text!r}; say what a reviewer can "
                    "observe (e.g. 'Filter dropdown has options: All, Active, Done')",
                )
            )
        elif title and _normal(text) == title:
            out.append(
                Problem(
                    "error",
                    story.id,
                    f"acceptance criterion {index} only repeats the title: list observable outcomes instead",
                )
            )
    return out


def _sizing_problems(story: Any) -> list[Problem]:
    out: list[Problem] = []
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", story.description.strip()) if s]
    if len(sentences) > MAX_DESCRIPTION_SENTENCES or len(story.description) > MAX_DESCRIPTION_CHARS:
        out.append(
            Problem(
                "warning",
                story.id,
                f"description has {len(sentences)} sentences / {len(story.description)} characters: a story one "
                "iteration can finish fits in 2-3 sentences; split it",
            )
        )
    if len(story.acceptanceCriteria) > MAX_CRITERIA:
        out.append(
            Problem(
                "warning",
                story.id,
                f"{len(story.acceptanceCriteria)} acceptance criteria (more than {MAX_CRITERIA}): "
                "probably too big for one iteration; split it",
            )
        )
    return out


def _order_problems(tasks: TaskList) -> list[Problem]:
    """A story ahead of (better priority than) a story it depends on."""
    by_id = {s.id: s for s in tasks.userStories}
    out = []
    for story in tasks.userStories:
        for dep in story.dependsOn:
            other = by_id.get(dep)
            if other is not None and other is not story and other.priority > story.priority:
                out.append(
                    Problem(
                        "warning",
                        story.id,
                        f"priority {story.priority:g} comes before its dependency {dep} (priority "
                        f"{other.priority:g}): give {dep} the smaller number so the order reads as it runs",
                    )
                )
    return out


def _normal(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text).strip().lower()


# -- ralph plan (interactive) ------------------------------------------------------------------

_TOKEN = re.compile(r"\\\{\\\{[A-Za-z_][A-Za-z0-9_]*\\\}\\\}")


def _template_line_patterns() -> list[re.Pattern[str]]:
    from ralph.templates import template_text

    patterns = []
    for line in _without_comments(template_text("prd.md")).splitlines():
        line = line.strip()
        if line:
            patterns.append(re.compile(_TOKEN.sub(".*", re.escape(line))))
    return patterns


def _without_comments(text: str) -> str:
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def prd_is_template(text: str) -> bool:
    """True when ``text`` has nothing beyond the prd.md scaffold (headings, comments, placeholders).

    A line counts as written content unless it is blank, inside an HTML comment, or a
    line of the shipped template (with ``{{TOKENS}}`` matching anything).  Deleting
    sections keeps a file "template"; writing one real sentence makes it content.
    """
    patterns = _template_line_patterns()
    for line in _without_comments(text).splitlines():
        line = line.strip()
        if line and not any(p.fullmatch(line) for p in patterns):
            return False
    return True


def plan_mode(ralph_dir: Path) -> int:
    """1 (full planning) when prd.md is missing, empty or still the template; else 2."""
    prd = ralph_dir / "prd.md"
    try:
        text = prd.read_text(encoding="utf-8")
    except FileNotFoundError:
        return 1
    return 1 if prd_is_template(text) else 2


def plan_prompt(mode: int, ralph_rel: str, task_file: str = "tasks.json") -> str:
    """The first message of the ``ralph plan`` session: invoke the skill in ``mode``."""
    if mode == 1:
        how = (
            f"Mode 1 (full planning): {ralph_rel}/prd.md is still the template. Ask me clarifying "
            f"questions until the requirements are clear, then write {ralph_rel}/prd.md and derive "
            f"{ralph_rel}/{task_file}."
        )
    else:
        how = (
            f"Mode 2 (task derivation): {ralph_rel}/prd.md already describes the feature. Read it, ask "
            f"only where it is ambiguous, and derive {ralph_rel}/{task_file}; do not rewrite prd.md."
        )
    return (
        f"/ralph:ralph-plan {how} The ralph directory is {ralph_rel}/. When done, check the task list "
        f"with `ralph plan --check`."
    )


def plan_command(
    binary: Path | str,
    plugin_dir: Path,
    project_dir: Path,
    ralph_dir: Path,
    model: str | None = None,
    task_file: str = "tasks.json",
) -> list[str]:
    """The interactive ``claude`` command line of ``ralph plan``.

    ``claude --plugin-dir <bundle>/ralph [--model M] "<prompt invoking /ralph:ralph-plan>"``;
    no ``-p``: the session is interactive.
    """
    try:
        ralph_rel = ralph_dir.resolve().relative_to(project_dir.resolve()).as_posix()
    except ValueError:
        ralph_rel = str(ralph_dir)
    argv = [str(binary), "--plugin-dir", str(plugin_dir)]
    if model:
        argv += ["--model", model]
    argv.append(plan_prompt(plan_mode(ralph_dir), ralph_rel, task_file))
    return argv


def run_plan_session(
    project_dir: Path,
    ralph_dir: Path,
    model: str | None = None,
    binary: str | None = None,
    echo: Any = print,
    dry_run: bool = False,
) -> int:
    """Export the plugin bundle to a temporary directory and start ``claude`` there, interactively."""
    import subprocess
    import tempfile

    from ralph.hooks.bundle import PLUGIN_DIR, export_bundle
    from ralph.errors import UnavailableError
    from ralph.claude_cli import CLAUDE_CLI, path_outside, resolve_binary

    if not ralph_dir.is_dir():
        raise UsageError(f"{ralph_dir} does not exist: run `ralph init` first")
    environ = {**os.environ, "PATH": path_outside(os.environ.get("PATH", os.defpath), project_dir)}
    path, source = resolve_binary(binary, environ)
    refused = CLAUDE_CLI.refusal(path, source, project_dir) if path is not None else None
    if refused:  # never a program the agent could have written
        raise UnavailableError(refused)
    if path is None:
        raise UnavailableError(
            "the Claude Code CLI was not found (tried --binary, $RALPH_CLAUDE_BINARY, claude on PATH, "
            "the claude-agent-sdk wheel): install it (pip install claude-agent-sdk)"
        )
    mode = plan_mode(ralph_dir)
    if dry_run:
        # the printed command must still work after ralph exits: the bundle goes to the state
        # directory (outside the project, replaced on each --print-command), not a temporary one
        import shlex

        from ralph import __version__
        from ralph.loop.rundir import check_state_root

        bundle = check_state_root() / "plugin-bundle" / __version__
        export_bundle(bundle, force=True, python=sys.executable)  # this machine's ralph, found without PATH
        argv = plan_command(path, bundle / PLUGIN_DIR, project_dir, ralph_dir, model)
        echo(
            f"ralph plan: Mode {mode} ({'full planning' if mode == 1 else 'task derivation'}), claude from {source}; "
            f"plugin bundle kept in {bundle}"
        )
        echo(shlex.join(argv))
        return 0
    with tempfile.TemporaryDirectory(prefix="ralph-plan-") as tmp:
        export_bundle(Path(tmp), python=sys.executable)
        argv = plan_command(path, Path(tmp) / PLUGIN_DIR, project_dir, ralph_dir, model)
        echo(f"ralph plan: Mode {mode} ({'full planning' if mode == 1 else 'task derivation'}), claude from {source}")
        return subprocess.run(argv, cwd=project_dir).returncode


def describe(problems: Iterable[Problem]) -> list[str]:
    return [str(problem) for problem in problems]
