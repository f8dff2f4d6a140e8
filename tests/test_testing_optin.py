"""``ralph.testing`` is opt-in: installing ralph does not load it into other projects' pytest runs.

Each case is a real ``pytest`` process on a throwaway project that has ralph installed (this
interpreter) and does or does not ask for the plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = '''
import sys


def test_probe(request):
    loaded = "ralph.testing" in sys.modules or "ralph.testing.pytest_plugin" in sys.modules
    try:
        request.getfixturevalue("ralph_project")
        fixture = True
    except Exception as exc:
        fixture = type(exc).__name__ != "FixtureLookupError"  # what pytest raises for an unknown fixture
    print(f"PROBE loaded={loaded} fixture={fixture}")
'''


def probe(project: Path, *args: str) -> str:
    """Run the probe test with pytest in ``project``; return its ``PROBE ...`` line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args, "test_probe.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("PROBE "))


@pytest.fixture
def other_project(tmp_path: Path) -> Path:
    project = tmp_path / "other"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")  # its own rootdir: ralph's config does not apply
    (project / "test_probe.py").write_text(PROBE)
    return project


def test_a_project_that_does_not_ask_for_it_does_not_load_it(other_project: Path) -> None:
    assert probe(other_project) == "PROBE loaded=False fixture=False"


def test_dash_p_loads_it(other_project: Path) -> None:
    assert probe(other_project, "-p", "ralph.testing") == "PROBE loaded=True fixture=True"


def test_pytest_plugins_in_conftest_loads_it(other_project: Path) -> None:
    (other_project / "conftest.py").write_text('pytest_plugins = ["ralph.testing"]\n')
    assert probe(other_project) == "PROBE loaded=True fixture=True"


def test_no_installed_distribution_registers_it_as_a_pytest11_entry_point() -> None:
    from importlib.metadata import entry_points

    assert [ep.value for ep in entry_points(group="pytest11") if ep.value.startswith("ralph")] == []
