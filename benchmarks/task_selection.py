"""ReviewPolicy.select on task lists of 10 to 100,000 stories.

Two realistic mid-project mixes (see ``_common.mixed_task_list``): ~60% of the
stories done and approved, open stories in dependsOn chains of 5 with priorities
shuffled, and

* ``mixed``: ~1% awaiting review and ~1% with changes requested, so select
  returns a review-fix (it scans the list for changes_requested first);
* ``implement path``: no pending reviews, so select scans for both review
  states, then builds the done set and sorts the ready stories: the slowest path.

The task lists are built (pydantic-validated) once, outside the timing.

    python benchmarks/task_selection.py [--sizes 10,1000,10000,100000]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, list_arg, mixed_task_list, ms, repeat, table  # noqa: E402

from ralph.config import RalphConfig  # noqa: E402
from ralph.settings import Settings  # noqa: E402
from ralph.tasks import TaskList  # noqa: E402
from ralph_plugins.policies.review import ReviewPolicy  # noqa: E402

SIZES = [10, 1_000, 10_000, 100_000]


def main(argv: list[str]) -> None:
    sizes = list_arg(argv, "--sizes", SIZES)
    header("ReviewPolicy.select")
    policy = ReviewPolicy(Settings(project_dir=Path.cwd(), config=RalphConfig()))
    rows = [("stories", "mix", "selected", "runs", "min ms", "median ms", "us/story")]
    for size in sizes:
        for label, pending in (("mixed", True), ("implement path", False)):
            tasks = TaskList.model_validate(mixed_task_list(size, pending_reviews=pending))
            selection = policy.select(tasks)
            chosen = f"{selection.mode} {selection.story_id}" if selection else "none"
            times = repeat(lambda: policy.select(tasks), min_runs=5, max_runs=500, budget=0.4)
            median = statistics.median(times)
            rows.append(
                (f"{size:,}", label, chosen, len(times), ms(min(times)), ms(median), f"{median / size * 1e6:.2f}")
            )
    table(rows, left=(1, 2))


if __name__ == "__main__":
    main(sys.argv[1:])
