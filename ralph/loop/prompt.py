"""Render one iteration's prompt: the project's prompt.md for this mode, plus the loop's own section.

A template may mark parts that apply only to some iterations::

    <!-- ralph:if review review-fix -->
    ...only in review and review-fix iterations...
    <!-- ralph:end -->

A block is kept when one of its names applies: the iteration's mode (``implement``,
``review``, ``review-fix``) or the run's review setting (``with-review``, ``skip-review``).
Blocks nest (a nested block needs its own name to apply too).  ``<!-- ralph:note ... -->``
comments are dropped.  A template without any ``ralph:`` marker is sent as it is, so a
project's own ``prompt.md`` written for all three modes keeps working unchanged.

The loop's section (``## This iteration``) carries the policy's instructions, the selected
story as JSON and the recent part of the progress log, so an iteration need not read a
large task list or log to start.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.agenttext import fence_for, indent_continuation, one_line, safe_data, strip_controls
from ralph.contracts import Policy, Selection
from ralph.errors import UsageError
from ralph.tasks import TaskList
from ralph.templates import render

if TYPE_CHECKING:
    from ralph.loop.records import IterationRecord
    from ralph.settings import Settings

THIS_ITERATION_HEADING = "## This iteration (set by the loop — authoritative)"
SECTION_NAMES = frozenset({"implement", "review", "review-fix", "with-review", "skip-review"})
"""Names a ``<!-- ralph:if ... -->`` block may use."""

_IF = re.compile(r"^\s*<!--\s*ralph:if\s+(?P<names>[^>]*?)\s*-->\s*$")
_END = re.compile(r"^\s*<!--\s*ralph:end\s*-->\s*$")
_NOTE = re.compile(r"^\s*<!--\s*ralph:note\b")
_ANY_MARKER = re.compile(r"<!--\s*ralph:")
_INTERNAL_FIELDS = ("failed", "failureReason", "waiting")


def active_names(mode: str, skip_review: bool) -> frozenset[str]:
    """The section names that apply to an iteration in ``mode``."""
    return frozenset({mode, "skip-review" if skip_review else "with-review"})


def select_sections(template: str, active: frozenset[str] | set[str], source: str = "prompt.md") -> str:
    """Keep the marked blocks of ``template`` that apply to ``active``, drop the rest and the markers.

    Raises :class:`UsageError` naming ``source`` and the line for an unknown name, an
    ``end`` without ``if``, or a block left open.
    """
    if not _ANY_MARKER.search(template):
        return template
    kept: list[str] = []
    stack: list[tuple[bool, int]] = []
    in_note = False
    for number, line in enumerate(template.splitlines(keepends=True), 1):
        if in_note:
            in_note = "-->" not in line
            continue
        if _NOTE.match(line):
            in_note = "-->" not in line.split("ralph:note", 1)[1]
            continue
        opened = _IF.match(line)
        if opened:
            names = set(opened.group("names").split())
            unknown = sorted(names - SECTION_NAMES)
            if unknown or not names:
                raise UsageError(
                    f"{source} line {number}: unknown section name {', '.join(unknown) or '(none)'} in "
                    f"`ralph:if`; use {', '.join(sorted(SECTION_NAMES))}"
                )
            stack.append((bool(names & active), number))
            continue
        if _END.match(line):
            if not stack:
                raise UsageError(f"{source} line {number}: `<!-- ralph:end -->` without an open `ralph:if` block")
            stack.pop()
            continue
        if _ANY_MARKER.search(line):
            raise UsageError(
                f"{source} line {number}: not a valid `ralph:` marker; markers are `<!-- ralph:if NAME ... -->`, "
                "`<!-- ralph:end -->` and `<!-- ralph:note ... -->`, each alone on its line"
            )
        if all(keep for keep, _ in stack):
            kept.append(line)
    if in_note:
        raise UsageError(f"{source}: a `<!-- ralph:note` comment is never closed with `-->`")
    if stack:
        raise UsageError(f"{source} line {stack[-1][1]}: `ralph:if` block is never closed with `<!-- ralph:end -->`")
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def check_template(template: str, source: str = "prompt.md") -> None:
    """Raise :class:`UsageError` when the template's section markers are malformed."""
    select_sections(template, frozenset(), source)


def story_json(tasks: TaskList, story_id: str | None) -> str:
    """The selected story as the task list holds it (the loop's own bookkeeping fields left out)."""
    story = tasks.story(story_id or "")
    if story is None:
        return ""
    data = story.model_dump(mode="json")
    for name in _INTERNAL_FIELDS:
        if not data.get(name):
            data.pop(name, None)
    # one field per line: readable, and about 15% smaller than indent=2 for list-valued fields
    fields = [f"  {json.dumps(key)}: {json.dumps(safe_data(value), ensure_ascii=False)}" for key, value in data.items()]
    return "{\n" + ",\n".join(fields) + "\n}"


def render_prompt(
    template: str,
    *,
    iteration: int,
    max_iterations: int,
    ralph_dir: str,
    review_cap: int,
    skip_review: bool,
    policy: Policy,
    selection: Selection,
    tasks: TaskList,
    feedback: list[str],
    tasks_file: str = "",
    progress: str = "",
    progress_file: str = "",
    progress_archive: str = "",
    person: list[str] | None = None,
) -> str:
    """This mode's part of the template with its tokens filled in, then the loop's section.

    ``person`` holds the loop's own text about the person in the loop (how to ask a person, a
    person's answers: :mod:`ralph.loop.parking`), its first item a line of the section's list, the
    others blocks after the story.

    ``progress`` is the excerpt of the progress log to quote (see
    :func:`ralph.loop.progresslog.excerpt`); ``progress_file`` and ``progress_archive`` name the log
    and its archive for the agent.
    """
    sections = select_sections(template, active_names(selection.mode, skip_review))
    body = render(
        sections,
        {
            "RALPH_ITERATION": str(iteration),
            "RALPH_MAX_ITERATIONS": str(max_iterations),
            "RALPH_DIR": ralph_dir,
            "RALPH_REVIEW_CAP": str(review_cap),
            "RALPH_SKIP_REVIEW": "true" if skip_review else "false",
        },
    )
    parts = [body.rstrip(), "", THIS_ITERATION_HEADING, "", policy.prompt_section(selection, tasks)]
    if tasks_file and not tasks_file.endswith("/tasks.json"):
        parts.append(
            f"- Task list: `{tasks_file}` (this project's format; wherever this prompt says tasks.json, "
            "it means this file)"
        )
    if tasks.verifyCommands:
        parts.append("- verifyCommands: " + ", ".join(f"`{one_line(command)}`" for command in tasks.verifyCommands))
    hint, *blocks = person or [""]
    if hint:
        parts.append(hint)
    story = story_json(tasks, selection.story_id)
    if story:
        fence = fence_for(story)  # a value holding backticks cannot close it
        parts += ["", f"### The story, as in `{tasks_file or ralph_dir + '/tasks.json'}`", "", fence + "json", story, fence]
    parts += [item for block in blocks if block for item in ("", block)]
    if progress:
        where = f"`{progress_file}`" if progress_file else "the progress log"
        older = f"; older entries are in `{progress_archive}`" if progress_archive else ""
        progress = strip_controls(progress)
        fence = fence_for(progress)
        parts += ["", f"### Progress log: Codebase Patterns and recent entries (from {where}{older})", "",
                  fence + "text", progress, fence]  # fmt: skip
    if feedback:
        parts += ["", "### Feedback from the loop about the previous iteration", ""]
        # an item's own lines never start at the margin: only the loop's bullets do (agent text inside is quoted)
        parts += [f"- {indent_continuation(strip_controls(item))}" for item in feedback]
    return "\n".join(parts) + "\n"


def render_iteration(
    template: str,
    settings: Settings,
    policy: Policy,
    tasks_path: Path,
    iteration: int,
    selection: Selection,
    tasks: TaskList,
    feedback: list[str],
    person: list[str] | None = None,
) -> str:
    """The prompt of ``iteration``: ``template`` with seed 001's tokens filled in, and the loop's section
    (``person``: see :func:`render_prompt`)."""
    from ralph.loop import progresslog
    from ralph.loop.start import seed_tokens
    from ralph.ralphfiles import progress_log
    from ralph.safeio import root_for

    config, project_dir, ralph_dir = settings.config, settings.project_dir, settings.ralph_dir
    progress = progress_log(ralph_dir)
    tokens = seed_tokens(selection.story_id, tasks, tasks_path, progress, ralph_dir)
    archive = progresslog.archive_path(progress)
    return render_prompt(
        render(template, tokens),
        iteration=iteration,
        max_iterations=config.max_iterations,
        ralph_dir=relative_dir(ralph_dir, project_dir),
        review_cap=config.review_cap,
        skip_review=not policy.uses_review,
        policy=policy,
        selection=selection,
        tasks=tasks,
        feedback=feedback,
        tasks_file=relative_dir(tasks_path, project_dir),
        progress=progresslog.excerpt(progress, selection.story_id, config.prompt_progress_entries,
                                     root_for(progress, project_dir)),
        progress_file=relative_dir(progress, project_dir),
        progress_archive=relative_dir(archive, project_dir) if archive.exists() else "",
        person=person,
    )


def iteration_feedback(record: IterationRecord, timeout: float) -> list[str]:
    """What the next prompt tells the agent about iteration ``record``: violations, undone changes,
    a timeout (``timeout``: the iteration's limit in seconds), a false promise."""
    # a violation is one line: an agent-written value it names cannot start a line of the loop's own
    feedback = [f"Iteration {record.number} ({record.mode}): {one_line(message)}" for message in record.violations]
    if record.undone:
        feedback.append(
            f"The loop undid the review-field changes of {', '.join(sorted(set(record.undone)))}; "
            "see progress.txt. Follow the mode rules above."
        )
    if record.timed_out:
        feedback.append(
            f"Iteration {record.number} timed out after {timeout:g}s; the agent was stopped. "
            "Check git status and progress.txt for partial work."
        )
    if record.promise and record.violations:
        feedback.append(
            "The previous iteration printed <promise>COMPLETE</promise> but the task list is not complete: "
            "only print it when every story passes and is approved."
        )
    return feedback


def relative_dir(ralph_dir: Path, project_dir: Path) -> str:
    """``ralph_dir`` relative to ``project_dir`` when it is inside, else as it is."""
    try:
        return str(ralph_dir.relative_to(project_dir))
    except ValueError:
        return str(ralph_dir)
