"""A project's session and ralph files, for plugin commands (``ralph_register_commands``) and tools.

``open_session(project_dir, overrides)`` is what a ralph command starts with (a :class:`Session`:
the settings, the plugin host, the project); ``find_project`` finds the project a directory is in,
``progress_log(ralph_dir)`` names the progress log of a ralph directory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes
from ralph.ralphfiles import find_project, progress_log

if TYPE_CHECKING:
    from ralph.session import Session, open_session

__all__ = ["Session", "find_project", "open_session", "progress_log"]

__getattr__ = lazy_attributes(__name__, dict.fromkeys(["Session", "open_session"], "ralph.session"))
