"""The run-owned config home of the agent's CLI: fresh and private per process, the login only.

Through the real CLI: tests/test_trust_agent_config.py (a logged-in subscription user, the
person's ~/.claude untouched, hooks and settings the agent writes never read).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from ralph.contracts import AgentView
from ralph.loop.agenthome import ConfigHomes, new_config_home, provide, remove_config_home


def test_a_home_is_fresh_private_and_holds_only_the_login(tmp_path: Path) -> None:
    login = tmp_path / "person" / ".claude" / ".credentials.json"
    login.parent.mkdir(parents=True)
    login.write_text('{"token": 1}')
    (login.parent / "settings.json").write_text('{"hooks": {}}')
    run_dir = tmp_path / "run"
    first = new_config_home(run_dir, "iteration-001", {".credentials.json": login})
    second = new_config_home(run_dir, "iteration-001", {".credentials.json": login})

    assert first != second and first.parent == second.parent == run_dir / "agent-homes"
    assert stat.S_IMODE(first.stat().st_mode) == 0o700
    assert sorted(p.name for p in first.iterdir()) == [".credentials.json"]
    assert os.path.samefile(first / ".credentials.json", login)  # a hard link: a refresh written in place reaches it


def test_the_login_is_a_symlink_across_file_systems_here_and_a_copy_elsewhere(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    login = tmp_path / "credentials.json"
    login.write_text("secret")

    def no_link(*args: object, **kwargs: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    provide(tmp_path / "here", login, same_machine=True)
    provide(tmp_path / "elsewhere", login, same_machine=False)
    assert (tmp_path / "here").is_symlink() and (tmp_path / "here").read_text() == "secret"
    assert not (tmp_path / "elsewhere").is_symlink() and (tmp_path / "elsewhere").read_text() == "secret"
    assert stat.S_IMODE((tmp_path / "elsewhere").stat().st_mode) == 0o600
    provide(tmp_path / "keychain", b"from the keychain")
    assert (tmp_path / "keychain").read_bytes() == b"from the keychain"
    with pytest.raises(FileExistsError):  # never written through what is already there
        provide(tmp_path / "keychain", b"again")


def test_removing_a_home_never_follows_what_the_agent_put_there(tmp_path: Path) -> None:
    login = tmp_path / "login"
    login.write_text("keep me")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me too")
    home = new_config_home(tmp_path / "run", "x", {".credentials.json": login})
    (home / "projects").mkdir()
    (home / "projects" / "link").symlink_to(outside)
    (home / "settings.json").symlink_to(outside / "precious")
    remove_config_home(home)
    assert not home.exists()
    assert login.read_text() == "keep me" and (outside / "precious").read_text() == "keep me too"


class _Runner:
    isolates = False

    def __init__(self, view: AgentView, isolates: bool = False) -> None:
        self.view = view
        self.isolates = isolates
        self.views = 0

    def agent_view(self) -> AgentView:
        self.views += 1
        return self.view


class _Agent:
    def __init__(self, logins: dict[str, Path | bytes] | None) -> None:
        self.logins = logins

    def login_files(self, view: AgentView) -> dict[str, Path | bytes] | None:
        return self.logins


def test_homes_are_made_per_process_only_for_agents_that_take_one(tmp_path: Path) -> None:
    runner = _Runner(AgentView(env={}, home=tmp_path))
    homes = ConfigHomes(runner)  # type: ignore[arg-type]
    assert homes.open(_Agent(None), tmp_path, "a") is None  # type: ignore[arg-type]
    home = homes.open(_Agent({}), tmp_path, "b")  # type: ignore[arg-type]
    assert home is not None and home.is_dir() and list(home.iterdir()) == []
    homes.close(home)
    assert not home.exists() and runner.views == 1  # the person's login is looked up once per run
    boxed = ConfigHomes(_Runner(AgentView(env={}, home=tmp_path), isolates=True))  # type: ignore[arg-type]
    assert boxed.open(_Agent({}), tmp_path, "c") is None  # a sandbox keeps its own home for now


def test_claude_finds_the_persons_login_where_its_cli_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ralph_plugins.agents import claude_home

    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    assert claude_home.login_files(AgentView(env={}, home=home)) == {} or sys.platform == "darwin"
    (home / ".claude" / ".credentials.json").write_text("{}")
    (home / ".claude" / "settings.json").write_text(json.dumps({"apiKeyHelper": "get-key", "env": {"X": "1"}}))
    view = AgentView(env={}, home=home)
    assert claude_home.login_files(view) == {".credentials.json": home / ".claude" / ".credentials.json"}
    assert claude_home.key_helper(view) == "get-key"
    elsewhere = tmp_path / "cfg"
    elsewhere.mkdir()
    (elsewhere / ".credentials.json").write_text("{}")
    assert claude_home.login_files(AgentView(env={"CLAUDE_CONFIG_DIR": str(elsewhere)}, home=home)) == {
        ".credentials.json": elsewhere / ".credentials.json"}
    # macOS keeps the login in the keychain, under a name the CLI no longer looks up once CLAUDE_CONFIG_DIR is set
    monkeypatch.setattr(claude_home.sys, "platform", "darwin")
    monkeypatch.setattr(claude_home, "keychain_login", lambda: b'{"claudeAiOauth": {}}')
    assert claude_home.login_files(AgentView(env={}, home=tmp_path / "nobody")) == {
        ".credentials.json": b'{"claudeAiOauth": {}}'}


def test_the_claude_agent_points_its_cli_at_the_home_and_carries_the_key_helper(tmp_path: Path) -> None:
    from ralph.config import RalphConfig
    from ralph.contracts import AgentChannel, AgentInvocation
    from ralph.settings import Settings
    from ralph_plugins.agents.claude import ClaudeAgent
    from ralph_plugins.agents.claude_config import ClaudeConfig

    binary = tmp_path / "claude"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps({"apiKeyHelper": "get-key"}))
    project = tmp_path / "project"
    project.mkdir()
    agent = ClaudeAgent(Settings(project_dir=project, config=RalphConfig(),
                                 plugin_config={"claude": ClaudeConfig(binary=str(binary))}))
    assert agent.login_files(AgentView(env={}, home=home)) == {}
    channel = AgentChannel(hook_socket=tmp_path / "s.sock", token="t", run_dir=tmp_path, state_file=tmp_path / "state.json",
                           tasks_file=project / "ralph" / "tasks.json", hook_command=("/usr/bin/python3", "-I", "-S", "c.py"),
                           config_home=tmp_path / "agent-home")
    spec = agent.process(AgentInvocation("p", project, tmp_path, 1, channel=channel))
    assert spec.env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "agent-home")
    settings = json.loads(spec.files[Path(spec.argv[spec.argv.index("--settings") + 1])])
    assert settings["apiKeyHelper"] == "get-key"
    command = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert command.startswith("out=$(RALPH_HOOK_LOOP=1 ") and command.endswith("exit 2")  # the fail-closed wrapper
    assert spec.argv[spec.argv.index("--setting-sources") + 1] == "project,local" and "--strict-mcp-config" in spec.argv


def test_codex_links_only_auth_json(tmp_path: Path) -> None:
    from ralph_plugins.agents.codex import CodexAgent

    agent = object.__new__(CodexAgent)
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    assert agent.login_files(AgentView(env={}, home=home)) == {}
    (home / ".codex" / "auth.json").write_text("{}")
    (home / ".codex" / "config.toml").write_text('notify = ["sh", "-c", "evil"]\n')
    assert agent.login_files(AgentView(env={}, home=home)) == {"auth.json": home / ".codex" / "auth.json"}


def test_what_the_agent_leaves_in_place_of_the_homes_directory_is_never_followed(tmp_path: Path) -> None:
    """The agent (as you, in direct mode) swaps ``agent-homes`` for a link to a readable place: the next
    home, and the link to your login in it, must not land there."""
    login = tmp_path / "login"
    login.write_text("secret")
    run_dir = tmp_path / "run"
    shared = tmp_path / "shared-with-everyone"
    shared.mkdir()
    run_dir.mkdir()
    (run_dir / "agent-homes").symlink_to(shared)
    home = new_config_home(run_dir, "x", {".credentials.json": login})
    assert list(shared.iterdir()) == []
    assert home.parent == run_dir / "agent-homes" and not home.parent.is_symlink()
    assert stat.S_IMODE(home.parent.stat().st_mode) == 0o700


def test_a_planted_link_or_special_file_as_the_login_is_not_followed_for_an_agent_elsewhere(tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("host secret")
    planted = tmp_path / "state" / ".claude" / ".credentials.json"  # in a state dir a container can write
    planted.parent.mkdir(parents=True)
    planted.symlink_to(secret)
    provide(tmp_path / "boxed", planted, same_machine=False)
    assert not (tmp_path / "boxed").exists() and not (tmp_path / "boxed").is_symlink()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    provide(tmp_path / "from-fifo", fifo, same_machine=True)  # would block a reader: left out
    assert not (tmp_path / "from-fifo").exists()
    provide(tmp_path / "here", planted, same_machine=True)  # on this machine the agent is you anyway
    assert (tmp_path / "here").read_text() == "host secret"


def test_every_process_of_an_agent_gets_a_fresh_home_at_the_same_path(tmp_path: Path) -> None:
    """Claude Code writes its config home's path into its system prompt: one path per run keeps the prompt
    prefix the same from iteration to iteration (the API's prompt cache reads it instead of writing it)."""
    runner = _Runner(AgentView(env={}, home=tmp_path))
    homes = ConfigHomes(runner)  # type: ignore[arg-type]
    agent = _Agent({})
    agent.name = "claude"  # type: ignore[attr-defined]
    first = homes.open(agent, tmp_path, "iteration-001")  # type: ignore[arg-type]
    assert first is not None
    (first / "settings.json").write_text('{"hooks": {}}')  # what the agent wrote during its session
    homes.close(first)
    outside = tmp_path / "outside"
    outside.mkdir()
    first.symlink_to(outside)  # a link left in its place is removed, never followed
    second = homes.open(agent, tmp_path, "iteration-002")  # type: ignore[arg-type]
    assert second == first and second is not None and second.is_dir() and not second.is_symlink()
    assert list(second.iterdir()) == [] and outside.is_dir() and stat.S_IMODE(second.stat().st_mode) == 0o700
