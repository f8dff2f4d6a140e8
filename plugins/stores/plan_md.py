"""The ``plan.md`` task store: checkbox stories in Markdown (seed 001, ``.ralph/PRD-N/plan.md``).

The format::

    # Plan: Search filters
    Branch: ralph/search-filters
    Verify: `pytest -q`

    ## Stories
    - [x] US-001: Add the status column <!-- ralph: {"reviewStatus": "approved", "reviewCount": 1, "notes": "..."} -->
    - [ ] US-002: Filter dropdown

    ### US-002: Filter dropdown
    The list page gets a dropdown that filters by status.

    **Acceptance criteria:**
    - Dropdown has options All, Active, Done
    - Choosing Active hides done items

    **Depends on:** US-001

- A story is a checkbox line ``- [ ] ID: Title`` (``[x]`` when it passes) outside story
  blocks and code fences.  Its position in the list is its priority.
- A story block is the section under a heading ``### ID: ...`` (any level 2-6) up to the
  next heading of the same or a higher level: its text is the description; bullets
  after an ``Acceptance criteria`` label are the criteria; ``Depends on:`` lists ids;
  ``Notes:`` gives notes.  A story without criteria gets its title as the one criterion
  (``ralph plan --check`` flags that as not verifiable).
- The state the loop tracks beyond the text (``reviewStatus``, ``reviewCount``,
  ``reviewFeedback``, ``notes`` when they differ from the block's, and any other
  non-default field) is kept in an HTML comment at the end of the story line,
  ``<!-- ralph: {...} -->``, invisible when the Markdown is rendered; the comment is
  absent while everything is at its default.
- The preamble (before the first story line) may hold ``Branch: ...``, ``Verify: ...``
  (one command per line, backticks optional) and ``Description: ...``; the first ``#``
  heading is the project name.

Writing changes only story lines: the checkbox, the title and the ralph comment of
the stories whose values changed; every other byte of the file stays as it was.
Description, criteria, dependencies and priority are the human's text and are not
rewritten (a story that is new to the file is appended, with a block).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.api import TaskListError, TaskStore, hookimpl

if TYPE_CHECKING:
    from ralph.api import TaskList

REVIEW_DEFAULTS: dict[str, Any] = {"reviewStatus": None, "reviewCount": 0, "reviewFeedback": ""}
TEXT_FIELDS = ("id", "title", "description", "acceptanceCriteria", "priority", "passes", "dependsOn")
"""Fields the Markdown itself carries; everything else the loop tracks goes in the ralph comment."""


def _defaults() -> dict[str, Any]:
    """Every optional story field with its default (review fields, notes, ``failed`` ...)."""
    from ralph.api import Story

    out = dict(REVIEW_DEFAULTS)
    for name, info in Story.model_fields.items():
        if name in TEXT_FIELDS or info.is_required():
            continue
        out[name] = info.get_default(call_default_factory=True)
    return out

_CHECKBOX = re.compile(
    r"^(?P<pre>[ \t]*[-*+][ \t]+\[)(?P<mark>[ xX])(?P<mid>\][ \t]+)(?P<id>[^\s:]+):(?P<sp>[ \t]*)(?P<rest>.*)$"
)
_COMMENT = re.compile(r"(?P<space>[ \t]*)<!--[ \t]*ralph:(?P<json>.*?)-->(?P<trail>[ \t]*)$")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
_BLOCK_HEADING = re.compile(r"^(?:\[[ xX]\][ \t]+)?(?P<id>[^\s:]+):[ \t]*(?P<title>.*)$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_LABEL = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?[ \t]*(?P<label>acceptance[ \t]+criteria|depends[ \t]+on|dependencies|notes)"
    r"[ \t]*:?[ \t]*(?:\*\*|__)?[ \t]*:?[ \t]*(?P<rest>.*)$",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+(?:\[[ xX]\][ \t]+)?(?P<text>.+?)[ \t]*$")
_PREAMBLE = re.compile(r"^[ \t]*(?:\*\*)?(?P<key>branch|verify|description)(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]*(?P<value>.*?)[ \t]*$", re.IGNORECASE)
_LOOKS_LIKE_ID = re.compile(r"[A-Za-z].*-.*\d|\d.*-")


@dataclass
class _StoryLine:
    index: int  # line number, 0-based
    pre: str
    mark: str
    mid: str
    story_id: str
    sp: str
    title: str
    comment: str  # the comment text as written, with its leading space ("" if none)
    state: dict[str, Any]  # the comment's fields
    trail: str
    eol: str


@dataclass
class _Block:
    start: int  # heading line
    end: int  # first line after the block
    story_id: str
    description: str = ""
    criteria: list[str] = field(default_factory=list)
    depends: list[str] = field(default_factory=list)
    notes: str = ""


@dataclass
class _Scan:
    lines: list[str]
    stories: list[_StoryLine]
    blocks: dict[str, _Block]
    top: dict[str, Any]


def _split_eol(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body):]


def _fail(source: Path, line: int, field_name: str, message: str) -> TaskListError:
    return TaskListError(f"{source}:{line + 1}: {field_name}: {message}")


def _scan(raw: str, source: Path) -> _Scan:
    from ralph.api.stores import story_id_problem

    lines = raw.splitlines(keepends=True)
    bodies = [_split_eol(line)[0] for line in lines]
    fenced = [False] * len(lines)
    inside = False
    for n, body in enumerate(bodies):
        if _FENCE.match(body):
            fenced[n] = True
            inside = not inside
        else:
            fenced[n] = inside

    # story blocks
    matches = [(n, _HEADING.match(body)) for n, body in enumerate(bodies) if not fenced[n]]
    headings = [(n, m) for n, m in matches if m]
    blocks: dict[str, _Block] = {}
    in_block = [False] * len(lines)
    for pos, (n, match) in enumerate(headings):
        level = len(match.group("hashes"))
        found = _BLOCK_HEADING.match(match.group("text"))
        if level < 2 or not found or story_id_problem(found.group("id")):
            continue
        end = next((m for m, other in headings[pos + 1:] if len(other.group("hashes")) <= level), len(lines))
        story_id = found.group("id")
        if story_id in blocks:
            raise _fail(source, n, f"story block {story_id}", f"a second block for {story_id} (the first is at line {blocks[story_id].start + 1})")
        block = _Block(n, end, story_id)
        _read_block(block, bodies, fenced, source)
        blocks[story_id] = block
        for m in range(n, end):
            in_block[m] = True

    # story lines
    stories: list[_StoryLine] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(lines):
        if fenced[n] or in_block[n]:
            continue
        body, eol = _split_eol(line)
        checkbox = _CHECKBOX.match(body)
        if not checkbox:
            continue
        story_id = checkbox.group("id")
        problem = story_id_problem(story_id)
        if problem:
            if _LOOKS_LIKE_ID.search(story_id):
                raise _fail(source, n, "id", problem)
            continue  # an ordinary checklist item ("- [ ] Note: ...")
        if story_id in seen:
            raise _fail(source, n, "id", f"duplicate story id {story_id!r} (also on line {seen[story_id] + 1})")
        seen[story_id] = n
        rest = checkbox.group("rest")
        comment, state, trail = "", {}, ""
        found = _COMMENT.search(rest)
        if found:
            comment = found.group(0)[: len(found.group(0)) - len(found.group("trail"))]
            trail = found.group("trail")
            rest = rest[: found.start()]
            state = _read_comment(found.group("json"), source, n)
        else:
            stripped = rest.rstrip(" \t")
            trail = rest[len(stripped):]
            rest = stripped
        stories.append(
            _StoryLine(n, checkbox.group("pre"), checkbox.group("mark"), checkbox.group("mid"), story_id, checkbox.group("sp"), rest, comment, state, trail, eol)
        )
    for story_id, block in blocks.items():
        if story_id not in seen:
            raise _fail(
                source, block.start, f"story block {story_id}",
                f"no story line for it: add `- [ ] {story_id}: <title>` to the story list",
            )
    return _Scan(lines, stories, blocks, _read_top(bodies, fenced, in_block, stories, source))


def _read_comment(text: str, source: Path, n: int) -> dict[str, Any]:
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(source, n, "ralph comment", f"not valid JSON ({exc.msg}): write <!-- ralph: {{\"reviewCount\": 1}} -->") from None
    if not isinstance(state, dict):
        raise _fail(source, n, "ralph comment", "must hold a JSON object")
    text_fields = sorted(set(state) & set(TEXT_FIELDS))
    if text_fields:
        raise _fail(
            source, n, "ralph comment",
            f"{text_fields[0]!r} belongs in the Markdown (the checkbox, the title or the story block), not in the comment",
        )
    return state


def _read_block(block: _Block, bodies: list[str], fenced: list[bool], source: Path) -> None:
    from ralph.api.stores import story_id_problem

    description: list[str] = []
    notes: list[str] = []
    section = "description"
    for n in range(block.start + 1, block.end):
        body = bodies[n]
        label = None if fenced[n] else _LABEL.match(body)
        if label:
            name = label.group("label").lower()
            section = "criteria" if name.startswith("acceptance") else "depends" if name.startswith("depend") else "notes"
            rest = label.group("rest").strip()
            if section == "depends" and rest:
                block.depends += _ids(rest, source, n)
            elif section == "notes" and rest:
                notes.append(rest)
            elif section == "criteria" and rest:
                block.criteria.append(rest)
            continue
        if section == "description":
            description.append(body)
        elif section == "criteria":
            bullet = _BULLET.match(body)
            if bullet:
                block.criteria.append(bullet.group("text"))
            elif body.strip():
                section = "description"
                description.append(body)
        elif section == "depends":
            bullet = _BULLET.match(body)
            if bullet:
                block.depends += _ids(bullet.group("text"), source, n)
            elif body.strip():
                section = "description"
                description.append(body)
        else:
            notes.append(body)
    block.description = "\n".join(description).strip()
    block.notes = "\n".join(notes).strip()
    for dep in block.depends:
        problem = story_id_problem(dep)
        if problem:  # pragma: no cover - _ids already checked
            raise _fail(source, block.start, "dependsOn", problem)


def _ids(text: str, source: Path, n: int) -> list[str]:
    from ralph.api.stores import story_id_problem

    ids = [part for part in re.split(r"[\s,;`*]+", text) if part and part.lower() not in {"none", "-", "and"}]
    for story_id in ids:
        problem = story_id_problem(story_id)
        if problem:
            raise _fail(source, n, "dependsOn", problem)
    return ids


def _read_top(bodies: list[str], fenced: list[bool], in_block: list[bool], stories: list[_StoryLine], source: Path) -> dict[str, Any]:
    first_story = stories[0].index if stories else len(bodies)
    top: dict[str, Any] = {"project": "", "branchName": "", "description": "", "verifyCommands": []}
    for n, body in enumerate(bodies[:first_story]):
        if fenced[n] or in_block[n]:
            continue
        heading = _HEADING.match(body)
        if heading and len(heading.group("hashes")) == 1 and not top["project"]:
            top["project"] = re.sub(r"^(?:plan|prd)\s*[:\-]\s*", "", heading.group("text"), flags=re.IGNORECASE)
            continue
        found = _PREAMBLE.match(body)
        if not found:
            continue
        key, value = found.group("key").lower(), found.group("value").strip("` ")
        if key == "verify" and value:
            top["verifyCommands"].append(value)
        elif key == "branch":
            top["branchName"] = value
        elif key == "description":
            top["description"] = value
    if not top["project"]:
        top["project"] = source.parent.name
    return top


class PlanMdStore(TaskStore):
    """Reads and writes ``<ralph dir>/plan.md`` (seed 001's ``.ralph/PRD-N/plan.md``)."""

    name = "plan-md"
    parse_reads_only_its_text = True
    filename = "plan.md"

    def parse(self, raw: str, source: Path) -> TaskList:
        from ralph.api.stores import parse_tasks

        scan = _scan(raw, source)
        if not scan.stories:
            raise TaskListError(f"{source}: userStories: no story lines found; write one per story as `- [ ] US-001: Title`")
        stories = []
        for priority, line in enumerate(scan.stories, 1):
            block = scan.blocks.get(line.story_id)
            story: dict[str, Any] = {
                "id": line.story_id,
                "title": line.title,
                "description": block.description if block else "",
                "acceptanceCriteria": (block.criteria if block and block.criteria else [line.title]),
                "priority": priority,
                "passes": line.mark in "xX",
                **REVIEW_DEFAULTS,
                "notes": block.notes if block else "",
                "dependsOn": block.depends if block else [],
            }
            story.update(line.state)
            stories.append(story)
        try:
            return parse_tasks({**scan.top, "userStories": stories}, str(source))
        except TaskListError as exc:
            raise TaskListError(_with_lines(str(exc), scan)) from None

    def render(self, tasks: TaskList, previous_raw: str | None) -> str:
        if previous_raw is None:
            return _new_file(tasks)
        try:
            scan = _scan(previous_raw, Path(self.filename))
        except TaskListError:
            return _new_file(tasks)
        lines = list(scan.lines)
        by_id = {line.story_id: line for line in scan.stories}
        wanted = {story.id: story for story in tasks.userStories}
        for story in tasks.userStories:
            old = by_id.get(story.id)
            if old is not None:
                block = scan.blocks.get(story.id)
                lines[old.index] = _story_line(old, story, block.notes if block else "")
        removed = [line for line in scan.stories if line.story_id not in wanted]
        drop: set[int] = {line.index for line in removed}
        for line in removed:
            block = scan.blocks.get(line.story_id)
            if block is not None:
                drop.update(range(block.start, block.end))
        added = [story for story in tasks.userStories if story.id not in by_id]
        if added:
            anchor = scan.stories[-1] if scan.stories else None
            eol = anchor.eol or "\n" if anchor else "\n"
            new_lines = [_fresh_story_line(story, anchor, eol) for story in added]
            if anchor is not None:
                if not lines[anchor.index].endswith(("\n", "\r")):
                    lines[anchor.index] += eol
                lines[anchor.index] += "".join(new_lines)
            else:
                lines.append("".join(new_lines))
            tail = "".join(_block_text(story, eol) for story in added)
            if lines and not lines[-1].endswith(("\n", "\r")):
                lines[-1] += eol
            lines.append(tail)
        return "".join(line for n, line in enumerate(lines) if n not in drop)


def _with_lines(message: str, scan: _Scan) -> str:
    """``userStories[2] (US-003).title`` -> add ``(line N)`` of that story."""
    def add(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index < len(scan.stories):
            return f"line {scan.stories[index].index + 1}: {match.group(0)}"
        return match.group(0)

    return re.sub(r"userStories\[(\d+)\]", add, message)


def _comment_state(story: Any, block_notes: str) -> dict[str, Any]:
    """What the ralph comment must hold: loop-tracked fields that differ from what the text says."""
    defaults = {**_defaults(), "notes": block_notes}
    values = story.model_dump(mode="json") if hasattr(story, "model_dump") else dict(story.__dict__)
    return {
        key: value
        for key, value in values.items()
        if key not in TEXT_FIELDS and not (key in defaults and value == defaults[key] and type(value) is type(defaults[key]))
    }


def _comment_text(state: dict[str, Any]) -> str:
    if not state:
        return ""
    data = json.dumps(state, ensure_ascii=False).replace(">", "\\u003e")  # never "-->" inside
    return f" <!-- ralph: {data} -->"


def _story_line(old: _StoryLine, story: Any, block_notes: str) -> str:
    """The story line with the new checkbox/title/comment; byte-identical when nothing changed."""
    mark = (old.mark if old.mark in "xX" else "x") if story.passes else " "
    title = old.title if story.title == old.title else story.title
    state = _comment_state(story, block_notes)
    old_effective = _comment_state(_Values({**_defaults(), "notes": block_notes, **old.state}), block_notes)
    comment = old.comment if state == old_effective else _comment_text(state)
    return f"{old.pre}{mark}{old.mid}{old.story_id}:{old.sp}{title}{comment}{old.trail}{old.eol}"


class _Values:
    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _fresh_story_line(story: Any, anchor: _StoryLine | None, eol: str) -> str:
    pre, mid = (anchor.pre, anchor.mid) if anchor else ("- [", "] ")
    mark = "x" if story.passes else " "
    return f"{pre}{mark}{mid}{story.id}: {story.title}{_comment_text(_comment_state(story, story.notes))}{eol}"


def _block_text(story: Any, eol: str) -> str:
    parts = [f"{eol}### {story.id}: {story.title}{eol}"]
    if story.description:
        parts.append(f"{eol}{story.description}{eol}")
    parts.append(f"{eol}**Acceptance criteria:**{eol}")
    parts += [f"- {criterion}{eol}" for criterion in story.acceptanceCriteria]
    if story.dependsOn:
        parts.append(f"{eol}**Depends on:** {', '.join(story.dependsOn)}{eol}")
    if story.notes:
        parts.append(f"{eol}**Notes:** {story.notes}{eol}")
    return "".join(parts)


def _new_file(tasks: TaskList) -> str:
    out = [f"# Plan: {tasks.project}\n"]
    if tasks.branchName:
        out.append(f"Branch: {tasks.branchName}\n")
    if tasks.description:
        out.append(f"Description: {tasks.description}\n")
    out += [f"Verify: `{command}`\n" for command in tasks.verifyCommands]
    out.append("\n## Stories\n")
    stories = sorted(tasks.userStories, key=lambda s: s.priority)
    out += [_fresh_story_line(story, None, "\n") for story in stories]
    out += [_block_text(story, "\n") for story in stories]
    return "".join(out)


@hookimpl(trylast=True)
def ralph_register_task_stores(register):  # type: ignore[no-untyped-def]
    """Register the plan.md store."""
    register(PlanMdStore)
