"""Pre-flight checks of the ``claude`` agent: the binary runs, credentials are where it runs.

Imported only when a run (or ``ralph doctor``) starts, never by ``ralph --help``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterable

from ralph.api import AgentView, Check

__all__ = ["CREDENTIAL_VARS", "billing_check", "binary_check", "credential_checks", "login_check"]

CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")
API_KEY_VARS = ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")
"""What Claude Code bills per token, before a subscription's login (its order of precedence)."""
CLOUD_VARS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")
VERSION_TIMEOUT = 30.0


def binary_check(path: Path, source: str) -> Check:
    """``claude --version`` exits 0 on this machine."""
    try:
        result = subprocess.run(
            [str(path), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "DISABLE_AUTOUPDATER": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(False, f"claude binary {path} (from {source}) does not run: {exc}", _reinstall_fix())
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit {result.returncode}"]
        return Check(False, f"claude binary {path} (from {source}) does not run: {tail[0][:200]}", _reinstall_fix())
    version = result.stdout.strip().splitlines()[0] if result.stdout.strip() else "?"
    return Check(True, f"claude binary runs: {path} (from {source}, {version})")


def _reinstall_fix() -> str:
    return "reinstall it (pip install --force-reinstall claude-agent-sdk) or set [tool.ralph.claude] binary"


def credential_checks(view: AgentView, passthrough: Iterable[str] = ()) -> list[Check]:
    """Credentials the agent will see, and the model endpoint when ``ANTHROPIC_BASE_URL`` is set."""
    env = _env(view, passthrough)
    where = view.where
    checks: list[Check] = []
    base_url = env.get("ANTHROPIC_BASE_URL", "")
    if base_url:
        checks.append(_endpoint_check(base_url, view))
    elif view.network == "none":
        checks.append(
            Check(
                False,
                f"the agent has no network on {where} (network = none): it cannot reach the model API",
                'set [tool.ralph.docker-sandbox] network = "allowlist" (only the model API gets through)',
            )
        )
    return [*checks, login_check(view, passthrough, endpoint_answers=bool(base_url) and bool(checks[0].ok))]


def _env(view: AgentView, passthrough: Iterable[str]) -> dict[str, str]:
    env = dict(view.env)
    for name in passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def login_check(view: AgentView, passthrough: Iterable[str] = (), endpoint_answers: bool = False) -> Check:
    """Whether Claude Code can log in where ``view`` shows it: a key or token in its environment,
    cloud-provider mode, a logged-in credentials file (or on macOS the keychain item) in the home it
    sees, an ``apiKeyHelper``; with ``endpoint_answers`` (``ANTHROPIC_BASE_URL`` set and answering)
    no key is only a warning."""
    env = _env(view, passthrough)
    where = view.where
    found = [name for name in CREDENTIAL_VARS if env.get(name)]
    cloud = [name for name in CLOUD_VARS if env.get(name, "") not in ("", "0", "false")]
    from .claude_home import CREDENTIALS_FILE, KEYCHAIN_SERVICE, key_helper, login_dir, login_files

    directory = login_dir(view)  # $CLAUDE_CONFIG_DIR or ~/.claude where the agent runs: the loop links it in
    credentials = directory / CREDENTIALS_FILE if directory is not None else None
    if found:
        return Check(True, f"credentials the agent sees on {where}: {', '.join(found)}")
    if cloud:
        return Check(True, f"cloud provider mode on {where}: {', '.join(cloud)} (credentials from its SDK)")
    if credentials is not None and credentials.is_file():
        return Check(True, f"logged-in credentials the agent sees: {credentials}")
    if isinstance(login_files(view).get(CREDENTIALS_FILE), bytes):
        return Check(True, f"logged-in credentials the agent sees: the macOS keychain item {KEYCHAIN_SERVICE!r}")
    if directory is not None and key_helper(view):
        return Check(True, f"apiKeyHelper set in {directory / 'settings.json'} (the one key of your user "
                           "settings a loop uses)")
    if endpoint_answers:
        return Check(None, f"no API key on {where}; relying on the endpoint ANTHROPIC_BASE_URL={env['ANTHROPIC_BASE_URL']}")
    home = f"no logged-in credentials in {credentials}" if credentials else "a fresh home without credentials"
    return Check(
        False,
        f"no credentials the agent can use on {where}: none of {', '.join(CREDENTIAL_VARS)} is set "
        f"and {home} (Claude Code would answer 'Not logged in')",
        _credential_fix(view),
    )


def subscription_login(view: AgentView, passthrough: Iterable[str] = ()) -> str | None:
    """Where the agent would find a Claude subscription login (None: none): ``CLAUDE_CODE_OAUTH_TOKEN`` in
    its environment, or an OAuth login (``claudeAiOauth``) in the credentials it sees."""
    import json

    from .claude_home import CREDENTIALS_FILE, login_files

    if _env(view, passthrough).get("CLAUDE_CODE_OAUTH_TOKEN"):
        return "CLAUDE_CODE_OAUTH_TOKEN"
    found = login_files(view).get(CREDENTIALS_FILE)
    try:
        text = found.read_text(encoding="utf-8") if isinstance(found, Path) else (found or b"").decode("utf-8")
        data = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    login = data.get("claudeAiOauth") if isinstance(data, dict) else None
    if not isinstance(login, dict):
        return None
    kind = login.get("subscriptionType")
    where = found if isinstance(found, Path) else "the keychain"
    return f"a Claude {kind} subscription login in {where}" if isinstance(kind, str) and kind else f"a Claude subscription login in {where}"


def billing_check(view: AgentView, passthrough: Iterable[str] = (), policy: str = "warn") -> Check | None:
    """An API key where the agent runs although the person is logged in with a subscription: Claude Code
    uses the key (``ANTHROPIC_AUTH_TOKEN``, ``ANTHROPIC_API_KEY`` come before a login), so the run bills
    the API per token.  A warning (``policy`` "warn"), a failed check ("refuse"), or nothing ("allow",
    or no such pair)."""
    if policy == "allow":
        return None
    env = _env(view, passthrough)
    key = next((name for name in API_KEY_VARS if env.get(name)), None)
    if key is None:
        return None
    login = subscription_login(view, passthrough)
    if login is None:
        return None
    what = (f"{key} is set where the agent runs ({view.where}): Claude Code bills the API per token for this run, "
            f"although you are logged in with {login}")
    fix = (f"unset {key} (e.g. `env -u {key} ralph run ...`) to spend the subscription; or set api_billing = "
           '"allow" in [tool.ralph] to bill the API without this warning')
    if policy == "refuse":
        return Check(False, f"{what} (api_billing = \"refuse\")", fix)
    return Check(None, what, fix)


def _credential_fix(view: AgentView) -> str:
    if view.where == "this machine":
        return "export ANTHROPIC_API_KEY=... (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`), or run `claude` once and /login"
    return (
        "export ANTHROPIC_API_KEY=..., or with a Claude subscription make a token with `claude setup-token` and "
        "export CLAUDE_CODE_OAUTH_TOKEN=<it> (it is passed into the sandbox); or set "
        '[tool.ralph.docker-sandbox] state_dir = "~/.dclaude_state" and log in once there'
    )


def _endpoint_check(base_url: str, view: AgentView) -> Check:
    from ralph.api.agents import endpoint_answers

    if view.network == "none":
        return Check(
            False,
            f"ANTHROPIC_BASE_URL={base_url} is set but the agent has no network on {view.where} (network = none)",
            'set [tool.ralph.docker-sandbox] network = "allowlist"',
        )
    problem = endpoint_answers(base_url)
    if problem:
        return Check(False, f"the model endpoint ANTHROPIC_BASE_URL={base_url} does not answer: {problem}",
                     "start it, or unset ANTHROPIC_BASE_URL to use the Anthropic API")
    return Check(True, f"the model endpoint ANTHROPIC_BASE_URL={base_url} answers")
