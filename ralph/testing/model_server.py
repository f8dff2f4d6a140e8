"""A scripted, local stand-in for the Anthropic Messages API.

Public for tests here; the implementation, which ``ralph demo`` uses too, is :mod:`ralph.scripted.model_server`.
"""

from __future__ import annotations

from ralph.scripted.model_server import *  # noqa: F403 - this module is its public face for tests
from ralph.scripted.model_server import __all__ as __all__
