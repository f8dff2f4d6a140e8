"""Build scripted agent behaviour: shell steps a model would take, as model turns or replay actions.

Public for tests here; the implementation, which ``ralph demo`` uses too, is :mod:`ralph.scripted.scripting`.
"""

from __future__ import annotations

from ralph.scripted.scripting import *  # noqa: F403 - this module is its public face for tests
from ralph.scripted.scripting import __all__ as __all__
