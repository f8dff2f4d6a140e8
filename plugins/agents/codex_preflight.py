"""Pre-flight checks of the ``codex`` agent: the binary runs, it has a key or a login, the endpoint answers,
and Codex's own sandbox can start a command.

Imported only when a run (or ``ralph doctor``) starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ralph.api import AgentView, Check

__all__ = ["codex_checks", "sandbox_check"]

VERSION_TIMEOUT = 30.0
SANDBOX_TIMEOUT = 30.0
SANDBOX_FIX = (
    "Codex runs every command of the agent in bubblewrap, which needs unprivileged user namespaces: allow them "
    "(or install a bubblewrap that works here), run with --runner docker-sandbox, or set [tool.ralph.codex] "
    'sandbox = "danger-full-access" (the agent\'s commands then run without Codex\'s sandbox, as you)'
)


def codex_checks(binary: Path, source: str, key_env: str, base_url: str | None, view: AgentView) -> list[Check]:
    """``codex --version`` runs; ``key_env`` (or ``OPENAI_API_KEY``) is set or a ``codex login`` exists."""
    checks = [_binary_check(binary, source)]
    if base_url:
        from ralph.api.agents import endpoint_answers

        problem = endpoint_answers(base_url)
        checks.append(
            Check(False, f"the Codex endpoint {base_url} does not answer: {problem}", "start it, or unset base_url")
            if problem
            else Check(True, f"the Codex endpoint {base_url} answers")
        )
    # the agent passes these variables into its process itself, wherever the runner runs it
    keys = [name for name in dict.fromkeys([key_env, "OPENAI_API_KEY"]) if os.environ.get(name)]
    auth = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "auth.json"
    if keys:
        checks.append(Check(True, f"credentials for codex: {', '.join(keys)}"))
    elif auth.is_file():
        checks.append(Check(True, f"codex login found: {auth} (copied into the run's CODEX_HOME)"))
    else:
        checks.append(
            Check(
                False,
                f"no credentials for codex: {key_env} is not set and there is no login in {auth}",
                f"export {key_env}=... or run `codex login` once",
            )
        )
    return checks


def _binary_check(binary: Path, source: str) -> Check:
    try:
        result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(False, f"codex binary {binary} (from {source}) does not run: {exc}",
                     "reinstall it (pip install --force-reinstall openai-codex-cli-bin) or set [tool.ralph.codex] binary")
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit {result.returncode}"]
        return Check(False, f"codex binary {binary} (from {source}) does not run: {tail[0][:200]}",
                     "reinstall it or set [tool.ralph.codex] binary")
    return Check(True, f"codex binary runs: {binary} (from {source}, {result.stdout.strip()[:60]})")


def sandbox_check(binary: Path, sandbox: str, project_dir: Path) -> Check | None:
    """Codex's own sandbox starts a command (``codex sandbox -- true``), with a ``CODEX_HOME`` placed as a
    run's would be under the temporary directory; None where Codex's sandbox is not used (not Linux,
    ``danger-full-access``)."""
    import shutil
    import sys
    import tempfile

    from ralph_plugins.agents.codex_sandbox import describe_bubblewrap, helper_placement

    if not sys.platform.startswith("linux") or sandbox == "danger-full-access":
        return None
    home = Path(tempfile.mkdtemp(prefix="ralph-codex-preflight-"))
    try:
        placement = helper_placement(home, os.environ, sandbox)
        env = {**os.environ, "CODEX_HOME": str(home), **placement.env}
        argv = [str(binary), "sandbox"]
        for key, value in placement.overrides:
            argv += ["-c", f"{key}={'true' if value is True else value}"]
        argv += ["--", "/bin/sh", "-c", "true"]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=SANDBOX_TIMEOUT, env=env,
                                    cwd=str(project_dir), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Check(False, f"Codex's sandbox could not be tried: {exc}", SANDBOX_FIX)
        which = describe_bubblewrap(env, project_dir)
        if result.returncode == 0:
            return Check(True, f"Codex's sandbox runs a command ({which})")
        lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        why = next((line for line in reversed(lines) if not line.startswith("WARNING")), f"exit {result.returncode}")
        return Check(False, f"Codex's sandbox cannot run a command here ({which}): {why[:300]}", SANDBOX_FIX)
    finally:
        shutil.rmtree(home, ignore_errors=True)
