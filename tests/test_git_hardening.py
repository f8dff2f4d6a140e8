"""Host-side git, hardened (ralph.gitutil) and the git metadata check (ralph.gitmeta), on real repositories.

Every "attack" here is a program named in repository files that writes a canary
file in the test's temp directory; the control runs plain git to show the same
setup does run it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from ralph import gitutil
from ralph.gitutil import GitMetadataChanged
from ralph.testing import RalphProject, ReplayScript, say, story
from ralph.testing.project import GIT_IDENTITY, ralph_command


def plain_git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    plain_git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    (path / "pic.bin").write_bytes(bytes(range(256)))
    plain_git(path, "add", "-A")
    plain_git(path, "commit", "-qm", "first")
    yield path
    gitutil.unprotect(path)


def canary_program(tmp_path: Path, canary: Path, name: str = "evil.sh") -> Path:
    """An executable that records that it ran (and passes stdin through, like a filter)."""
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\necho ran >> {canary}\ncat\n")
    script.chmod(0o755)
    return script


def test_repository_programs_never_run_from_loop_git(repo: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    program = canary_program(tmp_path, canary)
    hooks = repo / ".git" / "hooks"
    for hook in ("pre-commit", "post-commit", "commit-msg", "post-checkout", "pre-auto-gc", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\necho {hook} >> {canary}\n")
        (hooks / hook).chmod(0o755)
    for key, value in (
        ("core.fsmonitor", str(program)),
        ("core.pager", str(program)),
        ("diff.external", str(program)),
        ("diff.evil.textconv", str(program)),
        ("credential.helper", str(program)),
        ("core.sshCommand", str(program)),
    ):
        plain_git(repo, "config", key, value)
    (repo / ".gitattributes").write_text("*.txt diff=evil\n")
    (repo / "a.txt").write_text("two\n")
    (repo / "new.txt").write_text("new\n")

    # the control: plain git runs them
    plain_git(repo, "status", "--porcelain")
    plain_git(repo, "diff")
    assert canary.exists()
    canary.unlink()

    assert gitutil.dirty_paths(repo)
    assert "a.txt" in gitutil.changed_files(repo, "HEAD")
    assert gitutil.git(repo, "diff", "HEAD").stdout  # no external diff, no textconv
    assert gitutil.work_patch(repo, "HEAD")
    assert gitutil.commit_paths(repo, [repo / "a.txt"], "loop commit") is None
    assert gitutil.show_file(repo, "HEAD", repo / "a.txt") == "two\n"
    tip = gitutil.branch_failed_work(repo, "wip/x", "failed work")
    assert tip and gitutil.current_branch(repo) == "main"
    gitutil.stash_user_work(repo, "nothing to stash is fine") if gitutil.dirty_paths(repo) else None
    assert not canary.exists(), canary.read_text()


def test_loop_git_ignores_system_and_global_config(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = tmp_path / "canary"
    program = canary_program(tmp_path, canary)
    global_config = tmp_path / "global.gitconfig"
    global_config.write_text(f"[core]\n\tfsmonitor = {program}\n[user]\n\tname = Real Person\n\temail = real@example.invalid\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))  # inherited GIT_* never reaches loop git
    monkeypatch.setattr(gitutil, "_identity", None)
    for name in GIT_IDENTITY:
        monkeypatch.delenv(name, raising=False)
    (repo / "a.txt").write_text("changed\n")
    assert gitutil.commit_paths(repo, [repo / "a.txt"], "loop commit") is None
    assert not canary.exists()
    # identity (only) comes from the user's global config
    author = gitutil.git(repo, "log", "-1", "--format=%an <%ae>").stdout.strip()
    assert author == "Real Person <real@example.invalid>"
    assert gitutil.hardened_env()["GIT_CONFIG_GLOBAL"] == os.devnull
    monkeypatch.setattr(gitutil, "_identity", None)


def test_the_loops_git_reads_its_identity_from_no_file_the_agent_could_write(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In direct mode the agent is the same user: a config file the loop made for its git (a temp file with
    the identity) could get a clean filter or fsmonitor added, run by the loop's own git outside the agent's
    pid namespace.  The loop's git reads config from its own command line and environment and from the
    repository's config (which the metadata check watches), from no other file."""
    monkeypatch.setattr(gitutil, "_identity", None)
    listed = gitutil.git(repo, "config", "--show-origin", "--list").stdout.splitlines()
    origins = {line.split("\t", 1)[0] for line in listed}
    assert origins <= {"command line:", "file:.git/config"}, origins
    assert any(line.startswith("command line:\tuser.name=") for line in listed)
    assert gitutil.hardened_env()["GIT_CONFIG_GLOBAL"] == os.devnull
    # entries a caller adds (the loop's own index settings) are kept, the identity after them
    env = gitutil.hardened_env({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.splitIndex",
                                "GIT_CONFIG_VALUE_0": "false"})
    assert (env["GIT_CONFIG_COUNT"], env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_KEY_2"]) == (
        "3", "core.splitIndex", "user.name", "user.email")


def test_commondir_fsmonitor_attack_is_restored_and_stops(repo: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    program = canary_program(tmp_path, canary)
    gitutil.protect(repo)
    evil = repo / "evil"
    subprocess.run(["cp", "-r", str(repo / ".git"), str(evil)], check=True)
    with (evil / "config").open("a") as handle:
        handle.write(f"[core]\n\tfsmonitor = {program}\n")
    (repo / ".git" / "commondir").write_text("../evil\n")

    with pytest.raises(GitMetadataChanged) as raised:
        gitutil.dirty_paths(repo)
    message = str(raised.value)
    assert ".git/commondir" in message and "\n" not in message
    assert not (repo / ".git" / "commondir").exists()  # restored (it did not exist)
    # sticky: every later loop git call stops too
    with pytest.raises(GitMetadataChanged):
        gitutil.head(repo)
    assert not canary.exists()


@pytest.mark.parametrize(
    "attack",
    ["config", "hook-added", "hook-changed", "info-attributes", "alternates", "dotgit-file"],
)
def test_each_protected_path_is_checked_and_restored(repo: Path, tmp_path: Path, attack: str) -> None:
    git = repo / ".git"
    sample = next(p for p in (git / "hooks").iterdir())
    before_config = (git / "config").read_bytes()
    before_sample = sample.read_bytes()
    gitutil.protect(repo)
    if attack == "config":
        with (git / "config").open("a") as handle:
            handle.write("[core]\n\tfsmonitor = /bin/true\n")
        name = ".git/config"
    elif attack == "hook-added":
        (git / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
        name = ".git/hooks/pre-commit"
    elif attack == "hook-changed":
        sample.write_text("changed")
        name = f".git/hooks/{sample.name}"
    elif attack == "info-attributes":
        (git / "info" / "attributes").write_text("* filter=x\n")
        name = ".git/info/attributes"
    elif attack == "alternates":
        (git / "objects" / "info" / "alternates").write_text(str(tmp_path) + "\n")
        name = ".git/objects/info/alternates"
    else:
        os.rename(git, repo / "moved")
        (repo / ".git").write_text("gitdir: moved\n")
        name = ".git"
    with pytest.raises(GitMetadataChanged, match=name.replace(".", r"\.")):
        gitutil.untracked_files(repo)
    if attack != "dotgit-file":
        assert (git / "config").read_bytes() == before_config
        assert sample.read_bytes() == before_sample
        assert not (git / "hooks" / "pre-commit").exists()
        assert not (git / "info" / "attributes").exists()
        assert not (git / "objects" / "info" / "alternates").exists()
        gitutil.unprotect(repo)
        gitutil.protect(repo)
        assert gitutil.dirty_paths(repo) == []  # the repository works after the restore


def test_unchanged_metadata_passes_and_mode_change_is_caught(repo: Path) -> None:
    gitutil.protect(repo)
    for _ in range(3):
        assert gitutil.head(repo)
    hook = next((repo / ".git" / "hooks").iterdir())
    hook.chmod(hook.stat().st_mode ^ stat.S_IWGRP)
    os.utime(hook, (0, 0))
    original_mode = gitutil._guards[repo.resolve()].entries[hook].mode  # type: ignore[attr-defined]
    with pytest.raises(GitMetadataChanged):
        gitutil.head(repo)
    assert stat.S_IMODE(hook.stat().st_mode) == original_mode


def test_exclude_marker_line_never_grows(repo: Path) -> None:
    exclude = repo / ".git" / "info" / "exclude"
    for _ in range(3):
        gitutil.ensure_excluded(repo, ".ralph-active")
    lines = exclude.read_text().splitlines()
    assert lines.count("/.ralph-active") == 1
    exclude.write_text("# mine\n.ralph-active")  # the user's own form, no final newline
    gitutil.ensure_excluded(repo, ".ralph-active")
    assert exclude.read_text() == "# mine\n.ralph-active"


def test_work_patch_round_trips_tracked_untracked_and_binary(repo: Path, tmp_path: Path) -> None:
    (repo / "a.txt").write_text("edited\n")
    (repo / "pic.bin").write_bytes(bytes(reversed(range(256))))
    (repo / "sub").mkdir()
    (repo / "sub" / "new.txt").write_text("untracked\n")
    index_before = (repo / ".git" / "index").read_bytes()
    patch = gitutil.work_patch(repo, "HEAD")
    assert (repo / ".git" / "index").read_bytes() == index_before  # the user's index is untouched
    plain_git(repo, "reset", "-q", "--hard")
    plain_git(repo, "clean", "-fdq")
    (tmp_path / "w.patch").write_bytes(patch)
    assert plain_git(repo, "apply", "--3way", str(tmp_path / "w.patch")).returncode == 0
    assert (repo / "a.txt").read_text() == "edited\n"
    assert (repo / "pic.bin").read_bytes() == bytes(reversed(range(256)))
    assert (repo / "sub" / "new.txt").read_text() == "untracked\n"



def test_exclude_file_does_not_grow_over_real_runs(ralph_project: RalphProject, tmp_path: Path) -> None:
    """Three ``ralph run``s in the project and one in a worktree of it leave one marker line in
    the common ``info/exclude`` (a drifted copy of this code once added a line per run)."""
    ralph_project.write_stories([story("US-001")])
    script = ReplayScript().iteration(1, say("looked around, changed nothing")).write(tmp_path / "script.json")
    env = {"RALPH_REPLAY_SCRIPT": str(script)}
    args = ["run", "--runner", "direct", "--agent", "replay", "--skip-review", "-n", "1"]
    exclude = ralph_project.path / ".git" / "info" / "exclude"
    after: list[str] = []
    for number in range(1, 4):
        result = ralph_project.run(*args, env=env)
        assert result.returncode == 1 and len(ralph_project.run_dirs()) == number, result.stderr  # one iteration ran
        after.append(exclude.read_text())
    assert after[0].splitlines().count("/.ralph-active") == 1
    assert after == [after[0]] * 3
    worktree = tmp_path / "wt"
    assert plain_git(ralph_project.path, "worktree", "add", "-q", "-b", "wt", str(worktree)).returncode == 0
    result = subprocess.run([*ralph_command(), *args], cwd=worktree, env=ralph_project.process_env(env),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert (worktree / ".ralph-active").exists() is False
    assert exclude.read_text() == after[0]


def test_an_unchanged_check_lists_and_reads_nothing_and_a_change_under_a_kept_listing_is_caught(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ralph import gitmeta

    monkeypatch.setattr(gitmeta, "RACY_NS", -(10**12))  # every listing kept (as for directories older than 2 s)
    hooks = repo / ".git" / "hooks"
    sample = next(p for p in sorted(hooks.iterdir()) if p.is_file())
    gitutil.protect(repo)
    guard = gitutil._guards[repo.resolve()]
    listed, read = [], []
    real_listdir, real_scandir, real_read = os.listdir, os.scandir, Path.read_bytes
    monkeypatch.setattr(os, "listdir", lambda path: listed.append(Path(path)) or real_listdir(path))
    monkeypatch.setattr(os, "scandir", lambda path: listed.append(Path(path)) or real_scandir(path))
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or real_read(self))
    assert guard.changes() == []  # type: ignore[attr-defined]
    assert listed == [] and read == []  # stat calls only: no directory listed, no file read or hashed

    with sample.open("r+b") as handle:  # in place: the directory's times stay, the file's change
        handle.write(b"X")
    assert guard.changes() == [sample]  # type: ignore[attr-defined]
    assert listed == []  # found without listing hooks/ again

    (hooks / "pre-commit").write_text("#!/bin/sh\n")  # a new name: the directory changed, so it is listed again
    assert hooks / "pre-commit" in guard.changes()  # type: ignore[attr-defined]
    assert hooks in listed
    with pytest.raises(GitMetadataChanged, match="hooks"):
        gitutil.head(repo)
    assert not (hooks / "pre-commit").exists()
