"""The trusted loop engine: one ``ralph run``, iteration by iteration.

The agent can write anything in the project, so the loop keeps its own truth:
the pre-iteration snapshot and the iteration mode live in this process; after
every iteration it validates the task list itself, undoes illegal review
transitions, and decides completion.  ``.ralph-active`` in the project is
written for visibility only.

:class:`Loop` is the order of things; each step's work is done by a part with one
job: :mod:`~ralph.loop.opening` (the repository before iteration 1),
:mod:`~ralph.loop.agents` (agent sessions), :mod:`~ralph.loop.hookbridge` (hook calls),
:mod:`~ralph.loop.repairs` and :mod:`~ralph.loop.trustedcopy` (after an iteration),
:mod:`~ralph.loop.gates`, :mod:`~ralph.loop.limits`, :mod:`~ralph.loop.finish`.  The parts share one
:class:`~ralph.loop.runcontext.RunContext` (settings, run directory, clock, events, notes, meter, the
agents' sessions) instead of callbacks into the loop.
"""

from __future__ import annotations

import operator
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ralph.contracts import Agent, Check, Policy, Runner, Selection, TaskStore
from ralph.errors import RalphError, TaskListError, UsageError
from ralph.gitutil import git_dir, tree_status
from ralph.loop.activestate import ActiveState
from ralph.loop.agents import refuse_unwired
from ralph.loop.finish import finish_run, unselectable_end
from ralph.loop.gates import GateKeeper
from ralph.loop.hookbridge import HookBridge
from ralph.loop.limits import RunLimits
from ralph.loop.lock import ProjectLock
from ralph.loop.loopfiles import LoopFiles
from ralph.loop.opening import Opening, announce, prepare_repository
from ralph.loop.personchanges import PersonChanges
from ralph.loop.personchanges import describe as describe_person_changes
from ralph.loop.prompt import iteration_feedback, relative_dir, render_iteration
from ralph.loop.sessionslog import log_incomplete
from ralph.loop.records import (
    EXIT_AGENT_FAILING,
    EXIT_BUDGET,
    EXIT_COMPLETE,
    EXIT_EXHAUSTED,
    EXIT_GLOBAL_TIMEOUT,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    EXIT_USAGE_LIMIT,
    IterationRecord,
    RunResult,
)
from ralph.loop.repairs import TaskListRepairs
from ralph.loop.rundir import new_run_dir
from ralph.loop.runcontext import RunContext, RunOptions
from ralph.loop.signals import install_stop_handlers, restore_handlers
from ralph.loop.storechoice import choose_store
from ralph.loop.taskfile import TaskFile
from ralph.loop.trustedcopy import TrustedCopy
from ralph.plugin.manager import PluginFailure, PluginHost
from ralph.safeio import root_for
from ralph.ralphfiles import progress_log
from ralph.settings import Settings
from ralph.tasks import TaskList

PROMISE = re.compile(r"<promise>\s*COMPLETE\s*</promise>")


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
        review_agent: Agent | None = None,
        options: RunOptions | None = None,
        policy_note: Check | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.runner = runner
        self.agent = agent
        self.review_agent: Agent = review_agent or agent
        """The agent of review iterations (``review_agent`` in config; the same agent by default)."""
        self.policy = policy
        self.store = store
        self.options = options or RunOptions()
        """``--story``, and what to do with an earlier run's state (``--resume`` / ``--fresh``)."""
        self.policy_note = policy_note
        """Why the run uses another policy than the default (a prompt written for a loop without review)."""
        self.config = settings.config
        self.project_dir = settings.project_dir
        self.ralph_dir = settings.ralph_dir
        self.tasks_path = store.path(self.ralph_dir)
        self.records: list[IterationRecord] = []
        self.prompt: Any = None
        """The run's prompt template (a :class:`ralph.loop.start.PromptSource`), read once in preflight."""
        self.checks: list[Check] = []
        """The pre-flight checks of this run (warnings among them are reported at the start)."""
        self.warnings: list[Check] = []
        """What :meth:`preflight` found in the person's files that does not stop the run (a misspelt
        task-list key ...): reported at the start, by ``--dry-run`` and by ``ralph doctor``."""
        self.interrupt_signal: int | None = None
        self._unpriced_seen: set[str] = set()
        """Models already reported as having no price (``unpriced_model``, once per model)."""
        self._stories_shown: list[dict[str, Any]] | None = None
        """The stories of the last ``story_states`` event."""
        self._stories_key: object = None
        """What they were made of (:func:`ralph.loop.runreport.shown_key`)."""
        self.opening = Opening()
        self.taskfile = TaskFile(store, self.tasks_path, root_for(self.tasks_path, self.project_dir))
        """The task file: reads, the loop's writes, the last good text, the trusted non-story fields."""
        self.context = context = RunContext(settings, host, runner, policy, self.taskfile, agent=agent,
                                            review_agent=self.review_agent)
        """What the parts below share (the run directory, the clock, events, notes, the meter, the agents)."""
        self.emit = context.emit
        self.cancel = context.cancel
        self.agents = context.agents
        self.notes = context.notes
        self.limits = RunLimits(context)
        self.state = ActiveState(settings, runner, policy, store, self.tasks_path)
        self.trusted = TrustedCopy(settings, self.taskfile, self.notes, context.emit)
        self.loopfiles = LoopFiles(self.project_dir, self.taskfile, self.notes, self.state, context.emit)
        """The loop's own files in the project, put back as regular files after each session."""
        self.repairs = TaskListRepairs(context)
        self.keeper = GateKeeper(context, host, settings)
        from ralph.loop.personrefs import RefGuard, mirror_path

        self.refs = RefGuard(self.project_dir, mirror_path(self.project_dir, self.config.state_dir), context.emit)
        """HEAD on the run's branch, the person's other refs where they were (a mirror outside the project)."""
        from ralph.loop.reviewtree import ReviewFreeze

        self.freeze = ReviewFreeze(self.project_dir, self.taskfile, self.notes, context.emit, policy)
        """A review changes no code: its tree compared, code changes and the verdict undone."""
        from ralph.loop.parking import Parking

        self.parking = Parking(self.project_dir, self.config.state_dir, self.taskfile, self.notes, context.emit)
        """The agent's questions to a person and the stories they park (``ralph ask`` / ``ralph answer``)."""
        self.gap = PersonChanges(self.project_dir, self.trusted.loop_inputs, lambda: [progress_log(self.ralph_dir)],
                                 context.status.get)
        """What a person changed between two iterations (the run then stops)."""
        self.bridge: HookBridge | None = None
        """The hook server and the running iteration (from the run's start)."""

    @property
    def run_dir(self) -> Path | None:
        """The run directory (None until the run has started)."""
        return self.context.run_dir

    # -- before the lock ---------------------------------------------------------------------

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
            from ralph.ralphfiles import KNOWN_LOOP_DIRS, holds_loop, other_tool_loop

            found = [d for d in KNOWN_LOOP_DIRS if holds_loop(self.project_dir / d)]
            hint = "run `ralph init` first (or pass --ralph-dir)"
            other = other_tool_loop(self.project_dir)
            if other:
                hint = f"run `ralph init` first: it takes over {other}'s loop here (its files are left as they are)"
            if found:
                hint = f"run `ralph init` first, or pass --ralph-dir {found[0]} (a Ralph folder is there)"
            raise UsageError(f"{self.ralph_dir} does not exist: {hint}")
        from ralph.loop.start import check_only_story, check_prd, graph_errors, load_prompt

        self.prompt = load_prompt(self.ralph_dir, progress_log(self.ralph_dir).name)
        check_prd(self.prompt, self.ralph_dir, self.project_dir)
        from ralph.loop.prompt import check_template

        shown = "built-in prompt" if self.prompt.builtin else relative_dir(self.ralph_dir / "prompt.md", self.project_dir)
        check_template(self.prompt.text, shown)
        raw, tasks, error = self.taskfile.read()
        if tasks is None and raw is None and not os.path.lexists(self.tasks_path):
            raise TaskListError(f"{error}: write one (`ralph init` adds a template, `ralph plan` plans one), or point "
                                "--ralph-dir at the folder that holds it")
        if tasks is None:
            raise TaskListError(f"{error}\n(the file was left untouched; fix it and run again)")
        self.loopfiles.refuse_unsafe()
        problems = [v for v in self.context.checks.validate(raw, tasks, None, None, check_git=False) if v.check == "schema"]
        if problems:
            lines = "\n".join(f"{self.tasks_path}: {v.message}" for v in problems)
            raise TaskListError(f"{lines}\n(the file was left untouched; fix it and run again)")
        graph = graph_errors(tasks)
        if graph:
            lines = "\n".join(f"{self.tasks_path}: {line}" for line in graph)
            raise TaskListError(f"{lines}\n(no agent was started; fix the task list and run again)")
        if self.options.only_story is not None:
            check_only_story(tasks, self.options.only_story, self.tasks_path)
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
            refuse_unwired(agent)
            unmetered = self.context.meter.enabled_for(agent) if self.config.max_quota else None
            if unmetered is not None:
                raise UsageError(f"--max-quota needs the loop's meter of the model traffic, and agent {agent.name!r} "
                                 f"is not metered ({unmetered}): use --max-cost, or run a metered agent")
        if self.config.api_billing == "refuse" and not self.config.preflight:
            raise UsageError("api_billing = \"refuse\" needs the pre-flight checks, which look for an API key beside "
                             "your subscription login: set preflight = true (or api_billing = \"warn\")")
        self.taskfile.accept(raw)
        self.taskfile.trust(tasks)
        from ralph.loop.foreignprompt import refusal
        from ralph.loop.start import input_warnings

        refused = refusal(self.settings, self.policy, None if self.prompt.builtin else self.prompt.text)
        if refused:
            raise UsageError(refused)
        self.warnings = [self.policy_note] if self.policy_note else []
        self.warnings += input_warnings(tasks, self.tasks_path, self.project_dir, self.policy)
        return tasks

    def preflight_checks(self) -> list[Check]:
        """The runner's, the agent's and the plugins' pre-flight checks (none when turned off)."""
        if not self.config.preflight:
            return []
        from ralph.loop.preflight import preflight_checks

        return preflight_checks(self.settings, self.host, self.runner, self.agent, self.review_agent,
                                gates=self.taskfile.verify_commands)

    def readiness(self) -> list[Check]:
        """Every check ``ralph run`` makes before iteration 1, collected instead of raised (``ralph doctor``).

        The same calls as :meth:`run`: :meth:`preflight` (a failure is one failed check: the run
        stops at the first), its warnings, the opening's refusal of uncommitted changes (a warning
        here, as in ``--dry-run``: the person may be about to commit), then :meth:`preflight_checks`.
        """
        checks: list[Check] = []
        try:
            self.preflight()
        except RalphError as exc:
            checks.append(Check(False, str(exc), "see the message (`ralph run` stops here)"))
        checks += self.warnings
        from ralph.loop.opening import uncommitted_warning

        try:
            dirty = uncommitted_warning(self.project_dir, self.config)
        except RalphError:  # not a repository: preflight said so
            dirty = None
        return checks + ([dirty] if dirty is not None else []) + self.preflight_checks()

    def dry_run(self) -> tuple[Selection | None, str | None, TaskList]:
        """The next iteration's selection and rendered prompt; runs nothing."""
        tasks = self.preflight()
        selection = self.select(tasks)
        if selection is None:
            return None, None, tasks
        return selection, self.render(1, selection, tasks, []), tasks

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Lock the project, iterate until done, and always clean up (marker, lock, runner)."""
        with fewer_collections():
            return self._run()

    def _run(self) -> RunResult:
        self.preflight()
        from ralph.loop.preflight import raise_on_failures

        self.checks = self.warnings + self.preflight_checks()
        raise_on_failures(self.checks)
        self.host.configure(self.settings)  # reporters that need their config section (notifications) keep it
        lock = ProjectLock(git_dir(self.project_dir))
        lock.acquire()
        previous_handlers = install_stop_handlers(self._on_stop_signal)
        try:
            self.opening = prepare_repository(self.project_dir, self.config, self.taskfile, self.keeper,
                                               self.options.rerun)
            # read again: stashing the user's work may have changed the task list on disk
            raw, tasks, error = self.taskfile.read()
            if tasks is None:
                raise TaskListError(f"{error}\n(the file was left untouched; fix it and run again)")
            self.taskfile.accept(raw)
            self.context.clock.restart()
            self.context.run_dir = run_dir = new_run_dir(self.project_dir, self.config.state_dir)
            self.opening.keep_saved_work(run_dir)
            self.refs.start(run_dir)
            self.trusted.take(run_dir, tasks)
            self.bridge = bridge = HookBridge(self.context, run_dir, self.state.marker, on_ask=self.parking.ask).start()
            self.parking.start(run_dir)
        except BaseException:  # nothing started yet: the lock and the signal handlers go back
            restore_handlers(previous_handlers)
            lock.release()
            raise
        self.agents.channel = bridge
        try:
            from ralph.gitutil import GitMetadataChanged, protect, use_private_index

            protect(self.project_dir)
            # "committed" and "clean" from the loop's own index, never the one the agent can write
            use_private_index(self.project_dir, run_dir / "private-index")
            self.runner.prepare(self.project_dir)
            return self._iterate(tasks)
        except PluginFailure as exc:  # a check that cannot run stops the run: fail-closed
            self.emit("run_stopped", plugin=exc.name, provider=exc.plugin, plugin_kind=exc.kind, error=exc.error)
            self._finish(EXIT_USAGE, f"stopped: {exc}", self._current_tasks(tasks))
            raise
        except GitMetadataChanged as exc:
            self.emit("git_metadata_changed", error=str(exc))
            record = self.records[-1] if self.records else IterationRecord(0, self.policy.reopen_mode, None)
            refs = self.refs.put_back_on_stop(record)  # the same session may have moved the person's refs
            if refs:
                raise GitMetadataChanged(f"{exc}\n{refs}") from None
            raise
        except RalphError:
            raise
        except Exception as exc:  # fail-closed: stop with a clear error, keep the evidence
            import traceback

            trace = traceback.format_exc()
            (run_dir / "crash.txt").write_text(trace, encoding="utf-8")
            self.emit("loop_crashed", error=f"{type(exc).__name__}: {exc}", traceback=trace[-4000:])
            stop = RalphError(
                f"the loop stopped on an internal error: {type(exc).__name__}: {exc} (traceback in "
                f"{run_dir / 'crash.txt'}; the project is as the last iteration left it)"
            )
            self._finish(EXIT_USAGE, str(stop), self._current_tasks(tasks))
            raise stop from exc
        finally:
            restore_handlers(previous_handlers)
            try:
                self.runner.cleanup()
            finally:
                self.context.meter.stop()
                bridge.stop()
                self.parking.stop()
                self.state.remove_marker()
                from ralph.gitutil import drop_private_index, unprotect

                drop_private_index(self.project_dir)
                unprotect(self.project_dir)
                lock.release()

    def _iterate(self, tasks: TaskList) -> RunResult:
        """Announce the run, then one iteration after another until the work is done or a limit stops it."""
        assert self.run_dir is not None and self.bridge is not None
        self._announce(tasks)
        self._story_states(tasks)
        if self.is_complete(tasks):
            tasks, refs_moved = self._final_check_at_start(tasks)  # "complete" only when the tree passes
            if refs_moved is not None:
                return self._finish(EXIT_USAGE, (
                    "the final check of the tree this run found (every story was done) ran the project's code, and "
                    f"it changed refs that are the person's: {refs_moved} Fix the code that does so, then run again."),
                    tasks)
        if self.is_complete(tasks):
            only = self.options.only_story
            what = f"{only} was already complete" if only else "all stories were already complete"
            return self._finish(EXIT_COMPLETE, what, tasks)
        feedback: list[str] = []
        iteration = 0
        while iteration < self.config.max_iterations:
            if self.cancel.is_set():
                return self._finish(EXIT_INTERRUPTED, "interrupted", tasks)
            if self.limits.global_time_up():
                return self._finish(EXIT_GLOBAL_TIMEOUT, "global hard timeout reached: the loop stopped cleanly", tasks)
            # HEAD, untracked files and the person's-changes look: no agent ran since, a change is a person's
            status, changed = self.gap.look()  # right after the last iteration_over: its status (no git call)
            if changed:
                self.emit("person_changed", iteration=iteration + 1, paths=changed)
                return self._finish(EXIT_USAGE, describe_person_changes(changed, iteration + 1), tasks)
            accepted = self.taskfile.last_good
            tasks = self.parking.settle(tasks, iteration + 1)
            selection = self.select(tasks)
            if selection is None:
                return self._finish(*unselectable_end(tasks, self.policy, self.parking.waiting(tasks)), tasks)
            iteration += 1
            record = self._new_record(iteration, selection)
            iteration_started = time.time()
            trimmed = self.notes.trim_before(iteration)
            if trimmed or self.taskfile.last_good is not accepted:  # the loop committed or wrote since: look again
                status = tree_status(self.project_dir)
            self.refs.refresh()
            checkpoint, untracked_before = status.head or None, set(status.untracked)
            self.freeze.before_iteration(self.run_dir, selection.mode)
            self.keeper.before_iteration(selection, checkpoint)
            feedback = self.keeper.story_context(selection) + feedback
            before, tasks = tasks, self._one_iteration(record, selection, tasks, feedback, checkpoint, untracked_before)
            if self.bridge.plugin_failure is not None:
                raise self.bridge.plugin_failure
            limited = bool(record.usage_limit or record.rate_limit) and not self.cancel.is_set()
            if limited and record.rejected:
                # the meter saw the model answer nothing and the tree is unchanged: nothing to count or gate
                self.gap.iteration_over()
                self.gap.waiting()
                stop = self.limits.wait_out(record, counted=False)
                self.refs.read_again()
                if stop is not None:
                    return self._finish(EXIT_USAGE_LIMIT, stop, tasks)
                iteration -= 1
                feedback = []
                continue
            if not limited:
                self.limits.answered()
            if not self.cancel.is_set():
                tasks = self.keeper.after_iteration(record, selection, tasks, checkpoint, untracked_before, before)
                tasks = self._refs_after_gates(record, tasks, checkpoint)
                story = tasks.story(selection.story_id or "")
                if story is not None and story.passes and not record.violations:
                    self.keeper.forget(story.id)
            log_incomplete(self.keeper.states_dir.parent, record, before, tasks, self.cancel.is_set(),
                           self.keeper.failed_gate, self.policy)
            tasks = self.parking.after_iteration(record, tasks)  # the agent asked a person: its story waits
            failing = self.limits.agent_failing(record)
            if failing is not None:
                return self._finish(EXIT_AGENT_FAILING, failing, tasks)
            feedback = iteration_feedback(record, self.context.clock.iteration_timeout())
            tasks, limit_feedback = self.limits.story_limits(record, selection, tasks)
            self._story_states(tasks)
            feedback += limit_feedback + self.host.prompt_context(self.run_dir, iteration + 1, iteration_started)
            if self.is_complete(tasks) and not record.violations and not self.cancel.is_set():
                tasks = self.keeper.final_check(record, tasks)  # "complete" only when the final tree passes
                tasks = self._refs_after_gates(record, tasks, checkpoint)  # its gates ran the project's code
            end = self._end_after(record, tasks)
            if end is not None:
                return self._finish(*end, tasks)
            self.gap.iteration_over()  # what the loop left; anything else changing before the next one is a person's
            if record.promise:
                self.emit("false_completion", iteration=iteration)
            if limited:  # the iteration did work (it counts, its gates ran); wait before the next one
                self.gap.waiting()
                stop = self.limits.wait_out(record, counted=True)
                self.refs.read_again()
                if stop is not None:
                    return self._finish(EXIT_USAGE_LIMIT, stop, tasks)
        return self._finish(EXIT_EXHAUSTED, f"max iterations ({self.config.max_iterations}) reached", tasks)

    def _one_iteration(
        self, record: IterationRecord, selection: Selection, tasks: TaskList, feedback: list[str], checkpoint: str | None,
        untracked_before: set[str] | None = None,
    ) -> TaskList:
        """State file, prompt, the agent's session; then the loop's own reading (and repair) of what it left."""
        assert self.run_dir is not None and self.bridge is not None
        before, before_raw = tasks, self.taskfile.last_good  # never mutated: the post-iteration state is a fresh parse
        snapshot = self.context.checks.begin(before)  # the marker shows it too
        self.bridge.start_iteration((selection, before, checkpoint), record.number)
        self.state.write(self.run_dir, record, selection, snapshot)
        prompt = self.render(record.number, selection, tasks, feedback)
        (self.run_dir / f"iteration-{record.number:03d}.prompt.md").write_text(prompt, encoding="utf-8")
        self.emit(
            "iteration_started", iteration=record.number, max_iterations=self.config.max_iterations,
            mode=selection.mode, story=selection.story_id, reason=selection.reason,
            cost_so_far=round(self.agents.cost, 6), agent=record.agent, model=record.model,
            stories=len(tasks.userStories), stories_done=_done(tasks),
        )
        started = time.monotonic()
        self.context.status.forget()  # nothing read before the agent's session is shared after it
        try:
            texts = self.agents.run_iteration(record, prompt)
        finally:
            self.context.status.forget()
        record.seconds = round(time.monotonic() - started, 3)
        self._unpriced(record)
        if record.exit_code not in (0, None) or (record.metered and (record.answered == 0 or self._limited(record))):
            record.changed = not self._untouched(checkpoint, untracked_before)
        record.rejected = record.metered and record.answered == 0 and record.changed is False
        self._set_aside_limit(record)
        record.promise = any(PROMISE.search(text) for text in texts)
        self.bridge.current = None  # hooks that still arrive now see no iteration
        # HEAD and the person's refs first: the loop's own commits below go onto the run's branch
        moved = self.refs.check(record, checkpoint, untracked_before)
        frozen = self.freeze.after_iteration(record, checkpoint, self.run_dir)  # a review's code changes undone
        secured = self.loopfiles.secure(record, checkpoint)  # before anything is read back
        record.commands_failed = self._commands_failed(record, checkpoint, untracked_before)
        after, violations = self.repairs.read_back(record, selection, before, before_raw, self.run_dir)
        if frozen:  # ... and its verdict not accepted
            after = self.freeze.reject_verdict(record, selection, before, after)
        violations = moved + frozen + secured + violations
        violations += self.trusted.restore(record)
        record.violations = [v.message for v in violations if v.is_error]
        self.notes.unfinished(record, self.run_dir, self.context.clock.iteration_timeout(), self.cancel.is_set())
        for violation in violations:
            self.emit(
                "violation", iteration=record.number, check=violation.check, story=violation.story_id,
                message=violation.message, severity=violation.severity,
            )
        self.emit(
            "iteration_finished", iteration=record.number, mode=record.mode, story=record.story_id,
            exit_code=record.exit_code, timed_out=record.timed_out, seconds=record.seconds,
            cost=round(record.cost_usd, 6), usage=dict(record.usage), cost_so_far=round(self.agents.cost, 6),
            promise=record.promise, agent_error=record.agent_error, stories_done=_done(after),
            violations=len(record.violations), undone=record.undone, agent=record.agent, model=record.model,
        )
        if record.commands_failed:
            self.emit("commands_failed", iteration=record.number, calls=record.tool_calls, errors=record.tool_errors,
                      denied=record.tool_denials, first_error=(record.tool_error or "")[:1000])
        return after

    # -- the steps' small decisions --------------------------------------------------------------

    def select(self, tasks: TaskList) -> Selection | None:
        """The policy's choice (with each story's history at hand), limited to ``--story``'s story when one is given."""
        from ralph.loop.history import StoryHistories
        from ralph.loop.parking import parked_view
        from ralph.loop.start import only_story_scope

        scope = parked_view(only_story_scope(tasks, self.options.only_story))  # a policy that does not know `waiting` skips them too
        return self.policy.select_next(scope, StoryHistories(self.records, self.keeper))

    def is_complete(self, tasks: TaskList) -> bool:
        """Every story done (``--story``: that story done), as the policy defines done."""
        from ralph.loop.start import only_story_scope

        return self.policy.is_complete(only_story_scope(tasks, self.options.only_story))

    def render(self, iteration: int, selection: Selection, tasks: TaskList, feedback: list[str]) -> str:
        """The prompt of ``iteration``: the run's template with its tokens, and the loop's section."""
        if self.prompt is None:
            from ralph.loop.start import load_prompt

            self.prompt = load_prompt(self.ralph_dir, progress_log(self.ralph_dir).name)
        from ralph.loop.parking import ask_hint

        person = [ask_hint(ask_command(self.runner)), self.parking.prompt_block(selection.story_id)]
        return render_iteration(
            self.prompt.text, self.settings, self.policy, self.tasks_path, iteration, selection, tasks, feedback,
            person=person,
        )

    def _new_record(self, number: int, selection: Selection) -> IterationRecord:
        """The record of a starting iteration, with the agent and model its mode gets."""
        record = IterationRecord(number, selection.mode, selection.story_id)
        agent = self.agents.agent_for(selection.mode)
        record.agent, record.model = agent.name, self.agents.model_for(selection.mode, agent)
        self.records.append(record)
        return record

    @staticmethod
    def _limited(record: IterationRecord) -> bool:
        """The record says the iteration ended on a usage or rate limit or a context overflow."""
        return bool(record.usage_limit or record.rate_limit or record.context_overflow)

    def _set_aside_limit(self, record: IterationRecord) -> None:
        """A metered iteration that changed the project did not end on the limit its meter session ended on.

        The meter books every request on the session's secret path, and the agent can read that path from
        its CLI's environment: a process of the agent can make the session's last exchange a refusal of its
        own request (over-long, over the rate) after the CLI's last call.  Such an iteration did work, so
        the limit is set aside (no wait, no story flagged): a real limit rejects the next iteration's first
        call, which then changes nothing and is waited out.  A limit the agent provokes is a pause or a
        failure it causes itself, never a false completion.
        """
        if not record.metered or not record.changed or not self._limited(record):
            return
        limit = "usage_limit" if record.usage_limit else "rate_limit" if record.rate_limit else "context_overflow"
        message = record.usage_limit or record.rate_limit or "the context was exhausted"
        record.usage_limit = record.rate_limit = None
        record.retry_after = record.limit_resets_at = None
        record.context_overflow = False
        self.emit("limit_set_aside", iteration=record.number, limit=limit, message=message[:500])

    def _commands_failed(self, record: IterationRecord, checkpoint: str | None, untracked_before: set[str] | None) -> bool:
        """Every tool call of the iteration failed (the guards' denials apart) and the project is as the
        iteration found it (the loop's own look, before anything is repaired)."""
        if record.tool_errors == 0 or record.tool_errors < record.tool_calls:
            return False
        return self._untouched(checkpoint, untracked_before)

    def _untouched(self, checkpoint: str | None, untracked_before: set[str] | None) -> bool:
        """The project is as the iteration found it: same HEAD, no change against it, same untracked files (the
        loop's own status: an index flag the agent set hides nothing)."""
        if untracked_before is None:
            return False
        status = tree_status(self.project_dir)
        return ((status.head or None) == checkpoint and not status.tracked and not status.gitlinks
                and set(status.untracked) == untracked_before)

    def _final_check_at_start(self, tasks: TaskList) -> tuple[TaskList, str | None]:
        """A run that finds every story done checks the tree it finds (an earlier run may have ended before its
        final check): a failure sends the last done story back, and the run goes on with iterations.  Also
        returned: what its gates did to the person's refs (put back), None when nothing."""
        from ralph.loop.start import only_story_scope

        done = [story for story in only_story_scope(tasks, self.options.only_story).userStories if story.passes]
        if not done:
            return tasks, None
        record = IterationRecord(0, self.policy.reopen_mode, done[-1].id)
        tasks = self.keeper.final_check(record, tasks)
        # its gates ran the project's code (an earlier run's agent wrote it): the person's refs are checked after
        tasks = self._refs_after_gates(record, tasks, None)
        return tasks, (record.violations[0] if record.violations else None)

    def _refs_after_gates(self, record: IterationRecord, tasks: TaskList, checkpoint: str | None) -> TaskList:
        """The gates' sessions may not move the person's refs or HEAD either: put back, told next time."""
        violations = self.refs.check(record, checkpoint, after_agent=False)
        if not violations:
            return tasks
        for violation in violations:
            record.violations.append(violation.message)
            self.emit("violation", iteration=record.number, check=violation.check, story=violation.story_id,
                      message=violation.message, severity=violation.severity)
        raw, current, _ = self.taskfile.read()
        if current is None:
            return tasks
        self.taskfile.accept(raw)
        return current

    def _end_after(self, record: IterationRecord, tasks: TaskList) -> tuple[int, str] | None:
        """Why the run ends after this iteration (interrupted, out of budget, complete), or None to go on."""
        if self.cancel.is_set():
            return EXIT_INTERRUPTED, "interrupted"
        cost, budget = self.agents.cost, self.config.max_cost
        if budget is not None and cost >= budget:
            return EXIT_BUDGET, f"budget reached: ${cost:.4f} of ${budget:.4f} spent"
        quota = self._quota_end(record)
        if quota is not None:
            return EXIT_BUDGET, quota
        if self.is_complete(tasks) and not record.violations:
            how = "promise tag and verified task state" if record.promise else "verified task state (no promise tag)"
            return EXIT_COMPLETE, f"complete: {how}"
        return None

    def _unpriced(self, record: IterationRecord) -> None:
        """Say once per model that it has no price: its tokens cost $0 here, which no budget sees."""
        for model in record.unpriced:
            if model in self._unpriced_seen:
                continue
            self._unpriced_seen.add(model)
            pattern = model if "default model" not in model else "MODEL"
            self.emit("unpriced_model", iteration=record.number, model=model, usage=dict(record.usage),
                      fix=f'[tool.ralph.prices."{pattern}"] input = <USD per million input tokens>, output = <USD per '
                          "million output tokens>" + ("; name the model with --model or [tool.ralph.codex] model"
                                                      if pattern == "MODEL" else ""))

    def _quota_end(self, record: IterationRecord) -> str | None:
        """``--max-quota``: a window's use reached its budget, or the model answered without reporting any
        subscription quota (the traffic bills the API per token: the budget cannot be kept)."""
        limits = self.config.max_quota
        if not limits:
            return None
        over = self.context.meter.quota_over(limits)
        if over is not None:
            return over
        if record.metered and record.answered and not self.context.meter.quota.readings:
            return ("quota budget cannot be kept: the API reported no subscription quota for this run's model calls "
                    "(they are billed per token, as with an API key); --max-quota needs a subscription login, "
                    "--max-cost limits a run billed in USD")
        return None

    def _current_tasks(self, fallback: TaskList) -> TaskList:
        """The task list on disk, or ``fallback`` when it does not parse (for the summary of a stop)."""
        _, tasks, _ = self.taskfile.read()
        return tasks if tasks is not None else fallback

    def _on_stop_signal(self, signum: int) -> None:
        """SIGINT / SIGTERM: stop after the running step (a SIGTERM'd run ends with 143)."""
        self.interrupt_signal = self.interrupt_signal or signum
        self.cancel.set()
        self.emit("interrupt", signal=signal.Signals(signum).name)

    # -- the two ends ----------------------------------------------------------------------------

    def _announce(self, tasks: TaskList) -> None:
        """``run_started``, pre-flight warnings and what the opening found and did."""
        config = self.config
        run_started = {
            "project": str(self.project_dir), "run_dir": str(self.run_dir), "runner": self.runner.name,
            "agent": self.agent.name, "review_agent": self.review_agent.name, "policy": self.policy.name,
            "max_iterations": config.max_iterations, "review_cap": config.review_cap,
            "stories": len(tasks.userStories), "stories_done": _done(tasks),
            "fallback_reason": self.runner.fallback_reason, "sandboxed": bool(self.runner.isolates),
            "output": config.output, "live": config.live,
        }
        builtin = self.prompt is not None and self.prompt.builtin
        announce(self.emit, self.opening, run_started, self.checks,
                 relative_dir(self.ralph_dir, self.project_dir) if builtin else None)

    def _story_states(self, tasks: TaskList) -> None:
        """``story_states`` when the stories differ from those last emitted (what a dashboard shows mid-run)."""
        from ralph.loop.runreport import shown_key, summary_stories

        key = shown_key(tasks, self.policy)  # most iterations change no story: then no dict is built
        if key == self._stories_key:
            return
        self._stories_key = key
        stories = summary_stories(tasks, self.policy)
        if stories != self._stories_shown:
            self._stories_shown = stories
            self.emit("story_states", stories=stories, done=_done(tasks))

    def _finish(self, exit_code: int, reason: str, tasks: TaskList) -> RunResult:
        """End the run: summary, report and end marker written, ``run_finished`` emitted."""
        from ralph.loop.runreport import ralph_dir_arg

        return finish_run(
            exit_code, reason, tasks, records=self.records, cost=self.agents.cost, elapsed=self.context.clock.elapsed(),
            max_iterations=self.config.max_iterations, run_dir=self.run_dir, keeper=self.keeper,
            taskfile=self.taskfile, dir_arg=ralph_dir_arg(self.ralph_dir, self.project_dir),
            stash_message=self.opening.stash_message, interrupt_signal=self.interrupt_signal, emit=self.emit,
            quota_used=self.context.meter.quota_summary(),
            project_dir=self.project_dir,
        )


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Python's cyclic garbage collector, less often while the loop runs.

    Every iteration parses the task list afresh (tens of thousands of objects for a large list) while the
    loop holds the run's long-lived ones; with the default thresholds the collector scans that whole heap
    over and over, which at 10,000 stories cost more than the parse itself (``benchmarks/loop_overhead.py``).
    The loop's data is acyclic (freed by reference counting); collections still run, a hundred times rarer.
    """
    import gc

    saved = gc.get_threshold()
    gc.set_threshold(100_000, 50, 50)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def ask_command(runner: Runner) -> str:
    """How the agent runs ``ralph ask`` where ``runner`` runs it: ``ralph ask`` (a sandbox provides it,
    or ``ralph`` is on this machine's PATH), else this interpreter running ralph's CLI."""
    import shlex
    import shutil
    import sys

    if runner.isolates or shutil.which("ralph"):
        return "ralph ask"
    return f"{shlex.quote(sys.executable)} -P -m ralph.cli.main ask"


def _done(tasks: TaskList) -> int:
    return sum(map(_passes, tasks.userStories))  # StrictBool: True counts 1


_passes = operator.attrgetter("passes")


def build_loop(
    settings: Settings, host: PluginHost, runner_name: str, agent_name: str, policy_name: str,
    options: RunOptions | None = None,
) -> Loop:
    """Instantiate the named plugins (errors name what is unknown and what exists) and the loop that runs them."""
    chosen = host.runners.get(runner_name)
    agent = host.agents.get(agent_name)(settings)
    review_name = settings.config.review_agent
    review_agent = host.agents.get(review_name)(settings) if review_name and review_name != agent.name else None
    store = choose_store(settings, host)
    agents = [agent] + ([review_agent] if review_agent else [])
    runner = chosen(settings).resolve_for(host.runners, agents, gates=gate_commands(store, settings))
    available = runner.availability()
    if not available.ok:
        from ralph.errors import UnavailableError

        raise UnavailableError(f"runner {runner.name}: {available.reason}")
    from ralph.loop.foreignprompt import settle_policy

    policy_name, note = settle_policy(settings, host, policy_name)
    policy = host.policies.get(policy_name)(settings)
    return Loop(settings, host, runner=runner, agent=agent, policy=policy, store=store, review_agent=review_agent,
                options=options, policy_note=note)


def gate_commands(store: Any, settings: Settings) -> list[str]:
    """The task list's ``verifyCommands`` as they are now (what ``auto`` asks a sandbox to run);
    none when the list cannot be read (pre-flight then says why)."""
    try:
        path = store.path(settings.ralph_dir)
        _raw, tasks, _error = TaskFile(store, path, root_for(path, settings.project_dir)).read()
    except (RalphError, OSError):
        return []
    return list(tasks.verifyCommands) if tasks is not None else []
