"""The run's agent sessions: which agent and model a mode gets, an iteration's session, a gate's.

:class:`LoopAgents` starts every agent process of a run through the runner, writes its
raw output to the run directory and reads what the loop needs from its events (texts,
cost, tokens, usage and rate limits, errors) into the iteration's record.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.contracts import Agent, AgentEvent, AgentInvocation
from ralph.loop.activestate import STATE_FILE_ENV
from ralph.loop.records import IterationRecord, add_usage

if TYPE_CHECKING:
    from ralph.contracts import Runner
    from ralph.loop.hookbridge import HookBridge
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings


class LoopAgents:
    """The implement and review agents of a run (and any a gate names), and their sessions."""

    def __init__(
        self,
        settings: Settings,
        host: PluginHost,
        runner: Runner,
        agent: Agent,
        review_agent: Agent,
        *,
        tasks_path: Path,
        cancel: threading.Event,
        emit: Callable[..., None],
        iteration_timeout: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.config = settings.config
        self.host = host
        self.runner = runner
        self.agent = agent
        self.review_agent = review_agent
        """The agent of review iterations (``review_agent`` in config; the same agent by default)."""
        self.tasks_path = tasks_path
        self.cancel = cancel
        self.emit = emit
        self.iteration_timeout = iteration_timeout
        self.channel: HookBridge | None = None
        """The way back to the loop (run directory, hook socket, token); set when the run starts."""
        self.cost = 0.0
        """What the iterations' sessions cost so far (USD, as the agents report it)."""
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
            env = {
                STATE_FILE_ENV: str(channel.run_dir / "state.json"),
                "RALPH_TASKS_FILE": str(self.tasks_path),
                **channel.env(),
            }
            invocation = AgentInvocation(
                prompt=prompt,
                project_dir=self.settings.project_dir,
                run_dir=channel.run_dir,
                iteration=record.number,
                model=self.model_for(record.mode, agent, explicit_only=True),
                sandboxed=self.runner.isolates,
                hook_settings=channel.hook_settings(env),
                mode=record.mode,
                env=env,
            )
            spec = agent.process(invocation)
            texts: list[str] = []
            with raw_path.open("a", encoding="utf-8") as raw_out:

                def on_line(line: str) -> None:
                    raw_out.write(line + "\n")
                    for event in agent.parse_line(line):
                        self._on_event(record, event, texts)

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

    def _on_event(self, record: IterationRecord, event: AgentEvent, texts: list[str]) -> None:
        """Read one agent event into ``record`` (limits, errors, cost, tokens) and ``texts``; emit it."""
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

    # -- a gate's sessions ---------------------------------------------------------------------------

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
        channel = self._channel()
        agent = agent or self.agent
        env = channel.env()
        invocation = AgentInvocation(
            prompt=prompt,
            project_dir=self.settings.project_dir,
            run_dir=channel.run_dir,
            iteration=int(label.split(".")[0]),
            model=model if model is not None else (self.config.model if agent is self.agent else None),
            hook_settings=channel.hook_settings(env),
            env=env,
            purpose=label.split(".", 1)[-1],
            sandboxed=self.runner.isolates,
            read_only=read_only,
        )
        texts: list[str] = []
        with (channel.run_dir / f"iteration-{label}.agent.jsonl").open("a", encoding="utf-8") as raw_out:

            def on_line(line: str) -> None:
                raw_out.write(line + "\n")
                texts.extend(e.text for e in agent.parse_line(line) if e.kind == "text")

            self.runner.run(agent.process(invocation), on_line, timeout or self.iteration_timeout(), self.cancel)
        return "\n".join(texts)

    def _channel(self) -> HookBridge:
        assert self.channel is not None, "agent sessions start only once the run has started"
        return self.channel


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(data)
        return data
    except (TypeError, ValueError):
        return {"repr": repr(data)[:2000]}
