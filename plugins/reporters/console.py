"""The console view: iteration n/N, mode, story, elapsed and cost; agent output; a final table.

On a terminal (stdout and stderr both a TTY, ``live`` not turned off) a live
footer (:mod:`.live`, drawn with rich) stays at the bottom while these lines
scroll above it; otherwise the same lines are written plainly.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any, TextIO

from ralph.api import LoopEvent, hookimpl
from ralph.api.reporters import exit_meaning, process_ended, render_run_report, render_run_summary
from ralph.api.text import counted, one_line, quote, safe_data, strip_controls

from .runstate import RunState, fmt_elapsed


class ConsoleView:
    """Turns loop events into lines for a person; state resets at each run start."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, live: bool | None = None) -> None:
        self.out = out
        self.err = err
        self.output = "normal"
        self.max_iterations = 0
        self.state = RunState()
        self.live_allowed = live
        """None: follow the run's ``live`` setting; True/False: on/off.  Always only on a terminal."""
        self.footer: Any = None

    @property
    def stdout(self) -> TextIO:
        return self.out or sys.stdout

    @property
    def stderr(self) -> TextIO:
        return self.err or sys.stderr

    def status(self, text: str) -> None:
        """One status line on stderr (without control characters: it may quote the agent)."""
        self.stderr.write(f"ralph | {one_line(text)}\n")
        self.stderr.flush()

    def write(self, text: str) -> None:
        """Text on stdout (the agent's own words among it): escape sequences and control characters removed."""
        self.stdout.write(strip_controls(text))

    def handle(self, event: LoopEvent) -> None:
        """Fold ``event`` into the footer's state and show it; every string in it is stripped first (agent text is data)."""
        data = safe_data(event.data)
        self.state.update(event.kind, data)
        if event.kind == "run_started":
            self._start_footer(bool(data.get("live", True)))
        handler = getattr(self, f"on_{event.kind}", None)
        if handler is not None:
            handler(data)
        if self.footer is not None:
            self.footer.refresh()

    # -- the live footer ---------------------------------------------------------

    def _start_footer(self, wanted: bool) -> None:
        self.stop_footer()
        wanted = wanted if self.live_allowed is None else self.live_allowed
        if not wanted or self.out is not None or self.err is not None:
            return
        from .live import terminal_attached

        if not terminal_attached():
            return
        from .live import LiveFooter

        self.footer = LiveFooter(self.state)
        self.footer.start()
        atexit.register(self.stop_footer)  # an error that ends the process mid-run must not leave it drawn

    def on_follow_ended(self, data: dict[str, Any]) -> None:
        self.stop_footer()

    def stop_footer(self) -> None:
        """Take the footer off the screen (idempotent)."""
        footer, self.footer = self.footer, None
        if footer is not None:
            footer.stop()

    def on_run_started(self, data: dict[str, Any]) -> None:
        self.output = data.get("output", "normal")
        self.max_iterations = data.get("max_iterations", 0)
        if data.get("fallback_reason") and data.get("sandboxed"):
            self.status(f"sandbox: {data.get('runner')}, chosen by auto because {data['fallback_reason']}")
        elif data.get("fallback_reason"):
            self.status(
                f"warning: running the agent directly on this machine (no sandbox): {data['fallback_reason']}"
            )
        self.status(
            f"run started: {counted(data.get('stories'), 'story')}, runner {data.get('runner')}, agent {data.get('agent')}, "
            f"policy {data.get('policy')}, up to {counted(data.get('max_iterations'), 'iteration')}"
        )
        self.status(f"run directory: {data.get('run_dir')}")

    def on_iteration_started(self, data: dict[str, Any]) -> None:
        self.status(
            f"iteration {data['iteration']}/{data['max_iterations']} | {data['mode']} | {data.get('story')} | "
            f"elapsed {fmt_elapsed(data.get('elapsed', 0))} | cost ${data.get('cost_so_far', 0):.4f}"
        )

    def on_agent_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if self.output == "quiet":
            return
        if kind == "text" and data.get("text"):
            self.write(data["text"].rstrip() + "\n")
            self.stdout.flush()
        elif kind == "tool_use":
            tool = data.get("data", {})
            summary = _tool_summary(tool)
            self.write(f"  > {tool.get('name', '?')} {summary}\n")
        elif self.output == "verbose" and kind in {"tool_result", "error", "system", "result"}:
            self.write(f"  [{kind}] {str(data.get('data'))[:300]}\n")

    def on_unpriced_model(self, data: dict[str, Any]) -> None:
        self.status(f"warning: model {data.get('model')} has no price: its tokens count $0 in the cost and no budget "
                    f"(--max-cost) sees them; give it one: {data.get('fix')}")

    def on_question_asked(self, data: dict[str, Any]) -> None:
        self.status(f"{data.get('story')} asks a person (iteration {data.get('iteration')}): "
                    f"{quote(str(data.get('question') or ''), 300)}; answer with: {data.get('answer_with')}")

    def on_story_parked(self, data: dict[str, Any]) -> None:
        self.status(f"{data.get('story')} is parked: it waits for a person's answer; the loop goes on with the other stories")

    def on_question_answered(self, data: dict[str, Any]) -> None:
        self.status(f"a person answered {data.get('story')}: its next iteration has the answer")

    def on_violation(self, data: dict[str, Any]) -> None:
        lines = [line for line in data["message"].splitlines() if line.strip()] or [""]
        first = lines[0].strip()
        listed = []
        for line in lines[1:]:  # an indented list follows (the uncommitted files ...): name them
            if not line.startswith((" ", "\t")):
                break
            listed.append(line.strip())
        if first.endswith(":") and listed:
            first += " " + ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")
        self.status(f"check {data['check']} failed: {first}")

    def on_transition_undone(self, data: dict[str, Any]) -> None:
        self.status(f"undid illegal review-field changes on {', '.join(data['stories'])}")

    def on_task_list_restored(self, data: dict[str, Any]) -> None:
        parts = [f"{label} {', '.join(data[key])}" for key, label in
                 (("fields", "fields"), ("reinserted", "put back"), ("reverted", "reverted"), ("dropped", "removed")) if data.get(key)]
        self.status(f"undid task-list changes an iteration may not make ({'; '.join(parts)})")

    def on_protected_file_restored(self, data: dict[str, Any]) -> None:
        what = f"{data['path']} {data['part']}" if data.get("part") else data["path"]
        if data.get("how") == "reported":  # a change the loop did not undo: never say "restored"
            self.status(f"{what} was changed by the agent; not restored: {data.get('message', '')}")
            return
        self.status(f"restored {what} ({data['how']} by the agent) from the run's trusted copy")

    def on_loop_file_replaced(self, data: dict[str, Any]) -> None:
        self.status(f"{data['path']} was {data['what']}: removed it, never followed it, and put back the loop's copy")

    def on_hook_settings_warning(self, data: dict[str, Any]) -> None:
        self.status(f"warning: {data['warning']}")

    def on_iteration_timeout(self, data: dict[str, Any]) -> None:
        self.status(f"iteration {data['iteration']} timed out after {data['timeout']:g}s; the agent was stopped")

    def on_empty_response(self, data: dict[str, Any]) -> None:
        if data.get("retry"):
            self.status(f"the agent said nothing; retrying ({data['retry']}/{data['of']})")
        else:
            self.status("the agent said nothing again; moving on")

    def on_agent_failed(self, data: dict[str, Any]) -> None:
        reason = _one_line(data.get("reason") or " / ".join((data.get("stderr") or "").strip().splitlines()[-3:]))
        said = reason and reason != exit_meaning(data["exit_code"])  # not the same words twice
        self.status(f"agent {process_ended(data['exit_code'])}" + (f": {reason}" if said else ""))

    def on_agent_failing(self, data: dict[str, Any]) -> None:
        if data.get("cause") == "commands":
            self.status(f"every command the agent ran failed, changing nothing, in {counted(data['times'], 'iteration')} in a "
                        f"row; the first error: {_one_line(data['reason'])[:300]}")
            return
        self.status(f"the agent failed {counted(data['times'], 'time')} in a row with the same error: {_one_line(data['reason'])}")

    def on_commands_failed(self, data: dict[str, Any]) -> None:
        calls = data["calls"]
        what = "the agent's only command" if calls == 1 else f"all {calls} of the agent's commands"
        self.status(f"iteration {data['iteration']}: {what} failed and nothing changed: "
                    f"{_one_line(data.get('first_error') or '(no output)')[:300]}")

    def on_rate_limit(self, data: dict[str, Any]) -> None:
        # an iteration counts unless the loop's meter saw the model answer none of its calls (docs/metering.md)
        counted = "it counts (it did work)" if data.get("counted") else "does not count"
        what = "going on" if data.get("counted") else "retrying"
        self.status(
            f"API rate limit ({_one_line(data['message'])[:160]}): iteration {data['iteration']} {counted}; "
            f"{what} at {data['retry_at']} (in {data['wait']:g}s, {data['basis']}; Ctrl-C stops, state is saved)"
        )

    def on_preflight_warnings(self, data: dict[str, Any]) -> None:
        for warning in data["warnings"]:
            self.status(f"warning: {warning['what']}" + (f" (fix: {warning['fix']})" if warning.get("fix") else ""))

    def on_false_completion(self, data: dict[str, Any]) -> None:
        self.status(f"iteration {data['iteration']} claimed completion, but stories are open: continuing")

    def on_interrupt(self, data: dict[str, Any]) -> None:
        self.status(f"{data['signal']} received: stopping the agent and cleaning up")

    def on_iteration_finished(self, data: dict[str, Any]) -> None:
        error = f": {_one_line(data['agent_error'])[:200]}" if data.get("agent_error") else ""
        how = exit_meaning(data.get("exit_code"), bool(data.get("timed_out")))
        self.status(
            f"iteration {data['iteration']} finished in {data['seconds']:.1f}s "
            f"({how}, cost ${data['cost']:.4f}, {counted(data['violations'], 'violation')}){error}"
        )

    def on_run_finished(self, data: dict[str, Any]) -> None:
        self.stop_footer()
        self.write("\n" + render_run_summary(data) + "\n")
        report = data.get("report") or {}
        if report.get("failed") or report.get("quality_warnings"):
            self.write("\n" + render_run_report(report))
        if data.get("stash"):
            self.write("\n" + data["stash"] + "\n")
        if data.get("left_uncommitted_note"):
            self.write("\n" + data["left_uncommitted_note"][:1].upper() + data["left_uncommitted_note"][1:] + "\n")
        self.stdout.flush()

    def on_gate_failed(self, data: dict[str, Any]) -> None:
        back = f"; sent back ({', '.join(data['sent_back'])})" if data.get("sent_back") else ""
        status = exit_meaning(data.get("exit_code"), bool(data.get("timed_out")))
        self.status(f"{data['gate']} gate failed for {data['story']} ({status}){back}")
        for line in str(data.get("excerpt") or "").splitlines():
            self.status(f"    {line}")
        if data.get("log"):
            self.status(f"    full output: {data['log']}")

    def on_escalation(self, data: dict[str, Any]) -> None:
        what = ESCALATION_WORDS.get(str(data.get("decision")), str(data.get("decision")))
        self.status(f"{data['story']} failed {counted(data['stuck_count'], 'time')} in a row the same way: {what}")

    def on_story_failed(self, data: dict[str, Any]) -> None:
        self.status(f"{data['story']} stopped; work kept on {data['branch']}; working branch {data['reset']}")

    def on_quality_warning(self, data: dict[str, Any]) -> None:
        where = f" (full output: {data['log']})" if data.get("log") else ""
        self.status(f"quality warning ({data['story']}): {data['warning']}{where}")

    def on_rollback(self, data: dict[str, Any]) -> None:
        removed = f", removed {len(data['removed'])} new file(s)" if data.get("removed") else ""
        self.status(f"rolled back to {data['to'][:8]}{removed}")

    def on_refs_restored(self, data: dict[str, Any]) -> None:
        def short(ref: str) -> str:
            return ref.removeprefix("refs/heads/").removeprefix("refs/tags/")

        failed = set(data.get("failed") or ())
        back = [short(r["ref"]) for r in data["refs"] if r["ref"] not in failed]
        if back:
            self.status(f"iteration {data['iteration']} moved your refs ({', '.join(back[:5])}): put back from the run's copy")
        if failed:
            self.status(f"iteration {data['iteration']} moved your refs ({', '.join(short(r) for r in sorted(failed)[:5])}): "
                        f"NOT put back: their values are in the run's refs.json, their objects in {data.get('mirror')}")

    def on_head_restored(self, data: dict[str, Any]) -> None:
        branch = (data.get("branch") or "the detached HEAD").removeprefix("refs/heads/")
        what = {"moved": f"HEAD left {branch}: moved back", "deleted": f"{branch} was deleted: put back",
                "rewritten": f"{branch}'s history was rewritten: the work is kept on top of it"}.get(data["how"], data["how"])
        self.status(f"iteration {data['iteration']}: {what}")

    def on_global_soft_timeout(self, data: dict[str, Any]) -> None:
        self.status(f"warning: the run passed its soft time limit ({data['limit']:g}s)")

    def on_usage_limit(self, data: dict[str, Any]) -> None:
        self.status(f"the agent hit its usage limit; it resets around {data['resume_at']}")

    def on_usage_limit_wait(self, data: dict[str, Any]) -> None:
        self.status(f"waiting {data['seconds']:g}s until {data['until']} (Ctrl-C stops; state is saved)")

    def on_person_changed(self, data: dict[str, Any]) -> None:
        shown = ", ".join(data["paths"][:5]) + (f" and {len(data['paths']) - 5} more" if len(data["paths"]) > 5 else "")
        self.status(f"{shown} changed between iterations {data['iteration'] - 1} and {data['iteration']}, while no "
                    "agent ran: your change, not the agent's; stopping before the agent starts")

    def on_story_flagged(self, data: dict[str, Any]) -> None:
        self.status(f"{data['story']} flagged and skipped: {data['reason']}")

    def on_context_exhausted(self, data: dict[str, Any]) -> None:
        self.status(f"{data['story']} exhausted the agent's context ({data['times']}x)")

    def on_builtin_prompt(self, data: dict[str, Any]) -> None:
        from ralph.api.reporters import BUILTIN_PROMPT_NOTE

        self.status(BUILTIN_PROMPT_NOTE.format(dir=data["ralph_dir"]))

    def on_work_branch(self, data: dict[str, Any]) -> None:
        self.status(data["message"])

    def on_failure_branches_archived(self, data: dict[str, Any]) -> None:
        moved = ", ".join(f"{b['from']} -> {b['to']}" for b in data["branches"][:5])
        self.status(f"archived the failure branches of earlier runs (nothing deleted): {moved}")

    def on_earlier_state_continued(self, data: dict[str, Any]) -> None:
        self.status(f"continuing with the story state the previous run left for {data['stories']}")

    def on_user_work_stashed(self, data: dict[str, Any]) -> None:
        self.status(data["message"])


ESCALATION_WORDS = {
    "strategy-shift": "the next attempt is told to drop its approach and try a different one",
    "context-expansion": "the next attempt gets the project's file list and the files the error names",
    "stop": "no more attempts at it (its work is kept on a branch of its own)",
}
"""What each escalation step does, said plainly (the event's ``decision``)."""


def _one_line(text: str) -> str:
    return " ".join(one_line(text).split())


def _tool_summary(tool: dict[str, Any]) -> str:
    tool_input = tool.get("input") or {}
    for key in ("command", "file_path", "path", "pattern"):
        if key in tool_input:
            return _one_line(str(tool_input[key]))[:120]
    return ""


VIEW = ConsoleView()


@hookimpl
def ralph_loop_event(event: LoopEvent) -> None:
    """Show ``event`` on the terminal."""
    VIEW.handle(event)
