"""The run's limits and pacing: global time, the agent's usage and rate limits, an agent that keeps
failing, and each story's cost cap and context exhaustion.

:class:`RunLimits` decides; the engine stops the run with the reason it returns.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING
from ralph.wording import counted

if TYPE_CHECKING:
    from ralph.config import RalphConfig
    from ralph.contracts import Selection
    from ralph.loop.records import IterationRecord
    from ralph.loop.runcontext import RunContext
    from ralph.tasks import TaskList


MAX_RESET_WAIT = 7 * 86400.0 + 3600.0
"""The longest wait for a usage limit's reset the loop believes: the longest window (a week) and an hour of clock skew."""


class RunClock:
    """The run's clock and the time limits it sets: the global limits, each iteration's."""

    def __init__(self, config: RalphConfig) -> None:
        self.config = config
        self.started = time.monotonic()

    def restart(self) -> None:
        """The run proper starts now (after the lock and the repository's preparation)."""
        self.started = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.started

    def global_remaining(self) -> float | None:
        """Seconds left before the global hard timeout (None: no global limit)."""
        limit = self.config.global_hard_timeout
        if limit is None:
            return None
        return max(0.0, limit * self.config.timeout_multiplier - self.elapsed())

    def iteration_timeout(self) -> float:
        """The agent's time limit for one iteration, cut to what the global limit leaves."""
        timeout = self.config.timeout * self.config.timeout_multiplier
        remaining = self.global_remaining()
        return timeout if remaining is None else max(0.1, min(timeout, remaining))


class RunLimits:
    """Keeps the streaks behind the run's limits (on the run's clock); waits out usage and rate limits."""

    def __init__(self, context: RunContext) -> None:
        self.config = context.config
        self.clock = context.clock
        self.emit = context.emit
        self.cancel = context.cancel
        self.persist = context.persist_tasks
        """Writes, notes and commits a task list the limits changed (a flagged story)."""
        self.story_cost: dict[str, float] = {}
        self.context_overflows: dict[str, int] = {}
        self._soft_warned = False
        self._failure_streak: tuple[str, int] = ("", 0)
        self._commands_streak: list[str] = []
        """The first error of each iteration in a row whose commands all failed, changing nothing."""
        self._rate_limit_streak = 0
        self._rate_limit_waited = 0.0

    # -- time ---------------------------------------------------------------------------

    def global_time_up(self) -> bool:
        """Warn once at the soft limit; True when the hard limit is reached."""
        soft = self.config.global_soft_timeout
        if soft is not None and not self._soft_warned and self.clock.elapsed() >= soft * self.config.timeout_multiplier:
            self._soft_warned = True
            self.emit("global_soft_timeout", limit=soft * self.config.timeout_multiplier)
        remaining = self.clock.global_remaining()
        return remaining is not None and remaining <= 0

    # -- rejected iterations: usage and rate limits -------------------------------------------

    def wait_out(self, record: IterationRecord, counted: bool = False) -> str | None:
        """The iteration ended on a usage or rate limit: wait it out (None), or return the reason to stop.

        ``counted``: whether the iteration counted toward ``-n`` (the events say it).
        """
        return self._usage_limit(record, counted) if record.usage_limit else self._rate_limit(record, counted)

    def answered(self) -> None:
        """The API answered an iteration: a rate-limit episode is over."""
        self._rate_limit_streak, self._rate_limit_waited = 0, 0.0

    def _usage_limit(self, record: IterationRecord, counted: bool) -> str | None:
        """Wait for the usage limit to reset, or return the reason to stop with a resume hint.

        Metered: the reset time is the API's own (the ``anthropic-ratelimit-unified-*`` headers, or a
        number field of its 429, read by the meter), never a time in a message's text (a message can
        quote the agent's request).  Not metered: the one the agent's message names.  Else, or when the
        reset is more than :data:`MAX_RESET_WAIT` away (no subscription window is longer), ``usage_limit_wait``.
        """
        import datetime as dt

        from ralph.loop.usagelimit import reset_time

        message = record.usage_limit or ""
        now = dt.datetime.now().astimezone()
        if record.limit_resets_at is not None:
            resets: dt.datetime | None = dt.datetime.fromtimestamp(record.limit_resets_at, tz=dt.timezone.utc)
        else:
            resets = None if record.metered else reset_time(message, now)
        wait = (resets - now).total_seconds() if resets else self.config.usage_limit_wait
        doubted = None
        if wait > MAX_RESET_WAIT:
            doubted = resets.strftime("%Y-%m-%d %H:%M %Z") if resets else f"{wait:.0f}s"
            wait = self.config.usage_limit_wait
        wait = max(1.0, wait)
        resume_at = (now + dt.timedelta(seconds=wait)).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
        extra = {"reset_not_believed": doubted} if doubted else {}
        self.emit("usage_limit", iteration=record.number, message=message[:500], resume_at=resume_at, wait=round(wait, 1),
                  counted=counted, **extra)
        note = (f"; its reset ({doubted}) is more than a week away, longer than any usage window: not believed, "
                f"usage_limit_wait ({self.config.usage_limit_wait:g}s) instead") if doubted else ""
        if self.config.on_usage_limit == "exit" or wait > self.config.usage_limit_max_wait:
            return (
                f"paused on the agent's usage limit ({message.strip()[:200]}{note}); state saved — run "
                f"`ralph run --resume` after {resume_at}"
            )
        self.emit("usage_limit_wait", until=resume_at, seconds=round(wait, 1))
        self.cancel.wait(wait)  # Ctrl-C ends the wait; the loop then stops as interrupted
        return None

    def _rate_limit(self, record: IterationRecord, counted: bool) -> str | None:
        """Wait out a 429/overload rejection (the API's retry-after, else exponential backoff), or stop."""
        import datetime as dt

        self._rate_limit_streak += 1
        backoff = min(
            self.config.rate_limit_max_backoff, self.config.rate_limit_wait * 2 ** (self._rate_limit_streak - 1)
        )
        hint = record.retry_after
        if hint is not None and hint >= 1:
            # the API's own figure first; a repeat within the same streak never waits less than the backoff
            wait, basis = (hint, "the API's retry-after") if self._rate_limit_streak == 1 else (max(hint, backoff), "backoff")
        else:
            wait, basis = backoff, "backoff"
        now = dt.datetime.now().astimezone()
        retry_at = (now + dt.timedelta(seconds=wait)).strftime("%H:%M:%S")
        message = (record.rate_limit or "").strip()[:300]
        self.emit(
            "rate_limit",
            iteration=record.number,
            message=message,
            wait=round(wait, 1),
            retry_at=retry_at,
            basis=basis,
            attempt=self._rate_limit_streak,
            counted=counted,
        )
        total = self._rate_limit_waited + wait
        if self.config.on_usage_limit == "exit" or total > self.config.usage_limit_max_wait:
            why = "on_usage_limit = exit" if self.config.on_usage_limit == "exit" else (
                f"waiting would pass --max-wait ({self.config.usage_limit_max_wait:g}s)"
            )
            return (
                f"paused on the API's rate limit ({message[:200]}; {why}); state saved — run "
                f"`ralph run --resume` after {retry_at}"
            )
        self._rate_limit_waited = total
        self.cancel.wait(wait)  # Ctrl-C ends the wait; the loop then stops as interrupted
        return None

    # -- an agent that keeps failing ----------------------------------------------------------

    def agent_failing(self, record: IterationRecord) -> str | None:
        """The reason to stop when the agent keeps failing: with the same error too many times in a
        row, or with every command failing and nothing changed in as many iterations in a row.

        A metered agent failed when its process exited non-zero (an error line in its output alone,
        which the agent can write, proves nothing); an agent that is not metered also when its
        output reported an error.  Commands failing (:attr:`IterationRecord.commands_failed`): the
        loop saw the tree unchanged, the agent's output reported only failed tool calls.
        """
        return self._process_failing(record) or self._commands_failing(record)

    def _commands_failing(self, record: IterationRecord) -> str | None:
        """The reason to stop after ``max_agent_failures`` iterations in a row whose commands all failed.

        An iteration with no tool call in the agent's output leaves the streak as it is (Codex does not
        report every command its sandbox could not start); any other ends it (a call that worked, calls
        only the guards denied, a change to the project).
        """
        if self.cancel.is_set():
            self._commands_streak = []
            return None
        if not record.commands_failed:
            if record.tool_calls:
                self._commands_streak = []
            return None
        self._commands_streak.append(record.tool_error or "")
        count, limit = len(self._commands_streak), self.config.max_agent_failures
        if count < limit:
            return None
        first = self._commands_streak[0].strip() or "(no output)"
        reason = " ".join(first.split())[:300]
        self.emit("agent_failing", iteration=record.number, times=count, reason=first[:1000], cause="commands")
        return (
            f"every command the agent ran failed, and nothing changed, in {counted(count, 'iteration')} in a row; the first "
            f"error: {reason} (fix it and run again; see the iterations' .agent.jsonl in the run directory)"
        )

    def _process_failing(self, record: IterationRecord) -> str | None:
        """The reason to stop when the agent's process failed with the same error too many times in a row.

        A metered iteration that changed the project ends the streak, however its process ended: the agent
        can kill its own CLI after it wrote an error line (the stream is the agent's to write), and a run
        that is getting work done is not stopped on it.  A metered agent that got a model answer is quoted
        from the meter's view (the model API's own answer to the last failed call), else its exit status,
        never from its output stream; one that got none (``Not logged in``, a rejected key) could not have
        acted, and its CLI's own error line is shown.
        """
        reported = record.agent_error is not None and not record.metered
        failed = not record.timed_out and not record.context_overflow and (
            record.exit_code not in (0, None) or reported
        )
        if not failed or self.cancel.is_set() or (record.metered and record.changed):
            self._failure_streak = ("", 0)
            return None
        from ralph.loop.gateoutput import exit_meaning

        if record.metered and record.answered:  # the agent could act, so its output may be its own words
            reason = record.api_error or exit_meaning(record.exit_code)
        else:  # not metered; or no model answer reached the CLI, whose output is then its own
            reason = record.agent_error or record.api_error or exit_meaning(record.exit_code)
        key = re.sub(r"[0-9a-f]{6,}|\d+", "#", reason.lower())  # request ids and counters differ between tries
        previous, count = self._failure_streak
        count = count + 1 if key == previous else 1
        self._failure_streak = (key, count)
        limit = self.config.max_agent_failures
        if count < limit:
            return None
        self.emit("agent_failing", iteration=record.number, times=count, reason=reason[:1000], cause="exit")
        return (
            f"the agent failed {counted(count, 'time')} in a row with the same error: {reason.strip()[:300]} "
            "(fix it and run again; see the iteration's .agent.jsonl in the run directory)"
        )

    # -- per story ------------------------------------------------------------------------------

    def story_limits(self, record: IterationRecord, selection: Selection, tasks: TaskList) -> tuple[TaskList, list[str]]:
        """Per-story cost cap and context exhaustion: flag the story rather than feed it back unchanged.

        Returns the task list (the story flagged and persisted when a limit was reached) and feedback.
        """
        story = tasks.story(selection.story_id or "")
        if story is None or story.passes:
            return tasks, []
        feedback: list[str] = []
        spent = self.story_cost[story.id] = self.story_cost.get(story.id, 0.0) + record.cost_usd
        reason = None
        cap = self.config.story_max_cost
        if cap is not None and spent >= cap:
            reason = f"per-story cost cap reached (${spent:.4f} of ${cap:.4f})"
        if record.context_overflow:
            count = self.context_overflows[story.id] = self.context_overflows.get(story.id, 0) + 1
            self.emit("context_exhausted", iteration=record.number, story=story.id, times=count)
            if count >= 2:
                reason = reason or "the context was exhausted twice: split this story into smaller ones (`ralph plan`)"
            else:
                feedback.append(
                    f"The previous iteration on {story.id} exhausted the agent's context. Do not start the "
                    f"implementation again: first split {story.id} into smaller stories in the task list (keep "
                    f"the id {story.id} for the first slice, move each criterion it drops word for word to new "
                    "stories with new ids and dependsOn), commit, and stop."
                )
        if reason is not None:
            story.failed = True
            story.failureReason = reason
            self.persist(tasks, record, f"{story.id} flagged: {reason}")
            self.emit("story_flagged", iteration=record.number, story=story.id, reason=reason)
        return tasks, feedback
