"""The trusted loop engine.

The agent can write anything in the project, so the loop keeps its own truth:
the pre-iteration snapshot and the iteration mode live in this process; after
every iteration it validates the task list itself, undoes illegal review
transitions, and decides completion.  ``.ralph-active`` in the project is
written for visibility only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from ralph.contracts import (
    AUTO_APPROVED_PREFIX,
    Agent,
    AgentEvent,
    AgentInvocation,
    Check,
    LoopEvent,
    Policy,
    Runner,
    Selection,
    TaskStore,
    ValidationContext,
    Violation,
)
from ralph.errors import RalphError, TaskListError, UsageError
from ralph.fsutil import atomic_write_text
from ralph.gitutil import commit_paths, git_dir, head
from ralph.loop.lock import ProjectLock
from ralph.loop.records import (
    EXIT_AGENT_FAILING,
    EXIT_BUDGET,
    EXIT_COMPLETE,
    EXIT_EXHAUSTED,
    EXIT_FAILED_STORIES,
    EXIT_GLOBAL_TIMEOUT,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    EXIT_USAGE_LIMIT,
    IterationRecord,
    RunResult,
    add_usage,
    total_usage,
)
from ralph.plugin.manager import PluginFailure, PluginHost
from ralph.loop.prompt import relative_dir, render_prompt
from ralph.loop.rundir import new_run_dir
from ralph.settings import Settings
from ralph.ralphfiles import progress_log
from ralph.tasks import REVIEW_FIELDS, TaskList

PROMISE = re.compile(r"<promise>\s*COMPLETE\s*</promise>")
MARKER_NAME = ".ralph-active"
STATE_FILE_ENV = "RALPH_STATE_FILE"

class Loop:
    """One ``ralph run``: lock, iterate, validate, decide, clean up."""

    def __init__(
        self,
        settings: Settings,
        host: PluginHost,
        *,
        runner: Runner,
        agent: Agent,
        policy: Policy,
        store: TaskStore,
    ) -> None:
        self.settings = settings
        self.host = host
        self.runner = runner
        self.agent = agent
        self.review_agent: Agent = agent
        """The agent of review iterations (``review_agent`` in config; the same agent by default)."""
        self._extra_agents: dict[str, Agent] = {}
        self.policy = policy
        self.store = store
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.tasks_path = store.path(self.ralph_dir)
        self.marker = self.project_dir / MARKER_NAME
        self.cancel = threading.Event()
        self.run_dir: Path | None = None
        self.records: list[IterationRecord] = []
        self.cost = 0.0
        self.started = time.monotonic()
        from ralph.loop.taskfile import TaskFile

        self.taskfile = TaskFile(store, self.tasks_path)
        """The task file: reads, the loop's writes, the last good text, the trusted non-story fields."""
        self.trusted_files: Any = None
        self.trusted_config_table: Any = None
        self.trusted_tracked: set[Path] = set()
        """prd.md, prompt.md and the agent CLIs' project settings as the run started (``TrustedFiles``)."""
        self.hook_server: Any = None
        self.hook_token = ""
        self.rerun: str | None = None
        """``resume`` or ``fresh`` when state of an earlier run exists (None: ask, or refuse)."""
        self.stash_ref: str | None = None
        self.stash_message: str | None = None
        self.saved_work: bytes = b""
        """The stashed work as a patch, written to the run directory when it exists."""
        self.archived_state: Path | None = None
        self.continued_state: str | None = None
        self.only_story: str | None = None
        """``ralph run --story ID``: the loop works on this story alone."""
        self.prompt: Any = None
        """The run's prompt template (a :class:`ralph.loop.start.PromptSource`), read once in preflight."""
        self.branch_note: str | None = None
        self.archived_branches: list[tuple[str, str]] = []
        self.interrupt_signal: int | None = None
        """Set when the state of a previous, normally ended run is continued without asking."""
        self._soft_warned = False
        self._failure_streak: tuple[str, int] = ("", 0)
        self._rate_limit_streak = 0
        self._rate_limit_waited = 0.0
        self.story_cost: dict[str, float] = {}
        self.context_overflows: dict[str, int] = {}
        from ralph.loop.gates import GateKeeper

        self.keeper = GateKeeper(self, host, settings)
        self.sessions: dict[str, Any] = {}
        self.plugin_failure: PluginFailure | None = None
        """Set when a guard or Stop check raised in the hook server: the run stops after the iteration."""
        self.current: tuple[Selection, TaskList, str | None] | None = None
        """(selection, pre-iteration tasks, checkpoint commit) of the running iteration."""
        self.checks: list[Check] = []
        """The pre-flight checks of this run (warnings among them are reported at the start)."""

    # -- events ------------------------------------------------------------------

    def emit(self, kind: str, **data: Any) -> None:
        data.setdefault("elapsed", round(time.monotonic() - self.started, 3))
        self.host.emit(LoopEvent(kind, data, self.run_dir))

    # -- task list I/O --------------------------------------------------------------

    def read_tasks(self) -> tuple[str | None, TaskList | None, str | None]:
        """(raw text, parsed list or None, parse error or None)."""
        return self.taskfile.read()

    def write_tasks(self, tasks: TaskList, previous_raw: str | None) -> str:
        """Render ``tasks`` against ``previous_raw``, write it; it becomes the last good text."""
        return self.taskfile.write(tasks, previous_raw)

    # -- preflight ---------------------------------------------------------------------

    def preflight(self) -> TaskList:
        """Check everything that can be checked before taking the lock."""
        if self.config.max_iterations > self.config.iteration_limit:
            raise UsageError(
                f"--max-iterations {self.config.max_iterations} is above the limit of "
                f"{self.config.iteration_limit} iterations; raise it explicitly with "
                f"--iteration-limit {self.config.max_iterations} (or iteration_limit in config)"
            )
        git_dir(self.project_dir)
        from ralph.loop.rundir import check_state_root

        check_state_root(self.config.state_dir)
        if not self.ralph_dir.is_dir():
            from ralph.lifecycle.init import KNOWN_LOOP_DIRS, holds_loop

            found = [d for d in KNOWN_LOOP_DIRS if holds_loop(self.project_dir / d)]
            hint = "run `ralph init` first (or pass --ralph-dir)"
            if found:
                hint = f"run `ralph init` first, or pass --ralph-dir {found[0]} (a Ralph folder is there)"
            raise UsageError(f"{self.ralph_dir} does not exist: {hint}")
        from ralph.loop.start import check_only_story, graph_errors, load_prompt

        self.prompt = load_prompt(self.ralph_dir, progress_log(self.ralph_dir).name)
        from ralph.loop.prompt import check_template

        shown = "built-in prompt" if self.prompt.builtin else relative_dir(self.ralph_dir / "prompt.md", self.project_dir)
        check_template(self.prompt.text, shown)
        raw, tasks, error = self.read_tasks()
        if tasks is None:
            raise TaskListError(f"{error}\n(the file was left untouched; fix it and run again)")
        problems = [v for v in self.validate(raw, tasks, None, None, check_git=False) if v.check == "schema"]
        if problems:
            lines = "\n".join(f"{self.tasks_path}: {v.message}" for v in problems)
            raise TaskListError(f"{lines}\n(the file was left untouched; fix it and run again)")
        graph = graph_errors(tasks)
        if graph:
            lines = "\n".join(f"{self.tasks_path}: {line}" for line in graph)
            raise TaskListError(f"{lines}\n(no agent was started; fix the task list and run again)")
        if self.only_story is not None:
            check_only_story(tasks, self.only_story, self.tasks_path)
        from ralph.loop.taskfile import unsafe_ids

        bad_ids = unsafe_ids(tasks)
        if bad_ids:
            lines = "\n".join(f"{self.tasks_path}: {line}" for line in bad_ids)
            raise TaskListError(f"{lines}\n(the file was left untouched; fix the id and run again)")
        for agent in {id(a): a for a in (self.agent, self.review_agent)}.values():
            unavailable = agent.availability()
            if not unavailable.ok:
                from ralph.errors import UnavailableError

                raise UnavailableError(f"agent {agent.name!r} cannot run: {unavailable.reason}")
        self.taskfile.accept(raw)
        self.taskfile.trust(tasks)
        return tasks

    def validate(
        self,
        raw: str | None,
        tasks: TaskList | None,
        mode: str | None,
        before: TaskList | None,
        check_git: bool = True,
        parse_error: str | None = None,
        story_id: str | None = None,
    ) -> list[Violation]:
        """The validators' violations, and with a snapshot (``before``) the whole-list check's."""
        context = ValidationContext(
            project_dir=self.project_dir,
            tasks_path=self.tasks_path,
            raw=raw,
            tasks=tasks,
            parse_error=parse_error,
            policy=self.policy,
            mode=mode,  # type: ignore[arg-type]
            snapshot=before.snapshot() if before is not None else None,
            review_cap=self.config.review_cap,
            skip_review=not self.policy.uses_review,
            check_git=check_git,
        )
        violations = self.host.validate(context)
        if before is not None and tasks is not None:
            violations += self.check_list(before, tasks, story_id).violations
        return violations

    def check_list(self, before: TaskList, after: TaskList, story_id: str | None) -> Any:
        """The task list as a whole against ``before`` and the run's trusted fields (a ``ListCheck``)."""
        from ralph.loop.listcheck import check_list

        return check_list(before, after, story_id, self.taskfile.trusted)

    # -- the run -------------------------------------------------------------------------

    def preflight_checks(self) -> list[Check]:
        """The runner's, the agent's and the plugins' pre-flight checks (none when turned off)."""
        if not self.config.preflight:
            return []
        from ralph.loop.preflight import preflight_checks

        return preflight_checks(self.settings, self.host, self.runner, self.agent, self.review_agent)

    def run(self) -> RunResult:
        """Lock the project, iterate until done, and always clean up (marker, lock, runner)."""
        self.preflight()
        from ralph.loop.preflight import raise_on_failures

        self.checks = self.preflight_checks()
        raise_on_failures(self.checks)
        lock = ProjectLock(git_dir(self.project_dir))
        lock.acquire()
        previous_handlers = self._install_signal_handlers()
        try:
            self._prepare_repository()
            # read again: stashing the user's work may have changed the task list on disk
            raw, tasks, error = self.read_tasks()
            if tasks is None:
                raise TaskListError(f"{error}\n(the file was left untouched; fix it and run again)")
            self.taskfile.accept(raw)
        except BaseException:
            self._restore_signal_handlers(previous_handlers)
            lock.release()
            raise
        self.started = time.monotonic()
        self.run_dir = new_run_dir(self.project_dir, self.config.state_dir)
        if self.saved_work:
            from ralph.loop.savedwork import record_saved_work

            self.stash_message = (self.stash_message or "") + "; " + record_saved_work(
                self.run_dir, "stash", self.saved_work, "your uncommitted work at run start (also stashed)"
            )
        self._take_trusted_copy(tasks)
        from ralph.hooks.server import HookServer

        import secrets

        self.hook_token = secrets.token_urlsafe(32)
        self.hook_server = HookServer(
            self.answer_hook, token=self.hook_token, on_refused=lambda reason: self.emit("hook_refused", reason=reason)
        ).start()
        try:
            from ralph.gitutil import GitMetadataChanged, protect

            protect(self.project_dir)
            self.runner.prepare(self.project_dir)
            return self._iterate(tasks)
        except PluginFailure as exc:  # a check that cannot run stops the run: fail-closed
            self.emit("run_stopped", plugin=exc.name, provider=exc.plugin, plugin_kind=exc.kind, error=exc.error)
            self._finish(EXIT_USAGE, f"stopped: {exc}", self._current_tasks(tasks))
            raise
        except GitMetadataChanged as exc:
            self.emit("git_metadata_changed", error=str(exc))
            raise
        except RalphError:
            raise
        except Exception as exc:  # fail-closed: stop with a clear error, keep the evidence
            import traceback

            trace = traceback.format_exc()
            (self.run_dir / "crash.txt").write_text(trace, encoding="utf-8")
            self.emit("loop_crashed", error=f"{type(exc).__name__}: {exc}", traceback=trace[-4000:])
            stop = RalphError(
                f"the loop stopped on an internal error: {type(exc).__name__}: {exc} (traceback in "
                f"{self.run_dir / 'crash.txt'}; the project is as the last iteration left it)"
            )
            self._finish(EXIT_USAGE, str(stop), self._current_tasks(tasks))
            raise stop from exc
        finally:
            self._restore_signal_handlers(previous_handlers)
            try:
                self.runner.cleanup()
            finally:
                self.hook_server.stop()
                for error in self.hook_server.errors:
                    self.emit("hook_error", error=error[-4000:])
                self._remove_marker()
                from ralph.gitutil import unprotect

                unprotect(self.project_dir)
                lock.release()

    def _current_tasks(self, fallback: TaskList) -> TaskList:
        """The task list on disk, or ``fallback`` when it does not parse (for the summary of a stop)."""
        _, tasks, _ = self.read_tasks()
        return tasks if tasks is not None else fallback

    def _prepare_repository(self) -> None:
        """Keep the marker out of git, deal with the user's uncommitted work and earlier state."""
        from ralph.gitutil import dirty_paths, ensure_excluded, head as head_of, stash_user_work, work_patch

        ensure_excluded(self.project_dir, MARKER_NAME)
        dirty = dirty_paths(self.project_dir)
        if dirty:
            shown = "\n".join(f"  {line}" for line in dirty[:15])
            if self.config.dirty_start == "refuse":
                raise UsageError(
                    f"the project has uncommitted changes; ralph will not run over them:\n{shown}\n"
                    "commit or stash them yourself, or set dirty_start = \"stash\" in [tool.ralph] "
                    "(or RALPH_DIRTY_START=stash) to let ralph stash them under a named stash"
                )
            name = f"ralph: your uncommitted work before the run of {time.strftime('%Y-%m-%d %H:%M:%S')}"
            base = head_of(self.project_dir)
            # a copy outside the agent's reach (rule 6): `git stash clear` or `git gc` cannot lose it
            self.saved_work = work_patch(self.project_dir, base) if base else b""
            self.stash_ref = stash_user_work(self.project_dir, name)
            self.stash_message = (
                f"your uncommitted work was stashed as {self.stash_ref} ({name!r}); "
                f"get it back with `git stash pop {self.stash_ref}`"
            )
        from ralph.loop.start import archive_failure_branches, checkout_work_branch

        self.archived_branches = archive_failure_branches(self.project_dir)
        _, listed, _ = self.read_tasks()
        if listed is not None:
            self.branch_note = checkout_work_branch(self.project_dir, listed.branchName, self.tasks_path)
        pending = self.keeper.pending_states()
        previous_end = self.keeper.previous_end()
        if pending and self.rerun is None and self._ended_cleanly_unchanged(previous_end):
            # a run that ended normally and a task list nobody changed since: just go on
            self.continued_state = f"{len(pending)} stor{'y' if len(pending) == 1 else 'ies'} ({(previous_end or {}).get('reason')})"
            pending = []
        if pending:
            choice = self.rerun
            if choice is None:
                import sys

                if not sys.stdin.isatty():
                    names = ", ".join(p.stem for p in pending[:5])
                    why = (
                        "the task list changed since that run ended"
                        if previous_end
                        else "that run did not end normally (it crashed or was killed)"
                    )
                    raise UsageError(
                        f"state of an earlier run exists for {names} and {why}; pass --resume to continue "
                        "with it or --fresh to archive it and start over"
                    )
                import click

                choice = click.prompt(
                    f"An earlier run left state for {len(pending)} stor{'y' if len(pending) == 1 else 'ies'}. "
                    "Resume with it, or start fresh (archiving it)?",
                    type=click.Choice(["resume", "fresh"]),
                    default="resume",
                )
            if choice == "fresh":
                self.archived_state = self.keeper.archive_states()
        self.keeper.clear_end()

    def _ended_cleanly_unchanged(self, previous_end: dict[str, Any] | None) -> bool:
        """True when the previous run reached its end and the task list is byte for byte what it left."""
        if not previous_end or "tasks_sha256" not in previous_end:
            return False
        return previous_end["tasks_sha256"] == _file_sha256(self.tasks_path)

    def global_remaining(self) -> float | None:
        """Seconds left before the global hard timeout (None: no global limit)."""
        limit = self.config.global_hard_timeout
        if limit is None:
            return None
        return max(0.0, limit * self.config.timeout_multiplier - (time.monotonic() - self.started))

    def iteration_timeout(self) -> float:
        timeout = self.config.timeout * self.config.timeout_multiplier
        remaining = self.global_remaining()
        return timeout if remaining is None else max(0.1, min(timeout, remaining))

    def _check_global_time(self) -> bool:
        """Warn once at the soft limit; True when the hard limit is reached."""
        elapsed = time.monotonic() - self.started
        soft = self.config.global_soft_timeout
        if soft is not None and not self._soft_warned and elapsed >= soft * self.config.timeout_multiplier:
            self._soft_warned = True
            self.emit("global_soft_timeout", limit=soft * self.config.timeout_multiplier)
        remaining = self.global_remaining()
        return remaining is not None and remaining <= 0

    def dry_run(self) -> tuple[Selection | None, str | None, TaskList]:
        """The next iteration's selection and rendered prompt; runs nothing."""
        tasks = self.preflight()
        selection = self.select(tasks)
        if selection is None:
            return None, None, tasks
        return selection, self.render(1, selection, tasks, []), tasks

    def render(self, iteration: int, selection: Selection, tasks: TaskList, feedback: list[str]) -> str:
        from ralph.loop import progresslog
        from ralph.loop.start import load_prompt, seed_tokens
        from ralph.templates import render

        progress = progress_log(self.ralph_dir)
        if self.prompt is None:
            self.prompt = load_prompt(self.ralph_dir, progress.name)
        tokens = seed_tokens(selection.story_id, tasks, self.tasks_path, progress, self.ralph_dir)
        archive = progresslog.archive_path(progress)
        return render_prompt(
            render(self.prompt.text, tokens),
            iteration=iteration,
            max_iterations=self.config.max_iterations,
            ralph_dir=relative_dir(self.ralph_dir, self.project_dir),
            review_cap=self.config.review_cap,
            skip_review=not self.policy.uses_review,
            policy=self.policy,
            selection=selection,
            tasks=tasks,
            feedback=feedback,
            tasks_file=relative_dir(self.tasks_path, self.project_dir),
            progress=progresslog.excerpt(progress, selection.story_id, self.config.prompt_progress_entries),
            progress_file=relative_dir(progress, self.project_dir),
            progress_archive=relative_dir(archive, self.project_dir) if archive.exists() else "",
        )

    def select(self, tasks: TaskList) -> Selection | None:
        """The policy's choice, limited to ``--story``'s story when one is given."""
        from ralph.loop.start import only_story_scope

        return self.policy.select(only_story_scope(tasks, self.only_story))

    def is_complete(self, tasks: TaskList) -> bool:
        """Every story done (``--story``: that story done), as the policy defines done."""
        from ralph.loop.start import only_story_scope

        return self.policy.is_complete(only_story_scope(tasks, self.only_story))

    def _iterate(self, tasks: TaskList) -> RunResult:
        config = self.config
        runner_label = self.runner.name
        self.emit(
            "run_started",
            project=str(self.project_dir),
            run_dir=str(self.run_dir),
            runner=runner_label,
            agent=self.agent.name,
            review_agent=self.review_agent.name,
            policy=self.policy.name,
            max_iterations=config.max_iterations,
            review_cap=config.review_cap,
            stories=len(tasks.userStories),
            stories_done=_done(tasks),
            fallback_reason=self.runner.fallback_reason,
            output=config.output,
            live=config.live,
        )
        warnings = [check for check in self.checks if check.ok is None]
        if warnings:
            self.emit("preflight_warnings", warnings=[{"what": c.what, "fix": c.fix} for c in warnings])
        if self.stash_message:
            self.emit("user_work_stashed", stash=self.stash_ref, message=self.stash_message)
        if self.archived_state:
            self.emit("earlier_state_archived", path=str(self.archived_state))
        if self.continued_state:
            self.emit("earlier_state_continued", stories=self.continued_state)
        if self.prompt is not None and self.prompt.builtin:
            self.emit("builtin_prompt", ralph_dir=relative_dir(self.ralph_dir, self.project_dir))
        if self.branch_note:
            self.emit("work_branch", message=self.branch_note)
        if self.archived_branches:
            self.emit("failure_branches_archived", branches=[{"from": a, "to": b} for a, b in self.archived_branches])
        if self.is_complete(tasks):
            what = f"{self.only_story} was already complete" if self.only_story else "all stories were already complete"
            return self._finish(EXIT_COMPLETE, what, tasks)
        from ralph.gitutil import untracked_files

        feedback: list[str] = []
        iteration = 0
        while iteration < config.max_iterations:
            if self.cancel.is_set():
                return self._finish(EXIT_INTERRUPTED, "interrupted", tasks)
            if self._check_global_time():
                return self._finish(EXIT_GLOBAL_TIMEOUT, "global hard timeout reached: the loop stopped cleanly", tasks)
            selection = self.select(tasks)
            if selection is None:
                return self._finish_unselectable(tasks)
            iteration += 1
            record = IterationRecord(iteration, selection.mode, selection.story_id)
            agent = self.agent_for(selection.mode)
            record.agent, record.model = agent.name, self.model_for(selection.mode, agent)
            self.records.append(record)
            iteration_started = time.time()
            self._trim_progress(iteration)
            checkpoint = head(self.project_dir)
            untracked_before = untracked_files(self.project_dir)
            self.keeper.before_iteration(selection, checkpoint)
            feedback = self.keeper.story_context(selection) + feedback
            tasks = self._one_iteration(record, selection, tasks, feedback, checkpoint)
            if self.plugin_failure is not None:
                raise self.plugin_failure
            if record.usage_limit and not self.cancel.is_set():
                stop = self._usage_limit(record)
                if stop is not None:
                    return self._finish(EXIT_USAGE_LIMIT, stop, tasks)
                iteration -= 1  # nothing was done: the iteration does not count
                feedback = []
                continue
            if record.rate_limit and not self.cancel.is_set():
                stop = self._rate_limit(record)
                if stop is not None:
                    return self._finish(EXIT_USAGE_LIMIT, stop, tasks)
                iteration -= 1  # rejected before any work: the iteration does not count
                feedback = []
                continue
            self._rate_limit_streak, self._rate_limit_waited = 0, 0.0  # an answered iteration ends the episode
            if not self.cancel.is_set():
                tasks = self.keeper.after_iteration(record, selection, tasks, checkpoint, untracked_before)
                story = tasks.story(selection.story_id or "")
                if story is not None and story.passes and not record.violations:
                    self.keeper.forget(story.id)
            failing = self._agent_failing(record)
            if failing is not None:
                return self._finish(EXIT_AGENT_FAILING, failing, tasks)
            feedback = self._feedback_for_next(record)
            tasks, limit_feedback = self._cost_and_context(record, selection, tasks)
            feedback += limit_feedback
            assert self.run_dir is not None
            feedback += self.host.prompt_context(self.run_dir, iteration + 1, iteration_started)
            if self.cancel.is_set():
                return self._finish(EXIT_INTERRUPTED, "interrupted", tasks)
            if self.config.max_cost is not None and self.cost >= self.config.max_cost:
                return self._finish(
                    EXIT_BUDGET, f"budget reached: ${self.cost:.4f} of ${self.config.max_cost:.4f} spent", tasks
                )
            if self.is_complete(tasks) and not record.violations:
                how = "promise tag and verified task state" if record.promise else "verified task state (no promise tag)"
                return self._finish(EXIT_COMPLETE, f"complete: {how}", tasks)
            if record.promise:
                self.emit("false_completion", iteration=iteration)
        return self._finish(EXIT_EXHAUSTED, f"max iterations ({config.max_iterations}) reached", tasks)

    def _usage_limit(self, record: IterationRecord) -> str | None:
        """Wait for the agent's usage limit to reset, or return the reason to stop with a resume hint."""
        import datetime as dt

        from ralph.loop.usagelimit import reset_time

        message = record.usage_limit or ""
        now = dt.datetime.now().astimezone()
        resets = reset_time(message, now)
        wait = (resets - now).total_seconds() if resets else self.config.usage_limit_wait
        wait = max(1.0, wait)
        resume_at = (now + dt.timedelta(seconds=wait)).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
        self.emit("usage_limit", iteration=record.number, message=message[:500], resume_at=resume_at, wait=round(wait, 1))
        if self.config.on_usage_limit == "exit" or wait > self.config.usage_limit_max_wait:
            return (
                f"paused on the agent's usage limit ({message.strip()[:200]}); state saved — run "
                f"`ralph run --resume` after {resume_at}"
            )
        self.emit("usage_limit_wait", until=resume_at, seconds=round(wait, 1))
        self.cancel.wait(wait)  # Ctrl-C ends the wait; the loop then stops as interrupted
        return None

    def _rate_limit(self, record: IterationRecord) -> str | None:
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

    def _agent_failing(self, record: IterationRecord) -> str | None:
        """The reason to stop when the agent failed with the same error too many times in a row."""
        failed = not record.timed_out and not record.context_overflow and (
            record.exit_code not in (0, None) or record.agent_error is not None
        )
        if not failed or self.cancel.is_set():
            self._failure_streak = ("", 0)
            return None
        reason = record.agent_error or f"exit code {record.exit_code}"
        key = re.sub(r"[0-9a-f]{6,}|\d+", "#", reason.lower())  # request ids and counters differ between tries
        previous, count = self._failure_streak
        count = count + 1 if key == previous else 1
        self._failure_streak = (key, count)
        limit = self.config.max_agent_failures
        if count < limit:
            return None
        self.emit("agent_failing", iteration=record.number, times=count, reason=reason[:1000])
        return (
            f"the agent failed {count} times in a row with the same error: {reason.strip()[:300]} "
            "(fix it and run again; see the iteration's .agent.jsonl in the run directory)"
        )

    def _cost_and_context(
        self, record: IterationRecord, selection: Selection, tasks: TaskList
    ) -> tuple[TaskList, list[str]]:
        """Per-story cost cap and context exhaustion: flag the story rather than feed it back unchanged."""
        story_id = selection.story_id
        story = tasks.story(story_id or "")
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
                    f"the id {story.id} for the first slice, give the others new ids and dependsOn), commit, "
                    "and stop."
                )
        if reason is not None:
            story.failed = True
            story.failureReason = reason
            self.persist_tasks(tasks, record, f"{story.id} flagged: {reason}")
            self.emit("story_flagged", iteration=record.number, story=story.id, reason=reason)
        return tasks, feedback

    def _finish_unselectable(self, tasks: TaskList) -> RunResult:
        from ralph.loop.start import unselectable_reason
        from ralph.tasks import blocked_reason

        failed = [s.id for s in tasks.userStories if s.failed]
        waiting = [s for s in tasks.userStories if not s.passes and not s.failed]
        if failed:
            reason = f"finished with failed stories: {', '.join(failed)}"
            if waiting:
                reason += f"; blocked: {blocked_reason(tasks, waiting)}"
            return self._finish(EXIT_FAILED_STORIES, reason, tasks)
        reason = unselectable_reason(tasks, self.policy.uses_review)
        return self._finish(EXIT_EXHAUSTED, f"no story can be selected: {reason}", tasks)

    def _one_iteration(
        self,
        record: IterationRecord,
        selection: Selection,
        tasks: TaskList,
        feedback: list[str],
        checkpoint: str | None,
    ) -> TaskList:
        assert self.run_dir is not None
        before = tasks  # never mutated: the post-iteration state is a fresh parse
        before_raw = self.taskfile.last_good
        self.current = (selection, before, checkpoint)
        self._write_state(record, selection, before)
        prompt = self.render(record.number, selection, tasks, feedback)
        (self.run_dir / f"iteration-{record.number:03d}.prompt.md").write_text(prompt, encoding="utf-8")
        self.emit(
            "iteration_started",
            iteration=record.number,
            max_iterations=self.config.max_iterations,
            mode=selection.mode,
            story=selection.story_id,
            reason=selection.reason,
            cost_so_far=round(self.cost, 6),
            agent=record.agent,
            model=record.model,
            stories=len(tasks.userStories),
            stories_done=_done(tasks),
        )
        started = time.monotonic()
        texts = self._run_agent(record, prompt)
        record.seconds = round(time.monotonic() - started, 3)
        record.promise = any(PROMISE.search(text) for text in texts)

        self.current = None  # hooks that still arrive now see no iteration
        raw, after, error = self.read_tasks()
        violations = self.validate(raw, after, selection.mode, before, parse_error=error, story_id=selection.story_id)
        if after is None:
            after = self._restore_unparseable(record, raw, before, before_raw)
            violations = [v for v in violations if v.check != "schema"] + [
                Violation("schema", f"{error}. The loop restored the task list from before the iteration.")
            ]
        elif any(v.undoable for v in violations):
            after = self._undo(record, before, after, raw, violations, selection.story_id, before_raw)
        else:
            self.taskfile.accept(raw)
        violations += self._restore_trusted_files(record)
        record.violations = [v.message for v in violations if v.is_error]
        self._log_unfinished_iteration(record)
        for violation in violations:
            self.emit(
                "violation", iteration=record.number, check=violation.check, story=violation.story_id,
                message=violation.message, severity=violation.severity,
            )
        self.emit(
            "iteration_finished",
            iteration=record.number,
            mode=record.mode,
            story=record.story_id,
            exit_code=record.exit_code,
            timed_out=record.timed_out,
            seconds=record.seconds,
            cost=round(record.cost_usd, 6),
            usage=dict(record.usage),
            cost_so_far=round(self.cost, 6),
            promise=record.promise,
            agent_error=record.agent_error,
            stories_done=_done(after),
            violations=len(record.violations),
            undone=record.undone,
            agent=record.agent,
            model=record.model,
        )
        return after

    def _run_agent(self, record: IterationRecord, prompt: str) -> list[str]:
        """Run the agent, retrying empty responses; returns the assistant texts."""
        assert self.run_dir is not None
        raw_path = self.run_dir / f"iteration-{record.number:03d}.agent.jsonl"
        retries = 0
        agent = self.agent_for(record.mode)
        while True:
            env = {
                STATE_FILE_ENV: str(self.run_dir / "state.json"),
                "RALPH_TASKS_FILE": str(self.tasks_path),
                **self.channel_env(),
            }
            invocation = AgentInvocation(
                prompt=prompt,
                project_dir=self.project_dir,
                run_dir=self.run_dir,
                iteration=record.number,
                model=self.model_for(record.mode, agent, explicit_only=True),
                sandboxed=self.runner.isolates,
                hook_settings=self._hook_settings(env),
                mode=record.mode,
                env=env,
            )
            spec = agent.process(invocation)
            texts: list[str] = []
            with raw_path.open("a", encoding="utf-8") as raw_out:

                def on_line(line: str) -> None:
                    raw_out.write(line + "\n")
                    for event in agent.parse_line(line):
                        self._on_agent_event(record, event, texts)

                try:
                    outcome = self.runner.run(spec, on_line, self.iteration_timeout(), self.cancel)
                except FileNotFoundError as exc:
                    from ralph.errors import UnavailableError

                    raise UnavailableError(f"agent {agent.name!r} could not start: {exc}") from None
            record.exit_code = outcome.exit_code
            record.timed_out = outcome.timed_out
            if outcome.timed_out:
                self.emit("iteration_timeout", iteration=record.number, timeout=self.iteration_timeout())
            elif outcome.exit_code != 0 and not outcome.interrupted:
                reason = record.agent_error or _last_line(outcome.stderr) or f"exit code {outcome.exit_code}"
                if record.agent_error is None and outcome.stderr.strip():
                    record.agent_error = reason
                self.emit(
                    "agent_failed",
                    iteration=record.number,
                    exit_code=outcome.exit_code,
                    reason=reason[:1000],
                    stderr=outcome.stderr[-2000:],
                )
            empty = not outcome.timed_out and not outcome.interrupted and outcome.exit_code == 0 and not any(t.strip() for t in texts)
            if empty and retries < self.config.empty_retries and not self.cancel.is_set():
                retries += 1
                self.emit("empty_response", iteration=record.number, retry=retries, of=self.config.empty_retries)
                continue
            if empty:
                self.emit("empty_response", iteration=record.number, retry=None, of=self.config.empty_retries)
            return texts

    def _on_agent_event(self, record: IterationRecord, event: AgentEvent, texts: list[str]) -> None:
        if event.kind == "usage_limit" and record.usage_limit is None:
            record.usage_limit = event.text or "usage limit reached"
            resets = event.data.get("resets_at")
            if resets:
                record.usage_limit += f" |{int(resets)}" if isinstance(resets, (int, float)) else f" {resets}"
        elif event.kind == "context_overflow":
            record.context_overflow = True
        elif event.kind == "rate_limit" and record.rate_limit is None and record.usage_limit is None:
            record.rate_limit = event.text or "rate limited"
        elif event.kind == "error":
            delay = event.data.get("retry_delay_ms")
            if event.data.get("retrying"):
                if event.data.get("error_status") in (429, 529) and isinstance(delay, (int, float)):
                    record.retry_after = float(delay) / 1000
            elif event.text.strip():
                record.agent_error = event.text.strip()
        if event.kind == "text":
            texts.append(event.text)
        elif event.kind == "result":
            cost = event.data.get("total_cost_usd")
            if isinstance(cost, (int, float)):
                record.cost_usd += float(cost)
                self.cost += float(cost)
            add_usage(record.usage, event.data.get("usage"))
            if isinstance(event.data.get("result"), str):
                texts.append("")  # the result repeats the last text; counted once via text events
        self.emit("agent_event", iteration=record.number, type=event.kind, text=event.text[:4000], data=_jsonable(event.data))

    # -- repairs ---------------------------------------------------------------------------

    def _undo(
        self,
        record: IterationRecord,
        before: TaskList,
        after: TaskList,
        raw: str | None,
        violations: list[Violation],
        story_id: str | None = None,
        before_raw: str | None = None,
    ) -> TaskList:
        """Undo the whole-list findings and restore the review fields of every story with an undoable violation."""
        from ralph.loop.listcheck import CHECK

        listed = self.check_list(before, after, story_id)
        repaired = listed.apply(before, after) if listed.needed else after.model_copy(deep=True)
        ids = {v.story_id for v in violations if v.undoable and v.story_id and v.check != CHECK}
        for story in repaired.userStories:
            if story.id not in ids:
                continue
            old = before.story(story.id)
            for name in REVIEW_FIELDS:
                if old is None:
                    value = {"passes": False, "reviewStatus": None, "reviewCount": 0, "reviewFeedback": ""}[name]
                else:
                    value = getattr(old, name)
                setattr(story, name, value)
            record.undone.append(story.id)
        # text the person owns goes back: render against the pre-iteration text, not the agent's
        self.write_tasks(repaired, before_raw if listed.needed and before_raw is not None else raw)
        _, reread, _ = self.read_tasks()
        repaired = reread if reread is not None else repaired
        lines = [v.message for v in violations if v.undoable]
        parts = []
        if record.undone:
            parts.append(f"the loop undid illegal review-field changes on {', '.join(sorted(set(record.undone)))}")
        if listed.needed:
            parts.append("the loop undid changes to the task list that an iteration may not make")
            self.emit(
                "task_list_restored",
                iteration=record.number,
                fields=sorted((listed.top_level or {}).keys()) if listed.top_level is not None else [],
                reinserted=listed.reinsert,
                reverted=listed.revert_text,
                dropped=listed.drop,
                reasons=[v.message for v in listed.violations],
            )
        self._note_in_progress(record, "; ".join(parts) + ": " + " ".join(lines))
        if record.undone:
            self.emit("transition_undone", iteration=record.number, stories=sorted(set(record.undone)), reasons=lines)
        return repaired

    def _restore_unparseable(
        self, record: IterationRecord, raw: str | None, before: TaskList, before_raw: str | None
    ) -> TaskList:
        assert self.run_dir is not None
        if raw is not None:
            (self.run_dir / f"iteration-{record.number:03d}.tasks-invalid.json").write_text(raw, encoding="utf-8")
        self.write_tasks(before, before_raw)
        self._note_in_progress(record, "the task list did not validate; the loop restored the previous version")
        self.emit("tasks_restored", iteration=record.number)
        return before

    def _trim_progress(self, iteration: int) -> None:
        """Before ``iteration``: keep the progress log bounded (older entries move to its archive, committed)."""
        from ralph.gitutil import dirty_paths
        from ralph.loop import progresslog

        keep = self.config.progress_keep_entries
        progress = progress_log(self.ralph_dir)
        if keep <= 0 or not progress.is_file():
            return
        if len(progresslog.parse(progress.read_text(encoding="utf-8")).entries) <= keep:
            return
        rel = relative_dir(progress, self.project_dir)
        if any(line[3:].strip().strip('"') == rel for line in dirty_paths(self.project_dir)):
            return  # uncommitted edits of the log are the agent's work: leave them for the git-clean check
        moved = progresslog.trim(progress, keep)
        archive = progresslog.archive_path(progress)
        error = commit_paths(
            self.project_dir, [progress, archive], f"ralph: before iteration {iteration} - archive {moved} progress entries"
        )
        if error:
            self.emit("loop_commit_failed", iteration=iteration, error=error)
        self.emit("progress_trimmed", iteration=iteration, moved=moved, kept=keep, archive=str(archive))

    def _note_in_progress(
        self, record: IterationRecord, message: str, subject: str = "loop repaired the task list", paths: list[Path] | None = None
    ) -> None:
        """Record the loop's own change in the progress log and commit exactly those files."""
        progress = progress_log(self.ralph_dir)
        stamp = time.strftime("%Y-%m-%d %H:%M")
        with progress.open("a", encoding="utf-8") as handle:
            handle.write(f"\n[ralph loop {stamp}] iteration {record.number}: {message}\n")
        error = commit_paths(
            self.project_dir, [self.tasks_path, progress, *(paths or [])], f"ralph: iteration {record.number} - {subject}"
        )
        if error:
            self.emit("loop_commit_failed", iteration=record.number, error=error)

    def _log_unfinished_iteration(self, record: IterationRecord) -> None:
        """A timed-out or failed iteration goes to the progress log (and its commit), not only the event log."""
        if record.timed_out:
            what = f"timed out after {self.iteration_timeout():g}s; the loop stopped the agent"
        elif record.exit_code not in (0, None) and not self.cancel.is_set():
            what = f"the agent failed (exit code {record.exit_code})"
        else:
            return
        assert self.run_dir is not None
        raw = self.run_dir / f"iteration-{record.number:03d}.agent.jsonl"
        progress = progress_log(self.ralph_dir)
        stamp = time.strftime("%Y-%m-%d %H:%M")
        try:
            with progress.open("a", encoding="utf-8") as handle:
                handle.write(
                    f"\n[ralph loop {stamp}] iteration {record.number} ({record.mode} {record.story_id}): {what}; "
                    f"work it left uncommitted is still in the tree; the agent's output: {raw}\n"
                )
        except OSError as exc:
            self.emit("loop_commit_failed", iteration=record.number, error=f"progress log: {exc}")
            return
        error = commit_paths(self.project_dir, [progress], f"ralph: iteration {record.number} - {what.split(';')[0]}")
        if error:
            self.emit("loop_commit_failed", iteration=record.number, error=error)

    def persist_tasks(self, tasks: TaskList, record: IterationRecord, message: str) -> None:
        """Write a task list the loop changed (gates, failures), log it and commit it."""
        self.taskfile.persist(tasks)
        self._note_in_progress(record, message, subject=message.split(";")[0][:72])

    def ask_reviewer(
        self, prompt: str, label: str, timeout: float | None, agent_name: str | None, model: str | None
    ) -> tuple[str, str]:
        """A fresh, read-only session of ``agent_name`` (default: the review agent) for a gate.

        Returns (answer text, "agent" or "agent/model").
        """
        if agent_name is None or agent_name == self.review_agent.name:
            agent = self.review_agent
        elif agent_name == self.agent.name:
            agent = self.agent
        else:
            agent = self._extra_agents.get(agent_name) or self.host.agents.get(agent_name)(self.settings)
            self._extra_agents[agent_name] = agent
            available = agent.availability()
            if not available.ok:
                from ralph.errors import UnavailableError

                raise UnavailableError(f"agent {agent.name!r} (the {label.split('.', 1)[-1]} gate's) cannot run: {available.reason}")
        chosen = model or self.model_for("review", agent, explicit_only=True)
        answer = self.ask_agent(prompt, label, timeout, agent=agent, model=chosen, read_only=True)
        shown = chosen or self.model_for("review", agent)
        return answer, agent.name + (f"/{shown}" if shown else "")

    def ask_agent(
        self,
        prompt: str,
        label: str,
        timeout: float | None,
        agent: Agent | None = None,
        model: str | None = None,
        read_only: bool = False,
    ) -> str:
        """One extra agent call (a gate's review); its raw output goes to the run directory."""
        assert self.run_dir is not None
        agent = agent or self.agent
        env = self.channel_env()
        invocation = AgentInvocation(
            prompt=prompt,
            project_dir=self.project_dir,
            run_dir=self.run_dir,
            iteration=int(label.split(".")[0]),
            model=model if model is not None else (self.config.model if agent is self.agent else None),
            hook_settings=self._hook_settings(env),
            env=env,
            purpose=label.split(".", 1)[-1],
            sandboxed=self.runner.isolates,
            read_only=read_only,
        )
        texts: list[str] = []
        with (self.run_dir / f"iteration-{label}.agent.jsonl").open("a", encoding="utf-8") as raw_out:

            def on_line(line: str) -> None:
                raw_out.write(line + "\n")
                texts.extend(e.text for e in agent.parse_line(line) if e.kind == "text")

            self.runner.run(agent.process(invocation), on_line, timeout or self.iteration_timeout(), self.cancel)
        return "\n".join(texts)

    # -- per-mode agents and models -----------------------------------------------------

    def agent_for(self, mode: str) -> Agent:
        """The review agent for review iterations, the (implement) agent otherwise."""
        return self.review_agent if mode == "review" else self.agent

    def model_for(self, mode: str, agent: Agent, explicit_only: bool = False) -> str | None:
        """``review_model`` / ``implement_model``, else ``model`` for the main agent, else the agent's own default.

        ``explicit_only`` leaves out the agent's own default (the agent applies it itself).
        """
        config = self.config
        chosen = config.review_model if mode == "review" else config.implement_model
        if chosen is None and agent is self.agent:
            chosen = config.model
        if chosen is None and not explicit_only:
            default = getattr(agent, "default_model", None)
            chosen = default() if callable(default) else None
        return chosen

    def channel_env(self) -> dict[str, str]:
        """The agent's way to the loop: run dir, hook socket and the per-run token."""
        return {
            "RALPH_RUN_DIR": str(self.run_dir),
            "RALPH_HOOK_SOCKET": str(self.hook_server.path),
            "RALPH_HOOK_TOKEN": self.hook_token,
        }

    def _feedback_for_next(self, record: IterationRecord) -> list[str]:
        feedback = [f"Iteration {record.number} ({record.mode}): {message}" for message in record.violations]
        if record.undone:
            feedback.append(
                f"The loop undid the review-field changes of {', '.join(sorted(set(record.undone)))}; "
                "see progress.txt. Follow the mode rules above."
            )
        if record.timed_out:
            feedback.append(
                f"Iteration {record.number} timed out after {self.iteration_timeout():g}s; the agent was stopped. "
                "Check git status and progress.txt for partial work."
            )
        if record.promise and record.violations:
            feedback.append(
                "The previous iteration printed <promise>COMPLETE</promise> but the task list is not complete: "
                "only print it when every story passes and is approved."
            )
        return feedback

    # -- trusted state, marker, hook wiring ------------------------------------------------

    def _payload(self, record: IterationRecord, selection: Selection, before: TaskList) -> dict[str, Any]:
        return {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "pid": os.getpid(),
            "max_iterations": self.config.max_iterations,
            "mode": "sandbox" if self.runner.isolates else "direct",
            "runner": self.runner.name,
            "skipReview": not self.policy.uses_review,
            "reviewCap": self.config.review_cap,
            "iteration": record.number,
            "iterationMode": selection.mode,
            "story": selection.story_id,
            "preIterationSnapshot": {sid: state.as_dict() for sid, state in before.snapshot().items()},
            "ralphDir": str(self.ralph_dir),
            "policy": self.policy.name,
            "store": self.store.name,
        }

    def _write_state(self, record: IterationRecord, selection: Selection, before: TaskList) -> None:
        assert self.run_dir is not None
        payload = self._payload(record, selection, before)
        trusted = {**payload, "projectDir": str(self.project_dir), "tasksPath": str(self.tasks_path), "runDir": str(self.run_dir)}
        # compact JSON: json's indenting encoder is pure Python and slow on large task lists
        atomic_write_text(self.run_dir / "state.json", json.dumps(trusted))
        atomic_write_text(self.marker, json.dumps({**payload, "runDir": str(self.run_dir)}) + "\n")

    def _remove_marker(self) -> None:
        try:
            data = json.loads(self.marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if data.get("pid") in (None, os.getpid()) and self.marker.exists():
            self.marker.unlink()

    def _hook_settings(self, env: dict[str, str]) -> Path | None:
        """A Claude Code settings file in the run directory (outside the project) wiring ralph's hooks.

        It also pins what decides whether those hooks run (``disableAllHooks``, the hook
        process's ``RALPH_*`` and loader variables): see :mod:`ralph.hooks.wiring`.
        """
        assert self.run_dir is not None
        from ralph.hooks.wiring import pinned_env, write_hook_settings

        return write_hook_settings(
            self.run_dir, self.runner.hook_command(), pinned_env(env, inherit=not self.runner.isolates)
        )

    # -- the trusted copy of prd.md, prompt.md and the hook settings ----------------------------

    def _take_trusted_copy(self, tasks: TaskList) -> None:
        """Read the run's trusted inputs once (in process and in the run directory); warn about weak settings."""
        assert self.run_dir is not None
        from ralph.hooks.wiring import weakening_settings
        from ralph.loop.trustedfiles import TrustedConfigTable, TrustedFiles, protected_files

        self.taskfile.trust(tasks, self.run_dir)
        self.trusted_files = TrustedFiles(self.project_dir, protected_files(self.project_dir, self.ralph_dir))
        self.trusted_files.save(self.run_dir)
        self.trusted_config_table = TrustedConfigTable(self.project_dir)
        self.trusted_tracked = {path for path in self.trusted_files.paths if _tracked(self.project_dir, path)}
        config = self.config.model_dump(mode="json") if hasattr(self.config, "model_dump") else {}
        atomic_write_text(self.run_dir / "trusted" / "config.json", json.dumps(config, indent=2, default=str) + "\n")
        for warning in weakening_settings(self.project_dir):
            self.emit("hook_settings_warning", warning=warning)

    def _restore_trusted_files(self, record: IterationRecord) -> list[Violation]:
        """Put back prd.md, prompt.md and the project settings the iteration changed; log and commit them."""
        if self.trusted_files is None:
            return []
        restored = self.trusted_files.restore()
        violations = []
        table = self.trusted_config_table
        if table is not None:
            config_restored, config_message = table.check()
            if config_restored is not None:
                restored.append(config_restored)
            if config_message is not None:
                violations.append(Violation("protected-file", config_message))
                self.emit("protected_file_restored", iteration=record.number, path="pyproject.toml", how="reported",
                          message=config_message)
                self._note_in_progress(record, config_message, subject="agent changed [tool.ralph]", paths=[])
        if not restored:
            return violations
        names = []
        for item in restored:
            name = str(item.path.relative_to(self.project_dir)) if item.path.is_relative_to(self.project_dir) else str(item.path)
            names.append(name)
            message = (
                f"{name} is protected during the run and was {item.how} by the agent; the loop restored it from its "
                "trusted copy. It is the person's to change between runs: propose the change in progress.txt."
            )
            violations.append(Violation("protected-file", message))
            self.emit("protected_file_restored", iteration=record.number, path=name, how=item.how, message=message)
        # commit the restored files git tracks now or tracked when the run started, so the tree stays clean
        tracked = [item.path for item in restored if item.path in self.trusted_tracked or _tracked(self.project_dir, item.path)]
        self._note_in_progress(
            record,
            f"the loop restored protected files the agent changed: {', '.join(names)}",
            subject="loop restored protected files",
            paths=tracked,
        )
        return violations

    # -- the hook server's answers ----------------------------------------------------------

    def loop_view(self) -> Any:
        from ralph.contracts import LoopView
        from ralph.loop.trustedfiles import protected_files

        selection, _, checkpoint = self.current if self.current else (None, None, None)
        assert self.run_dir is not None
        return LoopView(
            runner=self.runner.name,
            isolates=self.runner.isolates,
            mode=selection.mode if selection else None,
            story_id=selection.story_id if selection else None,
            ralph_dir=self.ralph_dir,
            run_dir=self.run_dir,
            protected_paths=[self.marker, *protected_files(self.project_dir, self.ralph_dir)],
            checkpoint=checkpoint,
        )

    def answer_hook(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one agent-side hook call with the loop's trusted state and plugins."""
        from ralph.hooks.answers import HookContext, answer, deny
        from ralph.hooks.sessionstore import MemorySession

        payload = request.get("payload") or {}
        session_id = str(payload.get("session_id") or "")
        session = self.sessions.setdefault(session_id, MemorySession())
        current = self.current

        def stop_checks() -> list[Violation]:
            if current is None:
                return []
            selection, before, _ = current
            raw, tasks, error = self.read_tasks()
            return self.validate(raw, tasks, selection.mode, before, parse_error=error, story_id=selection.story_id)

        assert self.run_dir is not None
        context = HookContext(self.host, self.project_dir, session, self.run_dir, self.loop_view(), stop_checks)
        try:
            output = answer(payload, context, dict(request.get("env") or {}))
        except PluginFailure as exc:  # a guard (or a Stop check) that cannot run: deny, and stop the run
            self.plugin_failure = exc
            self.cancel.set()
            output = deny(payload, f"ralph: {exc}")
        if output:
            self.emit("hook", event=payload.get("hook_event_name"), tool=payload.get("tool_name"), output=output)
        return output

    # -- signals ---------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}

        def handle(signum: int, _frame: Any) -> None:
            self.interrupt_signal = self.interrupt_signal or signum
            self.cancel.set()
            self.emit("interrupt", signal=signal.Signals(signum).name)

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handle)
        return previous

    def _restore_signal_handlers(self, previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    # -- the end ---------------------------------------------------------------------------

    def _finish(self, exit_code: int, reason: str, tasks: TaskList) -> RunResult:
        if exit_code == EXIT_INTERRUPTED and self.interrupt_signal == signal.SIGTERM:
            exit_code, reason = EXIT_TERMINATED, f"{reason} (SIGTERM)"
        result = RunResult(exit_code, reason, self.run_dir, self.records, self.cost, tasks)
        stories = [
            {
                "id": s.id,
                "title": s.title,
                "passes": s.passes,
                "reviewStatus": s.reviewStatus,
                "reviewCount": s.reviewCount,
                "autoApproved": s.reviewFeedback.startswith(AUTO_APPROVED_PREFIX),
                "failed": s.failed,
                "failureReason": s.failureReason,
            }
            for s in tasks.userStories
        ]
        summary = {
            "exit_code": exit_code,
            "reason": reason,
            "iterations": len(self.records),
            "max_iterations": self.config.max_iterations,
            "cost_usd": round(self.cost, 6),
            "usage": total_usage(self.records),
            "elapsed": round(time.monotonic() - self.started, 3),
            "stories": stories,
            "records": [record.__dict__ for record in self.records],
        }
        from ralph.loop.runreport import build_run_report, ralph_dir_arg, render_run_report

        report = build_run_report(
            tasks, self.keeper, reason, exit_code,
            task_file=self.tasks_path.name, dir_arg=ralph_dir_arg(self.ralph_dir, self.project_dir),
        )
        summary["report"] = report
        if self.stash_message:
            summary["stash"] = self.stash_message
        if self.run_dir is not None:
            atomic_write_text(self.run_dir / "report.json", json.dumps(report, indent=2))
            atomic_write_text(self.run_dir / "report.md", render_run_report(report))
            atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        self.keeper.record_end(
            {"run_dir": str(self.run_dir), "exit_code": exit_code, "reason": reason, "tasks_sha256": _file_sha256(self.tasks_path)}
        )
        self.emit("run_finished", **summary)
        return result


def _done(tasks: TaskList) -> int:
    return sum(1 for story in tasks.userStories if story.passes)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _file_sha256(path: Path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _tracked(project_dir: Path, path: Path) -> bool:
    """Does git track ``path`` (in the index)?"""
    from ralph.gitutil import git

    return git(project_dir, "ls-files", "--error-unmatch", "--", str(path), check=False).returncode == 0


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(data)
        return data
    except (TypeError, ValueError):
        return {"repr": repr(data)[:2000]}


def build_loop(settings: Settings, host: PluginHost, runner_name: str, agent_name: str, policy_name: str) -> Loop:
    """Instantiate the named plugins (errors name what is unknown and what exists)."""
    runner = host.runners.get(runner_name)(settings).resolve(host.runners)
    available = runner.availability()
    if not available.ok:
        from ralph.errors import UnavailableError

        raise UnavailableError(f"runner {runner.name!r} cannot be used: {available.reason}")
    agent = host.agents.get(agent_name)(settings)
    policy = host.policies.get(policy_name)(settings)
    store = choose_store(settings, host)
    loop = Loop(settings, host, runner=runner, agent=agent, policy=policy, store=store)
    review_name = settings.config.review_agent
    if review_name and review_name != agent.name:
        loop.review_agent = host.agents.get(review_name)(settings)
    return loop


def choose_store(settings: Settings, host: PluginHost) -> TaskStore:
    """The configured store, else the one whose file is present (tasks.json first), else tasks.json."""
    from ralph.lifecycle.plan import store_for

    if not host.stores.names():
        raise RalphError("no task store plugin is loaded (is ralph-trustloop installed correctly?)")
    try:
        return store_for(settings.ralph_dir, host, settings.config.task_store)
    except UsageError:
        return host.stores.get("tasks-json")()  # preflight then names the missing file
