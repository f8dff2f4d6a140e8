"""Helpers shared by the benchmark scripts: timing statistics, tables, story generation.

Not a benchmark itself (``run_all.py`` skips files starting with ``_``).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any, Callable, Iterable, Sequence


def cores() -> str:
    total = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = total
    return f"{usable} usable of {total}" if usable != total else str(total)


def header(title: str) -> None:
    print(f"== {title} ==")
    print(
        f"machine: {cores()} cores | {platform.system()} {platform.machine()} | "
        f"Python {platform.python_version()} ({sys.executable})"
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p90 of 20 samples is the 18th smallest)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(-(-fraction * len(ordered) // 1))))
    return ordered[rank - 1]


def repeat(func: Callable[[], Any], *, min_runs: int = 5, max_runs: int = 200, budget: float = 0.5) -> list[float]:
    """Run ``func`` until ``budget`` seconds are spent (within [min_runs, max_runs]); seconds per run."""
    times: list[float] = []
    spent = 0.0
    while len(times) < max_runs and (len(times) < min_runs or spent < budget):
        start = time.perf_counter()
        func()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        spent += elapsed
    return times


def ms(seconds: float) -> str:
    value = seconds * 1000
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(rows: Iterable[Sequence[Any]], left: Sequence[int] = (0,)) -> None:
    """Print rows (first one is the header) with aligned columns; columns not in ``left`` right-aligned."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def fmt(row: list[str]) -> str:
        cells = []
        for i, cell in enumerate(row):
            cells.append(cell.ljust(widths[i]) if i in left else cell.rjust(widths[i]))
        return "  ".join(cells).rstrip()

    print(fmt(rows[0]))
    print("  ".join("-" * w for w in widths))
    for row in rows[1:]:
        print(fmt(row))


def story(index: int, **fields: Any) -> dict[str, Any]:
    """One story valid per the seed schema (every required field present, criteria non-empty)."""
    from ralph.testing.project import story as valid_story

    defaults = {
        "title": f"Story number {index + 1}",
        "description": f"As a user I want feature {index + 1} so that the product does more things.",
        "acceptanceCriteria": [f"Feature {index + 1} works", "Tests pass", "Typecheck passes"],
        "priority": index + 1,
    }
    return valid_story(f"US-{index + 1:06d}", **{**defaults, **fields})


def open_task_list(count: int) -> dict[str, Any]:
    """A task list of ``count`` fresh stories (all open, no dependencies): the loop-overhead case."""
    return {
        "project": "bench",
        "branchName": "ralph/bench",
        "description": "Generated for ralph benchmarks",
        "verifyCommands": [],
        "userStories": [story(i) for i in range(count)],
    }


def mixed_task_list(count: int, pending_reviews: bool = True) -> dict[str, Any]:
    """A realistic mid-project task list.

    The first ~60% of stories are done (approved, with notes), then (when ``pending_reviews``)
    one in 50 of the rest awaits review and one in 50 has changes requested; the rest are open.  Every open story
    depends on the one before it in chains of 5, and every 10th also on a done story, so
    dependency checks hit both met and unmet dependencies.  Priorities are shuffled
    deterministically so selection has to look at the whole list.
    """
    stories = []
    done_until = int(count * 0.6)
    for i in range(count):
        priority = (i * 7919) % count + 1  # a deterministic permutation when count is not a multiple of 7919
        fields: dict[str, Any] = {"priority": priority}
        if i < done_until:
            fields.update(passes=True, reviewStatus="approved", reviewCount=1, notes="Done in iteration 3.")
        elif pending_reviews and (i - done_until) % 50 == 0:
            fields.update(reviewStatus="needs_review")
        elif pending_reviews and (i - done_until) % 50 == 1:
            fields.update(reviewStatus="changes_requested", reviewCount=1, reviewFeedback="Handle the empty case.")
        else:
            deps = []
            if i % 5 and i > 0:
                deps.append(f"US-{i:06d}")  # the previous story
            if i % 10 == 0 and done_until:
                deps.append(f"US-{(i % done_until) + 1:06d}")  # a done story
            fields["dependsOn"] = deps
        stories.append(story(i, **fields))
    return {
        "project": "bench",
        "branchName": "ralph/bench",
        "description": "Generated for ralph benchmarks",
        "verifyCommands": ["pytest -q"],
        "userStories": stories,
    }


def int_arg(argv: list[str], flag: str, default: int) -> int:
    """``--flag N`` from argv (tiny parser so every script stays dependency-free)."""
    if flag in argv:
        return int(argv[argv.index(flag) + 1])
    return default


def list_arg(argv: list[str], flag: str, default: list[int]) -> list[int]:
    """``--flag 10,1000`` from argv."""
    if flag in argv:
        return [int(x) for x in argv[argv.index(flag) + 1].split(",") if x]
    return default
