"""Why a gate failed, shown where people look: a failed (or warning) gate's verbatim output is kept
whole in the run directory, and its excerpt — the first lines and the last ones, verbatim — goes into
the ``gate_failed`` event, so the console, ``ralph status`` and ``ralph report`` (text and HTML) show
it with the path of the rest.

The excerpt keeps the head (the command, the first error) and the tail (a test runner's summary,
``[exit N]``): what a person reads first in a failing run's output.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["EXCERPT_LINES", "excerpt", "exit_meaning", "failure_lines", "failures", "keep", "output_path", "process_ended", "why_lines"]

EXCERPT_LINES = 8
"""At most this many lines of a failure's output are shown; the rest is in the kept file."""

_EXIT_MEANINGS = {
    126: "found but not executable",
    127: "command not found",
}

_SIGNAL_STATUSES = (130, 137, 143)
"""128 + the signal, as a shell (and ``ralph run``) reports a command a signal stopped: SIGINT, SIGKILL, SIGTERM."""


def output_path(run_dir: Path, iteration: int, gate: str) -> Path:
    """Where iteration ``iteration``'s ``gate`` output is kept: ``iteration-NNN.gate-NAME.txt`` in the run directory."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", gate).lstrip(".") or "gate"
    return run_dir / f"iteration-{iteration:03d}.gate-{name}.txt"


def keep(run_dir: Path | None, iteration: int, gate: str, output: str) -> str | None:
    """Write ``output`` whole to :func:`output_path` (the run directory is the loop's, outside the
    project); its path, or None when there is no run directory or it cannot be written."""
    if run_dir is None:
        return None
    from ralph.fsutil import atomic_write_text

    path = output_path(run_dir, iteration, gate)
    try:
        atomic_write_text(path, output if output.endswith("\n") or not output else output + "\n")
    except OSError:
        return None
    return str(path)


def excerpt(output: str, limit: int = EXCERPT_LINES) -> tuple[str, int]:
    """(the lines to show, how many lines were left out): all of a short output; of a longer one
    the first three lines and the last ones, with a marker line between."""
    lines = [line.rstrip() for line in output.rstrip("\n").splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    if len(lines) <= limit:
        return "\n".join(lines), 0
    head, tail = lines[:3], lines[-(limit - 3):]
    left_out = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... {left_out} more lines ...]", *tail]), left_out


def exit_meaning(exit_code: int | None, timed_out: bool = False) -> str:
    """How a process ended, in plain words, the same way wherever ralph shows it: ``timed out``, ``stopped by
    SIGTERM`` (a negative code, or 128 + the signal as a shell reports it), ``exit 127: command not found``,
    ``exit 1``."""
    if timed_out:
        return "timed out"
    if exit_code is None:
        return "failed"
    if exit_code < 0 or exit_code in _SIGNAL_STATUSES:
        import signal

        number = -exit_code if exit_code < 0 else exit_code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            return f"stopped by signal {number}"
        return f"stopped by {name}" + (" (Ctrl-C)" if number == signal.SIGINT else "")
    meaning = _EXIT_MEANINGS.get(exit_code)
    return f"exit {exit_code}: {meaning}" if meaning else f"exit {exit_code}"


def process_ended(exit_code: int | None, timed_out: bool = False) -> str:
    """:func:`exit_meaning` as the end of a sentence about a process: ``exited with code 1``, ``was stopped
    by SIGTERM``, ``timed out``."""
    said = exit_meaning(exit_code, timed_out)
    if said.startswith("exit "):
        return "exited with code " + said[5:]
    return "was " + said if said.startswith("stopped") else said


def failure_lines(event: dict[str, Any], indent: str = "  ") -> list[str]:
    """A ``gate_failed`` event as lines for a person: what failed and why, the excerpt, where the rest is.

    Events of runs from before the excerpt existed show the ``gate`` event's output when the caller
    merged it in as ``output``.
    """
    status = exit_meaning(event.get("exit_code"), bool(event.get("timed_out")))
    lines = [f"{indent}#{event.get('iteration')} {event.get('story')}: {event.get('gate')} gate failed ({status})"]
    shown = event.get("excerpt")
    if shown is None and event.get("output"):
        shown, _ = excerpt(str(event["output"]))
    lines += [f"{indent}    {line}" for line in str(shown or "").splitlines()]
    if event.get("log"):
        lines.append(f"{indent}    full output: {event['log']}")
    return lines


def failures(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``gate_failed`` and ``quality_warning`` events of a run's log, in order; a failure of a run
    from before the excerpt existed gets its ``gate`` event's output as ``output``."""
    outputs: dict[tuple[Any, Any], str] = {}
    found = []
    for event in events:
        kind = event.get("kind")
        if kind == "gate" and event.get("passed") is False:
            outputs[(event.get("iteration"), event.get("gate"))] = str(event.get("output") or "")
        elif kind == "gate_failed":
            if event.get("excerpt") is None:
                event = {**event, "output": outputs.get((event.get("iteration"), event.get("gate")), "")}
            found.append(event)
        elif kind == "quality_warning":
            found.append(event)
    return found


def why_lines(events: list[dict[str, Any]], indent: str = "  ") -> list[str]:
    """Why each gate failed (and each quality warning) in a run's log, for ``ralph status`` and
    ``ralph report``: a failure whose output is the same as the story's previous one says so
    instead of repeating it."""
    lines: list[str] = []
    previous: dict[tuple[Any, Any], tuple[Any, str]] = {}
    for event in failures(events):
        if event.get("kind") == "quality_warning":
            where = f" (full output: {event['log']})" if event.get("log") else ""
            lines.append(f"{indent}#{event.get('iteration')} {event.get('story')}: quality warning "
                         f"({event.get('gate')}): {event.get('warning')}{where}")
            continue
        key = (event.get("story"), event.get("gate"))
        shown = str(event.get("excerpt") if event.get("excerpt") is not None else excerpt(str(event.get("output") or ""))[0])
        earlier = previous.get(key)
        if earlier is not None and earlier[1] == shown and shown:
            status = exit_meaning(event.get("exit_code"), bool(event.get("timed_out")))
            lines.append(f"{indent}#{event.get('iteration')} {event.get('story')}: {event.get('gate')} gate failed "
                         f"({status}): the same output as #{earlier[0]}")
            continue
        previous[key] = (event.get("iteration"), shown)
        lines += failure_lines({**event, "excerpt": shown}, indent)
    return lines
