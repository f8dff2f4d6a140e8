"""Finding the Claude Code CLI (the ``claude`` agent, ``ralph plan``, ``ralph demo`` and tests use it).

Stdlib only: the SDK wheel is found without importing it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Mapping

__all__ = ["BINARY_ENV_VAR", "bundled_binary", "locate_claude_cli", "resolve_binary"]

BINARY_ENV_VAR = "RALPH_CLAUDE_BINARY"
_SDK_PACKAGE = "claude_agent_sdk"
_NOT_FOUND = (
    "claude CLI not found: set [tool.ralph.claude] binary, set RALPH_CLAUDE_BINARY, "
    "put claude on PATH, or pip install claude-agent-sdk (it bundles the CLI)"
)


def bundled_binary() -> Path | None:
    """The CLI inside an installed claude-agent-sdk wheel, found without importing the SDK."""
    try:
        spec = importlib.util.find_spec(_SDK_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        for name in ("claude", "claude.exe"):
            candidate = Path(location) / "_bundled" / name
            if _is_executable(candidate):
                return candidate
    return None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _lookup(value: str, base_dir: Path | None) -> Path | None:
    """``value`` as a path (relative to ``base_dir``) when it has a separator, else a PATH lookup."""
    if os.sep in value or (os.altsep and os.altsep in value):
        path = Path(value).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return path if _is_executable(path) else None
    found = shutil.which(value)
    return Path(found) if found else None


def locate_claude_cli(
    configured: str | None = None, environ: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> tuple[Path | None, str, str]:
    """Find the Claude Code CLI: ``(path or None, source, reason when not found)``.

    Order: ``configured`` (``[tool.ralph.claude] binary``), ``$RALPH_CLAUDE_BINARY``,
    ``claude`` on PATH, the CLI bundled in the claude-agent-sdk wheel.  ``source`` is
    ``config``, ``env``, ``path``, ``claude-agent-sdk`` or ``none``.  An explicit choice
    that is not executable never falls back silently.
    """
    environ = os.environ if environ is None else environ
    if configured:
        path = _lookup(configured, base_dir)
        if path is None:
            return None, "config", f"[tool.ralph.claude] binary = {configured!r} is not an executable file"
        return path, "config", ""
    from_env = environ.get(BINARY_ENV_VAR, "")
    if from_env:
        path = _lookup(from_env, base_dir)
        if path is None:
            return None, "env", f"{BINARY_ENV_VAR}={from_env!r} is not an executable file"
        return path, "env", ""
    on_path = shutil.which("claude", path=environ.get("PATH"))
    if on_path:
        return Path(on_path), "path", ""
    bundled = bundled_binary()
    if bundled is not None:
        return bundled, "claude-agent-sdk", ""
    return None, "none", _NOT_FOUND


def resolve_binary(
    configured: str | None = None,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> tuple[Path | None, str]:
    """Find the claude executable: ``(path or None, source)``.

    Order: ``configured`` (the ``binary`` config key), ``$RALPH_CLAUDE_BINARY``,
    ``claude`` on PATH, the CLI bundled in claude-agent-sdk.  ``source`` is one
    of ``config``, ``env``, ``path``, ``claude-agent-sdk`` or ``none``.
    """
    path, source, _ = locate_claude_cli(configured, os.environ if environ is None else environ, base_dir)
    return path, source
