"""Pre-flight: what would make iteration 1 fail is found before any agent starts (issue 12).

Through the CLI as a user types it, with the real Claude Code CLI where the check is about it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import RalphProject, story

CREDENTIALS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
               "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


@pytest.fixture
def bare_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A user with no API key and no login: a fresh HOME, no credential variables."""
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "IS_SANDBOX": "1",
            "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.real_claude
def test_no_credentials_stop_before_iteration_one(ralph_project: RalphProject, claude_binary: Path, bare_env) -> None:
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=bare_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pre-flight check failed (no iteration was started)" in result.stderr
    assert "no credentials the agent can use on this machine" in result.stderr
    assert "fix: export ANTHROPIC_API_KEY" in result.stderr
    assert ralph_project.run_dirs() == []  # nothing started: no run directory, no iteration
    assert not (ralph_project.path / ".ralph-active").exists()
    # --dry-run runs nothing, but says what `ralph run` would stop on
    dry = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "--dry-run", env=bare_env)
    assert dry.returncode == 0 and "Mode:" in dry.stdout
    assert "warning: pre-flight: no credentials the agent can use" in dry.stderr
    assert "(ralph run would stop here)" in dry.stderr
    # `ralph doctor` says the same, with every other check
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "claude", env=bare_env)
    assert doctor.returncode == 1, doctor.stdout
    assert "[ok  ] claude binary runs:" in doctor.stdout and "(Claude Code)" in doctor.stdout
    assert "[FAIL] no credentials the agent can use on this machine" in doctor.stdout
    assert "fix: export ANTHROPIC_API_KEY" in doctor.stdout
    print(doctor.stdout)


@pytest.mark.real_claude
def test_logged_in_credentials_file_or_key_passes(ralph_project: RalphProject, claude_binary: Path, bare_env) -> None:
    ralph_project.write_stories([story("US-001")])  # `ralph doctor` checks the task list too, as `ralph run` does
    credentials = Path(bare_env["HOME"]) / ".claude" / ".credentials.json"
    credentials.parent.mkdir()
    credentials.write_text(json.dumps({"claudeAiOauth": {"accessToken": "x"}}))
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "claude", env=bare_env)
    assert doctor.returncode == 0, doctor.stdout
    assert f"[ok  ] logged-in credentials the agent sees: {credentials}" in doctor.stdout
    credentials.unlink()
    keyed = ralph_project.run("doctor", "--runner", "direct", "--agent", "claude",
                              env={**bare_env, "ANTHROPIC_API_KEY": "sk-test"})
    assert keyed.returncode == 0 and "credentials the agent sees on this machine: ANTHROPIC_API_KEY" in keyed.stdout


@pytest.mark.real_claude
def test_model_endpoint_that_does_not_answer(ralph_project: RalphProject, claude_binary: Path, bare_env) -> None:
    ralph_project.write_stories([story("US-001")])
    url = f"http://127.0.0.1:{closed_port()}"
    env = {**bare_env, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=env)
    assert result.returncode == 2, result.stderr
    assert f"the model endpoint ANTHROPIC_BASE_URL={url} does not answer" in result.stderr
    assert "fix: start it, or unset ANTHROPIC_BASE_URL" in result.stderr
    assert ralph_project.run_dirs() == []


@pytest.mark.real_claude
def test_preflight_can_be_turned_off(ralph_project: RalphProject, claude_binary: Path, bare_env) -> None:
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "1",
                               env={**bare_env, "RALPH_PREFLIGHT": "0"})
    assert "pre-flight" not in result.stderr
    assert len(ralph_project.events("iteration_started")) == 1  # it ran (and failed: not logged in)


def test_replay_script_that_is_not_json(ralph_project: RalphProject, tmp_path: Path) -> None:
    ralph_project.write_stories([story("US-001")])
    script = ralph_project.path / "ralph" / "script.json"
    script.write_text("{not json")
    ralph_project.commit_all("script")
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", env={"RALPH_REPLAY_SCRIPT": str(script)})
    assert result.returncode == 2
    assert f"replay script {script} is not valid JSON" in result.stderr and ralph_project.run_dirs() == []


class FailingCheck:
    """A third-party plugin adding its own pre-flight check through the hook."""

    __name__ = "needs-a-license"

    @staticmethod
    def ralph_preflight(context: Any) -> list[Any]:
        from ralph.contracts import Check

        assert context.runner.name == "direct" and context.agent.name == "replay"
        return [Check(False, "license server unreachable", "connect to the VPN"), Check(None, "a warning")]


def test_a_plugin_check_stops_the_run(ralph_project: RalphProject, tmp_path: Path, monkeypatch) -> None:
    import ralph
    from ralph.plugin.manager import PluginHost
    from ralph.loop.preflight import PreflightError
    from ralph.session import open_session

    ralph_project.write_stories([story("US-001")])
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {}}))
    monkeypatch.setenv("RALPH_REPLAY_SCRIPT", str(script))
    monkeypatch.setenv("RALPH_STATE_DIR", str(ralph_project.state_dir))
    plugin = FailingCheck()
    plugin.ralph_preflight = ralph.hookimpl(FailingCheck.ralph_preflight)  # type: ignore[method-assign]
    host = PluginHost(extra_plugins=[plugin])
    session = open_session(ralph_project.path, {"runner": "direct", "agent": "replay"}, host=host)
    loop = session.build_loop()
    with pytest.raises(PreflightError) as caught:
        loop.run()
    assert "license server unreachable; fix: connect to the VPN" in str(caught.value)
    assert caught.value.exit_code == 2
    assert ralph_project.run_dirs() == []


@pytest.mark.real_codex
def test_codex_without_key_or_login(ralph_project: RalphProject, codex_binary: Path, bare_env, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env = {**bare_env, "CODEX_HOME": str(tmp_path / "codex-home")}
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--runner", "direct", "--agent", "codex", env=env)
    assert result.returncode == 2, result.stderr
    assert "no credentials for codex: OPENAI_API_KEY is not set" in result.stderr and "codex login" in result.stderr
    doctor = ralph_project.run("doctor", "--runner", "direct", "--agent", "codex", env={**env, "OPENAI_API_KEY": "sk-x"})
    assert doctor.returncode == 0, doctor.stdout
    assert "[ok  ] codex binary runs:" in doctor.stdout and "credentials for codex: OPENAI_API_KEY" in doctor.stdout


def test_doctor_gives_the_runners_own_remedy(ralph_project: RalphProject, tmp_path: Path) -> None:
    """The core knows no runner's remedy: the docker plugin's reason carries it (issue 11)."""
    ralph_project.write_stories([story("US-001")])
    script = tmp_path / "script.json"
    script.write_text('{"iterations": {}}')
    # without the bwrap runner (auto would choose it next, tests/test_bwrap_auto.py)
    env = {"DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}", "RALPH_REPLAY_SCRIPT": str(script),
           "RALPH_DISABLE_PLUGINS": "bwrap"}
    auto = ralph_project.run("doctor", "--runner", "auto", "--agent", "replay", env=env)
    assert auto.returncode == 0, auto.stdout
    lines = auto.stdout.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("[warn] runner auto: no sandbox"))
    assert "the Docker engine does not answer" in lines[warning] and "start Docker" in lines[warning]
    assert "`--runner direct`" in lines[warning + 1]
    sandbox = ralph_project.run("doctor", "--runner", "docker-sandbox", "--agent", "replay", env=env)
    assert sandbox.returncode == 1
    failure = next(line for line in sandbox.stdout.splitlines() if line.startswith("[FAIL] runner docker-sandbox"))
    assert "start Docker" in failure
