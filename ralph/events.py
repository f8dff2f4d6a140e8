"""The kinds of loop events, with the payload each one carries.

``LoopEvent.kind`` is one of these.  ``EventKind`` is a ``str`` enum, so a
reporter may compare with plain strings (``event.kind == "run_started"``) or
with members (``event.kind is EventKind.RUN_STARTED`` does NOT hold for a kind
read back from the JSONL log; compare with ``==``).  Every payload is
JSON-serialisable and, when the loop emits it, also carries ``elapsed``
(seconds since the run started).  New keys may be added to a payload in a
minor API version; keys are never removed or renamed without a major one.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["EventKind"]


class EventKind(str, Enum):
    """What happened in the loop.  Each member's ``__doc__`` says when it is emitted and its payload."""

    def __new__(cls, value: str, doc: str) -> EventKind:
        member = str.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    def __str__(self) -> str:
        return str(self.value)

    @property
    def doc(self) -> str:
        """When the event is emitted and what its payload holds."""
        return self.__doc__ or ""

    # -- the run ------------------------------------------------------------------------------
    RUN_STARTED = (
        "run_started",
        "The run began (lock taken, run directory made). Payload: project, run_dir, runner, agent, "
        "policy, max_iterations, review_cap, stories (count), fallback_reason (why `auto` chose "
        "direct, or empty), output (normal/quiet/verbose).",
    )
    USER_WORK_STASHED = (
        "user_work_stashed",
        "Uncommitted work was stashed before the run (dirty_start = \"stash\"). Payload: stash "
        "(the stash ref), message (how to get it back).",
    )
    EARLIER_STATE_ARCHIVED = (
        "earlier_state_archived",
        "`--fresh` moved an interrupted run's story state aside. Payload: path.",
    )
    EARLIER_STATE_CONTINUED = (
        "earlier_state_continued",
        "`--resume` (or the default) goes on with an interrupted run's story state. Payload: stories.",
    )
    BUILTIN_PROMPT = (
        "builtin_prompt",
        "The ralph directory has no prompt.md: ralph's built-in prompt is used. Payload: ralph_dir.",
    )
    WORK_BRANCH = (
        "work_branch",
        "The run works on (or switched to) the task list's branch. Payload: message.",
    )
    FAILURE_BRANCHES_ARCHIVED = (
        "failure_branches_archived",
        "`--fresh` renamed earlier wip/ralph-fail-* branches aside. Payload: branches (a list of {from, to}).",
    )
    GIT_METADATA_CHANGED = (
        "git_metadata_changed",
        "The agent changed .git metadata the loop guards (config, hooks ...); the run stops. Payload: error.",
    )
    HOOK_SETTINGS_WARNING = (
        "hook_settings_warning",
        "The project's Claude Code settings weaken ralph's hooks (reported at start). Payload: warning.",
    )
    HOOK_REFUSED = (
        "hook_refused",
        "The hook server refused a request without the run's token. Payload: reason.",
    )
    RUN_FINISHED = (
        "run_finished",
        "The run ended, however it ended. Payload: exit_code, reason, iterations, max_iterations, "
        "cost_usd, elapsed, stories (id, title, passes, reviewStatus, reviewCount, autoApproved), "
        "records (one dict per iteration), report (the end-of-run report), stash (when work was "
        "stashed).",
    )
    RUN_STOPPED = (
        "run_stopped",
        "A plugin failure stopped the run (a validator, gate or guard raised). Payload: plugin (its "
        "name), provider (name, distribution and version), plugin_kind (validator, gate, guard ...), error.",
    )
    LOOP_CRASHED = (
        "loop_crashed",
        "The loop stopped on an internal error. Payload: error, traceback (the last 4000 characters).",
    )
    INTERRUPT = ("interrupt", "SIGINT or SIGTERM arrived; the loop stops the agent. Payload: signal.")
    GLOBAL_SOFT_TIMEOUT = (
        "global_soft_timeout",
        "The run passed global_soft_timeout (a warning; it goes on). Payload: limit (seconds).",
    )
    PREFLIGHT_WARNINGS = (
        "preflight_warnings",
        "Pre-flight checks that did not fail but warn (ralph doctor shows them too). Payload: "
        "warnings (a list of {what, fix}).",
    )
    FOLLOW_ENDED = (
        "follow_ended",
        "`ralph status --follow` stopped following (not emitted by a loop): reporters take down live "
        "displays. Payload: none.",
    )
    REPORTER_DISABLED = (
        "reporter_disabled",
        "A reporter raised and is disabled for the rest of the run (sent to the other reporters). "
        "Payload: plugin, distribution, error.",
    )
    # -- one iteration --------------------------------------------------------------------------
    ITERATION_STARTED = (
        "iteration_started",
        "An iteration begins. Payload: iteration, max_iterations, mode (implement, review, "
        "review-fix), story, reason (the policy's), cost_so_far.",
    )
    AGENT_EVENT = (
        "agent_event",
        "One parsed item of the agent's output. Payload: iteration, type (an AgentEvent kind: "
        "text, tool_use, tool_result, system, result, error, usage_limit, context_overflow), text "
        "(at most 4000 characters), data (the structured details).",
    )
    AGENT_FAILED = (
        "agent_failed",
        "The agent process exited non-zero (not on a timeout or interrupt). Payload: iteration, "
        "exit_code, stderr (the last 2000 characters).",
    )
    EMPTY_RESPONSE = (
        "empty_response",
        "The agent said nothing. Payload: iteration, retry (the retry number, or null when the "
        "loop gives up and moves on), of (empty_retries).",
    )
    ITERATION_TIMEOUT = (
        "iteration_timeout",
        "The iteration hit its timeout; the agent was stopped. Payload: iteration, timeout (seconds).",
    )
    USAGE_LIMIT = (
        "usage_limit",
        "The agent reported its usage limit. Payload: iteration, message, resume_at, wait (seconds).",
    )
    RATE_LIMIT = (
        "rate_limit",
        "The model API rejected a call (rate limit, overload); the loop waits and retries, the "
        "iteration does not count. Payload: iteration, message, wait (seconds), retry_at, basis "
        "(retry-after or backoff), attempt.",
    )
    AGENT_FAILING = (
        "agent_failing",
        "The agent failed the same way several iterations in a row; the run stops (exit 7). Payload: "
        "iteration, times, reason.",
    )
    USAGE_LIMIT_WAIT = (
        "usage_limit_wait",
        "The loop waits for the usage limit to reset. Payload: until, seconds.",
    )
    CONTEXT_EXHAUSTED = (
        "context_exhausted",
        "The agent ran out of context on a story. Payload: iteration, story, times (so far).",
    )
    HOOK = (
        "hook",
        "An agent-side hook call was answered with output (a denial, context, a Stop block). "
        "Payload: event (PreToolUse ...), tool, output (the JSON returned to the agent CLI).",
    )
    HOOK_ERROR = ("hook_error", "The hook server failed to answer a call. Payload: error.")
    VIOLATION = (
        "violation",
        "A validator found a broken rule after the iteration. Payload: iteration, check, story, "
        "message, severity (error or warning).",
    )
    TRANSITION_UNDONE = (
        "transition_undone",
        "The loop restored illegal review-field changes. Payload: iteration, stories, reasons.",
    )
    TASK_LIST_RESTORED = (
        "task_list_restored",
        "The loop undid changes to the task list an iteration may not make (deleted stories, other "
        "stories' text, trusted fields). Payload: iteration, fields, reinserted, reverted, dropped.",
    )
    PROTECTED_FILE_RESTORED = (
        "protected_file_restored",
        "A file the agent must not change (prd.md, prompt.md, .claude/settings*, .codex config, ralph.toml, "
        "pyproject.toml's [tool.ralph]) was restored from the run's trusted copy (how: changed, deleted, created, "
        "replaced), or reported without a restore (how: reported). Payload: iteration, path, how, message.",
    )
    PROGRESS_TRIMMED = (
        "progress_trimmed",
        "Before an iteration the loop kept the progress file to its header and the last entries and moved the "
        "older ones, verbatim, to the archive file (a loop commit). Payload: iteration, moved, kept, archive.",
    )
    TASKS_RESTORED = (
        "tasks_restored",
        "The task list did not parse after the iteration; the previous one was restored. "
        "Payload: iteration.",
    )
    LOOP_COMMIT_FAILED = (
        "loop_commit_failed",
        "The loop could not commit its own repair of the task list. Payload: iteration, error.",
    )
    ITERATION_FINISHED = (
        "iteration_finished",
        "An iteration ended and was validated. Payload: iteration, mode, story, exit_code, "
        "timed_out, seconds, cost, cost_so_far, promise (the agent printed the completion tag), "
        "violations (count), undone (story ids).",
    )
    FALSE_COMPLETION = (
        "false_completion",
        "The agent claimed completion but stories are open. Payload: iteration.",
    )
    STORY_FLAGGED = (
        "story_flagged",
        "A story was marked failed for its cost cap or repeated context exhaustion. Payload: "
        "iteration, story, reason.",
    )
    # -- gates and escalation -------------------------------------------------------------------
    GATE = (
        "gate",
        "A gate ran. Payload: iteration, story, gate, passed, hard, exit_code, timed_out, "
        "seconds, soft_timeout_exceeded, output (at most 40 lines).",
    )
    GATE_SOFT_TIMEOUT = (
        "gate_soft_timeout",
        "A gate took longer than its soft timeout. Payload: iteration, gate, seconds.",
    )
    GATE_VERDICT = (
        "gate_verdict",
        "A gate with a structured verdict (the spec gate) decided. Payload: iteration, story, gate, "
        "passed, and the gate's data (verdict, unmet, extra, malformed, reviewer ...).",
    )
    GATE_CHANGES_UNDONE = (
        "gate_changes_undone",
        "A gate's session changed the project, which a gate must not; the loop undid it. Payload: "
        "iteration, gate, changes (at most 50).",
    )
    GATE_FAILED = (
        "gate_failed",
        "A hard gate failed; the story goes back. Payload: iteration, story, gate, exit_code, "
        "timed_out, sent_back (the fields the loop changed).",
    )
    QUALITY_WARNING = (
        "quality_warning",
        "A soft gate logged a warning. Payload: iteration, story, gate, warning.",
    )
    ROLLBACK = (
        "rollback",
        "on_gate_failure = \"rollback\" reset the work. Payload: iteration, to (commit), removed "
        "(new files removed).",
    )
    WORK_SAVED = (
        "work_saved",
        "The loop copied the tree's changes into the run directory before discarding them (a "
        "rollback). Payload: iteration, what, where.",
    )
    ATTEMPT_FAILED = (
        "attempt_failed",
        "A failed attempt that does not escalate. Payload: iteration, story, tier (0), decision "
        "(null), attempts, stuck_count, error_hash.",
    )
    ESCALATION = (
        "escalation",
        "The same error again: tier 1 strategy shift, tier 2 context expansion, tier 3 stop. "
        "Payload: iteration, story, tier, decision, attempts, stuck_count, error_hash.",
    )
    STORY_FAILED = (
        "story_failed",
        "Tier 3: a story was stopped and its work kept on a branch. Payload: iteration, story, "
        "branch, tip, reset, stuck, error.",
    )
