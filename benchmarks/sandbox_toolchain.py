"""What the project's toolchain costs a run of the docker sandbox before iteration 1.

- ``image check``: finding the project's image by the hash of its toolchain (the config, a
  requirements file read without following links, the base image's id, the engine's image list),
  what ``availability()`` adds to every run of a project with a toolchain;
- ``gate look-up``: the ``verifyCommands`` programs looked up in the image (the shell model's parse
  plus one throw-away container), what ``auto`` and pre-flight pay once per run;
- with ``--build``: ``ralph sandbox build`` of ``packages = ["python3-pytest"]``, cold (apt from the
  Debian mirror) and then up to date (reused), on a temporary project whose image is removed after.

    python benchmarks/sandbox_toolchain.py [--runs 5] [--build]

Needs a Docker engine and ``ralph-sandbox:latest`` (``ralph sandbox build --offline-base``);
prints "skipped: ..." and exits 0 without them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, int_arg, ms, table  # noqa: E402

GATES = ["python3 -m pytest -q", "timeout 60 git --version", "bash -c 'python3 -m json.tool --help && true'"]


def runner_for(project: Path, **section: Any) -> Any:
    from ralph.config import load_config
    from ralph.settings import Settings
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    config, _, _ = load_config(project, {}, environ={})
    return DockerSandboxRunner(Settings(project, config, {"docker-sandbox": SandboxConfig(**section)}))


def seconds(func: Any, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        out.append(time.perf_counter() - started)
    return out


def main(argv: list[str]) -> int:
    runs = int_arg(argv, "--runs", 5)
    header("sandbox_toolchain: the project's toolchain before iteration 1")
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
        client.images.get("ralph-sandbox:latest")
    except Exception as exc:  # noqa: BLE001
        print(f"skipped: no Docker engine or no ralph-sandbox:latest ({str(exc).splitlines()[0][:120]})")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="ralph-bench-toolchain-") as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        (project / "requirements-dev.txt").write_text("pytest\n", encoding="utf-8")
        section = {"packages": ["python3-pytest"], "setup": ["test -f requirements-dev.txt"]}

        def image_check() -> None:
            runner_for(project, **section).availability()

        checks = seconds(image_check, runs)
        rows.append(("image check (availability, image not built)", ms(statistics.median(checks)), ms(max(checks))))

        looks = []
        for _ in range(runs):
            runner = runner_for(project)
            assert runner.availability().ok  # engine and image: what every sandbox run pays, not timed here
            started = time.perf_counter()
            runner.gate_check(GATES)
            looks.append(time.perf_counter() - started)
        rows.append((f"gate look-up ({len(GATES)} commands, one container)", ms(statistics.median(looks)), ms(max(looks))))
        if "--build" in argv:
            rows += build_rows(client, project, section)
    table([("what", "median", "max"), *rows])
    return 0


def build_rows(client: Any, project: Path, section: dict[str, Any]) -> list[tuple[str, str, str]]:
    from ralph_plugins.runners.docker import projectimage
    from ralph_plugins.runners.docker.config import SandboxConfig
    from ralph_plugins.runners.docker.toolchain import LABEL_PROJECT, toolchain_of

    client.api.timeout = 600
    found = toolchain_of(project, SandboxConfig(**section))
    assert found is not None
    rows = []
    try:
        started = time.perf_counter()
        projectimage.build(client, found, echo=lambda line: None)
        rows.append(("ralph sandbox build, cold (apt-get update + python3-pytest)", ms(time.perf_counter() - started), ""))
        started = time.perf_counter()
        projectimage.build(client, found, echo=lambda line: None)
        rows.append(("ralph sandbox build, up to date (reused)", ms(time.perf_counter() - started), ""))
    finally:
        for image in client.images.list(filters={"label": f"{LABEL_PROJECT}={project}"}):
            for tag in image.tags:
                client.images.remove(tag, force=True)
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
