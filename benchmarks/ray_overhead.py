"""What running the agent on a Ray node costs beyond direct mode.

On a real local Ray cluster (a head and two worker nodes, all on this machine):

1. **Workspace shipping** per iteration for a repository of 1,000 files and ~10 MB:
   the ``ray`` runner's ``run()`` of a tiny "agent" (edit a file, commit) against the
   ``direct`` runner's ``run()`` of the same command.  The first iteration ships the
   whole history; later ones ship only new commits.
2. **Hook latency through the relay**: the stdlib hook client on the node, through the
   actor's relay and Ray, to a loop socket on this machine (answering ``{}``), against
   the same client talking to that socket directly.
3. **A fleet** of 4 loops on 2 nodes (``ralph run --parallel --engine ray``) against the
   same 4 loops run one after the other (``ralph run --prd N``), with a replay agent that
   spends ``--agent-seconds`` per iteration: the ratio.

    python benchmarks/ray_overhead.py [--runs 5] [--agent-seconds 3] [--skip-fleet]

Needs the ``ray`` extra.  Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, ms  # noqa: E402

GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}


def make_repo(root: Path, files: int = 1000, total_bytes: int = 10_000_000) -> Path:
    repo = root / "project"
    repo.mkdir()
    size = total_bytes // files
    for index in range(files):
        folder = repo / f"pkg{index // 100}"
        folder.mkdir(exist_ok=True)
        (folder / f"file{index}.txt").write_bytes(os.urandom(size // 2).hex().encode()[:size])
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def agent_command(counter: int) -> list[str]:
    script = f"echo {counter} >> pkg0/file0.txt && git add -A && git commit -q -m 'iteration {counter}'"
    return ["sh", "-c", script]


def shipping(runs: int) -> None:
    from ralph.contracts import ProcessSpec
    from ralph_plugins.runners.direct import DirectRunner
    from ralph_plugins.runners.ray_cluster.runner import RayRunner

    from ralph.testing.ray_cluster import local_cluster

    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp, local_cluster(node2={"agent": 1}) as cluster:
        repo = make_repo(Path(tmp))
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        env = {**GIT_ENV, "RALPH_RUN_DIR": str(run_dir)}
        cancel = threading.Event()
        settings = _settings(repo, cluster.address)
        ray_runner = RayRunner(settings)
        ray_runner.prepare(repo)
        try:
            remote: list[float] = []
            for counter in range(runs + 1):
                spec = ProcessSpec(argv=agent_command(counter), env=dict(env), cwd=repo)
                start = time.perf_counter()
                outcome = ray_runner.run(spec, lambda line: None, 120, cancel)
                remote.append(time.perf_counter() - start)
                assert outcome.exit_code == 0, outcome.stderr
        finally:
            ray_runner.cleanup()
        direct: list[float] = []
        for counter in range(runs):
            spec = ProcessSpec(argv=agent_command(1000 + counter), env=dict(env), cwd=repo)
            start = time.perf_counter()
            DirectRunner(None).run(spec, lambda line: None, 120, cancel)
            direct.append(time.perf_counter() - start)
        files = len(subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True).stdout.split())
        size = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)
        print(f"repository: {files} files, {size / 1e6:.1f} MB")
        print(f"first iteration (whole history shipped): {ms(remote[0])} ms")
        later = median(remote[1:])
        print(f"later iterations, median of {runs}: ray {ms(later)} ms | direct {ms(median(direct))} ms | "
              f"overhead {ms(later - median(direct))} ms (target <= 300)")


def _settings(project: Path, address: str):  # type: ignore[no-untyped-def]
    from ralph.session import open_session

    (project / "ralph.toml").write_text(f'[ray]\naddress = "{address}"\nresources = {{"agent" = 1}}\n')
    session = open_session(project, {})
    (project / "ralph.toml").unlink()
    return session.settings


def relay_latency(runs: int) -> None:
    from ralph.contracts import ProcessSpec
    from ralph.hooks.server import HookServer
    from ralph_plugins.runners.ray_cluster.runner import RayRunner

    from ralph.hooks import client
    from ralph.testing.ray_cluster import local_cluster

    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
                          "session_id": "bench", "cwd": "/"})
    timer = (
        "import json,subprocess,sys,time\n"
        "times=[]\n"
        f"for _ in range({runs * 4}):\n"
        "    t=time.perf_counter()\n"
        f"    subprocess.run([sys.executable,'-S','-P',sys.argv[1]],input={payload!r},capture_output=True,text=True)\n"
        "    times.append(time.perf_counter()-t)\n"
        "print(json.dumps(times))\n"
    )
    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp, local_cluster(node2={"agent": 1}) as cluster:
        repo = make_repo(Path(tmp), files=10, total_bytes=10_000)
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        server = HookServer(lambda request: {}, token="bench").start()
        env = {"RALPH_RUN_DIR": str(run_dir), "RALPH_HOOK_SOCKET": str(server.path), "RALPH_HOOK_TOKEN": "bench"}
        try:
            direct_out = subprocess.run([sys.executable, "-c", timer, client.__file__], capture_output=True, text=True,
                                        env={**os.environ, **env}, check=True).stdout
            runner = RayRunner(_settings(repo, cluster.address))
            runner.prepare(repo)
            lines: list[str] = []
            try:
                node_client = runner.hook_command().split()[-1]
                spec = ProcessSpec(argv=[sys.executable, "-c", timer, node_client], env=dict(env), cwd=repo)
                runner.run(spec, lines.append, 300, threading.Event())
            finally:
                runner.cleanup()
        finally:
            server.stop()
        direct = json.loads(direct_out)
        relayed = json.loads(lines[-1])
        print(f"hook call (process start to answer), median of {len(relayed)}: through the relay "
              f"{ms(median(relayed))} ms | straight to the loop socket {ms(median(direct))} ms (target <= 50)")


def fleet(agent_seconds: float) -> None:
    from ralph.testing.project import make_project, story
    from ralph.testing.ray_cluster import local_cluster

    agent = (
        "import json,os,pathlib,subprocess,time\n"
        f"time.sleep({agent_seconds})\n"
        "p=pathlib.Path(os.environ['RALPH_TASKS_FILE']);d=json.loads(p.read_text())\n"
        "s=next(x for x in d['userStories'] if not x.get('passes'))\n"
        "s.update(passes=True,notes='done');p.write_text(json.dumps(d,indent=2)+'\\n')\n"
        "subprocess.run(['git','add','-A'],check=True);subprocess.run(['git','commit','-qm','feat'],check=True)\n"
    )
    with tempfile.TemporaryDirectory(prefix="ralph-bench-") as tmp, \
            local_cluster(node2={"agent": 1}, node3={"agent": 1}) as cluster:
        root = Path(tmp)
        project = make_project(root)
        for n in range(1, 5):
            folder = project.path / ".ralph" / f"PRD-{n}"
            folder.mkdir(parents=True)
            for name in ("prompt.md", "prd.md", "progress.txt"):
                shutil.copyfile(project.ralph_dir / name, folder / name)
            data = project.tasks()
            data["userStories"] = [story(f"US-{n}01")]
            (folder / "tasks.json").write_text(json.dumps(data, indent=2) + "\n")
        (root / "agent.py").write_text(agent)
        script = root / "script.json"
        command = f"{shlex.quote(sys.executable)} {shlex.quote(str(root / 'agent.py'))}"
        script.write_text(json.dumps({"iterations": {}, "default": [{"run": command}, {"say": "done"}]}))
        (project.path / "ralph.toml").write_text(
            f'[ray]\naddress = "{cluster.address}"\nresources = {{"agent" = 1}}\n'
            'env = ["RALPH_REPLAY_SCRIPT", "GIT_*", "HOME"]\n\n[spec]\nenabled = false\n'
        )
        project.commit_all("four PRDs")
        env = {"RALPH_REPLAY_SCRIPT": str(script)}
        options = ["--runner", "direct", "--agent", "replay", "--skip-review"]
        start = time.perf_counter()
        result = project.run("run", "--parallel", "--engine", "ray", *options, env=env, timeout=900)
        parallel = time.perf_counter() - start
        assert result.returncode == 0, result.stdout + result.stderr
        project.git("reset", "-q", "--hard")
        start = time.perf_counter()
        for n in range(1, 5):
            one = project.run("run", "--prd", str(n), *options, env=env, timeout=600)
            assert one.returncode == 0, one.stdout + one.stderr
        sequential = time.perf_counter() - start
        print(f"fleet of 4 loops on 2 nodes: {parallel:.1f} s | the same 4 one after the other: {sequential:.1f} s | "
              f"ratio {sequential / parallel:.2f}x (agent {agent_seconds:g} s per iteration)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agent-seconds", type=float, default=3.0)
    parser.add_argument("--skip-fleet", action="store_true")
    args = parser.parse_args()
    header("ray runner overhead")
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray is not installed (pip install 'ralph-trustloop[ray]'): nothing measured")
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    shipping(args.runs)
    relay_latency(args.runs)
    if not args.skip_fleet:
        fleet(args.agent_seconds)


if __name__ == "__main__":
    main()
