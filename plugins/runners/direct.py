"""The ``direct`` runner: the agent as a subprocess on this machine.

Without a sandbox the agent-side guards are the only protection, so
``ralph run`` says so when it falls back to this runner.  Two more layers,
both defense in depth rather than a boundary:

- the agent runs in its own session, the loop is a child subreaper, and after
  each run every process the agent left behind (``setsid``, ``nohup``, double
  forks) is killed;
- the agent's git cannot push: ``GIT_CONFIG_*`` entries rewrite the push URL of
  every remote and every URL to an unusable path, with no credential helper, no
  terminal prompt and no SSH agent.  An agent that clears its environment (or
  uses plumbing such as ``git send-pack``) gets past this; the sandbox is the
  boundary (docs/security.md).
"""

from __future__ import annotations

import os
import signal
import string
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from ralph.api import Availability, CommandResult, ProcessOutcome, ProcessSpec, Runner, hookimpl
from ralph.api import become_subreaper, descendants, kill_new_descendants, run_shell

KILL_GRACE_SECONDS = 5.0


class DirectRunner(Runner):
    """Runs the agent in its own process group so a timeout or Ctrl-C stops all of it."""

    name = "direct"
    description = "agent as a host subprocess (guards by hooks only)"

    swept: list[int] = []
    """Processes killed after the last run (left behind by the agent)."""
    _existing: set[int] | None = None
    _push_env: dict[Path, list[tuple[str, str]]] = {}

    def availability(self) -> Availability:
        return Availability.yes()

    def prepare(self, project_dir: Path) -> None:
        """Make the loop the reaper of everything the agent starts (Linux); note what already runs."""
        become_subreaper()
        self._existing = descendants()  # one /proc scan per run, not per iteration
        self._push_env = {}

    def _spared(self) -> set[int]:
        if self._existing is None:
            self._existing = descendants()
        return self._existing

    def run_command(self, command: str, cwd: Path, timeout: float | None) -> CommandResult:
        """A gate command on the host (direct mode has no sandbox); leftovers are swept."""
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
        existing = self._spared()
        become_subreaper()
        process = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        stderr_tail: deque[str] = deque(maxlen=200)
        readers = [
            threading.Thread(target=_pump, args=(process.stdout, on_line), daemon=True),
            threading.Thread(target=_pump, args=(process.stderr, stderr_tail.append), daemon=True),
        ]
        for reader in readers:
            reader.start()
        if spec.stdin is not None and process.stdin is not None:
            try:
                process.stdin.write(spec.stdin)
                process.stdin.close()
            except BrokenPipeError:
                pass
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = interrupted = False
        while process.poll() is None:
            if cancel.wait(0.05):
                interrupted = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
        if timed_out or interrupted:
            _stop_group(process)
        exit_code = process.wait()
        self.swept = kill_new_descendants(existing)  # nothing the agent started outlives its run
        for reader in readers:
            reader.join(timeout=2)
        return ProcessOutcome(exit_code, timed_out, interrupted, "\n".join(stderr_tail))


PUSH_BLOCKED_URL = "file:///dev/null/ralph-direct-mode-blocks-git-push"
"""Where every push of the agent's git goes: a path that cannot be a repository."""
PUSH_PREFIXES = tuple("/.~_") + tuple(string.ascii_letters + string.digits)
"""One-character prefixes: together they match every URL (longest match wins, so a
remote's full URL is added as well)."""


def push_block_entries(project_dir: Path) -> list[tuple[str, str]]:
    """``(key, value)`` config entries that send every push of the agent's git nowhere."""
    from ralph.api import git

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


def _pump(stream, sink: Callable[[str], None]) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        sink(line.rstrip("\n"))
    stream.close()


def _stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@hookimpl(trylast=True)
def ralph_register_runners(register):  # type: ignore[no-untyped-def]
    """Register the direct runner."""
    register(DirectRunner)
