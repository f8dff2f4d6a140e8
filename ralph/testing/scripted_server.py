"""What the scripted model servers share: the HTTP plumbing, the request record, the bookkeeping.

Public for tests here; the implementation, which ``ralph demo`` uses too, is :mod:`ralph.scripted.scripted_server`.
"""

from __future__ import annotations

from ralph.scripted.scripted_server import *  # noqa: F403 - this module is its public face for tests
from ralph.scripted.scripted_server import __all__ as __all__
