"""Where a run's money and time went, and what the rest will cost: for ``ralph status`` and ``ralph report``.

Folded from a run's event log (``iteration_finished``, ``gate_failed``, ``final_check_failed``,
``extra_session_cost``, ``story_states``), so it works while the run goes on.  Each iteration goes
to one kind:

- ``first implementation``: a story's first implement iteration;
- ``retries``: another implement iteration of a story no gate sent back (the last one left it
  unfinished, broke a rule, timed out ...);
- ``send-backs``: the iteration after a hard gate failed the story (the gate sent it back);
- ``review rounds``: review iterations and the review-fix iterations a review asked for;
- ``gate sessions``: the extra agent sessions of gates (the quality and spec reviewers);
- ``other``: an iteration on no story.

The forecast for the stories left is this history's own: what a story done in these runs cost
(and took, with the loop's share of the time between iterations), times the stories not done,
less what they have spent already.  No story done yet: no forecast.

Standard library only (``ralph status`` imports no pydantic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["KINDS", "Forecast", "Spend", "Spending", "fold_spending"]

KINDS = ("first implementation", "retries", "send-backs", "review rounds", "gate sessions", "other")


@dataclass
class Spend:
    """Iterations (or sessions), USD and seconds of one kind."""

    count: int = 0
    cost: float = 0.0
    seconds: float = 0.0


@dataclass
class Forecast:
    """What the stories left will cost and take, from the done stories' history."""

    remaining: list[str]
    basis: int
    """Stories done in these runs the figures come from (0: no forecast)."""
    cost: float = 0.0
    seconds: float = 0.0
    per_story_cost: float = 0.0
    per_story_seconds: float = 0.0


@dataclass
class Spending:
    """A run's (or several runs') spend by kind, per story, and the forecast."""

    kinds: dict[str, Spend] = field(default_factory=lambda: {kind: Spend() for kind in KINDS})
    stories: dict[str, Spend] = field(default_factory=dict)
    iteration_seconds: float = 0.0
    elapsed: float = 0.0
    done_at_start: set[str] = field(default_factory=set)
    forecast: Forecast | None = None

    @property
    def cost(self) -> float:
        return sum(spend.cost for spend in self.kinds.values())

    def lines(self) -> list[str]:
        """The text ``ralph status`` and ``ralph report`` print."""
        from ralph.loop.runreport import format_elapsed

        used = [(kind, spend) for kind, spend in self.kinds.items() if spend.count]
        if not used:
            return []
        total = self.cost
        lines = ["", "where the cost and time went (cost, share, agent time, iterations or sessions):"]
        width = max(len(kind) for kind, _ in used)
        for kind, spend in used:
            share = f"{spend.cost / total * 100:.0f}%" if total > 0 else "-"
            lines.append(f"  {kind.ljust(width)}  ${spend.cost:.4f}  {share:>4}  {format_elapsed(spend.seconds):>7}  "
                         f"{spend.count}")
        lines.append("  " + self.forecast_line())
        return lines

    def forecast_line(self) -> str:
        """``forecast for the 3 stories left (from the 2 done in this history): about $0.45 and 0:04:10 more``."""
        from ralph.loop.runreport import format_elapsed

        forecast = self.forecast
        if forecast is None or not forecast.remaining:
            return "forecast: no story left to do"
        from ralph.wording import counted

        left = f"{counted(len(forecast.remaining), 'story')} left"
        if not forecast.basis:
            return f"forecast for the {left}: none yet (no story was done in these runs to learn from)"
        return (f"forecast for the {left} (from the {forecast.basis} done here: ${forecast.per_story_cost:.4f} and "
                f"{format_elapsed(forecast.per_story_seconds)} each): about ${forecast.cost:.4f} and "
                f"{format_elapsed(forecast.seconds)} more")

    def as_dict(self) -> dict[str, Any]:
        """For ``ralph status --json``."""
        forecast = self.forecast
        return {
            "kinds": {kind: vars(spend) for kind, spend in self.kinds.items()},
            "forecast": None if forecast is None else {
                "remaining": forecast.remaining, "basis": forecast.basis, "cost": round(forecast.cost, 6),
                "seconds": round(forecast.seconds, 1),
            },
        }


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def fold_spending(runs: Iterable[list[dict[str, Any]]], stories: list[dict[str, Any]] | None = None) -> Spending:
    """The spending of ``runs`` (each a run's events, oldest run first) and the forecast for ``stories``
    (each a summary story: id, passes, failed, waiting; None: the last ``story_states`` of the runs)."""
    spending = Spending()
    latest: list[dict[str, Any]] | None = None
    first_states = True
    for events in map(list, runs):
        sent_back: set[str] = set()
        implemented: set[str] = set()
        for event in events:
            kind = event.get("kind")
            if kind == "story_states" and isinstance(event.get("stories"), list):
                latest = event["stories"]
                if first_states:  # what was done before the first of these runs does not teach anything
                    spending.done_at_start = {str(s.get("id")) for s in latest if isinstance(s, dict) and s.get("passes")}
                    first_states = False
            elif kind in ("gate_failed", "final_check_failed") and event.get("story"):
                sent_back.add(str(event["story"]))
            elif kind == "extra_session_cost":
                spend = spending.kinds["gate sessions"]
                spend.count += 1
                spend.cost += _number(event.get("cost"))
            elif kind == "iteration_finished":
                story = str(event["story"]) if event.get("story") else None
                mode = str(event.get("mode") or "")
                cost, seconds = _number(event.get("cost")), _number(event.get("seconds"))
                spending.iteration_seconds += seconds
                if story is None:
                    bucket = "other"
                elif story in sent_back and mode in ("implement", "review-fix"):
                    bucket = "send-backs"
                elif mode in ("review", "review-fix"):
                    bucket = "review rounds"
                elif story not in implemented:
                    bucket = "first implementation"
                else:
                    bucket = "retries"
                if story is not None:
                    sent_back.discard(story)
                    if mode == "implement":
                        implemented.add(story)
                    per_story = spending.stories.setdefault(story, Spend())
                    per_story.count += 1
                    per_story.cost += cost
                    per_story.seconds += seconds
                spend = spending.kinds[bucket]
                spend.count += 1
                spend.cost += cost
                spend.seconds += seconds
        # the run's wall time: its end's figure, else the latest event's (a run still going)
        spending.elapsed += max((_number(event.get("elapsed")) for event in events), default=0.0)
    spending.forecast = _forecast(spending, stories if stories is not None else latest or [])
    return spending


def _forecast(spending: Spending, stories: list[dict[str, Any]]) -> Forecast:
    remaining = [str(s.get("id")) for s in stories if isinstance(s, dict) and not s.get("passes") and not s.get("failed")]
    done = [str(s.get("id")) for s in stories if isinstance(s, dict) and s.get("passes")
            and str(s.get("id")) not in spending.done_at_start and str(s.get("id")) in spending.stories]
    if not done:
        return Forecast(remaining, 0)
    cost = sum(spending.stories[sid].cost for sid in done) / len(done)
    agent_seconds = sum(spending.stories[sid].seconds for sid in done) / len(done)
    overhead = max(1.0, spending.elapsed / spending.iteration_seconds) if spending.iteration_seconds else 1.0
    seconds = agent_seconds * overhead
    spent = {sid: spending.stories.get(sid, Spend()) for sid in remaining}
    return Forecast(
        remaining, len(done),
        cost=sum(max(0.0, cost - spent[sid].cost) for sid in remaining),
        seconds=sum(max(0.0, seconds - spent[sid].seconds * overhead) for sid in remaining),
        per_story_cost=cost, per_story_seconds=seconds,
    )
