"""The workspace exchange against what the agent leaves in its own checkout (red team 2, sandbox runners):
the tree the gates see is the project's, and what comes back never removes what the person's side holds.

Real git, the real inside script; the loop side's :class:`~ralph.workspace.AgentCheckout` with a local
``run_inside`` (a sandbox's primitive without the sandbox).  The same attacks through the real CLI in both
sandboxes: ``tests/test_redteam2_sandbox.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.project import GIT_IDENTITY
from ralph.workspace import (AgentCheckout, InsideResult, WorkspaceRefused, capture, head, init_checkout, inside_script,
                             mirror)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a tracked ``config/`` directory and the person's ignored ``config/.env`` in it."""
    project = tmp_path / "project"
    (project / "config").mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    (project / "config" / "settings.toml").write_text("[app]\n")
    (project / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (project / ".gitignore").write_text(".env\n__pycache__/\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "first")
    (project / "config" / ".env").write_text("TOKEN=the-persons\n")
    return project


def run_here(cwd: Path) -> Any:
    def run(argv: Any, stdin: bytes) -> InsideResult:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, cwd=cwd)
        return InsideResult(done.returncode, done.stdout, done.stderr)
    return run


def exchange(project: Path, tmp_path: Path) -> tuple[AgentCheckout, Any, Path]:
    checkout = tmp_path / "checkout"
    return (AgentCheckout(project, str(checkout), [sys.executable, "-I", "-S", str(inside_script())]),
            run_here(tmp_path), checkout)


# -- a directory of the person's replaced by a file ------------------------------------------------------------

SHAPES = {
    "file": "printf 'moved\\n' > config && git add -A && git commit -qm tidy",
    "symlink": "ln -s calc.py config && git add -A && git commit -qm tidy",
    "untracked-file": "git commit -qm 'drop config' && printf 'moved\\n' > config",
    "uncommitted-file": "printf 'moved\\n' > config && git add -A",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_directory_holding_an_ignored_file_is_never_replaced_by_what_comes_back(project: Path, tmp_path: Path,
                                                                                   shape: str) -> None:
    node = tmp_path / "node"
    init_checkout(node)
    mirror(node, capture(project), branch="main")
    git(node, "rm", "-rq", "config")
    subprocess.run(["sh", "-c", SHAPES[shape]], cwd=node, check=True, env={**os.environ, **GIT_IDENTITY})
    before = head(project)

    with pytest.raises(WorkspaceRefused, match=r"config.*holds.*\.env"):
        mirror(project, capture(node, [before]), branch="main", must_descend=before)

    assert (project / "config" / ".env").read_text() == "TOKEN=the-persons\n"
    assert head(project) == before and (project / "config" / "settings.toml").is_file()


def test_a_directory_that_holds_only_tracked_files_may_become_a_file(project: Path, tmp_path: Path) -> None:
    (project / "config" / ".env").unlink()
    node = tmp_path / "node"
    init_checkout(node)
    mirror(node, capture(project), branch="main")
    git(node, "rm", "-rq", "config")
    (node / "config").write_text("moved\n")
    git(node, "add", "-A")
    git(node, "commit", "-qm", "tidy")
    mirror(project, capture(node, [head(project)]), branch="main", must_descend=head(project))
    assert (project / "config").read_text() == "moved\n"


# -- the workspace side's git and a sandbox's PATH -----------------------------------------------------------

def test_the_inside_script_runs_a_git_it_found_outside_the_checkout(project: Path, tmp_path: Path) -> None:
    """A ``bin/git`` of the agent's on the person's ``PATH`` (direnv's ``PATH_add bin``) never runs in the ship-in
    or the capture: the script takes the first git outside the checkout, as an absolute path."""
    checkout_exchange, run, checkout = exchange(project, tmp_path)
    (checkout / "bin").mkdir(parents=True)
    canary = tmp_path / "agent-git-ran"
    (checkout / "bin" / "git").write_text(f"#!/bin/sh\necho ran >> {canary}\nexit 1\n")
    (checkout / "bin" / "git").chmod(0o755)
    path = f"{checkout / 'bin'}{os.pathsep}bin{os.pathsep}{os.environ['PATH']}"

    def on_the_persons_path(argv: Any, stdin: bytes) -> InsideResult:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, cwd=checkout, env={**os.environ, "PATH": path})
        return InsideResult(done.returncode, done.stdout, done.stderr)

    checkout_exchange.ship_in(on_the_persons_path)
    checkout_exchange.bring_back(on_the_persons_path)
    assert head(checkout) == head(project) and not canary.exists()


def test_path_outside_drops_entries_inside_the_project_by_name_and_resolved(tmp_path: Path) -> None:
    from ralph.api.process import path_outside

    project = tmp_path / "project"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / "link").symlink_to("/usr/bin")  # outside on this machine; the agent's own in a sandbox
    (tmp_path / "into").symlink_to(project / ".venv")
    entries = [str(project / "bin"), str(project / "link"), "bin", "", str(tmp_path / "into" / "bin"),
               str(project / ".venv" / "bin"), "/usr/bin"]
    assert path_outside(os.pathsep.join(entries), project) == "/usr/bin"
    kept = path_outside(os.pathsep.join(entries), project, keep=(str(project / ".venv"),))
    assert kept == os.pathsep.join([str(project / ".venv" / "bin"), "/usr/bin"])


# -- what the agent left in its checkout, at the next ship-in ----------------------------------------------------

def test_a_ship_in_leaves_nothing_of_the_agents_untracked_or_ignored_files(project: Path, tmp_path: Path) -> None:
    """A self-ignoring package, a nested repository, ignored bytecode and a locked directory the agent left:
    the next ship-in (the gates') removes them all; the project's untracked files are written again."""
    checkout_exchange, run, checkout = exchange(project, tmp_path)
    (project / "scratch.txt").write_text("the person's untracked file\n")
    checkout_exchange.ship_in(run)
    (checkout / "calc").mkdir()
    (checkout / "calc" / ".gitignore").write_text("*\n")
    (checkout / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    git(checkout, "init", "-q", "nested")
    (checkout / "nested" / "x.py").write_text("x = 1\n")
    (checkout / "config" / "__pycache__").mkdir()
    (checkout / "config" / "__pycache__" / "forged.pyc").write_bytes(b"\0")
    (checkout / "locked" / "inner").mkdir(parents=True)
    (checkout / "locked" / "inner" / ".gitignore").write_text("*\n")
    (checkout / "locked" / "inner").chmod(0)
    assert "calc" not in git(checkout, "status", "--porcelain")  # hidden from git

    checkout_exchange.ship_in(run)

    left = sorted(p.relative_to(checkout).as_posix() for p in checkout.rglob("*") if ".git" not in p.parts)
    assert left == [".gitignore", "calc.py", "config", "config/settings.toml", "scratch.txt"]


def test_a_forged_object_in_the_checkout_never_reaches_a_file(project: Path, tmp_path: Path) -> None:
    """The agent rewrites the loose object of a blob the loop already has (no later bundle carries it) and marks
    the file unchanged: the ship-in writes the project's bytes, from the loop's own object store."""
    import zlib

    objects = tmp_path / "loop-objects"
    checkout = tmp_path / "checkout"
    checkout_exchange = AgentCheckout(project, str(checkout), [sys.executable, "-I", "-S", str(inside_script())],
                                      objects=str(objects))
    here, calls = run_here(tmp_path), []

    def run(argv: Any, stdin: bytes) -> InsideResult:
        calls.append(list(argv))
        return here(argv, stdin)

    checkout_exchange.ship_in(run)
    (checkout / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(checkout, "commit", "-qam", "wrong")
    checkout_exchange.bring_back(run)  # the loop has calc.py's blob from now on
    assert (project / "calc.py").read_text().endswith("a - b\n")
    checkout_exchange.ship_in(run)
    sha = git(checkout, "rev-parse", "HEAD:calc.py").strip()
    forged = b"def add(a, b):\n    return a + b\n"
    loose = checkout / ".git" / "objects" / sha[:2] / sha[2:]
    loose.parent.mkdir(exist_ok=True)
    if loose.exists():
        loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(forged) + forged))
    (checkout / "calc.py").write_bytes(forged)
    git(checkout, "update-index", "--assume-unchanged", "calc.py")

    checkout_exchange.ship_in(run)

    assert (checkout / "calc.py").read_text().endswith("a - b\n")
    state = checkout_exchange.bring_back(run)
    assert state.head == head(project) and state.diff == b""
    assert not any("--fresh" in argv for argv in calls)  # every ship-in kept the checkout's .git: no retry
