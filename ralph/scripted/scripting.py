"""Build scripted agent behaviour: shell steps a model would take, as model turns
(for the real CLI against the scripted model server) or as replay actions."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any, Sequence

from ralph.scripted.model_server import Turn, text, tool

__all__ = [
    "approve_turns",
    "bash_turn",
    "bash_turns",
    "commit_command",
    "implement_turns",
    "python_line",
    "replay_actions",
    "review_fix_turns",
    "self_approving_turns",
    "set_fields_command",
]


def set_fields_command(story_id: str, tasks: str = "ralph/tasks.json", python: str = sys.executable,
                       **fields: Any) -> str:
    """A shell command editing one story of the task list, as a model would with a tool.

    ``python`` runs it: this interpreter by default; ``python3`` where the agent runs in a container.
    """
    code = (
        f"import json,sys;p={tasks!r};d=json.load(open(p));"
        f"[s.update(json.loads(sys.argv[1])) for s in d['userStories'] if s['id']=={story_id!r}];"
        "open(p,'w').write(json.dumps(d,indent=2)+'\\n')"
    )
    return f"{shlex.quote(python)} -c {shlex.quote(code)} {shlex.quote(json.dumps(fields))}"


def commit_command(message: str) -> str:
    """A shell command committing everything with ``message``."""
    return f"git add -A && git commit -q -m {shlex.quote(message)}"


def bash_turn(command: str) -> Turn:
    """A model turn that makes one Bash tool call running ``command``."""
    return Turn([tool("Bash", {"command": command, "description": "step"})])


def bash_turns(commands: list[str], say: str) -> list[Turn]:
    """One Bash tool call per command, then a closing text turn."""
    return [bash_turn(c) for c in commands] + [Turn([text(say)])]


def python_line(code: str, *args: Any, python: str = "python3") -> str:
    """A shell line running ``code`` with ``python -c``, each of ``args`` one JSON-encoded argv element.

    Attack code and hostile names travel this way as data: the line is built with :func:`shlex.quote`,
    never by pasting text into a shell command."""
    return " ".join([shlex.quote(python), "-c", shlex.quote(code), *(shlex.quote(json.dumps(a)) for a in args)])


def replay_actions(commands: list[str], say: str) -> list[dict[str, Any]]:
    """The same steps as actions of the replay agent."""
    return [{"run": c} for c in commands] + [{"say": say}]


def implement_turns(story_id: str, filename: str, content: str, python: str = sys.executable,
                    steps: Sequence[str] = ()) -> list[Turn]:
    """An implement iteration: write ``content`` to ``filename``, mark the story ``needs_review``,
    take the shell ``steps`` (a progress-log entry, say), commit ``feat: [ID] - implement``."""
    return bash_turns(
        [
            f"printf %s {shlex.quote(content)} > {filename}",
            set_fields_command(story_id, python=python, reviewStatus="needs_review"),
            *steps,
            commit_command(f"feat: [{story_id}] - implement"),
        ],
        say=f"Implemented {story_id}.",
    )


def approve_turns(story_id: str, count: int, python: str = sys.executable, **fields: Any) -> list[Turn]:
    """A review iteration that approves: ``passes``, review number ``count``, ``notes`` (and
    ``fields``), commit ``review: [ID] - approved``, then the completion promise."""
    return bash_turns(
        [
            set_fields_command(story_id, python=python, reviewStatus="approved", passes=True, reviewCount=count,
                               notes="reviewed", **fields),
            commit_command(f"review: [{story_id}] - approved"),
        ],
        say="Approved. <promise>COMPLETE</promise>",
    )


def review_fix_turns(story_id: str, filename: str, feedback: str, python: str = sys.executable) -> dict[int, list[Turn]]:
    """Iterations 1-4 of a review cycle: implement ``filename`` with a typo ("helo"), a review
    requesting changes (``feedback``), the fix ("hello"), the approving review."""
    return {
        1: implement_turns(story_id, filename, "helo", python),
        2: bash_turns(
            [
                set_fields_command(story_id, python=python, reviewStatus="changes_requested", reviewCount=1,
                                   reviewFeedback=feedback),
                commit_command(f"review: [{story_id}] - changes requested"),
            ],
            say="Changes requested.",
        ),
        3: bash_turns(
            [
                f"printf hello > {filename}",
                set_fields_command(story_id, python=python, reviewStatus="needs_review", reviewFeedback=""),
                commit_command(f"fix: [{story_id}] - address review feedback"),
            ],
            say="Fixed.",
        ),
        4: approve_turns(story_id, 2, python),
    }


def self_approving_turns(story_id: str, filename: str, python: str = sys.executable) -> list[Turn]:
    """An implement iteration that cheats: writes ``filename``, approves its own story and claims
    completion (the loop's checks must undo the approval and refuse the promise)."""
    return bash_turns(
        [
            f"printf hello > {filename}",
            set_fields_command(story_id, python=python, reviewStatus="approved", passes=True, notes="done"),
            commit_command(f"feat: [{story_id}] - implement and approve"),
        ],
        say="All done <promise>COMPLETE</promise>",
    )
