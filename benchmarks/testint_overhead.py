"""The extra time per iteration of the test-integrity gate (docs/tests.md).

On a git project of N files (default 1,000, a tenth of them tests under ``tests/``, ~10 KB each):

* ``untouched``: the look after an iteration whose story touched no test path (``changes_since``:
  ``git ls-tree`` of the story start, ``git ls-files``, hashing the test files) — the whole extra
  cost of such an iteration;
* ``touched, look + findings``: the same when one test file was weakened, with the findings;
* ``touched, trusted tree``: building the trusted tree (temporary index, ``git add -A``, the story-start
  tests put back, ``checkout-index``) and removing it;
* ``touched, whole gate``: ``check_tests`` with ``verifyCommands = ["true"]``: everything but the
  project's own test time (which the trusted run adds once more).

    python benchmarks/testint_overhead.py [--runs 10] [--files 1000]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, ms, table  # noqa: E402

from ralph.testing.project import GIT_IDENTITY  # noqa: E402
from ralph.testintegrity.check import check_tests  # noqa: E402
from ralph.testintegrity.export import build_export, changes_since  # noqa: E402
from ralph.testintegrity.findings import findings_for  # noqa: E402
from ralph.testintegrity.paths import TestRules  # noqa: E402

TARGET_UNTOUCHED_MS = 50.0
"""Target: an iteration that touched no test path pays at most this much (1,000 files)."""


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


def make_project(root: Path, files: int) -> tuple[Path, str]:
    project = root / "project"
    (project / "src").mkdir(parents=True)
    (project / "tests").mkdir()
    body = "x = 1\n" * 1700  # ~10 KB
    tests = max(1, files // 10)
    for i in range(files - tests):
        (project / "src" / f"mod_{i:05d}.py").write_text(f"# module {i}\n{body}")
    for i in range(tests):
        (project / "tests" / f"test_{i:05d}.py").write_text(
            f"from src import mod_{i:05d}\n\n\ndef test_{i}():\n    assert mod_{i:05d}.x == 1\n")
    (project / "pyproject.toml").write_text('[project]\nname = "bench"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n')
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "start")
    return project, git(project, "rev-parse", "HEAD").strip()


def stats(times: list[float]) -> tuple[str, str]:
    return ms(min(times)), ms(sorted(times)[len(times) // 2])


def timed(func: object, runs: int) -> list[float]:
    import time

    times = []
    for _ in range(runs):
        started = time.perf_counter()
        func()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str]) -> None:
    runs = int_arg(argv, "--runs", 10)
    files = int_arg(argv, "--files", 1000)
    header(f"test-integrity gate per iteration ({files} files)")
    rules = TestRules()
    rows = [("case", "runs", "min ms", "median ms")]
    with tempfile.TemporaryDirectory() as tmp:
        project, start = make_project(Path(tmp), files)
        (project / "src" / "mod_00000.py").write_text("x = 2\n")  # the agent's code changed, no test
        changes_since(project, start, rules)  # warm-up (imports, caches)
        untouched = timed(lambda: changes_since(project, start, rules), runs)
        rows.append(("untouched: the look", str(runs), *stats(untouched)))

        (project / "tests" / "test_00001.py").write_text("def test_1():\n    pass\n")

        def look() -> None:
            changes = changes_since(project, start, rules)
            for path in changes.changed:
                old, new = changes.texts[path]
                findings_for(path, old, new)

        rows.append(("touched: look + findings", str(runs), *stats(timed(look, runs))))
        work = Path(tmp) / "work"
        work.mkdir()

        def export() -> None:
            target = Path(tempfile.mkdtemp(dir=work))
            build_export(project, start, rules, target / "tree")
            subprocess.run(["rm", "-rf", str(target)], check=True)

        rows.append(("touched: trusted tree (build + remove)", str(runs), *stats(timed(export, runs))))
        whole = timed(lambda: check_tests(project, start, rules, ["true"], None, workdir=work), runs)
        rows.append(("touched: whole gate (verifyCommands = true)", str(runs), *stats(whole)))
    table(rows)
    sandbox(runs)
    median = sorted(untouched)[len(untouched) // 2] * 1000
    verdict = "met" if median <= TARGET_UNTOUCHED_MS else "NOT met"
    print(f"target: untouched ≤ {TARGET_UNTOUCHED_MS:g} ms per iteration at 1,000 files — {verdict} ({median:.1f} ms)")


def sandbox(runs: int) -> None:
    """docker-sandbox: a gate command in the trusted tree (outside the project: the container is made
    anew with it mounted) against one in the project, and the agent's next exec (made anew back)."""
    import threading

    try:
        import docker

        docker.from_env(timeout=10).ping()
    except Exception as exc:  # noqa: BLE001
        print(f"docker-sandbox part skipped: no Docker engine ({type(exc).__name__})")
        return
    from ralph.config import load_config
    from ralph.contracts import ProcessSpec
    from ralph.settings import Settings
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    with tempfile.TemporaryDirectory() as tmp:
        project, _ = make_project(Path(tmp), 10)
        config, _, _ = load_config(project, {}, environ={})
        runner = DockerSandboxRunner(Settings(project, config, {"docker-sandbox": SandboxConfig(network="none")}))
        if not runner.availability().ok:
            print(f"docker-sandbox part skipped: {runner.availability().reason}")
            return
        runner.prepare(project)
        inside, outside, agent_after = [], [], []
        try:
            for _ in range(max(2, runs // 3)):
                runner.run(ProcessSpec(["true"], {}, project), lambda line: None, 60, threading.Event())
                inside += timed(lambda: runner.run_command("true", project, 60), 1)
                tree = Path(tempfile.mkdtemp(prefix="ralph-trusted-tests-", dir=tmp)) / "tree"
                tree.mkdir()
                outside += timed(lambda: runner.run_command("true", tree, 60), 1)  # noqa: B023
                agent_after += timed(lambda: runner.run(ProcessSpec(["true"], {}, project), lambda line: None, 60,
                                                        threading.Event()), 1)
        finally:
            runner.cleanup()
    table([("docker-sandbox", "runs", "min ms", "median ms"),
           ("gate command in the project", str(len(inside)), *stats(inside)),
           ("gate command in the trusted tree (container made anew)", str(len(outside)), *stats(outside)),
           ("the agent's next exec (container made anew back)", str(len(agent_after)), *stats(agent_after))])


if __name__ == "__main__":
    main(sys.argv[1:])
