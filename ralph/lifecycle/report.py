"""``ralph report``: what a run (or the current task list) cost, per story, and whether reviews paid off.

Data come from the run directories the loop writes (``events.jsonl``, ``summary.json``;
see :mod:`ralph.loop.rundir`) and from the task list:

- per iteration: mode, story, start, seconds, cost, tokens (input, cache read, cache write,
  output, as the agent reported them), timed out, exit code, violations, gate failures;
- per story: iterations (implement / review / review-fix), reviews, ``reviewCount``,
  gate failures, violations, time, cost and tokens;
- review analytics (seed 000, "Review cycle iteration budget"): the distribution of
  ``reviewCount`` over completed stories (mostly 1s: low overhead; many 3-4s: the reviews
  catch real issues; cap hits: stories that may need a person's attention).

Rendered as a terminal table (:func:`render_text`) or as one self-contained HTML page
with an inline SVG timeline of the iterations (:func:`render_html`); no external files.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ralph.storydisplay import shown_state
from ralph.lifecycle.tables import USAGE_COLUMNS, USAGE_NAMES, aligned_rows, tokens, usage_cells, usage_of  # noqa: F401 - also importable here
from ralph.wording import counted, fit_column


MODE_COLOURS = {"implement": "#2563eb", "review": "#d97706", "review-fix": "#7c3aed"}
OTHER_COLOUR = "#6b7280"
FAIL_COLOUR = "#dc2626"


@dataclass
class IterationRow:
    run: str
    number: int
    mode: str
    story: str | None
    start: float
    """Seconds from the start of the report's first run (runs are laid end to end)."""
    seconds: float = 0.0
    cost: float = 0.0
    timed_out: bool = False
    exit_code: int | None = None
    violations: list[str] = field(default_factory=list)
    gate_failures: list[str] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)
    """Each gate run: "tests passed (sandbox)" — where its commands ran."""
    finished: bool = True
    agent: str = ""
    model: str | None = None
    verdicts: list[str] = field(default_factory=list)
    """Spec reviewers' verdicts on this iteration ("met (codex)", "NOT met (claude): ...")."""
    usage: dict[str, int] = field(default_factory=dict)
    """Tokens the agent reported: ``input``, ``cache_read``, ``cache_write``, ``output``."""

    @property
    def failed(self) -> bool:
        return bool(self.violations or self.gate_failures or self.timed_out or (self.exit_code not in (0, None)))


@dataclass
class StoryRow:
    id: str
    title: str
    state: str
    review_count: int
    auto_approved: bool
    iterations: int = 0
    implement: int = 0
    reviews: int = 0
    fixes: int = 0
    gate_failures: int = 0
    violations: int = 0
    seconds: float = 0.0
    cost: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class Analytics:
    cap: int
    completed: int
    distribution: dict[str, int]
    """Completed stories by reviewCount bucket: "0", "1", "2", "3-4", "5+" (cap and above)."""
    cap_hits: list[str]
    verdicts: list[str]

    def lines(self) -> list[str]:
        if not self.completed:
            return ["no completed stories yet: nothing to say about the review cycle"]
        spread = ", ".join(f"{key}: {value}" for key, value in self.distribution.items() if value)
        out = [f"reviewCount of {counted(self.completed, 'completed story', 'completed stories')}: {spread} (cap {self.cap})"]
        out += self.verdicts
        return out


@dataclass
class QuestionRow:
    """A question the agent asked a person (its words: data) and the person's answer, if any."""

    id: str
    story: str
    title: str
    iteration: int
    mode: str
    run: str
    asked_at: str
    question: str
    tools: list[str] = field(default_factory=list)
    """What the agent was doing (its last tool calls, one line each)."""
    answer: str | None = None
    answered_at: str | None = None
    answered_by: str | None = None

    @property
    def waiting(self) -> bool:
        return self.answer is None


@dataclass
class Report:
    title: str
    runs: list[str]
    reason: str | None
    exit_code: int | None
    cost: float
    elapsed: float
    iterations: list[IterationRow]
    stories: list[StoryRow]
    analytics: Analytics
    attention: list[str] = field(default_factory=list)
    """What needs a person (failed and blocked stories, branch, error, retry), from the last run."""
    why: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    """Per run (its name): the gate failures and quality warnings of its log, with their excerpts
    (:func:`ralph.loop.gateoutput.failures`)."""
    questions: list[QuestionRow] = field(default_factory=list)
    """The agent's questions to a person asked in these runs, and every one still waiting (oldest first)."""
    spending: Any = None
    """Where the cost and time went, and the forecast for the stories left (:class:`ralph.lifecycle.spending.Spending`)."""


# -- data ----------------------------------------------------------------------------------


def _bucket(count: int, cap: int) -> str:
    if count >= cap:
        return f"{cap}+"
    if count >= 3:
        return "3-4" if cap > 4 else str(count)
    return str(count)


def review_analytics(stories: Iterable[dict[str, Any]], cap: int = 5) -> Analytics:
    """Seed 000's reading of ``reviewCount`` over completed stories (dicts: id, passes, reviewCount, autoApproved)."""
    done = [s for s in stories if s.get("passes")]
    keys = ["0", "1", "2", "3-4", f"{cap}+"] if cap > 4 else [str(n) for n in range(cap)] + [f"{cap}+"]
    distribution = {key: 0 for key in keys}
    for story in done:
        distribution[_bucket(int(story.get("reviewCount", 0)), cap)] = distribution.get(_bucket(int(story.get("reviewCount", 0)), cap), 0) + 1
    cap_hits = [str(s["id"]) for s in done if s.get("autoApproved") or int(s.get("reviewCount", 0)) >= cap]
    verdicts: list[str] = []
    if done:
        ones = distribution.get("1", 0)
        heavy = distribution.get("3-4", 0)
        if ones * 2 > len(done):
            verdicts.append(f"mostly 1s ({ones} of {len(done)} approved at the first review): the review cycle costs little")
        if heavy and heavy * 3 >= len(done):
            verdicts.append(f"many 3-4s ({heavy} of {len(done)}): the reviews are catching real issues")
        if cap_hits:
            verdicts.append(
                f"{len(cap_hits)} cap hit{'s' if len(cap_hits) != 1 else ''} ({', '.join(cap_hits)}): auto-approved at the "
                "cap, may need manual attention"
            )
        if distribution.get("0", 0) == len(done):
            verdicts.append("no reviews recorded (skip-review runs)")
    return Analytics(cap, len(done), distribution, cap_hits, verdicts)


def _read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_iterations(run_dir: Path, offset: float = 0.0) -> list[IterationRow]:
    """The iterations of one run, from its event log (its summary when there is no log)."""
    from ralph.loop.rundir import read_events

    rows: dict[int, IterationRow] = {}
    clock = offset
    for event in read_events(run_dir):
        kind = event.get("kind")
        number = event.get("iteration")
        if not isinstance(number, int):
            continue
        if kind == "iteration_started":
            start = offset + float(event.get("elapsed", clock - offset))
            rows[number] = IterationRow(run_dir.name, number, str(event.get("mode")), event.get("story"), start, finished=False,
                                        agent=str(event.get("agent") or ""), model=event.get("model"))
        row = rows.get(number)
        if row is None:
            continue
        if kind == "iteration_finished":
            row.seconds = float(event.get("seconds") or 0)
            row.cost = float(event.get("cost") or 0)
            row.usage = usage_of(event.get("usage"))
            row.timed_out = bool(event.get("timed_out"))
            row.exit_code = event.get("exit_code")
            row.finished = True
            clock = row.start + row.seconds
        elif kind == "violation":
            row.violations.append(f"{event.get('check')}: {event.get('message')}")
        elif kind == "gate":
            verdict = "passed" if event.get("passed") else "failed"
            row.gates.append(f"{event.get('gate')} {verdict} ({event.get('where') or 'host'})")
            if event.get("passed") is False:
                row.gate_failures.append(str(event.get("gate")))
        elif kind == "gate_verdict":
            state = "met" if event.get("passed") else "NOT met"
            detail = event.get("malformed") or "; ".join(str(u.get("criterion")) for u in event.get("unmet") or [])
            row.verdicts.append(f"{event.get('gate')}: {state} ({event.get('reviewer')})" + (f": {detail}" if detail else ""))
        elif kind == "gate_failed" and not any(e for e in row.gate_failures):
            row.gate_failures.append(str(event.get("gate")))
    if rows:
        return [rows[n] for n in sorted(rows)]
    summary = _read_summary(run_dir) or {}
    out = []
    for record in summary.get("records", []):
        row = IterationRow(
            run_dir.name, int(record.get("number", 0)), str(record.get("mode")), record.get("story_id"), clock,
            float(record.get("seconds") or 0), float(record.get("cost_usd") or 0), bool(record.get("timed_out")),
            record.get("exit_code"), list(record.get("violations") or []),
        )
        row.usage = usage_of(record.get("usage"))
        clock += row.seconds
        out.append(row)
    return out


def report_questions(run_dirs: list[Path]) -> list[QuestionRow]:
    """The questions of ``run_dirs``' project that the report shows: those asked in these runs, and every
    one still waiting for an answer, from the question book next to the runs (``questions.json``); a
    question of these runs missing from the book comes from its ``question_asked`` event (no answer known)."""
    from ralph import safeio
    from ralph.loop.rundir import read_events
    from ralph.questions import BOOK_NAME, QuestionBook

    if not run_dirs:
        return []
    names = {d.name for d in run_dirs}
    base = run_dirs[-1].parent.parent
    try:
        book = QuestionBook.parse(safeio.read_text(base / BOOK_NAME, base))
    except (OSError, UnicodeDecodeError):
        book = QuestionBook()
    rows = []
    for entry in book.questions:
        if entry.run not in names and not entry.is_open:
            continue
        context = entry.context if isinstance(entry.context, dict) else {}
        tools = context.get("tools")
        rows.append(QuestionRow(
            entry.id, entry.story, str(context.get("title") or ""), entry.iteration, entry.mode, entry.run,
            entry.asked_at, entry.question, [str(t) for t in tools] if isinstance(tools, list) else [],
            entry.answer, entry.answered_at, entry.answered_by,
        ))
    known = {row.id for row in rows}
    for run_dir in run_dirs:
        for event in read_events(run_dir):
            if event.get("kind") != "question_asked" or str(event.get("id")) in known:
                continue
            tools = event.get("tools")
            rows.append(QuestionRow(
                str(event.get("id")), str(event.get("story")), str(event.get("title") or ""),
                int(event.get("iteration") or 0), str(event.get("mode") or ""), run_dir.name, str(event.get("ts") or ""),
                str(event.get("question") or ""), [str(t) for t in tools] if isinstance(tools, list) else [],
            ))
    return rows


def build_project_report(
    run_dirs: list[Path], stories: list[dict[str, Any]] | None, cap: int = 5, title: str = "ralph report"
) -> Report:
    """Combine the runs (laid end to end, oldest first) with the story states.

    ``stories`` None: the last run's ``summary.json`` stories.
    """
    from ralph.loop.gateoutput import failures
    from ralph.loop.rundir import read_events

    iterations: list[IterationRow] = []
    why: list[tuple[str, list[dict[str, Any]]]] = []
    logs: list[list[dict[str, Any]]] = []
    offset = 0.0
    reason = exit_code = None
    cost = elapsed = 0.0
    for run_dir in run_dirs:
        rows = run_iterations(run_dir, offset)
        logs.append(read_events(run_dir))
        found = failures(logs[-1])
        if found:
            why.append((run_dir.name, found))
        iterations += rows
        summary = _read_summary(run_dir)
        run_elapsed = float(summary.get("elapsed", 0)) if summary else 0.0
        end = max([row.start + row.seconds for row in rows] + [offset + run_elapsed, offset])
        offset = end + (1.0 if rows else 0.0)
        if summary:
            reason, exit_code = summary.get("reason"), summary.get("exit_code")
            cost += float(summary.get("cost_usd") or 0)
            elapsed += run_elapsed
        else:
            reason, exit_code = "no summary: the run was killed or is still running", None
            cost += sum(row.cost for row in rows)
            elapsed += sum(row.seconds for row in rows)
    if stories is None:
        summary = _read_summary(run_dirs[-1]) if run_dirs else None
        stories = list(summary.get("stories", [])) if summary else []
    known = {str(s["id"]) for s in stories}
    rows_by_id: dict[str, StoryRow] = {}
    for story in stories:
        rows_by_id[str(story["id"])] = StoryRow(
            str(story["id"]), str(story.get("title", "")), shown_state(story), int(story.get("reviewCount", 0)),
            bool(story.get("autoApproved")),
        )
    for row in iterations:
        if row.story is None:
            continue
        if row.story not in rows_by_id:
            rows_by_id[row.story] = StoryRow(row.story, "", "not in the task list", 0, False)
        story_row = rows_by_id[row.story]
        story_row.iterations += 1
        story_row.implement += row.mode == "implement"
        story_row.reviews += row.mode == "review"
        story_row.fixes += row.mode == "review-fix"
        story_row.gate_failures += len(row.gate_failures)
        story_row.violations += len(row.violations)
        story_row.seconds += row.seconds
        story_row.cost += row.cost
        for name, value in row.usage.items():
            story_row.usage[name] = story_row.usage.get(name, 0) + value
    ordered = [rows_by_id[str(s["id"])] for s in stories] + [r for i, r in rows_by_id.items() if i not in known]
    from ralph.loop.runreport import needs_a_person

    last = _read_summary(run_dirs[-1]) if run_dirs else None
    attention = needs_a_person((last or {}).get("report") or {})
    questions = report_questions(run_dirs)
    from ralph.agenttext import quote

    attention += [f"WAITING {q.story}: asked {quote(q.question, 200)} - answer: ralph answer {q.story} \"ANSWER\""
                  for q in questions if q.waiting]
    from ralph.lifecycle.spending import fold_spending

    return Report(
        title, [d.name for d in run_dirs], reason, exit_code, cost, elapsed, iterations, ordered,
        review_analytics(stories, cap), attention, why, questions, fold_spending(logs, stories) if logs else None,
    )


# -- text -------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s" if seconds % 1 else f"{int(seconds)}s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


STORY_COLUMNS = ("story", "title", "state", "iters", "impl", "reviews", "fixes", "reviewCount", "gate fails", "violations", "time", "cost")
def story_cells(row: StoryRow) -> tuple[str, ...]:
    return (
        row.id, row.title, row.state, str(row.iterations), str(row.implement), str(row.reviews), str(row.fixes),
        str(row.review_count), str(row.gate_failures), str(row.violations), _duration(row.seconds), f"${row.cost:.4f}",
    )


def render_text(report: Report, width: int | None = None) -> str:
    """The report as text; titles are cut only where the story table would not fit ``width`` columns (the
    terminal's by default)."""
    rows = fit_column([STORY_COLUMNS] + [story_cells(r) for r in report.stories], 1, width)
    widths = [max(len(row[i]) for row in rows) for i in range(len(STORY_COLUMNS))]
    lines = [report.title]
    if report.runs:
        lines.append(
            f"runs: {', '.join(report.runs)} | {counted(len(report.iterations), 'iteration')} | {_duration(report.elapsed)} | "
            f"cost ${report.cost:.4f}" + (f" | {report.reason}" if report.reason else "")
        )
    else:
        lines.append("no run recorded for this project: story states from the task list only")
    lines.append("")
    if report.attention:
        lines += ["NEEDS A PERSON:"] + [f"  {line}" for line in report.attention] + [""]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += why_text(report)
    lines += questions_text(report.questions)
    if report.spending is not None:
        lines += report.spending.lines()
    if report.iterations:
        lines += ["", "iterations (who did each):"]
        for iteration in report.iterations:
            who = f"{iteration.agent or '?'} ({iteration.model or 'default model'})"
            lines.append(f"  {iteration.run} #{iteration.number} {iteration.mode} {iteration.story or '-'} — {who}")
            lines += [f"      verdict {v}" for v in iteration.verdicts]
    lines += ["", "tokens the agent reported (input / cache read / cache write / output):"]
    lines += aligned_rows([("story", *USAGE_COLUMNS)] + [(r.id, *usage_cells(r.usage)) for r in report.stories])
    lines += aligned_rows([("iteration", "mode", "story", *USAGE_COLUMNS)] + [
        (f"#{r.number}", r.mode, r.story or "-", *usage_cells(r.usage)) for r in report.iterations
    ])  # fmt: skip
    lines += ["", "review analytics:"] + [f"  {line}" for line in report.analytics.lines()]
    gated = [row for row in report.iterations if row.gates]
    if gated:
        lines += ["", "gates (where their commands ran):"]
        lines += [f"  #{row.number} {row.story or '-'}: {', '.join(row.gates)}" for row in gated]
    return "\n".join(lines)


WHY_HEADING = "why gates failed (the output's first and last lines; the rest is in the file named)"
QUESTIONS_HEADING = "questions the agent asked a person (its words, quoted; answer with `ralph answer STORY \"ANSWER\"`)"


def questions_text(questions: list[QuestionRow]) -> list[str]:
    """Each question: story, when and where, the question (agent text, quoted), what the agent was doing,
    and the answer (the person's) or the command that gives one."""
    from ralph.agenttext import one_line, quote

    if not questions:
        return []
    lines = ["", f"{QUESTIONS_HEADING}:"]
    for row in questions:
        state = "WAITING for an answer" if row.waiting else (
            f"answered {one_line(row.answered_at or '')} ({one_line(row.answered_by or 'ralph answer')})")
        title = f" {quote(row.title, 80)}" if row.title else ""
        lines.append(f"  {one_line(row.story)}{title}: iteration {row.iteration} ({one_line(row.mode)}) of run "
                     f"{one_line(row.run)}, asked {one_line(row.asked_at)}: {state}")
        lines.append(f"    question: {quote(row.question, 2000)}")
        if row.tools:
            lines.append("    the agent was doing: " + "; ".join(quote(t, 120) for t in row.tools[-3:]))
        if row.waiting:
            lines.append(f"    answer with: ralph answer {one_line(row.story)} \"ANSWER\"")
        else:
            lines.append(f"    answer: {quote(row.answer or '', 2000)}")
    return lines


def why_text(report: Report) -> list[str]:
    """The report's gate failures and quality warnings, per run when there are several."""
    from ralph.loop.gateoutput import why_lines

    if not report.why:
        return []
    lines = ["", f"{WHY_HEADING}:"]
    for run, events in report.why:
        if len(report.why) > 1:
            lines.append(f"  run {run}:")
        lines += why_lines(events, "    " if len(report.why) > 1 else "  ")
    return lines


# -- HTML ---------------------------------------------------------------------------------------


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _ticks(total: float) -> list[float]:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400):
        if total / step <= 10:
            return [round(n * step, 3) for n in range(int(total / step + 1e-9) + 1)]
    step = total / 10
    return [n * step for n in range(11)]


def timeline_svg(report: Report, width: int = 1100) -> str:
    """An inline SVG: one lane per story, one bar per iteration (colour = mode, red outline = failed)."""
    lanes = [s.id for s in report.stories if s.iterations] or ["(none)"]
    label_w, top, lane_h, bottom = 120, 28, 30, 34
    height = top + lane_h * len(lanes) + bottom
    total = max([row.start + row.seconds for row in report.iterations] + [1.0])
    plot_w = width - label_w - 20
    scale = plot_w / total
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="Timeline of {counted(len(report.iterations), "iteration")}">'
    ]
    for index, lane in enumerate(lanes):
        y = top + index * lane_h
        fill = "#f3f4f6" if index % 2 == 0 else "#ffffff"
        parts.append(f'<rect x="{label_w}" y="{y}" width="{plot_w}" height="{lane_h}" fill="{fill}"/>')
        parts.append(f'<text x="{label_w - 8}" y="{y + lane_h / 2 + 4}" text-anchor="end" class="lane">{_esc(lane)}</text>')
    axis_y = top + lane_h * len(lanes)
    for tick in _ticks(total):
        x = label_w + tick * scale
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#d1d5db"/>')
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle" class="tick">{_esc(_duration(tick))}</text>')
    lane_of = {lane: index for index, lane in enumerate(lanes)}
    for row in report.iterations:
        lane_index = lane_of.get(row.story or "", None)
        if lane_index is None:
            continue
        x = label_w + row.start * scale
        w = max(row.seconds * scale, 3.0)
        y = top + lane_index * lane_h + 5
        colour = MODE_COLOURS.get(row.mode, OTHER_COLOUR)
        stroke = f' stroke="{FAIL_COLOUR}" stroke-width="3"' if row.failed else ""
        tip = (
            f"#{row.number} {row.mode} {row.story} ({row.run}): {row.seconds:.1f}s, ${row.cost:.4f}"
            + (", timed out" if row.timed_out else "")
            + (f", exit {row.exit_code}" if row.exit_code not in (0, None) else "")
            + "".join(f"\nviolation: {v}" for v in row.violations)
            + "".join(f"\ngate failed: {g}" for g in row.gate_failures)
        )
        parts.append(
            f'<g class="iteration" data-mode="{_esc(row.mode)}" data-iteration="{row.number}">'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane_h - 10}" rx="3" fill="{colour}"{stroke}>'
            f"<title>{_esc(tip)}</title></rect>"
        )
        if w > 22:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{y + lane_h / 2}" text-anchor="middle" class="bar">{row.number}</text>')
        parts.append("</g>")
    legend_x = label_w
    for mode, colour in [*MODE_COLOURS.items(), ("failed", FAIL_COLOUR)]:
        if mode == "failed":
            parts.append(f'<rect x="{legend_x}" y="8" width="14" height="12" fill="#fff" stroke="{colour}" stroke-width="3"/>')
        else:
            parts.append(f'<rect x="{legend_x}" y="8" width="14" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x + 20}" y="18" class="legend">{_esc(mode)}</text>')
        legend_x += 110
    parts.append("</svg>")
    return "".join(parts)


def analytics_svg(analytics: Analytics, width: int = 420) -> str:
    """Bars of the reviewCount distribution over completed stories."""
    items = list(analytics.distribution.items())
    height, top, base = 170, 16, 140
    biggest = max([v for _, v in items] + [1])
    bar_w = (width - 40) / max(len(items), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="histogram" viewBox="0 0 {width} {height}" width="{width}" height="{height}">']
    for index, (key, value) in enumerate(items):
        h = (base - top) * value / biggest
        x = 20 + index * bar_w + 6
        colour = FAIL_COLOUR if key.endswith("+") else "#059669"
        parts.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar_w - 12:.1f}" height="{h:.1f}" fill="{colour}"><title>{value} stories with reviewCount {_esc(key)}</title></rect>')
        parts.append(f'<text x="{x + (bar_w - 12) / 2:.1f}" y="{base - h - 4:.1f}" text-anchor="middle" class="tick">{value}</text>')
        parts.append(f'<text x="{x + (bar_w - 12) / 2:.1f}" y="{base + 16}" text-anchor="middle" class="lane">{_esc(key)}</text>')
    parts.append(f'<line x1="14" y1="{base}" x2="{width - 14}" y2="{base}" stroke="#9ca3af"/></svg>')
    return "".join(parts)


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], classes: Iterable[str] | None = None, table_class: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for index, row in enumerate(rows):
        cls = list(classes)[index] if classes is not None else ""
        body.append(f'<tr class="{_esc(cls)}">' + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>")
    return f'<table class="{table_class}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _attention_html(lines: list[str]) -> str:
    if not lines:
        return ""
    return '<section class="attention"><h2>Needs a person</h2><pre>' + _esc("\n".join(lines)) + "</pre></section>"


def _questions_html(questions: list[QuestionRow]) -> str:
    """The questions, escaped: the agent's words and the person's answer each in a block of its own."""
    if not questions:
        return ""
    parts = ['<section class="questions"><h2>Questions for a person</h2>']
    for row in questions:
        state = "waiting for an answer" if row.waiting else f"answered {row.answered_at or ''} ({row.answered_by or 'ralph answer'})"
        head = f"{row.story}" + (f" “{row.title}”" if row.title else "") + (
            f": iteration {row.iteration} ({row.mode}) of run {row.run}, asked {row.asked_at}")
        doing = (f'<div class="doing">the agent was doing: {_esc("; ".join(row.tools[-3:]))}</div>' if row.tools else "")
        if row.waiting:
            command = 'ralph answer ' + row.story + ' "ANSWER"'
            answer = f'<div class="answer-with">answer with: <code>{_esc(command)}</code></div>'
        else:
            answer = '<div class="k">the answer (the person’s)</div><pre class="answer">' + _esc(row.answer) + "</pre>"
        parts.append(f'<div class="question {"waiting" if row.waiting else "answered"}" data-story="{_esc(row.story)}">'
                     f'<b>{_esc(head)}</b> — <span class="state">{_esc(state)}</span>'
                     f'<div class="k">the question (the agent’s words)</div><pre>{_esc(row.question)}</pre>'
                     f"{doing}{answer}</div>")
    parts.append("</section>")
    return "".join(parts)


def _spending_html(report: Report) -> str:
    """Where the cost and time went (a table by kind) and the forecast for the stories left."""
    from ralph.loop.runreport import format_elapsed

    spending = report.spending
    if spending is None or not any(spend.count for spend in spending.kinds.values()):
        return ""
    total = spending.cost
    rows = [(kind, f"${spend.cost:.4f}", f"{spend.cost / total * 100:.0f}%" if total > 0 else "-",
             format_elapsed(spend.seconds), str(spend.count))
            for kind, spend in spending.kinds.items() if spend.count]
    table = _table(("kind", "cost", "share", "agent time", "iterations / sessions"), rows, table_class="spending")
    return (f'<section class="spending"><h2>Where the cost and time went</h2>{table}'
            f'<p class="forecast">{_esc(spending.forecast_line())}</p></section>')


def _why_html(report: Report) -> str:
    """The gate failures and quality warnings: what failed, the excerpt (verbatim, escaped), where the rest is."""
    from ralph.loop.gateoutput import excerpt, exit_meaning

    if not report.why:
        return ""
    parts = ['<section class="why"><h2>Why gates failed</h2>']
    for run, events in report.why:
        for event in events:
            where = (f'<div class="where">full output: <code>{_esc(event["log"])}</code></div>'
                     if event.get("log") else "")
            head = f"#{event.get('iteration')} {event.get('story')}" + (f" ({run})" if len(report.why) > 1 else "")
            if event.get("kind") == "quality_warning":
                parts.append(f'<div class="failure"><b>{_esc(head)}: quality warning ({_esc(event.get("gate"))})</b>'
                             f"<pre>{_esc(event.get('warning'))}</pre>{where}</div>")
                continue
            shown = event.get("excerpt")
            if shown is None:
                shown = excerpt(str(event.get("output") or ""))[0]
            status = exit_meaning(event.get("exit_code"), bool(event.get("timed_out")))
            parts.append(f'<div class="failure"><b>{_esc(head)}: {_esc(event.get("gate"))} gate failed '
                         f"({_esc(status)})</b><pre>{_esc(shown)}</pre>{where}</div>")
    parts.append("</section>")
    return "".join(parts)


def render_html(report: Report) -> str:
    from ralph.templates import render, template_text

    summary = [
        ("stories", f"{sum(1 for s in report.stories if s.state.startswith(('approved', 'done')))} of {len(report.stories)} done"),
        ("iterations", str(len(report.iterations))),
        ("time", _duration(report.elapsed)),
        ("cost", f"${report.cost:.4f}"),
    ]
    if report.reason:
        summary.append(("outcome", report.reason))
    cards = "".join(f'<div class="card"><div class="k">{_esc(k)}</div><div class="v">{_esc(v)}</div></div>' for k, v in summary)
    story_rows = [(*story_cells(row), *usage_cells(row.usage)) for row in report.stories]
    story_classes = ["cap" if row.auto_approved else ("ok" if row.state.startswith(("approved", "done")) else "") for row in report.stories]
    iteration_rows = [
        (
            str(row.number), row.run, row.mode, row.story or "-", f"{row.agent or '?'} ({row.model or 'default model'})",
            _duration(row.seconds), f"${row.cost:.4f}", *usage_cells(row.usage),
            "yes" if row.timed_out else "", "; ".join(row.violations) or "", ", ".join(row.gate_failures) or "",
            "; ".join(row.verdicts),
            ", ".join(row.gates),
        )
        for row in report.iterations
    ]
    values = {
        "TITLE": _esc(report.title),
        "RUNS": _esc(", ".join(report.runs) or "no run recorded: story states from the task list"),
        "CARDS": cards,
        "TIMELINE": timeline_svg(report) if report.iterations else '<p class="empty">No iterations recorded.</p>',
        "STORIES": _table((*STORY_COLUMNS, *USAGE_COLUMNS), story_rows, story_classes, table_class="stories"),
        "ATTENTION": _attention_html(report.attention),
        "WHY": _why_html(report),
        "QUESTIONS": _questions_html(report.questions),
        "SPENDING": _spending_html(report),
        "HISTOGRAM": analytics_svg(report.analytics)
        if any(s.reviews or s.review_count for s in report.stories)
        else '<p class="empty">No reviews in this report, so no review chart.</p>',
        "ANALYTICS": "".join(f"<li>{_esc(line)}</li>" for line in report.analytics.lines()),
        "ITERATIONS": _table(
            ("#", "run", "mode", "story", "agent (model)", "time", "cost", "tokens in", "cache read", "cache write",
             "tokens out", "timed out", "violations", "gate failures", "verdicts", "gates (where they ran)"),
            iteration_rows, table_class="iterations",
        ),  # fmt: skip
    }
    return render(template_text("report/report.html"), values)


# -- entry point for the CLI ----------------------------------------------------------------------


def project_report(
    project_dir: Path,
    run: str | None = None,
    all_runs: bool = False,
    tasks: Any = None,
    cap: int = 5,
    state_dir: str | None = None,
    policy: Any = None,
) -> Report:
    """The report the CLI shows.

    - default: the latest run, story states from its summary (the current task list when
      the run has no summary, e.g. it was killed);
    - ``run``: that run (a directory name under the project's runs, or a path);
    - ``all_runs``: the current task list with every run of the project laid end to end.
    """
    from ralph.errors import UsageError
    from ralph.loop.rundir import latest_run, runs_dir
    from ralph.loop.runreport import summary_stories

    parent = runs_dir(project_dir, state_dir)
    title = f"ralph report: {tasks.project if tasks is not None and tasks.project else project_dir.name}"
    current = summary_stories(tasks, policy) if tasks is not None else None  # the policy words each story's state
    if all_runs:
        dirs = sorted((p for p in parent.iterdir() if p.is_dir()), key=lambda p: p.name) if parent.is_dir() else []
        if current is not None:
            ids = {s["id"] for s in current}
            dirs = [d for d in dirs if any(row.story in ids for row in run_iterations(d))]
        return build_project_report(dirs, current, cap, title)
    run_dir: Path | None
    if run:
        candidate = Path(run)
        run_dir = candidate if candidate.is_dir() else parent / run
        if not run_dir.is_dir():
            known = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
            raise UsageError(f"no run {run!r} (runs of this project: {', '.join(known[-5:]) or 'none'})")
    else:
        run_dir = latest_run(project_dir, state_dir)
    if run_dir is None:
        return build_project_report([], current or [], cap, title)
    stories = None if _read_summary(run_dir) else current
    return build_project_report([run_dir], stories, cap, title)
