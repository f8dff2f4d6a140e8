"""One run as the dashboard shows it, folded from its event log (and its summary once it has one).

:class:`RunFold` takes the events of ``events.jsonl`` one at a time (in the page's first render and,
line by line, in the live stream) and keeps what the sections show: the header (state, iteration,
cost, tokens), the stories with their gates, every gate run with its output, the questions waiting
for a person, and the latest events as one-line rows.  Everything here is text the page escapes;
control characters are taken out before anything is shown (agent text is data).

Standard library only: the dashboard's tests fold recorded logs without the web stack.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ralph.agenttext import one_line, safe_data, strip_controls
from ralph.storydisplay import shown_state

__all__ = ["GateRun", "Question", "RunFold", "Row", "clean", "describe", "short"]

RECENT_ROWS = 300
"""How many of the latest events a run page keeps as rows."""
OUTPUT_CHARS = 20_000
"""A gate output longer than this is cut on the page (the whole output is in its file)."""

def clean(value: Any, limit: int | None = None) -> str:
    """``value`` as text without escape sequences and control characters (newlines and tabs kept), cut to ``limit``."""
    text = strip_controls(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f" [... {len(text) - limit} more characters]"
    return text


def short(value: Any, limit: int = 240) -> str:
    """``value`` on one line (line breaks shown as ``⏎``), without control characters, cut to ``limit``."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return clean(one_line(text).replace("\t", " "), limit)


def _exit_meaning(exit_code: Any, timed_out: bool = False) -> str:
    from ralph.loop.gateoutput import exit_meaning

    return exit_meaning(exit_code if isinstance(exit_code, int) else None, timed_out)


@dataclass
class GateRun:
    """One gate's run on one iteration, with what it printed."""

    iteration: int
    story: str
    gate: str
    passed: bool | None
    hard: bool = True
    status: str = ""
    """``passed``, ``exit 1``, ``timed out`` ... in plain words."""
    output: str = ""
    """What the page shows: the gate event's output (at most 40 lines), or a failure's excerpt."""
    log: str | None = None
    """The file name (in the run directory) of the gate's whole output, when the loop kept it."""
    verdict: str = ""
    """A spec reviewer's verdict, a quality warning."""
    seconds: float | None = None


@dataclass
class Question:
    """A question the agent asked a person (the story waits for the answer)."""

    story: str
    question: str
    iteration: int | None = None
    asked: str = ""
    context: str = ""
    """What the agent was doing (its last tool calls, one a line)."""
    answered: str | None = None
    """Set once the question is answered."""
    id: str = ""
    title: str = ""
    """The story's title when the question was asked."""
    run: str = ""
    """The run the question was asked in."""


@dataclass
class Row:
    """One event as a line of the run's stream."""

    offset: int
    """Where the event's line ends in ``events.jsonl`` (the stream's event id)."""
    time: str
    kind: str
    iteration: str
    text: str
    tone: str = ""
    """``ok``, ``fail``, ``warn`` or empty: how the row is coloured."""


_KIND_TONE = {
    "gate_failed": "fail", "violation": "fail", "story_failed": "fail", "loop_crashed": "fail", "run_stopped": "fail",
    "agent_failed": "fail", "transition_undone": "warn", "task_list_restored": "warn", "protected_file_restored": "warn",
    "quality_warning": "warn", "rate_limit": "warn", "usage_limit": "warn", "iteration_timeout": "warn",
    "false_completion": "warn", "escalation": "warn", "story_flagged": "warn", "question_asked": "warn",
}


def describe(event: dict[str, Any]) -> str:
    """One line saying what ``event`` was, for the stream (agent text shortened, never interpreted)."""
    kind = str(event.get("kind"))
    get = event.get
    if kind == "run_started":
        return (f"run started: runner {get('runner')}, agent {get('agent')}, policy {get('policy')}, "
                f"{get('stories')} stories, at most {get('max_iterations')} iterations")
    if kind == "iteration_started":
        model = f" {get('model')}" if get("model") else ""
        return f"{get('mode')} {get('story')} ({get('agent')}{model}): {short(get('reason') or '', 160)}"
    if kind == "iteration_finished":
        tokens = sum(_usage(get("usage")).values())
        return (f"{get('mode')} {get('story')} finished: exit {get('exit_code')}"
                + (" (timed out)" if get("timed_out") else "")
                + f", {get('seconds')}s, ${float(get('cost') or 0):.4f}, {tokens} tokens"
                + (f", {get('violations')} violations" if get("violations") else ""))
    if kind == "agent_event":
        data = _mapping(get("data"))
        kind_of = get("type")
        if kind_of == "tool_use":
            tool_input = data.get("input")
            shown = tool_input.get("command") if isinstance(tool_input, dict) and "command" in tool_input else tool_input
            return f"tool {short(data.get('name'), 60)}: {short(shown if shown is not None else '', 400)}"
        return f"{kind_of}: {short(get('text') or '', 400)}"
    if kind == "gate":
        verdict = "passed" if get("passed") else ("timed out" if get("timed_out") else "FAILED")
        return f"gate {get('gate')} {verdict} ({get('story')}), exit {get('exit_code')}, {get('seconds')}s"
    if kind == "gate_failed":
        return (f"gate {get('gate')} failed for {get('story')} ({_exit_meaning(get('exit_code'), bool(get('timed_out')))}): "
                f"{short(get('excerpt') or '', 300)}")
    if kind == "violation":
        return f"{get('severity') or 'error'} [{get('check')}] {get('story') or ''}: {short(get('message') or '', 400)}"
    if kind == "model_request":
        cost = get("cost")
        return (f"model call {get('model')} -> {get('status')}, {sum(_usage(get('usage')).values())} tokens"
                + (f", ${float(cost):.4f}" if isinstance(cost, (int, float)) else ""))
    if kind == "run_finished":
        return f"run finished (exit {get('exit_code')}): {short(get('reason') or '', 300)}"
    if kind == "hook":
        return f"hook {get('event')} {get('tool') or ''}: {short(get('output') or '', 300)}"
    payload = {k: v for k, v in event.items() if k not in ("kind", "ts", "elapsed", "iteration")}
    return short(payload, 400) if payload else ""


def _tools(value: Any) -> str:
    """The agent's last tool calls (one line each), as the question's context."""
    return clean("\n".join(str(line) for line in value), 8000) if isinstance(value, list) else clean(value or "", 8000)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _time_of(event: dict[str, Any]) -> str:
    stamp = event.get("ts")
    return stamp[11:19] if isinstance(stamp, str) and len(stamp) >= 19 else ""


def _usage(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def _add(total: dict[str, int], usage: dict[str, int]) -> None:
    for name, value in usage.items():
        total[name] = total.get(name, 0) + value


@dataclass
class RunFold:
    """What the page shows of one run; :meth:`feed` each event in order (and :meth:`finish` the summary)."""

    meta: dict[str, Any] = field(default_factory=dict)
    """``run_started``'s payload: project, runner, agent, policy, max_iterations ..."""
    started: str = ""
    current: dict[str, Any] | None = None
    """The last ``iteration_started`` (None before the first)."""
    iterations: int = 0
    cost: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    model_requests: int = 0
    stories: list[dict[str, Any]] = field(default_factory=list)
    """Each story as the loop last reported it (``story_states`` / ``run_finished``: id, title, passes ...)."""
    story_cost: dict[str, float] = field(default_factory=dict)
    story_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    story_iterations: dict[str, int] = field(default_factory=dict)
    gates: list[GateRun] = field(default_factory=list)
    questions: dict[str, Question] = field(default_factory=dict)
    """Questions by id (story id when the loop gives none), answered ones included."""
    book: list[Question] | None = None
    """The project's questions waiting for an answer, from its question book (the truth once read);
    None: the book was not read, the run's own ``question_asked`` events stand in."""
    ended: dict[str, Any] | None = None
    """``run_finished``'s payload (records left out), or the summary's."""
    note: str = ""
    """What the loop waits for besides the agent (a rate limit, the usage limit)."""
    recent: deque[Row] = field(default_factory=lambda: deque(maxlen=RECENT_ROWS))
    events: int = 0

    def feed(self, event: dict[str, Any], offset: int = 0) -> set[str]:
        """Fold ``event`` (its line ending at ``offset``); the names of the sections it changed."""
        event = safe_data(event)  # every string in it, from the project's name to a story title, stripped
        kind = str(event.get("kind"))
        self.events += 1
        changed = {"stream"}
        row = Row(offset, _time_of(event), kind, str(event.get("iteration") or ""), describe(event), _KIND_TONE.get(kind, ""))
        if kind == "gate":
            row.tone = "ok" if event.get("passed") else "fail"
        self.recent.append(row)
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            changed |= handler(event)
        return changed

    # -- the kinds that change a section ------------------------------------------------------

    def _on_run_started(self, event: dict[str, Any]) -> set[str]:
        self.meta = {k: v for k, v in event.items() if k not in ("kind", "elapsed")}
        self.started = str(event.get("ts") or "")
        return {"header"}

    def _on_iteration_started(self, event: dict[str, Any]) -> set[str]:
        self.current = event
        self.iterations = max(self.iterations, int(event.get("iteration") or 0))
        self.note = ""
        story = event.get("story")
        if story and not any(s.get("id") == story for s in self.stories):
            self.stories.append({"id": str(story), "title": "", "state": "?"})
        return {"header", "stories"}

    def _on_iteration_finished(self, event: dict[str, Any]) -> set[str]:
        cost_so_far = event.get("cost_so_far")
        cost = float(event.get("cost") or 0)
        self.cost = float(cost_so_far) if isinstance(cost_so_far, (int, float)) else self.cost + cost
        usage = _usage(event.get("usage"))
        _add(self.usage, usage)
        story = event.get("story")
        if story:
            sid = str(story)
            self.story_cost[sid] = self.story_cost.get(sid, 0.0) + cost
            _add(self.story_usage.setdefault(sid, {}), usage)
            self.story_iterations[sid] = self.story_iterations.get(sid, 0) + 1
        return {"header", "stories"}

    def _on_extra_session_cost(self, event: dict[str, Any]) -> set[str]:
        if isinstance(event.get("cost_so_far"), (int, float)):
            self.cost = float(event["cost_so_far"])
        _add(self.usage, _usage(event.get("usage")))
        return {"header"}

    def _on_model_request(self, event: dict[str, Any]) -> set[str]:
        self.model_requests += 1
        return {"header"}

    def _on_story_states(self, event: dict[str, Any]) -> set[str]:
        stories = event.get("stories")
        if isinstance(stories, list):
            self.stories = [s for s in stories if isinstance(s, dict) and "id" in s]
        return {"header", "stories"}

    def _on_gate(self, event: dict[str, Any]) -> set[str]:
        passed = event.get("passed")
        self.gates.append(GateRun(
            int(event.get("iteration") or 0), str(event.get("story") or ""), str(event.get("gate")),
            passed if isinstance(passed, bool) else None, bool(event.get("hard", True)),
            "passed" if passed else _exit_meaning(event.get("exit_code"), bool(event.get("timed_out"))),
            clean(event.get("output") or "", OUTPUT_CHARS), _log_name(event.get("log")),
            seconds=event.get("seconds") if isinstance(event.get("seconds"), (int, float)) else None,
        ))
        return {"gates", "stories"}

    def _on_gate_failed(self, event: dict[str, Any]) -> set[str]:
        run = self._gate_run(event)
        if run.passed is None:
            run.passed = False
        run.status = _exit_meaning(event.get("exit_code"), bool(event.get("timed_out")))
        if event.get("excerpt") and not run.output:
            run.output = clean(event["excerpt"], OUTPUT_CHARS)
        run.log = run.log or _log_name(event.get("log"))
        return {"gates", "stories"}

    def _on_gate_verdict(self, event: dict[str, Any]) -> set[str]:
        run = self._gate_run(event)
        unmet = "; ".join(str(u.get("criterion")) for u in event.get("unmet") or [] if isinstance(u, dict))
        detail = event.get("malformed") or unmet
        run.verdict = clean(("met" if event.get("passed") else "NOT met") + (f" ({event.get('reviewer')})" if event.get("reviewer") else "")
                            + (f": {detail}" if detail else ""), 4000)
        return {"gates"}

    def _on_quality_warning(self, event: dict[str, Any]) -> set[str]:
        run = self._gate_run(event)
        run.verdict = clean(f"quality warning: {event.get('warning')}", 4000)
        run.log = run.log or _log_name(event.get("log"))
        return {"gates"}

    def _gate_run(self, event: dict[str, Any]) -> GateRun:
        """The gate run ``event`` is about (the latest of its iteration and gate), made when there is none."""
        iteration, gate = int(event.get("iteration") or 0), str(event.get("gate"))
        for run in reversed(self.gates):
            if run.iteration == iteration and run.gate == gate:
                return run
        run = GateRun(iteration, str(event.get("story") or ""), gate, None)
        self.gates.append(run)
        return run

    def _on_rate_limit(self, event: dict[str, Any]) -> set[str]:
        self.note = f"rate limited: retrying at {clean(event.get('retry_at'), 80)}"
        return {"header"}

    def _on_usage_limit_wait(self, event: dict[str, Any]) -> set[str]:
        self.note = f"usage limit: waiting until {clean(event.get('until'), 80)}"
        return {"header"}

    def _on_question_asked(self, event: dict[str, Any]) -> set[str]:
        question = Question(
            str(event.get("story") or ""), clean(event.get("question") or "", 8000),
            event.get("iteration") if isinstance(event.get("iteration"), int) else None, str(event.get("ts") or ""),
            _tools(event.get("tools")), None, str(event.get("id") or event.get("story") or ""),
        )
        self.questions[question.id] = question
        return {"questions", "stories", "header"}

    def _on_question_answered(self, event: dict[str, Any]) -> set[str]:
        ids = event.get("ids") if isinstance(event.get("ids"), list) else None
        for question in self.questions.values():
            if question.answered is None and (question.id in ids if ids is not None else question.story == event.get("story")):
                question.answered = f"answered ({clean(event.get('by') or 'a person', 40)})"
        return {"questions", "stories", "header"}

    def _on_story_parked(self, event: dict[str, Any]) -> set[str]:
        return {"questions", "stories"}

    def _on_story_released(self, event: dict[str, Any]) -> set[str]:
        return {"questions", "stories"}

    def set_book(self, open_questions: list[Question] | None) -> bool:
        """The project's open questions from its question book (None: unreadable); whether that changed anything."""
        if open_questions == self.book:
            return False
        self.book = open_questions
        return True

    def _on_run_finished(self, event: dict[str, Any]) -> set[str]:
        self.finish({k: v for k, v in event.items() if k != "records"})
        return {"header", "stories", "questions"}

    def finish(self, summary: dict[str, Any]) -> None:
        """The run ended: take its totals and story states from ``run_finished`` or ``summary.json``."""
        ended: dict[str, Any] = safe_data({k: v for k, v in summary.items() if k != "records"})
        self.ended = summary = ended
        if isinstance(summary.get("cost_usd"), (int, float)):
            self.cost = float(summary["cost_usd"])
        if isinstance(summary.get("iterations"), int):
            self.iterations = summary["iterations"]
        stories = summary.get("stories")
        if isinstance(stories, list) and stories:
            self.stories = [s for s in stories if isinstance(s, dict) and "id" in s]
        if not self.usage and isinstance(summary.get("usage"), dict):
            self.usage = _usage(summary["usage"])
        self.note = ""

    # -- what the page asks ------------------------------------------------------------------

    @property
    def pending(self) -> list[Question]:
        """Questions still waiting for an answer (the project's, from its book, once read)."""
        if self.book is not None:
            return self.book
        return [q for q in self.questions.values() if q.answered is None]

    @property
    def waiting_stories(self) -> list[str]:
        """The stories with a question waiting, each once, in the order asked."""
        return list(dict.fromkeys(q.story for q in self.pending))

    @property
    def tokens(self) -> int:
        """Every token of the run (input, cache read and write, output)."""
        return sum(self.usage.values())

    def story_state(self, story: dict[str, Any]) -> str:
        """A story's state in words: waiting for a person, else the policy's word the loop reported
        (:func:`ralph.storydisplay.shown_state`)."""
        if any(q.story == story.get("id") for q in self.pending):
            return "waiting for a person"
        return shown_state(story)

    def latest_gates(self, story: str) -> list[GateRun]:
        """The latest run of each gate on ``story``."""
        latest: dict[str, GateRun] = {}
        for run in self.gates:
            if run.story == story:
                latest[run.gate] = run
        return list(latest.values())

    def done(self) -> tuple[int, int]:
        """(stories done, stories)."""
        done = sum(1 for s in self.stories if s.get("passes"))
        total = len(self.stories) or int(self.meta.get("stories") or 0)
        return done, total


def _log_name(value: Any) -> str | None:
    """The file name of a kept gate output (``iteration-NNN.gate-NAME.txt``); None for anything else."""
    if not isinstance(value, str):
        return None
    name = value.replace("\\", "/").rsplit("/", 1)[-1]
    return name if GATE_LOG.fullmatch(name) else None


GATE_LOG = re.compile(r"iteration-\d{3,}\.gate-[A-Za-z0-9_.-]+\.txt")
"""The names of the gate output files the dashboard serves from a run directory."""
