"""Codex's own sandbox: the pre-flight check, and a command with the system's bubblewrap or the bundled one.

Prints, as medians over ``--rounds``:

* ``preflight_check_s``: ralph's pre-flight check of Codex's sandbox (``codex sandbox -- true`` with a
  ``CODEX_HOME`` placed as a run's under the temporary directory), what ``ralph run`` adds before
  iteration 1 for the codex agent in direct mode;
* ``exec_system_bwrap_s`` / ``exec_bundled_bwrap_s``: one ``codex exec`` session of ralph's codex agent
  (its argv, environment and helper placement) against the scripted Responses server, running five
  shell commands in Codex's ``workspace-write`` sandbox: with the system's bubblewrap on ``PATH``, and
  with a ``PATH`` without one (Codex then uses the one in its wheel);
* ``per_command_*_ms``: the same minus a session without commands, divided by five.

    python benchmarks/codex_sandbox.py [--rounds 5]

Needs the Codex CLI (pip install openai-codex-cli-bin); the system-bubblewrap figures need ``bwrap``
on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ralph.api import AgentInvocation
from ralph.api.agents import CODEX_CLI
from ralph.testing.model_server import SequenceScript, Turn, text, tool
from ralph.testing.responses_server import ScriptedResponsesServer

COMMANDS = ["printf a > a.txt", "cat a.txt", "git status --short", "ls", "printf b >> a.txt"]


class _Settings:
    """The little of Settings the codex agent reads: no config section (its defaults)."""

    project_dir = None

    def section(self, name: str) -> Any:
        return None


def path_without_bwrap(bin_dir: Path) -> str:
    bin_dir.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            target, source = bin_dir / name, os.path.join(entry, name)
            if name != "bwrap" and not os.path.lexists(target) and os.path.isfile(source) and os.access(source, os.X_OK):
                target.symlink_to(source)
    return str(bin_dir)


def one_session(root: Path, commands: list[str], path: str | None) -> float:
    """Seconds of one ``codex exec`` of ralph's codex agent running ``commands``."""
    from ralph_plugins.agents.codex import CodexAgent

    project, run_dir = root / "project", root / "run"
    project.mkdir()
    run_dir.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    script = SequenceScript([Turn([tool("Bash", {"command": c})]) for c in commands] + [Turn([text("done")])])
    with ScriptedResponsesServer(script) as server:
        saved = {k: os.environ.get(k) for k in ("RALPH_CODEX_BASE_URL", "OPENAI_API_KEY")}
        os.environ.update(RALPH_CODEX_BASE_URL=server.url, OPENAI_API_KEY="offline")
        try:
            spec = CodexAgent(_Settings()).process(AgentInvocation("go", project, run_dir, 1))  # type: ignore[arg-type]
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        env = {**os.environ, "OPENAI_API_KEY": "offline", "HOME": str(root), **spec.env}
        if path is not None:
            env["PATH"] = path
        started = time.perf_counter()
        done = subprocess.run(spec.argv, input=spec.stdin, cwd=spec.cwd, env=env, capture_output=True, text=True,
                              timeout=300)
        seconds = time.perf_counter() - started
        outputs = [i.get("output", "") for r in server.requests for i in r.input if i.get("type") == "function_call_output"]
    if done.returncode != 0 or any("codex-linux-sandbox" in str(o) for o in outputs):
        raise SystemExit(f"codex failed: {done.stderr[-500:]}")
    return seconds


def preflight_check(binary: Path, cwd: Path) -> float:
    from ralph_plugins.agents.codex_preflight import sandbox_check

    started = time.perf_counter()
    check = sandbox_check(binary, "workspace-write", cwd)
    seconds = time.perf_counter() - started
    if check is None or not check.ok:
        raise SystemExit(f"the check failed: {check}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    binary = CODEX_CLI.locate()[0]
    if binary is None:
        print(json.dumps({"skipped": "no Codex CLI"}))
        return 0
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="ralph-bench-codex-") as tmp:
        root = Path(tmp)
        no_bwrap = path_without_bwrap(root / "bin-without-bwrap")
        variants = {"bundled_bwrap": no_bwrap}
        if shutil.which("bwrap"):
            variants["system_bwrap"] = os.environ.get("PATH", "")
        for round_ in range(args.rounds):
            samples.setdefault("preflight_check_s", []).append(preflight_check(binary, root))
            for name, path in variants.items():
                for label, commands in (("exec", COMMANDS), ("empty", [])):
                    where = root / f"{round_}-{name}-{label}"
                    where.mkdir()
                    samples.setdefault(f"{label}_{name}_s", []).append(one_session(where, commands, path))
    figures: dict[str, Any] = {key: round(statistics.median(values), 3) for key, values in sorted(samples.items())}
    for name in ("system_bwrap", "bundled_bwrap"):
        if f"exec_{name}_s" in figures:
            figures[f"per_command_{name}_ms"] = round(
                (figures[f"exec_{name}_s"] - figures[f"empty_{name}_s"]) * 1000 / len(COMMANDS), 1)
    figures["rounds"] = args.rounds
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
