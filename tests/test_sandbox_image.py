"""The project's sandbox image against the real Docker engine, through the real ``ralph`` CLI:
``ralph sandbox build`` from packages, setup and a devcontainer; a run whose image is older than
the config; and the gate programs looked up in the image before iteration 1, so that ``auto``
never picks a sandbox that cannot run the gates (``--runner docker-sandbox`` stops with exit 2);
``ralph sandbox clean -d`` removing a project's images.

The images built here are the test projects' own (``ralph-sandbox-<project>-…``), removed
afterwards; ``ralph-sandbox:latest`` is only read.  The build from PyPI behind this machine's
TLS-intercepting egress, and the loop end to end, are in tests/test_sandbox_toolchain_claude.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import RalphProject, settings_for, story

import test_docker_sandbox as _docker
from test_docker_sandbox import IMAGE

docker_client, sandbox_image = _docker.docker_client, _docker.sandbox_image  # the docker fixtures

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-P", "-m", "ralph.cli.main"]


def remove_project_images(client: Any, project: Path) -> None:
    """Every image built for ``project`` (by label), and a build container left behind."""
    import docker.errors

    from ralph_plugins.runners.docker.toolchain import LABEL_PROJECT, image_repository

    for image in client.images.list(filters={"label": f"{LABEL_PROJECT}={project}"}):
        for tag in image.tags:
            assert tag.startswith(image_repository(project) + ":"), tag  # never ralph-sandbox:latest
            client.images.remove(tag, force=True)
    try:
        client.containers.get(image_repository(project) + "-build").remove(force=True)
    except docker.errors.NotFound:
        pass


@pytest.fixture
def toolchain_project(ralph_project: RalphProject, docker_client: Any, sandbox_image: str):  # type: ignore[no-untyped-def]
    yield ralph_project
    remove_project_images(docker_client, ralph_project.path)


def write_config(project: RalphProject, **section: Any) -> None:
    """ralph.toml's [docker-sandbox] section, committed."""
    lines = ["[docker-sandbox]"]
    for key, value in section.items():
        lines.append(f"{key} = " + ("{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
                                    if isinstance(value, dict) else json.dumps(value)))
    (project.path / "ralph.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    project.commit_all("sandbox toolchain")


def project_runner(project: RalphProject) -> Any:
    """The docker-sandbox runner as ``ralph run`` makes it in ``project`` (its ralph.toml)."""
    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    return DockerSandboxRunner(settings_for(project.path, environ={}))


def ralph(project: RalphProject, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # the docker sandbox or direct: without the bwrap runner, which auto would try between them (tests/test_bwrap_auto.py)
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "RALPH_DISABLE_PLUGINS": "bwrap"}
    return subprocess.run([*CLI, *args], cwd=project.path, capture_output=True, text=True, env=env, timeout=timeout)


# -- the gates' programs, before iteration 1 ---------------------------------------------------------


def test_auto_falls_back_and_docker_sandbox_stops_when_the_image_lacks_a_gate_program(
    toolchain_project: RalphProject, claude_binary: Path
) -> None:
    project = toolchain_project
    project.write_stories([story("US-001")], verifyCommands=["git --version", "python3 -m pytest -q"])
    reason = ("the sandbox cannot run the gate `python3 -m pytest -q`: python3 in the sandbox image "
              f"{IMAGE} has no module pytest")
    fix = 'add "python3-pytest" to packages in [tool.ralph.docker-sandbox]'

    dry = ralph(project, "run", "--dry-run", "--agent", "claude")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"runner:  direct (fallback: docker-sandbox: {reason}; to run in the sandbox, {fix}" in dry.stdout

    run = ralph(project, "run", "--runner", "docker-sandbox", "--agent", "claude")
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"pre-flight check failed (no iteration was started): {reason}; fix: {fix}" in run.stderr
    assert "then run `ralph sandbox build`" in run.stderr
    assert project.events("iteration_started") == []

    doctor = ralph(project, "doctor", "--runner", "docker-sandbox", "--agent", "claude")
    assert doctor.returncode == 1
    assert f"[FAIL] {reason}" in doctor.stdout and f"fix: {fix}" in doctor.stdout
    auto = ralph(project, "doctor", "--agent", "claude")
    assert f"[warn] runner auto: no sandbox, the agent would run directly: docker-sandbox: {reason}" in auto.stdout


def test_gates_the_image_can_run_keep_the_sandbox(toolchain_project: RalphProject, claude_binary: Path) -> None:
    project = toolchain_project
    project.write_stories([story("US-001")], verifyCommands=["git --version", "timeout 60 python3 -m json.tool --help"])
    dry = ralph(project, "run", "--dry-run", "--agent", "claude")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "runner:  docker-sandbox" in dry.stdout and "fallback" not in dry.stdout
    doctor = ralph(project, "doctor", "--runner", "docker-sandbox", "--agent", "claude")
    assert f"[ok  ] the sandbox image {IMAGE} has what the gates run: git, python3 -m json.tool, timeout" in doctor.stdout


# -- ralph sandbox build: packages, setup, a stale image -------------------------------------------------


def test_packages_and_setup_make_the_projects_image_and_a_changed_input_makes_it_older(
    toolchain_project: RalphProject, docker_client: Any, claude_binary: Path
) -> None:
    project = toolchain_project
    (project.path / "requirements-dev.txt").write_text("pytest\n", encoding="utf-8")
    write_config(project, packages=["python3-pytest"], setup=["test -f requirements-dev.txt && mkdir -p /opt/made"],
                 image_env={"TOOLCHAIN_MARK": "from-config"})
    project.write_stories([story("US-001")], verifyCommands=["python3 -m pytest -q"])

    built = ralph(project, "sandbox", "build")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "- packages: python3-pytest" in built.stdout and "- setup: test -f requirements-dev.txt" in built.stdout
    from ralph_plugins.runners.docker.toolchain import LABEL_PROJECT, image_repository

    images = docker_client.images.list(filters={"label": f"{LABEL_PROJECT}={project.path}"})
    assert len(images) == 1 and images[0].tags[0].startswith(image_repository(project.path) + ":")
    tag = images[0].tags[0]
    assert "TOOLCHAIN_MARK=from-config" in images[0].attrs["Config"]["Env"]
    assert docker_client.images.get(IMAGE).id != images[0].id  # ralph's image is the base, untouched

    again = ralph(project, "sandbox", "build")
    assert again.returncode == 0 and f"image {tag} is up to date" in again.stdout

    doctor = ralph(project, "doctor", "--runner", "docker-sandbox", "--agent", "claude")
    assert f"the project's sandbox image {tag} is built from its toolchain config as it is now" in doctor.stdout
    assert f"[ok  ] the sandbox image {tag} has what the gates run: python3 -m pytest" in doctor.stdout
    assert ralph(project, "run", "--dry-run", "--agent", "claude").stdout.count("runner:  docker-sandbox") == 1

    (project.path / "requirements-dev.txt").write_text("pytest>=8\n", encoding="utf-8")
    project.commit_all("new requirement")
    older = f"the project's sandbox image is older than its toolchain config: {tag} was built "
    stopped = ralph(project, "run", "--runner", "docker-sandbox", "--agent", "claude")
    assert stopped.returncode == 2
    assert older in stopped.stderr and "before requirements-dev.txt changed; run `ralph sandbox build`" in stopped.stderr
    dry = ralph(project, "run", "--dry-run", "--agent", "claude")
    assert "runner:  direct (fallback: docker-sandbox: " + older in dry.stdout


def test_a_devcontainer_gives_the_image_its_commands_env_and_path_and_the_gates_use_them(
    toolchain_project: RalphProject, docker_client: Any
) -> None:
    project = toolchain_project
    folder = project.path / ".devcontainer"
    folder.mkdir()
    tool = "mkdir -p /opt/tools && printf '#!/bin/sh\\necho tool-ran $TOOL_MODE\\n' > /opt/tools/mytool && chmod 755 /opt/tools/mytool"
    (folder / "devcontainer.json").write_text(json.dumps({
        "image": IMAGE, "postCreateCommand": tool, "containerEnv": {"TOOL_MODE": "dev"},
        "features": {"ghcr.io/devcontainers/features/node:1": {}},
    }), encoding="utf-8")
    write_config(project, path=["/opt/tools"])
    project.write_stories([story("US-001")], verifyCommands=["mytool"])
    built = ralph(project, "sandbox", "build")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "ignored from the devcontainer (not applied in the sandbox): features" in built.stdout
    assert "- ralph's layer" in built.stdout and f"- setup: {tool}" in built.stdout

    write_config(project, path=["/opt/tools"], network="none")
    runner = project_runner(project)
    try:
        assert runner.availability().ok, runner.availability().reason
        assert runner.image().startswith("ralph-sandbox-")
        assert [c.ok for c in runner.gate_check(["mytool"])] == [True]
        result = runner.run_command("mytool && command -v git python3", project.path, 60)
    finally:
        runner.cleanup()
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "tool-ran dev" and result.where == "sandbox"


def test_a_devcontainer_dockerfile_is_built_and_an_image_not_here_is_one_clear_line(
    toolchain_project: RalphProject, claude_binary: Path
) -> None:
    project = toolchain_project
    folder = project.path / ".devcontainer"
    folder.mkdir()
    (folder / "devcontainer.json").write_text('{"image": "registry.example.test/devcontainers/python:3"}', encoding="utf-8")
    project.write_stories([story("US-001")], verifyCommands=["git --version"])
    project.commit_all("devcontainer")
    missing = ("names the image registry.example.test/devcontainers/python:3, which is not on this machine (ralph never "
               "pulls): `docker pull registry.example.test/devcontainers/python:3` where a registry is reachable, or set "
               "devcontainer = false in [tool.ralph.docker-sandbox]")
    built = ralph(project, "sandbox", "build")
    assert built.returncode == 2 and missing in built.stderr and len(built.stderr.strip().splitlines()) == 1
    run = ralph(project, "run", "--runner", "docker-sandbox", "--agent", "claude")
    assert run.returncode == 2 and missing in run.stderr

    (folder / "devcontainer.json").write_text('{"build": {"dockerfile": "Dockerfile"}}', encoding="utf-8")
    (folder / "Dockerfile").write_text(f"FROM {IMAGE}\nRUN mkdir -p /opt/df && echo from-dockerfile > /opt/df/marker\n",
                                       encoding="utf-8")
    project.commit_all("devcontainer dockerfile")
    built = ralph(project, "sandbox", "build")
    assert built.returncode == 0, built.stdout + built.stderr
    write_config(project, network="none")
    runner = project_runner(project)
    try:
        result = runner.run_command("cat /opt/df/marker", project.path, 60)
    finally:
        runner.cleanup()
    assert result.output.strip() == "from-dockerfile"

    (folder / "Dockerfile").write_text("FROM registry.example.test/base:1\n", encoding="utf-8")
    project.commit_all("a base that is not here")
    built = ralph(project, "sandbox", "build")
    assert built.returncode == 2
    assert "starts FROM registry.example.test/base:1, which is not on this machine (ralph never pulls)" in built.stderr


def test_a_gate_can_run_a_program_it_built_in_tmp(toolchain_project: RalphProject) -> None:
    """`go test` builds its test binary in /tmp and runs it there: the sandbox's /tmp is executable
    (still a tmpfs of its own, empty in every container)."""
    project = toolchain_project
    write_config(project, network="none")
    runner = project_runner(project)
    try:
        script = "printf '#!/bin/sh\\necho built-and-ran\\n' > /tmp/t.sh && chmod 755 /tmp/t.sh && /tmp/t.sh"
        result = runner.run_command(script, project.path, 60)
    finally:
        runner.cleanup()
    assert (result.exit_code, result.output.strip()) == (0, "built-and-ran")


# -- ralph sandbox clean -------------------------------------------------------------------------------


def test_sandbox_clean_removes_the_project_images_it_built_and_keeps_what_is_not_its_own(
    toolchain_project: RalphProject, docker_client: Any, tmp_path: Path
) -> None:
    """Always with ``-d``: a clean of every project would take other runs' containers on this machine."""
    import docker.errors

    from ralph.testing.project import make_project
    from ralph_plugins.runners.docker.toolchain import LABEL_PROJECT

    def built_tag(project: RalphProject) -> str:
        done = ralph(project, "sandbox", "build")
        assert done.returncode == 0, done.stdout + done.stderr
        images = docker_client.images.list(filters={"label": f"{LABEL_PROJECT}={project.path}"})
        assert len(images) == 1, images
        return str(images[0].tags[0])

    project, other = toolchain_project, make_project(tmp_path / "other")
    for each in (project, other):
        write_config(each, setup=["mkdir -p /opt/made"])
    tag, other_tag = built_tag(project), built_tag(other)
    persons = "ralph-clean-test-persons-tag:kept"
    docker_client.images.get(tag).tag(persons)  # a tag a person gave the project image: not ralph's to remove
    in_use = docker_client.containers.run(other_tag, ["sleep", "300"], detach=True)
    try:
        cleaned = ralph(project, "sandbox", "clean", "-d", str(project.path))
        assert cleaned.returncode == 0, cleaned.stderr
        assert cleaned.stdout == f"removed 1 project image: {tag}\n"
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(tag)
        docker_client.images.get(persons)
        docker_client.images.get(other_tag)  # another project's image: not asked for
        docker_client.images.get(IMAGE)  # ralph's own image stays
        assert ralph(project, "sandbox", "clean", "-d", str(project.path)).stdout == "removed: nothing\n"

        busy = ralph(other, "sandbox", "clean", "-d", str(other.path))
        assert busy.returncode == 0, busy.stderr
        assert busy.stdout.startswith(f"kept {other_tag}: ") and busy.stdout.endswith("removed: nothing\n"), busy.stdout
        docker_client.images.get(other_tag)  # a container still uses it
        in_use.remove(force=True)
        assert ralph(other, "sandbox", "clean", "-d", str(other.path)).stdout == f"removed 1 project image: {other_tag}\n"
    finally:
        try:
            in_use.remove(force=True)
        except docker.errors.NotFound:
            pass
        docker_client.images.remove(persons, force=True)
        remove_project_images(docker_client, other.path)
