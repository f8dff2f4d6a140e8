"""The config steers the loop: an agent's change to ``[tool.ralph]`` or ``ralph.toml`` is undone or reported.

The run always uses its in-process copy of the config; these tests check that the person also learns
of the change and that the file is put back where that cannot lose the project's own edits.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from ralph.loop.trustedfiles import TrustedConfigTable
from ralph.testing.project import story

PYPROJECT = '[project]\nname = "demo"\nversion = "1.0"\n\n[tool.ralph]\nmax_attempts = 5\n'


def test_only_the_ralph_table_changed_is_restored(tmp_path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    table = TrustedConfigTable(tmp_path)
    path.write_text(PYPROJECT.replace("max_attempts = 5", "max_attempts = 99"))
    restored, message = table.check()
    assert restored is not None and message is None
    assert path.read_text() == PYPROJECT


def test_a_ralph_table_change_mixed_with_project_edits_is_reported_not_restored(tmp_path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    table = TrustedConfigTable(tmp_path)
    mixed = PYPROJECT.replace("max_attempts = 5", "max_attempts = 99").replace('"1.0"', '"1.1"')
    path.write_text(mixed)
    restored, message = table.check()
    assert restored is None and "[tool.ralph]" in message
    assert path.read_text() == mixed


def test_project_edits_alone_are_the_agents_to_make(tmp_path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    table = TrustedConfigTable(tmp_path)
    path.write_text(PYPROJECT.replace('"1.0"', '"1.1"') + '\n[tool.pytest.ini_options]\naddopts = "-q"\n')
    assert table.check() == (None, None)


def _python_edit(path: Path, old: str, new: str) -> str:
    code = f"import pathlib;p=pathlib.Path({str(path)!r});p.write_text(p.read_text().replace({old!r},{new!r}))"
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def test_a_loop_restores_ralph_toml_and_the_ralph_table(ralph_project, tmp_path) -> None:
    pyproject, ralph_toml = ralph_project.path / "pyproject.toml", ralph_project.path / "ralph.toml"
    pyproject.write_text(PYPROJECT)
    ralph_toml.write_text("[spec]\nenabled = false\n")
    ralph_project.write_stories([story("US-001")], commit=False)
    ralph_project.commit_all("config")
    actions = [
        {"run": _python_edit(pyproject, "max_attempts = 5", "max_attempts = 99")},
        {"run": _python_edit(ralph_toml, "enabled = false", "enabled = true")},
        {"commit": "feat: [US-001] - loosen the loop"},
        {"say": "done"},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": actions}}))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1",
                               env={"RALPH_REPLAY_SCRIPT": str(script)})

    assert result.returncode == 1, result.stderr
    assert pyproject.read_text() == PYPROJECT
    assert ralph_toml.read_text() == "[spec]\nenabled = false\n"
    restored = {e["path"] for e in ralph_project.events("protected_file_restored")}
    assert {"pyproject.toml", "ralph.toml"} <= restored
    assert ralph_project.git("status", "--porcelain") == ""
