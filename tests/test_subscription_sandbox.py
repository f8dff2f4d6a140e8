"""Issue 22 item 10: a logged-in (subscription) user and the sandbox.

Their login lives in the host's Claude Code config (``~/.claude/.credentials.json``, or the macOS
keychain), which the sandbox container does not see.  ``--runner auto`` used to choose the sandbox
anyway and stop before iteration 1 with "no credentials"; now it runs the agent directly, saying
why, and the fix names ``claude setup-token`` (a token the sandbox can be given) and
``--runner direct``.  Through the real ``ralph`` CLI, with the real Docker engine and sandbox image
(``auto`` would choose the sandbox otherwise).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from ralph.testing.project import RalphProject, story

from test_docker_sandbox import docker_client, sandbox_image  # noqa: F401  (fixtures)

CREDENTIAL_VARIABLES = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                        "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CONFIG_DIR")


@pytest.fixture
def logged_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox_image: str) -> dict[str, str]:  # noqa: F811
    """A person logged in with `claude` + /login: the token only in ~/.claude, no key in the environment."""
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps(
        {"claudeAiOauth": {"accessToken": "sk-ant-oat01-test", "refreshToken": "r", "expiresAt": 4102444800000,
                           "scopes": ["user:inference"], "subscriptionType": "max"}}))
    # without the bwrap runner, which can use this login (tests/test_bwrap_auto.py): auto's choice is then docker or direct
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1",
            "RALPH_DISABLE_PLUGINS": "bwrap"}


def fake_claude(tmp_path: Path) -> Path:
    """A `claude` outside the project that answers --version and ends each session at once, noting
    whether the session's config dir held the person's login."""
    path = tmp_path / "bin" / "claude"
    path.parent.mkdir()
    seen = tmp_path / "logins-seen"
    result = json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "nothing to do",
                         "num_turns": 1, "usage": {"input_tokens": 1, "output_tokens": 1}})
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "2.1.332 (Claude Code)"; exit 0; fi\n'
        f'if [ -f "$CLAUDE_CONFIG_DIR/.credentials.json" ]; then echo login >> {seen}; else echo none >> {seen}; fi\n'
        f"echo '{result}'\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_auto_runs_a_logged_in_user_directly_saying_why(ralph_project: RalphProject, logged_in: dict[str, str],
                                                        claude_binary: Path) -> None:
    ralph_project.write_stories([story("US-001")])
    dry = ralph_project.run("run", "--agent", "claude", "--dry-run", env=logged_in)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    runner_line = next(line for line in dry.stdout.splitlines() if line.startswith("runner:"))
    assert runner_line.startswith("runner:  direct (fallback: docker-sandbox cannot use claude's login"), runner_line
    credentials = Path(logged_in["HOME"]) / ".claude" / ".credentials.json"
    assert f"logged-in credentials the agent sees: {credentials}, on this machine only" in runner_line
    assert "`claude setup-token`" in runner_line and "CLAUDE_CODE_OAUTH_TOKEN" in runner_line
    assert "`--runner direct`" in runner_line
    assert "no credentials" not in dry.stderr  # nothing would stop the run

    doctor = ralph_project.run("doctor", "--agent", "claude", env=logged_in)
    assert doctor.returncode == 0, doctor.stdout
    assert "[warn] runner auto: no sandbox, the agent would run directly: docker-sandbox cannot use claude's login" in doctor.stdout
    assert "`claude setup-token`" in doctor.stdout
    assert f"[ok  ] logged-in credentials the agent sees: {credentials}" in doctor.stdout


def test_the_run_starts_directly_with_the_reason_and_the_login(ralph_project: RalphProject, logged_in: dict[str, str],
                                                               tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001")])
    env = {**logged_in, "RALPH_CLAUDE_BINARY": str(fake_claude(tmp_path))}
    result = ralph_project.run("run", "--agent", "claude", "-n", "1", env=env)
    assert result.returncode == 1, result.stdout + result.stderr  # it ran its one iteration
    assert "warning: running the agent directly on this machine (no sandbox): docker-sandbox cannot use claude's login" in result.stderr
    assert "`claude setup-token`" in result.stderr
    started = ralph_project.events("run_started")[0]
    assert started["runner"] == "direct" and "claude setup-token" in started["fallback_reason"]
    assert set((tmp_path / "logins-seen").read_text().split()) == {"login"}  # each session had the person's login


def test_a_token_or_a_key_keeps_the_sandbox(ralph_project: RalphProject, logged_in: dict[str, str],
                                            claude_binary: Path) -> None:
    """`claude setup-token`'s token is passed into the sandbox: auto keeps choosing it."""
    ralph_project.write_stories([story("US-001")])
    for name in ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY"):
        dry = ralph_project.run("run", "--agent", "claude", "--dry-run", env={**logged_in, name: "test-token"})
        assert dry.returncode == 0, dry.stderr
        assert "runner:  docker-sandbox\n" in dry.stdout, dry.stdout


def test_without_any_login_the_sandbox_stays_and_the_fix_names_setup_token(
        ralph_project: RalphProject, logged_in: dict[str, str], claude_binary: Path) -> None:
    """Nobody logged in anywhere: running directly would not help, so auto keeps the sandbox and the
    pre-flight check stops the run naming both ways to log in."""
    ralph_project.write_stories([story("US-001")])
    (Path(logged_in["HOME"]) / ".claude" / ".credentials.json").unlink()
    result = ralph_project.run("run", "--agent", "claude", env=logged_in)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no credentials the agent can use on the sandbox container" in result.stderr
    assert "`claude setup-token`" in result.stderr
    assert ralph_project.run_dirs() == []
