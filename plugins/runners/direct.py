"""The ``direct`` runner: the agent as a subprocess on this machine.

Without a sandbox the agent-side guards are the only protection, so
``ralph run`` says so when it falls back to this runner.  Two more layers:

- the agent runs through ``run_process``, as each gate command does: on Linux
  in a pid namespace of its own, so the kernel kills everything it started
  (``setsid``, ``nohup``, double forks, fork chains) when it ends, before the
  loop reads anything; where no namespace can be made, the leftovers are swept
  after the run, and the pre-flight line (``ralph doctor``, the run's first
  lines) says so with the fix (``ralph.api.process.containment``);
- the agent's git cannot push: ``GIT_CONFIG_*`` entries rewrite the push URL of
  every remote and every URL to an unusable path, with no credential helper, no
  terminal prompt and no SSH agent.  An agent that clears its environment (or
  uses plumbing such as ``git send-pack``) gets past this; the sandbox is the
  boundary (docs/security.md).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from ralph.api import Availability, CommandResult, ProcessOutcome, ProcessSpec, Runner, hookimpl
from ralph.api import Check, PreflightContext
from ralph.api.process import containment, descendants, run_process, run_shell


class DirectRunner(Runner):
    """Runs the agent with ``run_process``: its own pid namespace, and nothing it started outlives the run."""

    name = "direct"
    description = "agent as a host subprocess (guards by hooks only)"

    swept: list[int] = []
    """Processes the agent left when its last run ended, all killed (pids as they saw themselves)."""
    _existing: set[int] | None = None
    _push_env: dict[Path, list[tuple[str, str]]] = {}

    def availability(self) -> Availability:
        return Availability.yes()

    def model_endpoint_host(self) -> str:
        """The agent runs on this machine: the loop's model meter listens on the loopback address."""
        return "127.0.0.1"

    def preflight(self, context: PreflightContext) -> list[Check]:
        """What contains the agent's processes and the gate commands' here (a warning where only a sweep does)."""
        return [containment().check()]

    def prepare(self, project_dir: Path) -> None:
        """Without a pid namespace, note the processes that already run: the sweep after each run spares them."""
        self._existing = None
        self._spared()  # one /proc scan per run, not per iteration
        self._push_env = {}

    def _spared(self) -> set[int]:
        if self._existing is None:
            self._existing = set() if containment().namespace else descendants()
        return self._existing

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """A gate command on the host (direct mode has no sandbox), contained like the agent's runs."""
        code, output, timed_out = run_shell(command, cwd, timeout, self._spared())
        return CommandResult(code, output, timed_out, "host")

    def run(
        self,
        spec: ProcessSpec,
        on_line: Callable[[str], None],
        timeout: float | None,
        cancel: threading.Event,
    ) -> ProcessOutcome:
        cwd = Path(spec.cwd)
        if cwd not in self._push_env:  # the git config cannot change during a run: the loop checks it
            self._push_env = {**self._push_env, cwd: push_block_entries(cwd)}
        env = agent_environment({**os.environ, **spec.env}, cwd, self._push_env[cwd])
        outcome = run_process(spec, on_line, timeout, cancel, env=env, spare=self._spared())
        self.swept = outcome.swept
        return outcome


PUSH_BLOCKED_URL = "file:///dev/null/ralph-direct-mode-blocks-git-push"
"""Where every push of the agent's git goes: a path that cannot be a repository."""
PUSH_PREFIXES = tuple(chr(code) for code in range(1, 128))
"""One-character prefixes: together they match every URL or path that starts with an ASCII character --
not only letters, digits and ``/.~_``: ``git push @up HEAD`` (a path ``@up`` linked to another repository)
is a push too.  Longest match wins, so a remote's full URL is added as well.  A URL that starts with a
non-ASCII character is not matched: a one-byte prefix of it is no valid UTF-8, which the agent's CLI
(Node) does not pass on."""


def push_block_entries(project_dir: Path) -> list[tuple[str, str]]:
    """``(key, value)`` config entries that send every push of the agent's git nowhere."""
    from ralph.api.process import git

    entries = [("credential.helper", ""), ("core.askPass", "")]
    try:
        listing = git(project_dir, "config", "--get-regexp",
                      r"^(remote\..*\.(push)?url|url\..*\.(push)?insteadof)$", check=False).stdout
    except OSError:
        listing = ""
    explicit_push_urls = []
    prefixes = list(PUSH_PREFIXES)
    for line in listing.splitlines():
        key, _, value = line.partition(" ")
        if not value:
            continue
        prefixes.append(value)
        if key.endswith(".pushurl"):
            explicit_push_urls.append(value)
    for prefix in dict.fromkeys(prefixes):
        entries.append((f"url.{PUSH_BLOCKED_URL}.pushInsteadOf", prefix))
    # pushInsteadOf does not apply to an explicit pushurl; insteadOf does
    for url in dict.fromkeys(explicit_push_urls):
        entries.append((f"url.{PUSH_BLOCKED_URL}.insteadOf", url))
    return entries


def agent_environment(base: dict[str, str], project_dir: Path,
                      entries: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """The agent's environment in direct mode: ``base`` plus the push block (appended to any
    ``GIT_CONFIG_COUNT`` entries already there), no prompts, no SSH agent."""
    env = dict(base)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0
    for key, value in push_block_entries(project_dir) if entries is None else entries:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_ASKPASS"] = "false"
    env["SSH_ASKPASS"] = "false"
    env.pop("SSH_AUTH_SOCK", None)
    return env


@hookimpl(trylast=True)
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the direct runner."""
    register(DirectRunner)
