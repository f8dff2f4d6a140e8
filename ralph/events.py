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
        "policy, max_iterations, review_cap, stories (count), fallback_reason (why `auto` did not choose "
        "the sandboxes it prefers to this runner, or empty), sandboxed (the runner isolates the agent), "
        "output (normal/quiet/verbose).",
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
        "stashed), left_uncommitted and left_uncommitted_note (what git status lists at the end, and what to do "
        "about it, when anything), usage (tokens), metering (metered_iterations, reported_cost_usd: what the agents' "
        "output claimed, model_requests, quota: the subscription windows the API last reported).",
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
        "The iteration ended on the usage limit (from the metered model traffic; for an agent that "
        "is not metered, from its own report). Payload: iteration, message, resume_at, wait (seconds), "
        "counted (whether the iteration counts: it does unless the meter saw the model answer nothing "
        "and the tree and task list are unchanged), reset_not_believed (when present: the reset the API "
        "or the agent named, more than a week away; the loop waits usage_limit_wait instead).",
    )
    RATE_LIMIT = (
        "rate_limit",
        "The model API rejected a call (rate limit, overload) and the agent gave up; the loop waits "
        "and goes on. Payload: iteration, message, wait (seconds), retry_at, basis (retry-after or "
        "backoff), attempt, counted (as for usage_limit).",
    )
    MODEL_REQUEST = (
        "model_request",
        "The loop's meter forwarded one model call (ralph/metering). Payload: iteration, session, path, "
        "model, status, usage (input, cache_read, cache_write, output), cost (USD at the price table's "
        "rate, null when the model has none), answered, complete, seconds, first_byte, bytes, and when "
        "present limit (usage_limit, rate_limit, context_overflow), retry_after, resets_at, error, "
        "error_type, quota (the subscription windows: status, reset, windows {5h, 7d ...: utilization, "
        "reset, status}).",
    )
    LIMIT_SET_ASIDE = (
        "limit_set_aside",
        "The meter saw the agent's session end on a limit or a context overflow, but the iteration changed "
        "the project: the loop does not take it as how the iteration ended (a process of the agent can send "
        "requests through the meter after its CLI's last call), so it neither waits nor flags the story; a "
        "real limit rejects the next iteration's first call. Payload: iteration, limit (usage_limit, "
        "rate_limit, context_overflow), message.",
    )
    METERING_STARTED = (
        "metering_started",
        "The run's model meter listens (the first metered agent is about to run). Payload: url.",
    )
    MODEL_REQUESTS_REFUSED = (
        "model_requests_refused",
        "The meter refused requests of an agent session: after it had ended (a process that outlived "
        "its iteration), or for a path or method it does not forward because it could not book them "
        "(Message Batches, Files ...). Payload: session, refused (count of the late ones), blocked "
        "(\"METHOD /path\" of the others, at most 100).",
    )
    UNPRICED_MODEL = (
        "unpriced_model",
        "An iteration called a model the price table has no price for (once per model and run): its tokens count "
        "$0 in the cost, and --max-cost cannot stop on them. Payload: iteration, model, usage (the iteration's "
        "tokens), fix (the [tool.ralph.prices] table to add).",
    )
    METERING_ERROR = ("metering_error", "The meter failed inside itself (reported at the end of the run). Payload: error.")
    EXTRA_SESSION_COST = (
        "extra_session_cost",
        "A gate's extra agent session ended; its cost counts toward the run's budget. Payload: label, "
        "cost, usage, metered, reported_cost (what the agent's output claimed), cost_so_far.",
    )
    AGENT_FAILING = (
        "agent_failing",
        "The agent failed the same way several iterations in a row, or every command it ran failed and "
        "nothing changed in as many iterations in a row; the run stops (exit 7). Payload: iteration, times, "
        "reason (the error; for commands, the first one's output), cause (exit: the agent's process; "
        "commands: its tool calls).",
    )
    COMMANDS_FAILED = (
        "commands_failed",
        "Every tool call of the iteration failed (calls the guards denied apart) and the project is as "
        "the iteration found it: a broken environment, such as a sandbox that cannot start a command. "
        "Payload: iteration, calls, errors, denied (results of calls the guards denied), first_error (the "
        "first failed call's output, at most 1000 characters).",
    )
    PERSON_CHANGED = (
        "person_changed",
        "Between two iterations, while no agent ran, files of the project changed (a person's edit, commit or "
        "checkout): the run stops before the next iteration so that nothing undoes the change or counts it "
        "against the agent. Payload: iteration (the one that did not start), paths (what changed; `HEAD (a "
        "commit or a checkout)` first when HEAD moved).",
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
        "A validator found a broken rule after the iteration (or a gate did: its result's "
        "data['violations'], check = the gate's name, e.g. test-integrity naming file and line). "
        "Payload: iteration, check, story, message, severity (error or warning).",
    )
    TRANSITION_UNDONE = (
        "transition_undone",
        "The loop restored illegal review-field (state-field) changes: the policy's transition table did not "
        "allow them. Payload: iteration, stories, reasons.",
    )
    TASK_LIST_RESTORED = (
        "task_list_restored",
        "The loop undid changes to the task list outside the policy's whitelist (deleted stories, other "
        "stories' fields, loop-only fields, stories added outside a legal split, trusted fields). Payload: "
        "iteration, fields, reinserted, reverted, reverted_fields (story id -> fields), dropped, reordered, reasons.",
    )
    PROTECTED_FILE_RESTORED = (
        "protected_file_restored",
        "A file the agent must not change (prd.md, prompt.md, .claude/settings*, .mcp.json, .codex config, ralph.toml, "
        "pyproject.toml's [tool.ralph]) was restored from the run's trusted copy (how: changed, deleted, created, "
        "replaced; part: [tool.ralph] when only the table went back, the agent's other edits of the file kept), or "
        "reported without a restore (how: reported; ralph's own loop no longer emits it). Payload: iteration, path, "
        "how, message, part.",
    )
    LOOP_FILE_REPLACED = (
        "loop_file_replaced",
        "After an iteration a file the loop reads and writes in the project (the task file, the progress log "
        "or its archive, the .ralph-active marker) was a symlink, a hard link or a special file, or a folder on "
        "the way was a symlink: the loop removed it (never following it) and put back its own copy. Payload: "
        "iteration, path (the offending path), what (a symlink ...), restored (what was put back), message.",
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
    STORY_STATES = (
        "story_states",
        "The stories as the loop last read and checked the task list (`ralph serve` shows them while the run "
        "goes on): after run_started and after every iteration that changed them. Payload: stories (id, title, "
        "passes, reviewStatus, reviewCount, autoApproved, failed, failureReason, waiting: as in summary.json), done (count).",
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
        "A gate ran (one that had nothing to check, GateResult.skipped, emits none). Payload: "
        "iteration, story, gate, passed, hard, exit_code, timed_out, seconds, soft_timeout_exceeded, "
        "output (at most 40 lines), log (where a failed or warning gate's whole output is kept, else null).",
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
        "timed_out, sent_back (the fields the loop changed), excerpt (the output's first and last lines, "
        "verbatim), left_out (lines not in the excerpt), log (the whole output's file in the run directory).",
    )
    QUALITY_WARNING = (
        "quality_warning",
        "A soft gate logged a warning. Payload: iteration, story, gate, warning, log (the gate's whole output).",
    )
    ROLLBACK = (
        "rollback",
        "on_gate_failure = \"rollback\" reset the work. Payload: iteration, to (commit), removed "
        "(new files removed).",
    )
    WORK_SAVED = (
        "work_saved",
        "The loop copied the tree's changes into the run directory before discarding them (a "
        "rollback, HEAD moved back, a review's code change undone). Payload: iteration, what, where.",
    )
    REVIEW_CHANGES_UNDONE = (
        "review_changes_undone",
        "An iteration of a mode the gates do not follow (a review) changed files other than the task list and "
        "the progress log: the loop undid them (its commits dropped, a copy saved) and did not accept its "
        "verdict. Payload: iteration, story, paths, saved.",
    )
    FINAL_GATE = (
        "final_gate",
        "One gate's result on the final tree, before the run may end complete (the gates with "
        "on_final_tree: tests, test-integrity). Payload: as `gate`.",
    )
    FINAL_CHECK_FAILED = (
        "final_check_failed",
        "A gate failed on the final tree: the run does not end complete, the last iteration's story goes "
        "back (gate_failed follows). Payload: iteration, story, gate.",
    )
    REFS_RESTORED = (
        "refs_restored",
        "An iteration (or a gate's session) moved or deleted refs that are the person's (branches, tags, the "
        "stash, and the HEAD and refs/bisect/, refs/worktree/ of the person's other worktrees, named "
        "worktrees/<id>/... or main-worktree/...; not the run's branch, remote-tracking refs or the branches of "
        "ralph's own worktrees): the loop put them back from its mirror outside the project. Payload: iteration, "
        "refs (each: ref, was, moved_to (null: deleted), kept_as (where the mirror keeps moved_to)), mirror, "
        "failed (the refs it could not put back: the run stops).",
    )
    WORKTREE_FILES_RESTORED = (
        "worktree_files_restored",
        "An iteration changed the files that say where one of the person's other worktrees is and what it reads "
        "(its commondir, gitdir, config.worktree, or its folder's .git file): the loop put them back as they were "
        "when the run started. Payload: iteration, paths.",
    )
    HEAD_RESTORED = (
        "head_restored",
        "HEAD left the run's branch, or the run's branch lost the iteration's starting commit: the loop "
        "moved HEAD back (the tree reset to the branch, a copy saved), put the branch back (deleted) or "
        "committed the agent's tree on top of the starting commit (rewritten). Payload: iteration, branch, "
        "how (moved, deleted, rewritten), was, now, saved.",
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

    # -- the person in the loop (ralph ask / ralph answer) ----------------------------------------
    QUESTION_ASKED = (
        "question_asked",
        "The iteration's agent asked a person a question (`ralph ask`). Payload: iteration, story, mode, "
        "id, question (the agent's words), title (the story's), tools (the agent's last tool calls, one "
        "line each), answer_with (the command that answers).",
    )
    STORY_PARKED = (
        "story_parked",
        "After the iteration that asked, the story waits for a person's answer (its `waiting` set; no "
        "policy selects it). Payload: iteration, story, ids (the questions).",
    )
    QUESTION_ANSWERED = (
        "question_answered",
        "A person answered during the run (`ralph answer` on the loop's person channel). Payload: story, "
        "ids, by (how the answer came).",
    )
    STORY_RELEASED = (
        "story_released",
        "Before the loop selects: a waiting story's questions are answered; it goes on. Payload: story.",
    )
    ANSWER_REFUSED = (
        "answer_refused",
        "A process that is not the person's (an agent's command, a container's) tried to answer on the "
        "person channel; nothing was recorded. Payload: reason.",
    )
    PERSON_CHANNEL_UNAVAILABLE = (
        "person_channel_unavailable",
        "The loop could not open its person channel (not Linux, or the name taken): `ralph answer` reaches "
        "the next run only. Payload: error, message.",
    )
