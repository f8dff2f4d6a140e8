"""The loop's own wording of a run, for reporters that show it as the console does.

``render_run_report`` and ``render_run_summary`` (a run's ``summary.json`` as text),
``format_elapsed`` (``m:ss``, ``h:mm:ss``), ``exit_meaning`` and ``process_ended`` (what a gate command's
exit status means), ``BUILTIN_PROMPT_NOTE`` (the note shown when the run uses ralph's built-in prompt).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes

if TYPE_CHECKING:
    from ralph.loop.gateoutput import exit_meaning, process_ended
    from ralph.loop.runreport import format_elapsed, render_run_report, render_run_summary
    from ralph.loop.start import BUILTIN_PROMPT_NOTE

__all__ = ["BUILTIN_PROMPT_NOTE", "exit_meaning", "format_elapsed", "process_ended", "render_run_report",
           "render_run_summary"]

__getattr__ = lazy_attributes(__name__, {
    "BUILTIN_PROMPT_NOTE": "ralph.loop.start",
    "exit_meaning": "ralph.loop.gateoutput",
    "process_ended": "ralph.loop.gateoutput",
    **dict.fromkeys(["format_elapsed", "render_run_report", "render_run_summary"], "ralph.loop.runreport"),
})
