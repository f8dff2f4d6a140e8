"""A small Python project with pytest completes its loop in the docker sandbox, as docs/sandbox.md
says: its toolchain in ``[tool.ralph.docker-sandbox]`` (a venv made in the image, pytest from PyPI
through this machine's TLS-intercepting egress), ``ralph sandbox build``, then ``ralph run
--runner docker-sandbox`` with the real Claude Code CLI against the scripted model server, the
gates running pytest inside the sandbox.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, ScriptedModelServer, Turn, text
from ralph.testing.project import RalphProject, story

import test_docker_sandbox as _docker
import test_sandbox_image as _images
from test_docker_sandbox import CLAUDE_TEST_ENV, bash
from test_loop_claude import set_fields
from test_sandbox_image import ralph, write_config

docker_client, gateway, sandbox_image = _docker.docker_client, _docker.gateway, _docker.sandbox_image  # fixtures
toolchain_project = _images.toolchain_project

pytestmark = pytest.mark.slow

GATE = "python3 -m pytest -q -p no:cacheprovider"
CALC = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
SUB = "\n\ndef sub(a, b):\n    return a - b\n"
TEST_SUB = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"


def write_file(name: str, content: str, append: bool = False) -> str:
    """A Bash command writing (or appending) ``content`` to ``name`` (printf, the text one quoted argument)."""
    import shlex

    return f"printf '%s' {shlex.quote(content)} {'>>' if append else '>'} {name}"


def implement_with_a_test_and_approve() -> IterationScript:
    return IterationScript(
        {
            1: [
                bash(write_file("calc.py", SUB, append=True) + " && " + write_file("test_sub.py", TEST_SUB)
                     + f" && {GATE} && git add -A && git commit -qm 'feat: [US-001] - sub()'"),
                bash(set_fields("US-001", reviewStatus="needs_review") + " && git add -A && git commit -qm 'mark needs_review'"),
                Turn([text("Implemented US-001; the tests pass.")]),
            ],
            2: [
                bash(f"{GATE} && " + set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok")
                     + " && git add -A && git commit -qm 'review: [US-001] - approved'"),
                Turn([text("Approved. <promise>COMPLETE</promise>")]),
            ],
        }
    )


def image_shell(client: Any, tag: str, command: str) -> str:
    return client.containers.run(tag, ["sh", "-c", command], remove=True, network_mode="none").decode()


@pytest.mark.real_claude
def test_a_python_project_with_pytest_completes_its_loop_in_the_sandbox(
    toolchain_project: RalphProject, docker_client: Any, gateway: str, claude_binary: Path, claude_agent_env: Any
) -> None:
    project = toolchain_project
    (project.path / "requirements-dev.txt").write_text("pytest\n", encoding="utf-8")
    (project.path / ".gitignore").write_text(".venv/\n", encoding="utf-8")
    write_config(project, packages=["python3-venv"],
                 setup=["python3 -m venv /opt/venv", "/opt/venv/bin/pip install -r requirements-dev.txt"],
                 path=["/opt/venv/bin"], network="allowlist", env=CLAUDE_TEST_ENV)
    (project.path / "calc.py").write_text(CALC, encoding="utf-8")  # a project with its tests
    (project.path / "test_calc.py").write_text(TEST, encoding="utf-8")
    project.write_stories([story("US-001", "sub()")], verifyCommands=[GATE])
    # a virtualenv of this machine in the project: never what the sandbox runs
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(project.path / ".venv")], check=True)

    not_built = ralph(project, "run", "--runner", "docker-sandbox", "--agent", "claude")
    assert not_built.returncode == 2 and "is not built yet: run `ralph sandbox build`" in not_built.stderr

    built = ralph(project, "sandbox", "build", timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "the build uses this machine's CA certificates" in built.stdout
    assert "Successfully installed" in built.stdout and "pytest" in built.stdout  # from PyPI, over TLS
    tag = next(line.split()[1] for line in built.stdout.splitlines() if line.startswith("image ") and " built in " in line)

    # what the build borrowed is in no layer and no config of the image
    config_env = docker_client.images.get(tag).attrs["Config"]["Env"]
    assert not [item for item in config_env if item.split("=")[0] in ("SSL_CERT_FILE", "PIP_CERT", "HTTPS_PROXY")]
    bundle = image_shell(docker_client, tag, "cat /etc/ssl/certs/ca-certificates.crt")
    extra = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    for cert in extra:
        body = "".join(cert.read_text().strip().splitlines()[1:-1])
        assert body[:200] not in bundle.replace("\n", ""), f"{cert} went into the image"
    assert image_shell(docker_client, tag, "ls -A /tmp").strip() == ""
    assert image_shell(docker_client, tag, "command -v python3; command -v pytest").split() == ["/opt/venv/bin/python3",
                                                                                    "/opt/venv/bin/pytest"]

    script = implement_with_a_test_and_approve()
    with ScriptedModelServer(script, host=gateway) as server:
        result = project.run("run", "--runner", "docker-sandbox", "--agent", "claude", "--timeout", "120",
                             env=claude_agent_env(server.url), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    final = project.story("US-001")
    assert (final["passes"], final["reviewStatus"]) == (True, "approved")
    assert script.unscripted == 0
    assert project.events("run_started")[0]["runner"] == "docker-sandbox"
    gates = [e for e in project.events("gate") + project.events("final_gate") if e["gate"] == "tests"]
    assert gates and all(e["passed"] and e["where"] == "sandbox" for e in gates)
    assert "2 passed" in gates[0]["output"]
    assert (project.path / "calc.py").read_text() == CALC + SUB
