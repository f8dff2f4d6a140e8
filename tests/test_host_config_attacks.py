"""Nothing the agent writes changes what a later command does on the host (issue 19 item 5).

Through the real Claude Code CLI: a scripted agent changes ``[tool.ralph]`` together with other parts of
``pyproject.toml`` and writes a "claude" program into the project; afterwards the person runs
``ralph doctor`` the ways that used to run it (the agent's ``binary`` setting, a PATH entry under the
project, a relative ``RALPH_CLAUDE_BINARY``).  A host canary file shows whether it ran.  Attack programs
are data: they reach the CLI only as tool inputs.
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

import test_trust_boundary_claude as _boundary
from ralph.testing.model_server import IterationScript
from ralph.testing.project import RalphProject, story
from test_trust_boundary_claude import bash, done, write

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]

run_loop = _boundary.run_loop

PYPROJECT = '[project]\nname = "demo"\nversion = "1.0"\n\n[tool.ralph]\nmax_attempts = 5  # the person\'s choice\n'


def edit_pyproject(*replacements: tuple[str, str], append: str = "") -> str:
    """A Python program the agent runs: text replacements in pyproject.toml, then ``append``."""
    return (
        "import pathlib\n"
        "p = pathlib.Path('pyproject.toml')\n"
        "t = p.read_text()\n"
        + "".join(f"t = t.replace({old!r}, {new!r})\n" for old, new in replacements)
        + f"p.write_text(t + {append!r})\n"
    )


def test_a_ralph_table_change_with_other_edits_is_restored_and_doctor_runs_nothing_the_agent_wrote(
    run_loop: Any, ralph_project: RalphProject, tmp_path: Path, claude_binary: Path
) -> None:
    project = ralph_project
    (project.path / "pyproject.toml").write_text(PYPROJECT)
    project.write_stories([story("US-001"), story("US-002", priority=2)])
    canary = tmp_path / "host-canary"
    fake = (
        "import os, pathlib\n"
        "os.makedirs('node_modules/.bin', exist_ok=True)\n"
        "p = pathlib.Path('node_modules/.bin/claude')\n"
        f"p.write_text('#!/bin/sh\\necho ran >> {canary}\\necho 9.9.9\\n')\n"
        "p.chmod(0o755)\n"
    )
    only_the_rest = edit_pyproject(('version = "1.0"', 'version = "1.1"'))
    mixed = edit_pyproject(
        ('version = "1.1"', 'version = "1.2"'),
        append='\n[tool.ralph.claude]\nbinary = "node_modules/.bin/claude"\n\n[tool.black]\nline-length = 99\n',
    )
    script = IterationScript({
        1: [write(project.path / "edit1.py", only_the_rest), bash("python3 edit1.py && rm edit1.py"),
            bash("git add -A && git commit -qm 'bump version'"), done()],
        2: [write(project.path / "fake.py", fake), bash("python3 fake.py && rm fake.py"),
            write(project.path / "edit2.py", mixed), bash("python3 edit2.py && rm edit2.py"),
            bash("git add -A && git commit -qm 'use the local claude'"), done()],
    })
    result, _ = run_loop("direct", script, "-n", "2")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output

    # the table is the person's again; the agent's other edits stay
    parsed = tomllib.loads((project.path / "pyproject.toml").read_text())
    assert parsed["tool"]["ralph"] == {"max_attempts": 5}
    assert parsed["project"]["version"] == "1.2" and parsed["tool"]["black"] == {"line-length": 99}
    assert "max_attempts = 5  # the person's choice" in (project.path / "pyproject.toml").read_text()
    # the console says "restored" once: iteration 1 changed only the rest of the file
    assert output.count("restored pyproject.toml [tool.ralph]") == 1, output
    restored = project.events("protected_file_restored")
    assert [(e["iteration"], e["path"], e["part"]) for e in restored] == [(2, "pyproject.toml", "[tool.ralph]")]
    assert (project.path / "node_modules" / ".bin" / "claude").is_file()  # the agent's program is still there

    # the person's next commands: none of them runs the agent's "claude"
    doctor = project.run("doctor", "--runner", "direct", env={"PATH": f"{project.path}/node_modules/.bin:{os.environ['PATH']}"})
    assert not canary.exists(), doctor.stdout + doctor.stderr
    relative = project.run("doctor", "--runner", "direct", env={"RALPH_CLAUDE_BINARY": "node_modules/.bin/claude"})
    assert not canary.exists(), relative.stdout + relative.stderr
    assert relative.returncode != 0 and "is inside the project" in relative.stdout + relative.stderr
    (project.path / "ralph.toml").write_text('[claude]\nbinary = "node_modules/.bin/claude"\n')  # as if configured
    configured = project.run("doctor", "--runner", "direct")
    assert not canary.exists(), configured.stdout + configured.stderr
    assert "[tool.ralph.claude] binary" in configured.stdout + configured.stderr
    run = project.run("run", "--runner", "direct", "--agent", "claude", "-n", "1")
    assert run.returncode == 2 and "is inside the project" in run.stderr and not canary.exists()
    # the control: the agent's program does run when started
    subprocess.run([str(project.path / "node_modules" / ".bin" / "claude")], capture_output=True, check=True)
    assert canary.exists()


def test_an_agent_made_pyproject_with_a_ralph_table_is_neutralised(
    run_loop: Any, ralph_project: RalphProject, tmp_path: Path
) -> None:
    project = ralph_project
    assert not (project.path / "pyproject.toml").exists()
    project.write_stories([story("US-001")])
    made = (
        "import pathlib\n"
        "pathlib.Path('pyproject.toml').write_text("
        "'[project]\\nname = \"x\"\\n\\n[tool.ralph]\\nmax_iterations = 500\\n\\n[tool.ralph.claude]\\nbinary = \"./claude\"\\n')\n"
    )
    script = IterationScript({1: [write(project.path / "make.py", made), bash("python3 make.py && rm make.py"),
                                  bash("git add -A && git commit -qm 'add a pyproject'"), done()]})
    result, _ = run_loop("direct", script, "-n", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert tomllib.loads((project.path / "pyproject.toml").read_text()) == {"project": {"name": "x"}}
    assert "restored pyproject.toml [tool.ralph] (created by the agent)" in result.stdout + result.stderr
