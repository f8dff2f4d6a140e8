"""What Claude Code reads during a loop: only the configuration ralph gives it.

- **Its config dir** (``CLAUDE_CONFIG_DIR``) is the run-owned home the loop makes for every
  session (:mod:`ralph.loop.agenthome`), holding only the person's login
  (:func:`login_files`): their user-scope settings, hooks, MCP servers, plugins, commands and
  agents are neither read nor reachable.
- **Setting sources** are the ones ``[tool.ralph.claude] setting_sources`` names (default
  ``project`` and ``local``: the project's ``.claude/settings*.json``, ``CLAUDE.md``, skills and
  agents, which the loop restores after every iteration), never ``user``
  (``--setting-sources``).
- **MCP servers** are only those of ``[tool.ralph.claude] mcp_servers`` (``--strict-mcp-config``
  with ``--mcp-config``): a ``.mcp.json`` the agent writes is not started.
- **apiKeyHelper** is the one key taken from the person's user-scope settings, as they were
  when the run started (a way to log in, as the credentials file is).

Imported only when an agent process is built or pre-flight runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ralph.api import AgentView

__all__ = ["CREDENTIALS_FILE", "KEYCHAIN_SERVICE", "key_helper", "login_dir", "login_files", "mcp_args", "source_args"]

CREDENTIALS_FILE = ".credentials.json"
"""Claude Code's login (OAuth tokens) in its config dir, where no keychain is used."""
KEYCHAIN_SERVICE = "Claude Code-credentials"
"""The macOS keychain item of the login when ``CLAUDE_CONFIG_DIR`` is not set."""
SECURITY = "/usr/bin/security"


def login_dir(view: AgentView) -> Path | None:
    """Claude Code's config dir where the agent runs, as it would be without ralph:
    ``$CLAUDE_CONFIG_DIR``, else ``~/.claude`` of the home the agent sees."""
    configured = view.env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    return view.home / ".claude" if view.home is not None else None


def login_files(view: AgentView) -> dict[str, Path | bytes]:
    """The person's Claude Code login, for the run-owned config home: the credentials file, or
    on macOS (no file, no ``CLAUDE_CONFIG_DIR``) the keychain item's text, which the CLI would
    not find under its usual name once ``CLAUDE_CONFIG_DIR`` is set."""
    directory = login_dir(view)
    if directory is not None:
        credentials = directory / CREDENTIALS_FILE
        if credentials.is_file():
            return {CREDENTIALS_FILE: credentials}
    if sys.platform == "darwin" and not view.env.get("CLAUDE_CONFIG_DIR") and view.where == "this machine":
        secret = keychain_login()
        if secret:
            return {CREDENTIALS_FILE: secret}
    return {}


def keychain_login() -> bytes | None:
    """The login Claude Code keeps in the macOS keychain, or None."""
    try:
        result = subprocess.run(
            [SECURITY, "find-generic-password", "-a", os.environ.get("USER", ""), "-w", "-s", KEYCHAIN_SERVICE],
            capture_output=True, timeout=10, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = result.stdout.strip()
    return text if result.returncode == 0 and text.startswith(b"{") else None


def key_helper(view: AgentView) -> str | None:
    """``apiKeyHelper`` of the person's user-scope settings (the one key ralph carries over), or None."""
    directory = login_dir(view)
    if directory is None:
        return None
    try:
        data = json.loads((directory / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    helper = data.get("apiKeyHelper") if isinstance(data, dict) else None
    return helper if isinstance(helper, str) and helper.strip() else None


def source_args(sources: list[str]) -> list[str]:
    """``--setting-sources A,B``: the settings Claude Code loads besides ralph's own (never ``user``)."""
    return ["--setting-sources", ",".join(s for s in sources if s != "user")]


def mcp_args(servers: Mapping[str, Any]) -> list[str]:
    """``--strict-mcp-config --mcp-config JSON``: only the loop's MCP servers start."""
    return ["--strict-mcp-config", "--mcp-config", json.dumps({"mcpServers": dict(servers)}, separators=(",", ":"))]
