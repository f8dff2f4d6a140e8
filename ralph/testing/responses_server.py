"""A scripted, local stand-in for the OpenAI Responses API (what the Codex CLI speaks).

Public for tests here; the implementation, which ``ralph demo`` uses too, is :mod:`ralph.scripted.responses_server`.
"""

from __future__ import annotations

from ralph.scripted.responses_server import *  # noqa: F403 - this module is its public face for tests
from ralph.scripted.responses_server import __all__ as __all__
