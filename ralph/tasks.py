"""The task list model (seed 000 §8), its structural rules, and story selection.

Unknown fields are kept (``extra="allow"``): the agent and the user may add
their own, and nothing they wrote is dropped when the loop writes the file.
"""

from __future__ import annotations

import operator
from itertools import repeat
from pathlib import Path
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from ralph.contracts import Snapshot, StoryState

ReviewStatus = Literal["needs_review", "changes_requested", "approved"]
"""The values of ``reviewStatus`` besides null (not yet submitted for review)."""
REVIEW_FIELDS = ("passes", "reviewStatus", "reviewCount", "reviewFeedback")
"""The story fields only the review cycle may change (the loop guards them)."""
TEXT_FIELDS = ("title", "description", "acceptanceCriteria")
"""A story's scope, the person's: an iteration narrows it only by splitting its own story."""
LOOP_FIELDS: tuple[str, ...] = ("failed", "failureReason", "waiting")
"""Story fields only the loop sets (it stops a story that keeps failing): no iteration may change
them, whatever a policy's table says, and a story an iteration adds starts without them."""
PERSON_FIELDS: tuple[str, ...] = ("allowTestChanges",)
"""Story fields only a person sets, between runs (the loop trusts their value from the run's
start): no iteration may change them and a story an iteration adds may not carry them.  Making
a field person-only is adding its name here."""

class Story(BaseModel):
    """One user story.  Required fields follow seed 000 §5b Check 1."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    id: StrictStr = Field(min_length=1)
    title: StrictStr
    description: StrictStr = ""
    acceptanceCriteria: list[StrictStr] = Field(min_length=1)
    priority: StrictInt | StrictFloat
    passes: StrictBool
    reviewStatus: ReviewStatus | None
    reviewCount: StrictInt = Field(ge=0)
    reviewFeedback: StrictStr
    notes: StrictStr = ""
    dependsOn: list[StrictStr] = Field(default_factory=list)
    failed: StrictBool = False
    """Set by the loop when the story was stopped (tier 3); it is skipped until a person resets it."""
    failureReason: StrictStr = ""
    waiting: StrictBool = False
    """Set by the loop when the agent asked a person a question about the story (``ralph ask``): the story is
    parked, not failed and not retried, until a person answers (``ralph answer``); the loop clears it."""
    allowTestChanges: list[StrictStr] = Field(default_factory=list)
    """Person-only: existing tests this story may change (paths or patterns, docs/tests.md).  The loop
    reads it from the task list as the run started; the agent's edits to it are undone (``PERSON_FIELDS``)."""

    def state(self, fields: Iterable[str] = REVIEW_FIELDS) -> StoryState:
        """The story's ``fields`` (the task model's review fields by default); the loop snapshots a policy's
        own with :meth:`ralph.contracts.Policy.state_of`."""
        return StoryState.of(self, tuple(fields))

    @property
    def done(self) -> bool:
        """True when the story passes (what ``dependsOn`` waits for)."""
        return self.passes


class TaskList(BaseModel):
    """The whole task list: project metadata plus the stories."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    project: StrictStr
    branchName: StrictStr
    description: StrictStr
    verifyCommands: list[StrictStr] = Field(default_factory=list)
    userStories: list[Story]

    def story(self, story_id: str) -> Story | None:
        """The story with id ``story_id``, or None."""
        for story in self.userStories:
            if story.id == story_id:
                return story
        return None

    def snapshot(self, fields: Iterable[str] = REVIEW_FIELDS) -> Snapshot:
        """Every story's ``fields`` by id (the review fields by default; the loop's snapshot is the policy's,
        :meth:`ralph.contracts.Policy.snapshot`)."""
        names = tuple(fields)
        return {story.id: StoryState.of(story, names) for story in self.userStories}


def read_task_text(path: Path, root: Path | None = None) -> str:
    """The text of a task-list file.

    Raises ``FileNotFoundError`` when it is missing (callers word that themselves) and
    :class:`ralph.errors.TaskListError` naming the file and the fix when it is a directory,
    a symlink (anywhere below ``root``, default: the file's folder), a special file or a file
    with other hard links, unreadable, or not UTF-8 text; the file is never touched.
    """
    from ralph import safeio
    from ralph.errors import TaskListError

    try:
        return safeio.read_text(path, path.parent if root is None else root)
    except FileNotFoundError:
        raise
    except safeio.UnsafePath as exc:
        if safeio.kind(path, path.parent if root is None else root) == "dir":
            raise TaskListError(f"{path} is a directory, not a task-list file: remove or rename it") from None
        raise TaskListError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TaskListError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}): save it as UTF-8"
        ) from None
    except OSError as exc:
        raise TaskListError(f"{path} cannot be read: {exc.strerror or exc}") from None


def parse_tasks(data: Any, source: str) -> TaskList:
    """Validate already-decoded JSON; raise TaskListError naming file, story and field."""
    from ralph.errors import TaskSchemaError

    try:
        return TaskList.model_validate(data)
    except ValidationError as exc:
        raise TaskSchemaError(explain_errors(exc, data, source)) from None


def parse_tasks_json(raw: str, source: Path) -> TaskList:
    """The task list in JSON text ``raw`` (read from ``source``): what ``parse_tasks(decode_json(raw, source),
    str(source))`` returns, about 2.5 times faster on large lists, and the same errors.

    Pydantic's own JSON parser validates as it reads.  It accepts a subset of what :func:`json.loads` accepts
    (no lone surrogates, nothing nested hundreds of levels deep) and reads what both accept to the same values,
    so whenever it fails the text goes through the slow path, which words the error (line and column, the
    story and field) or accepts what only ``json.loads`` takes.
    """
    try:
        return TaskList.model_validate_json(raw)
    except (ValidationError, ValueError, RecursionError):
        from ralph.jsonpatch import decode_json

        return parse_tasks(decode_json(raw, source), str(source))


def explain_errors(exc: ValidationError, data: Any, source: str) -> str:
    """Readable lines: ``ralph/tasks.json: userStories[0] (US-001).acceptanceCriteria: ...``."""
    lines: list[str] = []
    for error in exc.errors():
        loc = list(error["loc"])
        line = f"{source}: {_location(loc, data)}: {_message(error)}{_misspelt_instead(error, data)}"
        if line not in lines:  # a union (priority: int | float) reports once per member
            lines.append(line)
    return "\n".join(lines)


def _location(loc: list[Any], data: Any) -> str:
    if not loc:
        return "(top level)"
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(part, int):
            label = f"[{part}]"
            if isinstance(node, list) and part < len(node):
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("id"), str):
                    label += f" ({node['id']})"
            parts.append(label)
        elif parts and not isinstance(node, dict):
            continue  # a union member's tag ("int", "float"), not a field of the file
        else:
            parts.append(("." if parts else "") + str(part))
            node = node.get(part) if isinstance(node, dict) else None
    return "".join(parts)


def _misspelt_instead(error: Any, data: Any) -> str:
    """For a missing field: `` (`prority` is there: a misspelling?)`` when the object has a key like it."""
    from ralph.spelling import closest

    loc = list(error["loc"])
    if error["type"] != "missing" or not loc or not isinstance(loc[-1], str):
        return ""
    node = data
    for part in loc[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return ""
    if not isinstance(node, dict):
        return ""
    typos = [key for key in node if isinstance(key, str) and closest(key, [loc[-1]]) == loc[-1]]
    return f" (`{typos[0]}` is there: a misspelling of `{loc[-1]}`?)" if typos else ""


def _message(error: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "required field is missing"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind == "literal_error":
        return 'must be null or one of "needs_review", "changes_requested", "approved"'
    if kind == "bool_type":
        return "must be true or false"
    if kind == "int_type" and error["loc"] and error["loc"][-1] == "reviewCount":
        return "must be a non-negative integer"
    if kind in {"int_type", "float_type"}:
        return "must be a number"
    if kind == "greater_than_equal":
        return f"must be an integer >= {ctx.get('ge')}"
    if kind == "string_type":
        return "must be a string"
    if kind == "list_type":
        return "must be an array"
    if kind == "model_type":
        return "must be a JSON object"
    return error.get("msg", "is invalid")


def structural_problems(tasks: TaskList) -> list[tuple[str | None, str]]:
    """Rules beyond field types (seed Check 1): unique ids, notes on finished stories."""
    problems: list[tuple[str | None, str]] = []
    seen: set[str] = set()
    for story in tasks.userStories:
        if story.id in seen:
            problems.append((story.id, f"Duplicate story id {story.id!r}: every story needs a unique id."))
        seen.add(story.id)
        if story.passes and not story.notes.strip():
            problems.append(
                (story.id, f"Story {story.id} has passes=true but empty notes: document what was done in notes.")
            )
    return problems


def ready_stories(tasks: TaskList, candidates: Iterable[Story]) -> list[Story]:
    """Candidates whose ``dependsOn`` stories are all done, best priority first.

    Ties keep file order.  Unknown dependencies count as unmet; failed stories and stories waiting for a
    person's answer are never ready.
    """
    stories = tasks.userStories
    done = {story.id for story in stories if story.done}
    ready = [
        story for story in candidates
        if not story.failed and not story.waiting and (not story.dependsOn or done.issuperset(story.dependsOn))
    ]
    # the sort key (priority, position in the file; a candidate not in the list counts as 0), built and
    # compared at C speed: the same keys in the same order as sorting ``ready`` by them
    position = dict(zip(map(id, stories), range(len(stories))))  # a story listed twice: its last place, as before
    keys = list(zip(map(_priority, ready), map(position.get, map(id, ready), repeat(0))))
    return [ready[index] for index in sorted(range(len(ready)), key=keys.__getitem__)]


_priority = operator.attrgetter("priority")


def first_ready(tasks: TaskList, candidates: Iterable[Story]) -> Story | None:
    """``ready_stories(tasks, candidates)[0]``, or None when none is ready, without sorting every ready story:
    the best priority, the first in the file among equals."""
    stories = tasks.userStories
    done = {story.id for story in stories if story.done}
    ready = [
        story for story in candidates
        if not story.failed and not story.waiting and (not story.dependsOn or done.issuperset(story.dependsOn))
    ]
    if not ready:
        return None
    priorities = list(map(_priority, ready))
    if float in set(map(type, priorities)) and any(p != p for p in priorities):  # NaN orders nothing: as the sort does
        return ready_stories(tasks, ready)[0]
    best = min(priorities)
    tied = [story for story, priority in zip(ready, priorities) if priority == best]
    if len(tied) == 1:
        return tied[0]
    # the sort's tie-break: the place in the file (a story listed twice: its last; not in the list: 0), then the
    # candidates' own order
    position = dict(zip(map(id, stories), range(len(stories))))
    return min(tied, key=lambda story: position.get(id(story), 0))


def blocked_reason(tasks: TaskList, candidates: Iterable[Story]) -> str:
    """Why none of ``candidates`` can be selected (for the loop's message)."""
    known = {story.id: story for story in tasks.userStories}
    reasons = []
    for story in candidates:
        waits = [dep for dep in story.dependsOn if dep not in known or not known[dep].done]
        named = ", ".join(dep if dep in known else f"{dep} (unknown story)" for dep in waits)
        reasons.append(f"{story.id} waits on {named}")
    return "; ".join(reasons[:5]) + (" ..." if len(reasons) > 5 else "")


def find_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Each dependency cycle once (as a list of ids, rotated to start at its smallest id)."""
    cycles: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):]
                first = cycle.index(min(cycle))
                key = tuple(cycle[first:] + cycle[:first])
                if key not in seen:
                    seen.add(key)
                    cycles.append(list(key))
            elif state.get(nxt) is None:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    return cycles


def misspelt_keys(tasks: TaskList, story_fields: Iterable[str] = ()) -> list[str]:
    """Keys ralph does not read that look like a misspelt one it does, one line each:
    ``userStories[1] (US-002).depends_on: not a key ralph reads; did you mean `dependsOn`?``.

    Other keys ralph does not know are the person's own and pass silently (they are kept as they
    are); a typo of a known key would otherwise be ignored without a word (``depends_on`` leaves
    the story without dependencies, ``prority`` without its priority).  ``story_fields``: story
    keys a plugin reads besides ralph's (a policy's own state fields), never reported.
    """
    from ralph.spelling import closest

    def check(where: str, extra: dict[str, Any] | None, known: Iterable[str]) -> list[str]:
        lines = []
        for key in extra or {}:
            found = closest(key, known)
            if found is not None:
                lines.append(f"{where}{key}: not a key ralph reads (kept, ignored); did you mean `{found}`?")
        return lines

    own = set(story_fields)
    found = check("", tasks.model_extra, TaskList.model_fields)
    for index, story in enumerate(tasks.userStories):
        extra = {key: value for key, value in (story.model_extra or {}).items() if key not in own}
        found += check(f"userStories[{index}] ({story.id}).", extra, [*Story.model_fields, *own])
    return found
