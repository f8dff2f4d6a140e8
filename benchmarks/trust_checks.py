"""The per-iteration cost of the trusted-input checks (docs/design.md, trust boundary rule 3).

What the loop adds after every iteration, on task lists of 10 to 10,000 stories:

* ``whole-list check``: ``check_list`` applying the review policy's whitelist: the list after the
  iteration against the one before it and the run's trusted non-story fields (every field of
  every story, the selected story's transition from the policy's table, top-level fields), on an
  unchanged list (the common case) and on a list where the iteration submitted its story for
  review and wrote its notes (legal changes);
* ``trusted files``: comparing prd.md, prompt.md and the four agent settings files with the
  run's trusted copy (:meth:`TrustedFiles.changed`, nothing to restore);
* ``trusted view``: the gates' view of the task list with the trusted ``verifyCommands``.

The Stop-hook answer runs the same whole-list check once per Stop. The task lists are built
(pydantic-validated) once, outside the timing.

    python benchmarks/trust_checks.py [--sizes 10,1000,10000]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, list_arg, mixed_task_list, ms, repeat, table  # noqa: E402

from ralph.loop.listcheck import check_list, top_level  # noqa: E402
from ralph.loop.taskfile import TaskFile  # noqa: E402
from ralph.loop.trustedfiles import TrustedFiles, protected_files  # noqa: E402
from ralph.config import RalphConfig  # noqa: E402
from ralph.settings import Settings  # noqa: E402
from ralph.tasks import TaskList  # noqa: E402
from ralph_plugins.policies.review import ReviewPolicy  # noqa: E402

SIZES = [10, 1_000, 10_000]
POLICY = ReviewPolicy(Settings(project_dir=Path("."), config=RalphConfig()))
TARGET_MS = 50.0
"""The loop's whole overhead target per iteration at 1,000 stories (benchmarks/README.md)."""


def _after(before: TaskList) -> tuple[TaskList, str]:
    """The list an implement iteration left, and its story: the story sent to review, with notes."""
    after = before.model_copy(deep=True)
    story = next(s for s in after.userStories if not s.passes and s.reviewStatus is None)
    story.reviewStatus = "needs_review"
    story.notes = "implemented"
    return after, story.id


def main(argv: list[str]) -> None:
    sizes = list_arg(argv, "--sizes", SIZES)
    header("trusted-input checks per iteration")
    rows = [("stories", "what", "runs", "min ms", "median ms")]
    at_1000 = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        ralph_dir = project / "ralph"
        ralph_dir.mkdir()
        (project / ".claude").mkdir()
        (ralph_dir / "prd.md").write_text("# PRD\n" + "A requirement line.\n" * 400)
        (ralph_dir / "prompt.md").write_text("# Prompt\n" + "An instruction line.\n" * 200)
        (project / ".claude" / "settings.json").write_text('{"model": "sonnet"}\n')
        files = TrustedFiles(project, protected_files(project, ralph_dir))
        files_times = repeat(files.changed, min_runs=20, max_runs=2000, budget=0.4)
        for size in sizes:
            before = TaskList.model_validate(mixed_task_list(size))
            trusted = top_level(before)
            after, selected = _after(before)
            same = before.model_copy(deep=True)
            taskfile = TaskFile(None, project / "tasks.json")  # type: ignore[arg-type]
            taskfile.trust(before)
            assert not check_list(before, after, selected, trusted, policy=POLICY, mode="implement").violations
            cases = [
                ("whole-list check, unchanged",
                 lambda: check_list(before, same, selected, trusted, policy=POLICY, mode="implement")),
                ("whole-list check, legal changes",
                 lambda: check_list(before, after, selected, trusted, policy=POLICY, mode="implement")),
                ("trusted view (gates)", lambda: taskfile.trusted_view(after)),
            ]
            total = statistics.median(files_times)
            for label, func in cases:
                times = repeat(func, min_runs=5, max_runs=500, budget=0.4)
                rows.append((f"{size:,}", label, len(times), ms(min(times)), ms(statistics.median(times))))
                if "unchanged" not in label:
                    total += statistics.median(times)
            rows.append((f"{size:,}", "trusted files (6 paths)", len(files_times), ms(min(files_times)), ms(statistics.median(files_times))))
            rows.append((f"{size:,}", "= added per iteration", "", "", ms(total)))
            if size == 1_000:
                at_1000 = total
    table(rows, left=(1,))
    if at_1000:
        verdict = "within" if at_1000 * 1000 <= TARGET_MS else "OVER"
        print(f"added per iteration at 1,000 stories: {ms(at_1000)} ms ({verdict} the {TARGET_MS:g} ms loop-overhead budget)")


if __name__ == "__main__":
    main(sys.argv[1:])
