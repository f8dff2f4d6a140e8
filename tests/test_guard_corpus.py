"""The guard corpora (tests/guard_corpus.py) against every registered guard, in direct and sandbox mode.

Nothing here executes a command: the strings only go to ``ralph_pre_tool_use``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from guard_corpus import ATTACKS, HOME, LOOP_ORDINARY, ORDINARY, PROTECTED, Attack, project_tree
from ralph.contracts import LoopView
from ralph.plugin.manager import PluginHost
from ralph.testing.hooks import make_event

DOCS = Path(__file__).resolve().parent.parent / "docs" / "guards.md"


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(environ={})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_tree(tmp_path)


def loop(project: Path, runner: str) -> LoopView:
    return LoopView(
        runner=runner,
        isolates=runner == "docker-sandbox", mode="implement", story_id="US-001", ralph_dir=project / "ralph",
        run_dir=project.parent / "runs" / "run-1",
        protected_paths=[project / ".ralph-active", project / "ralph" / "prd.md", project / "ralph" / "prompt.md"],
        checkpoint="0123456789abcdef0123456789abcdef01234567",
    )


def rules(host: PluginHost, project: Path, command: str, runner: str | None) -> list[str]:
    payload: dict[str, Any] = {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(project)}
    event = make_event("PreToolUse", payload, project, project.parent / "state",
                       loop=loop(project, runner) if runner else None,
                       environ={"HOME": HOME, "TMPDIR": str(project.parent / "scratch")})
    return [d.rule for result in host.pm.hook.ralph_pre_tool_use(event=event) for d in (result or [])]


def test_the_corpora_are_big_enough() -> None:
    assert len(ATTACKS) >= 150 and len(ORDINARY) >= 100
    assert len({a.command for a in ATTACKS}) == len(ATTACKS), "duplicate attack strings"
    assert len(set(ORDINARY)) == len(ORDINARY), "duplicate ordinary commands"


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.command[:60] for a in ATTACKS])
def test_attack_in_direct_mode(host: PluginHost, project: Path, attack: Attack) -> None:
    for runner in (None, "direct"):  # interactive use (no loop) is direct mode too
        got = rules(host, project, attack.command, runner)
        if attack.direct == "deny":
            assert attack.rule in got, f"{attack.command!r}: expected {attack.rule}, got {got}"
        else:
            assert got == [], f"{attack.command!r} is now denied ({got}): make it a deny row and drop it from the docs"


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.command[:60] for a in ATTACKS])
def test_attack_in_sandbox_mode(host: PluginHost, project: Path, attack: Attack) -> None:
    got = rules(host, project, attack.command, "docker-sandbox")
    assert "unparseable" not in got and "opaque-code" not in got
    if attack.sandbox == "deny":
        assert attack.rule in got, f"{attack.command!r}: expected {attack.rule} in a sandbox, got {got}"
    else:
        assert got == [], f"{attack.command!r}: expected no denial in a sandbox, got {got}"


@pytest.mark.parametrize("command", ORDINARY)
def test_ordinary_command_is_allowed(host: PluginHost, project: Path, command: str) -> None:
    for runner in (None, "direct", "docker-sandbox"):
        assert rules(host, project, command, runner) == [], (command, runner)


def _in_loop(project: Path, command: str) -> str:
    (project / "x.patch").write_text("--- a/ralph/prd.md\n+++ b/ralph/prd.md\n@@ -1 +1 @@\n-a\n+b\n")
    (project / "prog.awk").write_text("{ print $1 }\n")
    (project / "x.awk").write_text("@include \"inplace\"\n1\n")
    return command.format(state=project.parent, scratch=project.parent / "scratch")


@pytest.mark.parametrize("command,mode", PROTECTED, ids=[c[:60] for c, _ in PROTECTED])
def test_protected_file_write_in_a_loop(host: PluginHost, project: Path, command: str, mode: str) -> None:
    line = _in_loop(project, command)
    assert "protected-file" in rules(host, project, line, "direct"), line
    sandboxed = rules(host, project, line, "docker-sandbox")
    assert ("protected-file" in sandboxed) == (mode == "both"), (line, sandboxed)


@pytest.mark.parametrize("command", LOOP_ORDINARY)
def test_ordinary_write_in_a_loop_is_allowed(host: PluginHost, project: Path, command: str) -> None:
    line = _in_loop(project, command)
    for runner in ("direct", "docker-sandbox"):
        assert "protected-file" not in rules(host, project, line, runner), (line, runner)


def documented_limits() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Known limits", 1)[1].split("\n## ", 1)[0]
    limits = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = re.split(r"(?<!\\)\|", line)[1].strip()
        limits.append(cell.strip("`").replace("\\|", "|").replace("\\n", "\n"))
    return limits


def test_every_attack_allowed_in_direct_mode_is_a_documented_limit() -> None:
    allowed = {a.command for a in ATTACKS if a.direct == "allow"}
    limits = documented_limits()
    assert limits, "docs/guards.md has no known-limits table"
    assert set(limits) == allowed
