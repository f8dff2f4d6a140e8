"""The config steers the loop: an agent's change to ``[tool.ralph]`` or ``ralph.toml`` is always undone.

The run always uses its in-process copy of the config; these tests check that a later command reads
the trusted table again, that the project's own edits of ``pyproject.toml`` are kept, and that the
person learns of the change.
"""

from __future__ import annotations

import json
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

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


def test_a_ralph_table_change_mixed_with_project_edits_restores_the_table_and_keeps_the_rest(tmp_path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    table = TrustedConfigTable(tmp_path)
    mixed = PYPROJECT.replace("max_attempts = 5", "max_attempts = 99").replace('"1.0"', '"1.1"')
    path.write_text(mixed + '\n[tool.black]\nline-length = 100  # kept, comment too\n')
    restored, message = table.check()
    assert restored is not None and restored.part == "[tool.ralph]" and message is None
    assert path.read_text() == PYPROJECT.replace('"1.0"', '"1.1"') + '\n[tool.black]\nline-length = 100  # kept, comment too\n'
    assert table.check() == (None, None)


LAYOUTS = {
    "subtables out of order": (
        '[tool.ralph]\nmax_attempts = 5\n\n[project]\nname = "demo"\n\n[tool.ralph.claude]\nmodel = "x"\n',
        lambda t: t.replace('model = "x"', 'model = "x"\nbinary = "node_modules/.bin/claude"')
        + '\n[tool.pytest.ini_options]\naddopts = "-q"\n',
    ),
    "dotted keys": (
        '[tool]\nralph.max_attempts = 5\nblack.line-length = 3\n',
        lambda t: t.replace("black.line-length = 3", "black.line-length = 4\nralph.claude.binary = './evil'"),
    ),
    "top-level dotted": (
        'tool.ralph.max_attempts = 5\n[project]\nname = "x"\n',
        lambda t: t.replace('"x"', '"y"') + '\n[tool.ralph.claude]\nbinary = "./evil"\n',
    ),
    "inline table": (
        'tool = {ralph = {max_attempts = 5}, black = {line-length = 3}}\n',
        lambda t: t.replace("5", "7").replace("3", "4"),
    ),
    "a table added where there was none": (
        '[project]\nname = "demo"\n',
        lambda t: t.replace('"demo"', '"demo2"') + '\n[tool.ralph]\nmax_iterations = 999\n',
    ),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_way_of_writing_the_table_is_restored_and_the_rest_kept(tmp_path, layout: str) -> None:
    trusted, attack = LAYOUTS[layout]
    path = tmp_path / "pyproject.toml"
    path.write_text(trusted)
    table = TrustedConfigTable(tmp_path)
    path.write_text(attack(trusted))
    restored, _ = table.check()
    assert restored is not None and restored.part == "[tool.ralph]"
    now, agent, before = (tomllib.loads(t) for t in (path.read_text(), attack(trusted), trusted))
    assert now.get("tool", {}).get("ralph") == before.get("tool", {}).get("ralph")  # what a later command reads
    for parsed in (now, agent):
        parsed.get("tool", {}).pop("ralph", None)
        if parsed.get("tool") == {}:
            del parsed["tool"]
    assert now == agent  # everything else exactly as the agent left it


def test_an_agent_made_pyproject_with_a_ralph_table_is_neutralised(tmp_path) -> None:
    path = tmp_path / "pyproject.toml"
    table = TrustedConfigTable(tmp_path)
    path.write_text('[tool.ralph.claude]\nbinary = "./evil"\n')
    restored, _ = table.check()
    assert restored is not None and restored.how == "created" and not path.exists()
    path.write_text('[project]\nname = "made-by-the-agent"\n\n[tool.ralph]\nmax_attempts = 1\n')
    table.check()
    assert tomllib.loads(path.read_text()) == {"project": {"name": "made-by-the-agent"}}


def test_a_symlink_or_unparseable_file_puts_the_whole_trusted_file_back(tmp_path) -> None:
    path, host = tmp_path / "pyproject.toml", tmp_path.parent / f"{tmp_path.name}-host.toml"
    path.write_text(PYPROJECT)
    table = TrustedConfigTable(tmp_path)
    host.write_text('[tool.ralph.claude]\nbinary = "/tmp/evil"\n')
    path.unlink()
    path.symlink_to(host)
    restored, _ = table.check()
    assert restored is not None and restored.how == "replaced"
    assert not path.is_symlink() and path.read_text() == PYPROJECT and "evil" in host.read_text()
    broken = PYPROJECT.replace("max_attempts = 5", "max_attempts = ") + "[tool.black\n"
    path.write_text(broken)
    aside = tmp_path / "run" / "iteration-001.pyproject.toml"
    restored, _ = table.check(aside)
    assert restored is not None and restored.part == "(whole file)" and str(aside) in restored.note
    assert path.read_text() == PYPROJECT and aside.read_text() == broken


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
