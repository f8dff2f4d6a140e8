"""What the ``notify`` reporter says, per loop event: a title and a plain-text body (no Apprise here).

Everything the agent could have written (its question, a story's title, a gate's output, an end
reason quoting them) is stripped of control characters and cut; the body is sent as plain text, so
a service that renders markdown or HTML shows it as it is.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.api.reporters import format_elapsed
from ralph.api.text import counted, one_line, quote, strip_controls

__all__ = ["Message", "RunView", "message_for"]

BODY_LIMIT = 1800
"""Characters of a body (most services cut long messages; ntfy takes 4096 bytes)."""

EXIT_WORDS = {
    0: ("complete", "success"),
    1: ("stopped: nothing more it could do", "warning"),
    2: ("stopped on an error", "failure"),
    3: ("finished with failed stories", "failure"),
    4: ("stopped: global time limit", "warning"),
    5: ("stopped: budget reached", "warning"),
    6: ("paused: usage limit", "warning"),
    7: ("stopped: the agent keeps failing", "failure"),
    8: ("waiting for a person", "warning"),
    130: ("interrupted", "info"),
    143: ("interrupted (SIGTERM)", "info"),
}


@dataclass(frozen=True)
class Message:
    """One notification: what kind (``question`` ...), a title, a plain-text body and a level
    (``info``, ``success``, ``warning``, ``failure``: Apprise's notify types)."""

    kind: str
    title: str
    body: str
    level: str = "info"


@dataclass
class RunView:
    """What the reporter remembers of the run it notifies about."""

    project: str = ""
    run_dir: str = ""
    ended: bool = False

    @property
    def name(self) -> str:
        """The project's directory name (how titles name the run)."""
        return Path(self.project).name if self.project else "project"


def _text(value: Any, limit: int) -> str:
    """Agent text (or anything from a payload) for a body: control characters out, cut at ``limit``."""
    text = strip_controls(str(value if value is not None else "")).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cut(body: str) -> str:
    return body if len(body) <= BODY_LIMIT else body[: BODY_LIMIT - 1] + "…"


def _answer_command(run: RunView, story: str) -> str:
    where = f"-d {shlex.quote(run.project)} " if run.project else ""
    return f"ralph answer {where}{shlex.quote(story)} \"ANSWER\""


def message_for(kind: str, data: dict[str, Any], run: RunView) -> Message | None:
    """The notification for one loop event (None: the event is not one a person is told about)."""
    if kind == "question_asked":
        return _question(data, run)
    if kind == "story_failed":
        story = one_line(str(data.get("story") or "?"))
        lines = [f"{story} was stopped after iteration {data.get('iteration')} (the same error again: tier-3 hard "
                 "stop); the loop goes on with the other stories."]
        if data.get("error"):
            lines += ["", "last error:", _text(data["error"], 900)]
        if data.get("branch"):
            lines += ["", f"its work is kept on the branch {one_line(str(data['branch']))}"]
        return Message("story_stopped", f"ralph: {story} stopped ({run.name})", _cut("\n".join(lines)), "failure")
    if kind == "story_flagged":
        story = one_line(str(data.get("story") or "?"))
        body = (f"{story} was stopped after iteration {data.get('iteration')}: {_text(data.get('reason'), 600)}; "
                "the loop goes on with the other stories.")
        return Message("story_stopped", f"ralph: {story} stopped ({run.name})", _cut(body), "failure")
    if kind == "usage_limit_wait":
        body = (f"The agent hit its usage limit; the loop waits until {_text(data.get('until'), 60)} and then goes "
                f"on by itself (Ctrl-C stops it: `ralph run --resume` continues later).\nrun: {run.run_dir}")
        return Message("waiting", f"ralph: waiting for the usage limit ({run.name})", body, "warning")
    if kind == "run_finished":
        run.ended = True
        return _finished(data, run)
    if kind == "git_metadata_changed":
        run.ended = True
        body = (f"The run stopped: the agent changed the repository's .git metadata the loop guards.\n"
                f"{_text(data.get('error'), 900)}\nrun: {run.run_dir}")
        return Message("run_ended", f"ralph: run stopped on an error ({run.name})", _cut(body), "failure")
    return None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _question(data: dict[str, Any], run: RunView) -> Message:
    story = one_line(str(data.get("story") or "?"))
    title = data.get("title")
    lines = [f"{story}{' ' + quote(str(title), 100) if title else ''} asked a person in iteration "
             f"{data.get('iteration')} ({one_line(str(data.get('mode') or ''))}). The story waits for your answer; the "
             "loop goes on with the stories that do not depend on it.", "",
             "The question (the agent's words):", _text(data.get("question"), 1200)]
    tools = data.get("tools")
    if isinstance(tools, list) and tools:
        lines += ["", "What the agent was doing: " + "; ".join(_text(t, 120) for t in tools[-3:])]
    lines += ["", f"Answer: {_answer_command(run, story)}  (or in `ralph serve`)"]
    return Message("question", f"ralph: {story} asks a person ({run.name})", _cut("\n".join(lines)), "warning")


def _finished(data: dict[str, Any], run: RunView) -> Message:
    code = data.get("exit_code")
    words, level = EXIT_WORDS.get(code if isinstance(code, int) else -1, (f"ended (exit {code})", "warning"))
    listed = data.get("stories")
    stories: list[Any] = listed if isinstance(listed, list) else []
    done = sum(1 for s in stories if isinstance(s, dict) and s.get("passes"))
    cost = _number(data.get("cost_usd"))
    elapsed = _number(data.get("elapsed"))
    lines = [_text(data.get("reason"), 1000), "",
             f"{done}/{counted(len(stories), 'story')} done | {counted(data.get('iterations'), 'iteration')} | cost ${cost:.4f} | "
             f"{format_elapsed(elapsed)} | exit {code}"]
    waiting = [s for s in stories if isinstance(s, dict) and s.get("waiting") and not s.get("passes")]
    if waiting:
        lines.append("waiting for your answer: " + ", ".join(one_line(str(s.get("id"))) for s in waiting))
    lines += ["", f"run: {run.run_dir}", "details: ralph status" + (f" -d {shlex.quote(run.project)}" if run.project else "")]
    return Message("run_ended", f"ralph: run {words} ({run.name})", _cut("\n".join(lines)), level)
