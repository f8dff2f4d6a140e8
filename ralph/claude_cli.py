"""Finding an agent's CLI (Claude Code, Codex ...): config, an environment variable, PATH, a wheel.

Stdlib only: a wheel that bundles the CLI is found without importing it.  The ``claude`` agent,
``ralph plan``, ``ralph demo`` and the tests find Claude Code with :func:`locate_claude_cli`;
other agents describe their CLI with an :class:`AgentCli` (``ralph.api.agents.AgentCli``).  The two CLIs
ralph's default agents run are described here (:data:`CLAUDE_CLI`, :data:`CODEX_CLI`), so that
``ralph.testing`` finds them without importing a default plugin.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["BINARY_ENV_VAR", "CLAUDE_CLI", "CODEX_CLI", "AgentCli", "bundled_binary", "inside_tree", "locate_claude_cli",
           "path_outside", "resolve_binary"]


def inside_tree(path: Path | str, tree: Path | str) -> bool:
    """Is ``path`` (symlinks resolved) ``tree`` or inside it?"""
    real, base = os.path.realpath(path), os.path.realpath(tree)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def path_outside(value: str, tree: Path | str, keep: tuple[str, ...] = ()) -> str:
    """A ``PATH`` value without the entries a program in ``tree`` could be found through: entries
    inside ``tree`` (``node_modules/.bin``, a project venv) and relative ones (the current folder).

    Inside by name or with symlinks resolved: in a sandbox the project's path shows the agent's checkout,
    where a link of this machine's means nothing.  ``keep``: entries to keep although inside (under a
    directory a sandbox shows read-only from this machine, the project's ``.venv``)."""
    def dropped(entry: str) -> bool:
        if not entry or not os.path.isabs(entry):
            return True
        if any(_lexically_under(entry, kept) for kept in keep):
            return False
        return _lexically_under(entry, str(tree)) or inside_tree(entry, tree)

    return os.pathsep.join(entry for entry in value.split(os.pathsep) if not dropped(entry))


def _lexically_under(path: str, tree: str) -> bool:
    real, base = os.path.normpath(path), os.path.normpath(os.path.abspath(tree))
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _lookup(value: str, base_dir: Path | None, search: str | None = None) -> Path | None:
    """``value`` as a path (relative to ``base_dir``) when it has a separator, else a lookup on ``search``
    (a PATH value; None: the process's)."""
    if os.sep in value or (os.altsep and os.altsep in value):
        path = Path(value).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return path if _is_executable(path) else None
    found = shutil.which(value, path=search)
    return Path(found) if found else None


@dataclass(frozen=True)
class AgentCli:
    """Where to look for one agent CLI, in order: the ``binary`` key of its config section, an
    environment variable, ``program`` on PATH, and the copy a Python wheel bundles."""

    program: str
    """The executable's name on PATH (``claude``)."""
    section: str
    """Its config section (``[tool.ralph.<section>] binary``)."""
    env_var: str
    """The environment variable naming the executable (``RALPH_CLAUDE_BINARY``)."""
    wheel_package: str
    """The import package of the wheel that bundles the CLI (``claude_agent_sdk``)."""
    wheel_dir: str
    """The directory inside that package holding the executable (``_bundled``, ``bin``)."""
    wheel_label: str
    """How the wheel is named in messages and as a source (``claude-agent-sdk``)."""

    def bundled(self) -> Path | None:
        """The CLI inside the installed wheel, found without importing it."""
        try:
            spec = importlib.util.find_spec(self.wheel_package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        for location in spec.submodule_search_locations:
            for name in (self.program, f"{self.program}.exe"):
                candidate = Path(location) / self.wheel_dir / name
                if _is_executable(candidate):
                    return candidate
        return None

    def locate(
        self,
        configured: str | None = None,
        environ: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        bundled: Callable[[], Path | None] | None = None,
    ) -> tuple[Path | None, str, str]:
        """``(path or None, source, reason when not found)``; ``source`` is ``config``, ``env``,
        ``path``, the wheel's label or ``none``.  An explicit choice that is not executable never
        falls back silently."""
        environ = os.environ if environ is None else environ
        if configured:
            path = _lookup(configured, base_dir, environ.get("PATH"))
            if path is None:
                return None, "config", f"[tool.ralph.{self.section}] binary = {configured!r} is not an executable file"
            return path, "config", ""
        from_env = environ.get(self.env_var, "")
        if from_env:
            path = _lookup(from_env, base_dir, environ.get("PATH"))
            if path is None:
                return None, "env", f"{self.env_var}={from_env!r} is not an executable file"
            return path, "env", ""
        on_path = shutil.which(self.program, path=environ.get("PATH"))
        if on_path:
            return Path(on_path), "path", ""
        found = (bundled or self.bundled)()
        if found is not None:
            return found, self.wheel_label, ""
        return None, "none", (
            f"{self.program} CLI not found: set [tool.ralph.{self.section}] binary, set {self.env_var}, "
            f"put {self.program} on PATH, or pip install {self.wheel_label} (it bundles the CLI)"
        )


    def refusal(self, path: Path, source: str, tree: Path) -> str | None:
        """Why ``path`` (found from ``source``) must not run: it is inside ``tree``, the project the agent
        writes; None when it is outside.  The wheel's copy inside the project is allowed only when ralph
        itself is installed there too (the agent could change ralph's own code then: ``ralph doctor`` says so)."""
        if not inside_tree(path, tree):
            return None
        if source == self.wheel_label and inside_tree(Path(__file__).parent, tree):
            return None
        where = {"config": f"[tool.ralph.{self.section}] binary", "env": self.env_var, "path": "PATH"}.get(source, source)
        return (
            f"the {self.program} CLI found at {path} (from {where}) is inside the project {tree}: ralph never runs a "
            f"program from the project tree, which the agent can write; install {self.program} outside the project "
            f"or set [tool.ralph.{self.section}] binary to an absolute path outside it"
        )


CLAUDE_CLI = AgentCli("claude", "claude", "RALPH_CLAUDE_BINARY", "claude_agent_sdk", "_bundled", "claude-agent-sdk")
"""Claude Code: ``[tool.ralph.claude] binary``, ``RALPH_CLAUDE_BINARY``, PATH, the claude-agent-sdk wheel."""
BINARY_ENV_VAR = CLAUDE_CLI.env_var
CODEX_CLI = AgentCli("codex", "codex", "RALPH_CODEX_BINARY", "codex_cli_bin", "bin", "openai-codex-cli-bin")
"""The Codex CLI: ``[tool.ralph.codex] binary``, ``RALPH_CODEX_BINARY``, PATH, the openai-codex-cli-bin wheel."""


def bundled_binary() -> Path | None:
    """The Claude Code CLI inside an installed claude-agent-sdk wheel."""
    return CLAUDE_CLI.bundled()


def locate_claude_cli(
    configured: str | None = None, environ: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> tuple[Path | None, str, str]:
    """Find the Claude Code CLI: ``(path or None, source, reason when not found)`` (see ``AgentCli.locate``)."""
    return CLAUDE_CLI.locate(configured, environ, base_dir, bundled=lambda: bundled_binary())


def resolve_binary(
    configured: str | None = None, environ: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> tuple[Path | None, str]:
    """Find the Claude Code CLI: ``(path or None, source)``."""
    path, source, _ = locate_claude_cli(configured, environ, base_dir)
    return path, source
