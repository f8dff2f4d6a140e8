"""Build scripted agent behaviour: shell steps a model would take, as model turns
(for the real CLI against the scripted model server) or as replay actions."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

from ralph.testing.model_server import Turn, text, tool


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


def bash_turns(commands: list[str], say: str) -> list[Turn]:
    """One Bash tool call per command, then a closing text turn."""
    turns = [Turn([tool("Bash", {"command": c, "description": "step"})]) for c in commands]
    return turns + [Turn([text(say)])]


def replay_actions(commands: list[str], say: str) -> list[dict[str, Any]]:
    """The same steps as actions of the replay agent."""
    return [{"run": c} for c in commands] + [{"say": say}]
