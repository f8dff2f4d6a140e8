"""Extra cost of never acting through a path the agent controls (ralph.safeio, the .git layout check).

On a project of 1,000 files in a repository with 50 branches (refs and reflogs) and its loose objects:

- the ``.git`` layout check that runs before every host git call (symlinks, fifos, devices, hard links
  in the git directory): the first check of a process (every directory listed), and later checks
  (directories only stat'ed, listed again when they changed), and a hardened ``git status`` with and
  without it;
- the loop's file IO through ``ralph.safeio`` against plain path-based IO: reading a 1,000-story task
  list, appending a progress note, replacing the task list atomically;
- ``LoopFiles.secure`` after an agent session (the four loop files checked, nothing to put back).

The per-iteration total uses the loop's usual number of git calls (``GIT_CALLS``, as
``trust_overhead.py``) and one secure, two task-list reads, one write and one append.

    python benchmarks/safeio_overhead.py [--runs 20] [--files 1000]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, mixed_task_list, ms, percentile, table  # noqa: E402

GIT_CALLS = 8
BRANCHES = 50
TARGET_MS = 50.0
"""Part of the direct-mode trust-boundary target per iteration (benchmarks/README.md)."""


def timed(func: Callable[[], Any], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        samples.append(time.perf_counter() - started)
    return samples


def row(label: str, samples: list[float]) -> tuple[str, ...]:
    return (label, str(len(samples)), ms(min(samples)), ms(statistics.median(samples)), ms(percentile(samples, 0.9)))


def make_project(root: Path, files: int) -> Path:
    project = root / "project"
    project.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project, check=True)
    for index in range(files):
        folder = project / f"pkg{index % 20:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"module_{index:04d}.py").write_text(f"VALUE = {index}\n" * 20)
    (project / "ralph").mkdir()
    (project / "ralph" / "tasks.json").write_text(json.dumps(mixed_task_list(1000), indent=2) + "\n")
    (project / "ralph" / "progress.txt").write_text("# Progress\n" + "## entry\n- did a thing\n" * 200)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "files"], cwd=project, check=True, env=env)
    for index in range(BRANCHES):
        subprocess.run(["git", "branch", f"feature/b{index:02d}"], cwd=project, check=True, env=env)
    return project


def plain_replace(path: Path, data: bytes) -> None:
    """What a path-based atomic write costs (the reference): temp file, fsync, rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def main() -> None:
    runs = int_arg(sys.argv, "--runs", 20)
    files = int_arg(sys.argv, "--files", 1000)
    header(f"safe project IO and the .git layout check ({files} files, {BRANCHES} branches)")
    from types import SimpleNamespace

    from ralph import gitutil, safeio
    from ralph.gitmeta import GitLayout, discover
    from ralph.loop.loopfiles import LoopFiles

    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp:
        project = make_project(Path(tmp), files)
        roots = discover(project)
        entries = sum(len(names) + len(dirs) for root in roots for _, dirs, names in os.walk(root))
        first = timed(lambda: GitLayout(roots).problems(), runs)
        time.sleep(2.2)  # past the "changed just now" window: later checks only stat the directories
        layout = GitLayout(roots)
        layout.problems()
        later = timed(layout.problems, runs * 5)
        check_layout = gitutil.check_layout
        with_check = timed(lambda: gitutil.git(project, "status", "--porcelain"), runs)
        gitutil.check_layout = lambda project_dir: None  # type: ignore[assignment]
        try:
            without_check = timed(lambda: gitutil.git(project, "status", "--porcelain"), runs)
        finally:
            gitutil.check_layout = check_layout  # type: ignore[assignment]

        tasks, progress = project / "ralph" / "tasks.json", project / "ralph" / "progress.txt"
        data = tasks.read_bytes()
        read_plain = timed(tasks.read_bytes, runs * 5)
        read_safe = timed(lambda: safeio.read_bytes(tasks, project), runs * 5)
        note = "\n[ralph loop] iteration 1: a note\n"

        def append_plain() -> None:
            with open(progress, "a", encoding="utf-8") as handle:
                handle.write(note)

        append_ref = timed(append_plain, runs * 5)
        append_safe = timed(lambda: safeio.append_text(progress, project, note), runs * 5)
        write_ref = timed(lambda: plain_replace(tasks, data), runs)
        write_safe = timed(lambda: safeio.write_bytes(tasks, project, data), runs)

        taskfile = SimpleNamespace(path=tasks, root=project, last_good=data.decode())
        notes = SimpleNamespace(progress=lambda: progress, root=project)
        state = SimpleNamespace(marker=project / ".ralph-active", written=b"{}\n")
        loopfiles = LoopFiles(project, taskfile, notes, state, lambda *a, **k: None)  # type: ignore[arg-type]
        record = SimpleNamespace(number=1)
        secure = timed(lambda: loopfiles.secure(record, None), runs * 5)  # type: ignore[arg-type]

    print(f"the git directory holds {entries} entries")
    print("times in ms")
    table([
        ("what", "runs", "min", "median", "p90"),
        row(".git layout check, first in a process (lists all)", first),
        row(".git layout check, later (stats directories)", later),
        row("git status, hardened, with the layout check", with_check),
        row("git status, hardened, without it (reference)", without_check),
        row("read the task list (1,000 stories), plain", read_plain),
        row("read the task list, safeio (fd walk, fstat)", read_safe),
        row("append a progress note, plain", append_plain_samples := append_ref),
        row("append a progress note, safeio", append_safe),
        row("replace the task list atomically, path-based", write_ref),
        row("replace the task list atomically, safeio", write_safe),
        row("LoopFiles.secure after a session (all clean)", secure),
    ])
    med = statistics.median
    per_iteration = (
        GIT_CALLS * med(later)
        + med(secure)
        + 2 * max(0.0, med(read_safe) - med(read_plain))
        + max(0.0, med(write_safe) - med(write_ref))
        + max(0.0, med(append_safe) - med(append_plain_samples))
    )
    print(f"\nper iteration: {GIT_CALLS} git calls x {ms(med(later))} ms layout check + secure {ms(med(secure))} ms "
          f"+ the IO's extra = {ms(per_iteration)} ms (target: part of <= {TARGET_MS:.0f} ms direct: "
          f"{'met' if per_iteration * 1000 <= TARGET_MS else 'NOT met'}); the first check of a process costs "
          f"{ms(med(first))} ms once")


if __name__ == "__main__":
    main()
