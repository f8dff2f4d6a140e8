"""Extra cost of the result-integrity checks per iteration (issue 20 items 2-4).

On a project of 1,000 files (about 10 MB in git's objects when ``--size-kb 10``), with 50 branches,
20 tags and a stash:

- the person's refs (``ralph.loop.personrefs.RefGuard``): the mirror made when a run starts (the first
  run of a project copies every object; a later run only what is new), the refresh before every
  iteration (nothing to fetch when no ref moved; one incremental fetch when the run's branch moved, as
  it does after each iteration), the check after the agent's session and after the gates (two per
  iteration), and putting back one deleted branch after ``gc --prune=now``;
- a review changes no code (``ralph.loop.reviewtree.TreeView``): the loop's own walk of the tree through
  the ignore rules it froze, the first time in a run (every file hashed, what git's objects lack kept)
  and later (stat only): before a review iteration (the rules frozen again) and after it;
- agent text (``ralph.agenttext``): stripping a 1 MB gate output, and a prompt's feedback of 20 items.

The per-iteration total is two ref checks and a refresh after the run's branch moved (every
iteration) plus two warm tree hashes (review iterations only).

    python benchmarks/integrity_overhead.py [--runs 10] [--files 1000] [--size-kb 10]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, ms, percentile, table  # noqa: E402

BRANCHES = 50
TAGS = 20
TARGET_MS = 50.0
"""Part of the direct-mode trust-boundary target per iteration (benchmarks/README.md)."""
ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@b"}


def timed(func: Callable[[], Any], runs: int, before: Callable[[], Any] | None = None) -> list[float]:
    samples = []
    for _ in range(runs):
        if before is not None:
            before()
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    return samples


def row(label: str, samples: list[float]) -> tuple[str, ...]:
    return (label, str(len(samples)), ms(min(samples)), ms(statistics.median(samples)), ms(percentile(samples, 0.9)))


def sh(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, check=True, env=ENV, capture_output=True, text=True).stdout.strip()


def make_project(root: Path, files: int, size_kb: int) -> Path:
    project = root / "project"
    project.mkdir()
    sh(project, "init", "-q", "-b", "main")
    for index in range(files):
        folder = project / f"pkg{index % 20:02d}"
        folder.mkdir(exist_ok=True)
        line = f"VALUE_{index} = {index!r}  # filler to make the file about {size_kb} KB\n"
        (folder / f"module_{index:04d}.py").write_text(line * max(1, size_kb * 1024 // len(line)))
    (project / "ralph").mkdir()
    (project / "ralph" / "tasks.json").write_text("{}\n")
    (project / "ralph" / "progress.txt").write_text("# Progress\n")
    sh(project, "add", "-A")
    sh(project, "commit", "-qm", "files")
    for index in range(BRANCHES):
        sh(project, "branch", f"feature/b{index:02d}")
    for index in range(TAGS):
        sh(project, "tag", f"v{index}")
    (project / "pkg00" / "module_0000.py").write_text("stashed\n")
    sh(project, "stash", "-q")
    sh(project, "checkout", "-q", "-b", "ralph/run")
    return project


def main() -> None:
    runs = int_arg(sys.argv, "--runs", 10)
    files = int_arg(sys.argv, "--files", 1000)
    size_kb = int_arg(sys.argv, "--size-kb", 10)
    header(f"result integrity: refs, review tree, agent text ({files} files of ~{size_kb} KB, "
           f"{BRANCHES} branches, {TAGS} tags)")
    from ralph.agenttext import strip_controls
    from ralph.loop.personrefs import RefGuard
    from ralph.loop.records import IterationRecord
    from ralph.loop.reviewtree import TreeView

    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp:
        root = Path(tmp)
        project = make_project(root, files, size_kb)
        run_dir = root / "run"
        run_dir.mkdir()
        mirrors = iter(range(1_000_000))

        def fresh_guard() -> RefGuard:
            return RefGuard(project, root / f"mirror-{next(mirrors)}.git", lambda *a, **k: None)

        first_start = timed(lambda: fresh_guard().start(run_dir), max(2, runs // 3))
        guard = RefGuard(project, root / "mirror.git", lambda *a, **k: None)
        guard.start(run_dir)
        sh(project, "commit", "-q", "--allow-empty", "-m", "one more")
        later_start = timed(lambda: RefGuard(project, root / "mirror.git", lambda *a, **k: None).start(run_dir), runs)
        checkpoint = sh(project, "rev-parse", "HEAD")
        record = IterationRecord(1, "implement", "US-001")
        refresh = timed(guard.refresh, runs * 3)
        counter = iter(range(1_000_000))
        moved = timed(guard.refresh, runs * 3,
                      before=lambda: sh(project, "commit", "-q", "--allow-empty", "-m", f"loop {next(counter)}"))
        check = timed(lambda: guard.check(record, checkpoint, set()), runs * 3)

        def delete_and_prune() -> None:
            sh(project, "branch", "-D", "feature/b00")
            sh(project, "reflog", "expire", "--expire=now", "--all")

        restore = timed(lambda: guard.check(record, checkpoint, set()), max(2, runs // 2), before=delete_and_prune)

        views = iter(range(1_000_000))
        cold = timed(lambda: TreeView(project, run_dir / f"view-{next(views)}").freeze(), max(2, runs // 3))
        view = TreeView(project, run_dir / "view")
        view.freeze()
        warm = timed(view.freeze, runs * 3)
        after = timed(view.scan, runs * 3)

        output = ("FAILED test_x - AssertionError \x1b[31mred\x1b[0m \x1b]52;c;ZXZpbA==\x07 " * 20 + "\n") * 900
        strip = timed(lambda: strip_controls(output), runs)
        feedback = [f"Iteration 3 (implement): Story US-0{i:02d} has a problem with \"key {i}\"" for i in range(20)]
        plain = timed(lambda: [strip_controls(item) for item in feedback], runs * 20)

    rows = [
        row("refs: mirror made (first run of a project)", first_start),
        row("refs: mirror brought up to date (a later run)", later_start),
        row("refs: refresh before an iteration (nothing moved)", refresh),
        row("refs: refresh after the run's branch moved (the usual case)", moved),
        row("refs: check after a session (nothing moved)", check),
        row("refs: a deleted, pruned branch put back", restore),
        row("review tree: rules frozen and tree walked, first of a run", cold),
        row("review tree: rules frozen and tree walked, later (stat only)", warm),
        row("review tree: walked after the review (stat only)", after),
        row(f"agent text: strip {len(output) // 1024} KB of gate output", strip),
        row("agent text: strip a prompt's 20 feedback items", plain),
    ]
    table([("what", "runs", "min ms", "median ms", "p90 ms"), *rows])
    per_iteration = statistics.median(moved) + 2 * statistics.median(check)
    per_review = per_iteration + statistics.median(warm) + statistics.median(after)
    print(f"\nper iteration (a refresh after the run's branch moved, two ref checks): {ms(per_iteration)} ms; a review "
          f"iteration adds the tree's two walks: {ms(per_review)} ms (target for the direct-mode trust checks: {TARGET_MS:g} ms)")


if __name__ == "__main__":
    main()
