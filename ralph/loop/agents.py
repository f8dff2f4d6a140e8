"""The run's agent sessions: which agent and model a mode gets, an iteration's session, a gate's.

:class:`LoopAgents` starts every agent process of a run through the runner, writes its
raw output to the run directory and reads the iteration's record: cost, tokens, usage and
rate limits from the loop's meter of the model traffic (:mod:`ralph.loop.metering`) when the
agent is metered; texts, tool calls and errors from its output stream, which otherwise also
supplies cost, tokens and limits (sanitized: a report never lowers the cost).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.contracts import Agent, AgentEvent, AgentInvocation, ProcessSpec
from ralph.loop.agenthome import ConfigHomes
from ralph.loop.gateoutput import exit_meaning
from ralph.loop.metering import apply_usage
from ralph.loop.records import IterationRecord, add_usage, reported_cost

if TYPE_CHECKING:
    from ralph.loop.hookbridge import HookBridge
    from ralph.loop.runcontext import ExtraSession, RunContext


class LoopAgents:
    """The implement and review agents of a run (and any a gate names), and their sessions."""

    def __init__(self, context: RunContext, agent: Agent, review_agent: Agent) -> None:
        self.settings = context.settings
        self.config = context.config
        self.host = context.host
        self.runner = context.runner
        self.agent = agent
        self.review_agent = review_agent
        """The agent of review iterations (``review_agent`` in config; the same agent by default)."""
        self.tasks_path = context.tasks_path
        self.cancel = context.cancel
        self.emit = context.emit
        self.iteration_timeout = context.clock.iteration_timeout
        self.meter = context.meter
        """The run's model meter (started when a metered agent first runs)."""
        self.channel: HookBridge | None = None
        """The way back to the loop (run directory, hook socket, token); set when the run starts."""
        self.cost = 0.0
        """What the run's agent sessions cost so far (USD: metered, else as the agents report it); never decreases."""
        self.homes = ConfigHomes(self.runner)
        """The run-owned config homes of the agents' CLIs (one per process)."""
        self._extra_agents: dict[str, Agent] = {}

    # -- which agent, which model --------------------------------------------------------------

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

    # -- the iteration's session -------------------------------------------------------------------

    def run_iteration(self, record: IterationRecord, prompt: str) -> list[str]:
        """Run the iteration's agent, retrying empty responses; returns the assistant texts."""
        channel = self._channel()
        raw_path = channel.run_dir / f"iteration-{record.number:03d}.agent.jsonl"
        retries = 0
        agent = self.agent_for(record.mode)
        while True:
            session = self.meter.open(agent, f"iteration {record.number}", record.number)
            home = self.homes.open(agent, channel.run_dir, f"iteration-{record.number:03d}")
            invocation = self._invocation(
                agent,
                session.url if session is not None else None,
                home,
                prompt=prompt,
                iteration=record.number,
                model=self.model_for(record.mode, agent, explicit_only=True),
                mode=record.mode,
            )
            texts: list[str] = []
            try:
                spec = self._process(agent, invocation)
                with raw_path.open("a", encoding="utf-8") as raw_out:

                    def on_line(line: str) -> None:
                        raw_out.write(line + "\n")
                        for event in agent.parse_line(line):
                            self._on_event(record, event, texts, metered=session is not None)

                    try:
                        outcome = self.runner.run(spec, on_line, self.iteration_timeout(), self.cancel)
                    except FileNotFoundError as exc:
                        from ralph.errors import UnavailableError

                        raise UnavailableError(f"agent {agent.name!r} could not start: {exc}") from None
            finally:
                self.homes.close(home)
                if session is not None:
                    self._add_cost(record, self.meter.close(session))
            record.exit_code = outcome.exit_code
            record.timed_out = outcome.timed_out
            if outcome.timed_out:
                self.emit("iteration_timeout", iteration=record.number, timeout=self.iteration_timeout())
            elif outcome.exit_code != 0 and not outcome.interrupted:
                reason = record.agent_error or _last_line(outcome.stderr) or exit_meaning(outcome.exit_code)
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

    def _add_cost(self, record: IterationRecord, usage: Any) -> None:
        """A metered session ended: its totals go into the record, its cost into the run's."""
        before = record.cost_usd
        apply_usage(record, usage)
        self.cost += max(0.0, record.cost_usd - before)

    def _on_event(self, record: IterationRecord, event: AgentEvent, texts: list[str], metered: bool = False) -> None:
        """Read one agent event into ``record`` and ``texts``; emit it.

        Texts and errors always come from here.  Limits, context overflow, cost and tokens come from
        here only when the agent is not ``metered``: then the meter's view of the traffic decides
        (the agent can write to this stream), and what the stream claims is kept for display.
        """
        if not metered:
            if event.kind == "usage_limit" and record.usage_limit is None:
                record.usage_limit = event.text or "usage limit reached"
                resets = event.data.get("resets_at")
                if resets:
                    record.usage_limit += f" |{int(resets)}" if isinstance(resets, (int, float)) else f" {resets}"
            elif event.kind == "context_overflow":
                record.context_overflow = True
            elif event.kind == "rate_limit" and record.rate_limit is None and record.usage_limit is None:
                record.rate_limit = event.text or "rate limited"
        if event.kind == "error":
            delay = event.data.get("retry_delay_ms")
            if event.data.get("retrying"):
                if not metered and event.data.get("error_status") in (429, 529) and isinstance(delay, (int, float)):
                    record.retry_after = max(0.0, float(delay) / 1000)
            elif event.text.strip():
                record.agent_error = event.text.strip()
        if event.kind == "text":
            texts.append(event.text)
        elif event.kind == "tool_result":
            self._tool_result(record, event)
        elif event.kind == "result":
            cost = reported_cost(event.data.get("total_cost_usd"))
            record.reported_cost += cost
            add_usage(record.reported_usage, event.data.get("usage"))
            if not metered:
                if event.data.get("total_cost_usd") is None:  # tokens, no cost (Codex): the price table's
                    cost = self._priced(record, event.data.get("usage"))
                record.cost_usd += cost
                self.cost += cost
                add_usage(record.usage, event.data.get("usage"))
            if isinstance(event.data.get("result"), str):
                texts.append("")  # the result repeats the last text; counted once via text events
        self.emit("agent_event", iteration=record.number, type=event.kind, text=event.text[:4000], data=_jsonable(event.data))

    def _priced(self, record: IterationRecord, usage: Any) -> float:
        """What the tokens an agent reported without a cost come to at the price table's rate (``[tool.ralph.prices]``,
        then the built-in table); a model without a price (or none named) is listed in ``record.unpriced``."""
        tokens: dict[str, int] = {}
        add_usage(tokens, usage)
        if not any(tokens.values()):
            return 0.0
        from ralph.loop.metering import price_table

        price = price_table(self.config).price_for(record.model)
        if price is None:
            name = record.model or f"{record.agent}'s default model"
            record.unpriced = sorted(set(record.unpriced) | {name})
            return 0.0
        return price.of(tokens)

    def _tool_result(self, record: IterationRecord, event: AgentEvent) -> None:
        """Count one tool result and keep the first failure's output.  A call the loop's guards denied
        (its ``tool_use_id`` is the hook's) is counted apart: a denial is the loop's answer, not a
        command that failed."""
        denied = self.channel.denied_ids if self.channel is not None else set()
        if str(event.data.get("tool_use_id") or "") in denied:
            record.tool_denials += 1
            return
        record.tool_calls += 1
        if not event.data.get("is_error"):
            return
        record.tool_errors += 1
        if record.tool_error is None:
            text = str(event.data.get("content") or "").strip()
            record.tool_error = text[:1000] or "a tool call failed with no output"

    # -- a gate's sessions (:class:`ralph.loop.runcontext.AgentSessions`) ----------------------------

    def ask(self, request: ExtraSession, prompt: str) -> tuple[str, str]:
        """One extra session for a gate: a fresh read-only review session (``request.reviewer``) or one of
        the main agent.  Returns (answer text, "agent" or "agent/model")."""
        if request.reviewer:
            return self._ask_reviewer(request, prompt)
        model = self.config.model
        return self._session(request, prompt, self.agent, model), self.agent.name + (f"/{model}" if model else "")

    def _ask_reviewer(self, request: ExtraSession, prompt: str) -> tuple[str, str]:
        """A fresh, read-only session of ``request.agent`` (default: the review agent)."""
        agent_name = request.agent
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

                raise UnavailableError(f"agent {agent.name!r} (the {request.purpose} gate's) cannot run: {available.reason}")
        chosen = request.model or self.model_for("review", agent, explicit_only=True)
        answer = self._session(request, prompt, agent, chosen, read_only=True)
        shown = chosen or self.model_for("review", agent)
        return answer, agent.name + (f"/{shown}" if shown else "")

    def _session(
        self, request: ExtraSession, prompt: str, agent: Agent, model: str | None, read_only: bool = False
    ) -> str:
        """One extra agent call (a gate's review); its raw output goes to the run directory."""
        channel = self._channel()
        session = self.meter.open(agent, request.meter_name, request.iteration)
        home = self.homes.open(agent, channel.run_dir, request.file_stem)
        invocation = self._invocation(
            agent,
            session.url if session is not None else None,
            home,
            prompt=prompt,
            iteration=request.iteration,
            model=model,
            purpose=request.purpose,
            read_only=read_only,
        )
        texts: list[str] = []
        reported = 0.0
        try:
            with (channel.run_dir / f"{request.file_stem}.agent.jsonl").open("a", encoding="utf-8") as raw_out:

                def on_line(line: str) -> None:
                    nonlocal reported
                    raw_out.write(line + "\n")
                    for event in agent.parse_line(line):
                        if event.kind == "text":
                            texts.append(event.text)
                        elif event.kind == "result":
                            reported += reported_cost(event.data.get("total_cost_usd"))

                timeout = request.timeout or self.iteration_timeout()
                self.runner.run(self._process(agent, invocation), on_line, timeout, self.cancel)
        finally:
            self.homes.close(home)
            cost, tokens = reported, {}
            if session is not None:
                usage = self.meter.close(session)
                cost, tokens = max(0.0, usage.cost), dict(usage.usage)
            self.cost += cost
            self.emit("extra_session_cost", label=request.label, cost=round(cost, 6), usage=tokens,
                      metered=session is not None, reported_cost=round(reported, 6), cost_so_far=round(self.cost, 6))
        return "\n".join(texts)

    # -- the channel ---------------------------------------------------------------------------------

    def _invocation(self, agent: Agent, model_endpoint: str | None, config_home: Path | None,
                    **fields: Any) -> AgentInvocation:
        """An invocation carrying the channel as the runner remaps it: the meter session's URL as its
        model endpoint (or, unmetered, the agent's own upstream), the process's config home."""
        refuse_unwired(agent)
        bridge = self._channel()
        host = dataclasses.replace(bridge.channel(self.tasks_path, fields.get("iteration")), model_endpoint=model_endpoint,
                                   model_upstream=None if model_endpoint else agent.model_upstream(),
                                   config_home=config_home)
        channel = self.runner.agent_channel(host)
        return AgentInvocation(
            project_dir=self.settings.project_dir,
            run_dir=bridge.run_dir,
            sandboxed=self.runner.isolates,
            env=channel.env(),
            channel=channel,
            **fields,
        )

    def _process(self, agent: Agent, invocation: AgentInvocation) -> ProcessSpec:
        """``agent.process(invocation)`` with the channel on the spec (the runner reads it there)."""
        spec = agent.process(invocation)
        return dataclasses.replace(spec, channel=spec.channel or invocation.channel)

    def _channel(self) -> HookBridge:
        assert self.channel is not None, "agent sessions start only once the run has started"
        return self.channel


def refuse_unwired(agent: Agent) -> None:
    """Raise :class:`~ralph.errors.UnavailableError` for an agent that does not render the loop's channel
    (:attr:`~ralph.contracts.Agent.uses_channel`): its tool calls would run with no guard and its stop
    unchecked, and the loop writes no other agent's settings format for it."""
    if getattr(agent, "uses_channel", False):
        return
    from ralph.errors import UnavailableError

    raise UnavailableError(
        f"agent {agent.name!r} cannot run in a loop: it does not wire ralph's hooks from the loop's channel "
        "(Agent.uses_channel is False), so its tool calls would not be guarded; render invocation.channel into "
        "its CLI's hook configuration and set uses_channel = True (docs/plugins.md, Agents)")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(data)
        return data
    except (TypeError, ValueError):
        return {"repr": repr(data)[:2000]}
