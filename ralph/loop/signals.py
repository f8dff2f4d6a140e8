"""SIGINT and SIGTERM during a run: the loop stops cleanly after the running step.

Handlers can only be installed from the main thread (a loop run in another thread, as
the tests and fleet engines may do, keeps the process's handlers).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


def install_stop_handlers(on_signal: Callable[[int], None]) -> dict[int, Any]:
    """Route SIGINT and SIGTERM to ``on_signal``; returns the previous handlers (empty off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}

    def handle(signum: int, _frame: Any) -> None:
        on_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handle)
    return previous


def restore_handlers(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`install_stop_handlers` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
