"""Other Ralph tools' loops, taken over by ``ralph init``: what their files say, in ralph's files.

- **ralph-claude-code** (frankbria): ``.ralph/PROMPT.md`` (the project's goals and principles,
  mixed with instructions for that tool's loop), ``.ralph/fix_plan.md`` (a checkbox list under
  priority headings), ``.ralph/specs/``, ``.ralph/AGENT.md`` (how to build and test).
- **ralph-orchestrator**: ``ralph.yml`` at the project root (its ``backpressure.gates`` are test,
  lint and format commands) and ``PROMPT.md`` beside it (the task).

``ralph init`` writes ralph's own loop folder (``ralph/``) from them: the checklist items become
stories (``FP-001`` ..., a checked item done), the prompt's project sections become ``prd.md``,
the gates become ``verifyCommands``.  Their files are read, never changed: the other tool keeps
working.  snarktank/ralph's ``scripts/ralph/`` needs no import: ralph runs that folder as it is.
Stdlib only.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ralph.ralphfiles import FRANKBRIA, ORCHESTRATOR, other_tool_loop as detect

__all__ = ["FRANKBRIA", "ORCHESTRATOR", "Adoption", "adopt", "detect", "fix_plan_stories", "orchestrator_gates"]

OPTIONAL_SECTIONS = re.compile(r"\b(optional|future|nice to have|someday|backlog|notes?)\b", re.IGNORECASE)
"""fix_plan.md sections whose items do not block the end of that tool's loop: not imported as stories."""
LOOP_SECTIONS = re.compile(
    r"status|exit|signal|protected files|subagent|testing guidelines|execution guidelines|file structure|"
    r"current task|what not to do|scenario|circuit|loop",
    re.IGNORECASE,
)
"""PROMPT.md headings about ralph-claude-code's own loop (its status block, EXIT_SIGNAL ...): left out of prd.md."""

_CHECKBOX = re.compile(r"^(?P<indent>[ \t]*)[-*+][ \t]+\[(?P<mark>[ xX])\][ \t]+(?P<text>.+?)[ \t]*$")
_ITEM = re.compile(r"^(?P<indent>[ \t]*)(?:[-*+]|\d+[.)])[ \t]+(?:\[[ xX]\][ \t]+)?(?P<text>.+?)[ \t]*$")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")


@dataclass
class Adoption:
    """What ``ralph init`` takes over from another tool's loop."""

    tool: str
    sources: list[str]
    """The files read, relative to the project."""
    prd: str | None = None
    """The text for ``prd.md`` (None: ralph's template)."""
    stories: list[dict[str, object]] = field(default_factory=list)
    verify: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)
    """One line per thing imported or left out, for the person."""

    def tasks_text(self, template: str) -> str:
        """The tasks.json ``template`` (already named) with the imported stories and commands."""
        data = json.loads(template)
        if self.stories:
            data["userStories"] = self.stories
        if self.verify:
            data["verifyCommands"] = self.verify
        data["description"] = data.get("description") or f"taken over from {self.tool} ({', '.join(self.sources)})"
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def adopt(project_dir: Path, today: str) -> Adoption | None:
    """What to take over from the other tool's loop in ``project_dir`` (None: there is none)."""
    tool = detect(project_dir)
    if tool == FRANKBRIA:
        return _frankbria(project_dir, today)
    if tool == ORCHESTRATOR:
        return _orchestrator(project_dir, today)
    return None


def _read(path: Path, project_dir: Path) -> str | None:
    from ralph import safeio

    try:
        return safeio.read_text(path, project_dir)
    except (OSError, safeio.UnsafePath, UnicodeDecodeError, ValueError):
        return None


# -- ralph-claude-code ---------------------------------------------------------------------------


def _frankbria(project_dir: Path, today: str) -> Adoption:
    adoption = Adoption(FRANKBRIA, [])
    plan = _read(project_dir / ".ralph" / "fix_plan.md", project_dir)
    if plan is not None:
        adoption.sources.append(".ralph/fix_plan.md")
        adoption.stories, skipped = fix_plan_stories(plan)
        done = sum(1 for s in adoption.stories if s["passes"])
        adoption.report.append(
            f"imported {len(adoption.stories)} tasks of .ralph/fix_plan.md as stories FP-001 ... ({done} checked off: "
            "done; each item's text is its one acceptance criterion: sharpen them)"
            + (f"; left out {skipped} items of its optional/future/notes sections" if skipped else "")
        )
    prompt = _read(project_dir / ".ralph" / "PROMPT.md", project_dir)
    extra = ["- Detailed specifications: `.ralph/specs/` (read the ones your story needs)."] if (
        project_dir / ".ralph" / "specs").is_dir() else []
    if (project_dir / ".ralph" / "AGENT.md").is_file():
        extra.append("- How to build, run and test the project: `.ralph/AGENT.md`.")
    if prompt is not None:
        adoption.sources.append(".ralph/PROMPT.md")
        kept, dropped = _project_sections(prompt)
        adoption.prd = _prd(".ralph/PROMPT.md", FRANKBRIA, today, kept, extra, dropped)
        adoption.report.append(
            "wrote .ralph/PROMPT.md's project sections into prd.md"
            + (f" (left out its loop instructions: {', '.join(dropped)})" if dropped else "")
        )
    if not (project_dir / ".ralph" / "AGENT.md").is_file():
        return adoption
    adoption.report.append("verifyCommands is empty: add the test commands of .ralph/AGENT.md to tasks.json")
    return adoption


def fix_plan_stories(text: str) -> tuple[list[dict[str, object]], int]:
    """The checklist items of a ``fix_plan.md`` as stories, and how many optional ones were left out.

    A top-level checkbox item is a story (its text the title and the criterion, ``[x]`` done); an
    indented item under it is one more criterion; items under an optional, future or notes heading
    are left out; code fences and HTML comments are skipped.
    """
    stories: list[dict[str, object]] = []
    section, skipped, fenced, in_comment = "", 0, False, False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if in_comment or line.lstrip().startswith("<!--"):
            in_comment = "-->" not in line
            continue
        heading = _HEADING.match(line)
        if heading:
            section = heading.group("text")
            continue
        found = _CHECKBOX.match(line)
        if not found:
            continue
        if OPTIONAL_SECTIONS.search(section):
            skipped += 1
            continue
        item = found.group("text")
        if len(found.group("indent").expandtabs(4)) >= 2 and stories:
            criteria = stories[-1]["acceptanceCriteria"]
            assert isinstance(criteria, list)
            criteria.append(item)
            continue
        done = found.group("mark") in "xX"
        stories.append({
            "id": f"FP-{len(stories) + 1:03d}",
            "title": item,
            "description": "From .ralph/fix_plan.md" + (f", section \"{section}\"" if section else ""),
            "acceptanceCriteria": [item],
            "priority": len(stories) + 1,
            "passes": done,
            "reviewStatus": "approved" if done else None,
            "reviewCount": 0,
            "reviewFeedback": "",
            "notes": "checked off in .ralph/fix_plan.md before ralph took over" if done else "",
            "dependsOn": [],
        })
    return stories, skipped


def _project_sections(prompt: str) -> tuple[str, list[str]]:
    """``prompt`` without its sections about the other tool's loop, and their headings."""
    kept: list[str] = []
    dropped: list[str] = []
    skipping_level = 0
    for line in prompt.splitlines():
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group("hashes"))
            if skipping_level and level > skipping_level:
                continue
            skipping_level = 0
            title = re.sub(r"[^\w\s/().,'-]", "", heading.group("text")).strip()
            if level >= 2 and LOOP_SECTIONS.search(title):
                skipping_level = level
                dropped.append(title)
                continue
        elif skipping_level:
            continue
        kept.append(line)
    return "\n".join(kept).strip() + "\n", dropped


def _prd(source: str, tool: str, today: str, body: str, extra: list[str], dropped: list[str]) -> str:
    left_out = f"; its sections about {tool}'s own loop were left out: {', '.join(dropped)}" if dropped else ""
    lines = [
        f"<!-- Taken over from {tool}'s {source} by `ralph init` on {today}{left_out}. The agent reads",
        "     this file every iteration and never edits it; edit it yourself. -->",
        "",
        body.rstrip(),
    ]
    if extra:
        lines += ["", "## Where the rest is", "", *extra]
    return "\n".join(lines) + "\n"


# -- ralph-orchestrator -----------------------------------------------------------------------------


def _orchestrator(project_dir: Path, today: str) -> Adoption:
    adoption = Adoption(ORCHESTRATOR, ["ralph.yml"])
    config = _read(project_dir / "ralph.yml", project_dir) or ""
    adoption.verify = orchestrator_gates(config)
    if adoption.verify:
        adoption.report.append(f"took ralph.yml's backpressure gates as verifyCommands: {', '.join(adoption.verify)}")
    prompt_file = _scalar(config, "prompt_file") or "PROMPT.md"
    prompt = _read(project_dir / prompt_file, project_dir)
    if prompt is None:
        adoption.report.append(f"no {prompt_file} to take over: write what to build into prd.md")
        return adoption
    adoption.sources.append(prompt_file)
    extra = ["- Specifications: `.ralph/specs/` (read the ones your story needs)."] if (
        project_dir / ".ralph" / "specs").is_dir() else []
    adoption.prd = _prd(prompt_file, ORCHESTRATOR, today, prompt, extra, [])
    adoption.report.append(f"wrote {prompt_file} into prd.md")
    title, items = _task_items(prompt)
    if items:
        adoption.stories = [{
            "id": "US-001", "title": title or "The task of " + prompt_file, "description": f"From {prompt_file}",
            "acceptanceCriteria": items, "priority": 1, "passes": False, "reviewStatus": None, "reviewCount": 0,
            "reviewFeedback": "", "notes": "", "dependsOn": [],
        }]
        adoption.report.append(f"made one story of {prompt_file}'s {len(items)} list items (split it with "
                               "`ralph plan`, or by hand)")
    else:
        adoption.report.append(f"{prompt_file} lists no items to make stories of: `ralph plan` writes them from prd.md")
    return adoption


def orchestrator_gates(config: str) -> list[str]:
    """The ``command`` of every gate under ``backpressure: gates:`` in a ralph.yml (a string, or a list
    of arguments), read line by line: ralph has no YAML parser and needs nothing else of the file."""
    commands: list[str] = []
    in_backpressure = False
    for line in config.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            in_backpressure = line.split(":", 1)[0].strip() == "backpressure"
            continue
        found = re.match(r"^\s*(?:-\s+)?command:\s*(?P<value>.+?)\s*$", line) if in_backpressure else None
        if found:
            value = _unquote(found.group("value"))
            if value:
                commands.append(value)
    return commands


def _unquote(value: str) -> str:
    value = re.sub(r"\s+#.*$", "", value).strip()
    if value.startswith("["):
        try:
            parts = json.loads(value.replace("'", '"'))
        except ValueError:
            return value
        return shlex.join(str(part) for part in parts) if isinstance(parts, list) else value
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _scalar(config: str, key: str) -> str | None:
    found = re.search(rf"^\s*{re.escape(key)}:\s*(?P<value>.+?)\s*$", config, re.MULTILINE)
    return _unquote(found.group("value")) if found else None


def _task_items(prompt: str) -> tuple[str, list[str]]:
    """The first heading (``Task:`` dropped) and the top-level list items of a task prompt."""
    title, items, fenced = "", [], False
    for line in prompt.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = _HEADING.match(line)
        if heading and not title:
            title = re.sub(r"^(?:task|prompt)\s*:\s*", "", heading.group("text"), flags=re.IGNORECASE)
            continue
        item = _ITEM.match(line)
        if item and len(item.group("indent").expandtabs(4)) < 2:
            items.append(item.group("text"))
    return title, items
