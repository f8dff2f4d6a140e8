"""What an agent plugin that runs a command-line program needs beyond ``ralph.api.Agent``.

:class:`CliAgent` is the base of the ``claude`` and ``codex`` agents (the CLI found, its
version checked, its output parsed line by line into :class:`~ralph.api.AgentEvent`);
:class:`AgentCli` says where one CLI is looked for (config, environment variable, ``PATH``, a
wheel that bundles it), ``CLAUDE_CLI`` and ``CODEX_CLI`` are the two ralph knows, and
``locate_claude_cli`` finds Claude Code as the ``claude`` agent does.  ``endpoint_answers(url)``
is the preflight probe of a model endpoint (None when a connection to it opens, else why not).
``private_dir(path)`` makes (or remakes) a directory of this user only, mode 0700, never through a link
(an agent's scratch or config directory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.claude_cli import CLAUDE_CLI, CODEX_CLI, AgentCli, locate_claude_cli
from ralph.cliagent import CliAgent
from ralph.fsutil import private_dir
from ralph.lazymodule import lazy_attributes

if TYPE_CHECKING:
    from ralph.loop.preflight import endpoint_answers

__all__ = ["CLAUDE_CLI", "CODEX_CLI", "AgentCli", "CliAgent", "endpoint_answers", "locate_claude_cli", "private_dir"]

__getattr__ = lazy_attributes(__name__, {"endpoint_answers": "ralph.loop.preflight"})
