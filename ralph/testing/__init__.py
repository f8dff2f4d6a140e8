"""Test helpers for ralph and for plugin authors.

Enable the fixtures yourself (ralph no longer loads into every pytest run)::

    # conftest.py
    pytest_plugins = ["ralph.testing"]

or ``pytest -p ralph.testing``.  Fixtures (``ralph.testing.pytest_plugin``): ``ralph_project`` (a
git project with ``ralph init`` done, :class:`RalphProject`, whose ``run`` returns a :class:`RunResult`
with assertions such as ``assert_complete()``), ``ralph_cli`` (the CLI in-process),
``scripted_model``, ``claude_agent_env`` and ``claude_binary`` (the real Claude Code CLI against a
scripted local model), ``scripted_responses``, ``codex_agent_env`` and ``codex_binary`` (the same
for the Codex CLI).

Builders, importable without pytest: :func:`story` (a valid story dict),
:class:`ReplayScript` and its actions (``say``, ``write_file``, ``set_fields``,
``commit`` ...), :func:`replay_env`, :func:`settings_for` (the ``Settings`` a plugin is constructed
with), :func:`make_event` (a ``HookEvent`` for a guard), :class:`MemorySession`, :func:`make_project`,
:func:`wait_for`, :func:`process_alive`.  ``ralph.testing.requirements.require`` skips a test whose
real component is missing, and fails it under ``CI=true``.  The scripted model servers and their
responders are in ``ralph.testing.model_server`` and ``ralph.testing.responses_server``; turns for
the usual steps (implement, approve, review) in ``ralph.testing.scripting``.  See docs/plugins.md.
"""

from __future__ import annotations

import sys

from ralph.testing.hooks import MemorySession, make_event
from ralph.testing.project import RalphProject, RunResult, make_project, process_alive, settings_for, story, wait_for
from ralph.testing.replay import (
    ReplayScript,
    append_file,
    commit,
    cost,
    exit_with,
    replay_env,
    run,
    say,
    set_fields,
    sleep,
    write_file,
)

__all__ = [
    "MemorySession",
    "RalphProject",
    "ReplayScript",
    "RunResult",
    "append_file",
    "commit",
    "cost",
    "exit_with",
    "make_event",
    "make_project",
    "process_alive",
    "replay_env",
    "run",
    "say",
    "set_fields",
    "settings_for",
    "sleep",
    "story",
    "wait_for",
    "write_file",
]

# Loaded by pytest (-p ralph.testing, or pytest_plugins = ["ralph.testing"]): pytest follows this
# to the module defining the fixtures.  Importing ralph.testing elsewhere never imports pytest.
pytest_plugins = ["ralph.testing.pytest_plugin"]

if "pytest" in sys.modules:
    from ralph.testing.requirements import must_run, require

    __all__ += ["must_run", "require"]
