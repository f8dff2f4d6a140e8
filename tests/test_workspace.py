"""``ralph.workspace``: shipping a git workspace to another checkout and back, on real repositories."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

import ralph.workspace_inside as inside
from ralph.testing.project import GIT_IDENTITY
from ralph.workspace import (AgentCheckout, InsideResult, WorkspaceError, WorkspaceRefused, capture, decode, encode,
                             escapes, head, init_checkout, mirror, receive_branch)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A project with one commit (a text and a binary file) and an empty checkout to ship it to."""
    project, node = tmp_path / "project", tmp_path / "node"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "notes.txt").write_text("one\n")
    (project / "blob.bin").write_bytes(bytes(range(256)))
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "first")
    init_checkout(node)
    mirror(node, capture(project), branch="main")
    return project, node


def test_a_round_trip_brings_back_commits_changes_and_untracked_files(pair) -> None:
    project, node = pair
    shipped = head(project)
    (node / "feature.txt").write_text("feature\n")
    git(node, "add", "feature.txt")
    git(node, "commit", "-q", "-m", "feature")
    (node / "notes.txt").write_text("changed, not committed\n")
    (node / "blob.bin").write_bytes(bytes(reversed(range(256))))
    (node / "scratch.txt").write_text("untracked\n")

    state = capture(node, [shipped])
    assert state.bundle is not None  # only the new commit travels
    mirror(project, state, branch="main", must_descend=shipped)

    assert head(project) == head(node)
    assert git(project, "log", "--format=%s") == "feature\nfirst\n"
    assert (project / "notes.txt").read_text() == "changed, not committed\n"
    assert (project / "blob.bin").read_bytes() == bytes(reversed(range(256)))
    assert (project / "scratch.txt").read_text() == "untracked\n"
    assert git(project, "status", "--porcelain") == git(node, "status", "--porcelain")


def test_nothing_new_ships_no_bundle_and_a_removed_untracked_file_goes_away(pair) -> None:
    project, node = pair
    (node / "scratch.txt").write_text("x\n")
    mirror(project, capture(node, [head(project)]), branch="main")
    assert (project / "scratch.txt").exists()
    (node / "scratch.txt").unlink()
    state = capture(node, [head(project)])
    assert state.bundle is None
    mirror(project, state, branch="main")
    assert not (project / "scratch.txt").exists()
    assert git(project, "status", "--porcelain") == ""


def test_rewritten_history_is_refused_and_the_project_is_left_as_it_was(pair) -> None:
    project, node = pair
    shipped = head(project)
    git(node, "commit", "-q", "--amend", "-m", "rewritten")
    (node / "scratch.txt").write_text("x\n")
    before = (head(project), git(project, "status", "--porcelain"))
    with pytest.raises(WorkspaceError, match="does not descend"):
        mirror(project, capture(node, [shipped]), branch="main", must_descend=shipped)
    assert (head(project), git(project, "status", "--porcelain")) == before
    assert not (project / "scratch.txt").exists()


def test_untracked_files_cannot_land_outside_the_checkout(pair, tmp_path) -> None:
    project, node = pair
    state = capture(node, [head(project)])
    for name, link in (("../escaped.txt", None), ("evil", "/etc/passwd")):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
            archive.addfile(info, io.BytesIO(b""))
        state.untracked, state.untracked_names = buffer.getvalue(), [name]
        with pytest.raises(WorkspaceError, match="outside the checkout"):
            mirror(project, state, branch="main")
    assert not (tmp_path / "escaped.txt").exists() and not (project / "evil").exists()


def test_a_diff_that_does_not_apply_changes_nothing(pair) -> None:
    project, node = pair
    (node / "notes.txt").write_text("node edit\n")
    state = capture(node, [head(project)])
    state.diff = state.diff.replace(b"-one", b"-something else")
    with pytest.raises(WorkspaceError, match="do not apply"):
        mirror(project, state, branch="main")
    assert (project / "notes.txt").read_text() == "one\n"


def test_receive_branch_creates_and_only_moves_forward(pair) -> None:
    project, node = pair
    base = head(project)
    (node / "a.txt").write_text("a\n")
    git(node, "add", "a.txt")
    git(node, "commit", "-q", "-m", "a")
    assert receive_branch(project, capture(node, [base]), "ralph/parallel/PRD-1") == "created"
    assert git(project, "rev-parse", "ralph/parallel/PRD-1").strip() == head(node)
    assert git(project, "status", "--porcelain") == "" and not (project / "a.txt").exists()
    git(node, "reset", "-q", "--hard", base)
    (node / "b.txt").write_text("b\n")
    git(node, "add", "b.txt")
    git(node, "commit", "-q", "-m", "b")
    with pytest.raises(WorkspaceError, match="does not descend"):
        receive_branch(project, capture(node, [base]), "ralph/parallel/PRD-1")


# -- what comes back is the agent's: checked as bytes before anything touches the project ------------



def project_files(project: Path) -> dict[str, str]:
    """Every entry of the project except .git, as ``kind:content`` (links as their target)."""
    found = {}
    for path in sorted(project.rglob("*")):
        rel = path.relative_to(project).as_posix()
        if rel.split("/")[0] == ".git":
            continue
        if path.is_symlink():
            found[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            found[rel] = "file:" + path.read_bytes().decode("utf-8", "replace")
        else:
            found[rel] = "dir"
    return found


def refused(project: Path, state: Any, match: str, **kw: Any) -> None:
    before = (head(project), git(project, "status", "--porcelain"), project_files(project))
    with pytest.raises(WorkspaceRefused, match=match):
        mirror(project, state, branch="main", **kw)
    assert (head(project), git(project, "status", "--porcelain"), project_files(project)) == before


def commit_tree(node: Path, entries: list[tuple[str, str, str]], message: str = "crafted") -> str:
    """A commit on top of HEAD whose tree is exactly ``entries`` (mode, sha, name), made with mktree."""
    listing = "".join(f"{mode} {'commit' if mode == '160000' else 'blob'} {sha}\t{name}\n" for mode, sha, name in entries)
    tree = subprocess.run(["git", "mktree"], cwd=node, input=listing, capture_output=True, text=True, check=True).stdout.strip()
    sha = git(node, "commit-tree", tree, "-p", "HEAD", "-m", message).strip()
    git(node, "update-ref", "HEAD", sha)  # (no checkout: git itself would refuse to write such a tree)
    return sha


def blob(node: Path, data: str) -> str:
    return subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=node, input=data, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_committed_symlinks_inside_the_tree_come_back_as_links_and_escaping_ones_are_refused(pair, tmp_path) -> None:
    project, node = pair
    base = head(project)
    (node / "docs").mkdir()
    os.symlink("../notes.txt", node / "docs" / "notes")
    git(node, "add", "-A")
    git(node, "commit", "-q", "-m", "a link inside")
    mirror(project, capture(node, [base]), branch="main", must_descend=base)
    assert os.readlink(project / "docs" / "notes") == "../notes.txt"  # recreated as a link, not followed
    inside_head = head(project)
    outside = tmp_path / "host-secret"
    outside.write_text("secret\n")
    for name, target in (("escape", str(outside)), ("up", "../../host-secret"), ("dotgit", ".git/config"),
                         ("docs/deep", "../.git/hooks")):
        git(node, "reset", "-q", "--hard", inside_head)
        os.symlink(target, node / name)
        git(node, "add", "-A")
        git(node, "commit", "-q", "-m", f"link {name}")
        refused(project, capture(node, [inside_head]), "symlink", must_descend=inside_head)
    assert outside.read_text() == "secret\n"


def test_a_chain_of_symlinks_that_leaves_the_tree_is_refused(pair) -> None:
    project, node = pair
    base = head(project)
    (node / "a").mkdir()
    os.symlink("..", node / "a" / "l")  # a/l -> the top: inside
    os.symlink("a/l/..", node / "m")  # through a/l: the top's parent, outside
    git(node, "add", "-A")
    git(node, "commit", "-q", "-m", "chain")
    refused(project, capture(node, [base]), "leads outside", must_descend=base)
    assert escapes("m", "a/l/..", {"a/l": "..", "m": "a/l/.."}) == "leads outside the checkout"
    assert escapes("x", "y", {"x": "y", "y": "x"}) == "is a loop of symlinks"
    assert escapes("docs/x", "../notes.txt", {}) is None


def test_dot_git_entries_and_gitlinks_in_trees_are_refused(pair) -> None:
    project, node = pair
    base = head(project)
    notes = git(node, "rev-parse", "HEAD:notes.txt").strip()
    hook = blob(node, "#!/bin/sh\ntouch /tmp/pwned\n")
    commit_tree(node, [("100644", notes, "notes.txt"), ("100755", hook, ".git")])
    refused(project, capture(node, [base]), r"\.git|refused", must_descend=base)
    git(node, "reset", "-q", "--hard", base)
    commit_tree(node, [("100644", notes, "notes.txt"), ("160000", base, "vendor")])
    refused(project, capture(node, [base]), "submodule", must_descend=base)


def untracked_tar(*members: tuple[str, str, str]) -> bytes:
    """A tar of (name, kind, content or link target) with kind in file, link, hardlink, fifo, dir."""
    buffer = io.BytesIO()
    types = {"link": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "dir": tarfile.DIRTYPE,
             "char": tarfile.CHRTYPE}
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(value.encode())
                archive.addfile(info, io.BytesIO(value.encode()))
                continue
            info.type = types[kind]
            info.linkname = value
            archive.addfile(info)
    return buffer.getvalue()


@pytest.mark.parametrize("members, match", [
    ([("pipe", "fifo", "")], "not a regular file"),
    ([("dev", "char", "")], "not a regular file"),
    ([("hard", "hardlink", "notes.txt")], "not a regular file"),
    ([("x.txt", "file", "a"), ("x.txt", "file", "b")], "twice"),
    ([("notes.txt", "file", "shadow")], "tracked path"),
    ([("notes.txt/inner", "file", "x")], "not a directory"),
    ([("l", "link", "sub"), ("l/f", "file", "x")], "not a directory"),
    ([("up", "link", "../outside")], "leads outside"),
    ([("u", "link", "d/.."), ("d", "link", "..")], "leads outside"),
    ([("g", "link", ".git")], "into .git"),
    ([(".git/hooks/pre-commit", "file", "#!/bin/sh\n")], "outside the checkout"),
    ([("sub/.GIT/config", "file", "[core]\n")], "outside the checkout"),
    ([("/etc/cron.d/x", "file", "* * * * * root sh\n")], "outside the checkout"),
])
def test_untracked_entries_that_are_not_plain_data_are_refused(pair, members, match) -> None:
    project, node = pair
    state = capture(node, [head(project)])
    state.untracked = untracked_tar(*members)
    refused(project, state, match)


def test_untracked_files_are_never_written_under_an_ignored_symlink_of_this_machine(pair, tmp_path) -> None:
    project, node = pair
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (project / ".git" / "info" / "exclude").write_text("build\n")
    os.symlink(outside, project / "build")  # the person's own ignored link
    state = capture(node, [head(project)])
    state.untracked = untracked_tar(("build/payload.sh", "file", "echo pwned\n"))
    refused(project, state, "ignored")
    assert list(outside.iterdir()) == []


def test_an_escaping_symlink_the_project_already_has_is_the_persons_and_stays(pair, tmp_path) -> None:
    project, node = pair
    os.symlink("/usr/share/dict", project / "dict")  # committed by the person, before the run
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "person's link")
    base = head(project)
    inside.apply(node, capture(project), "main")  # the loop's state, applied where the agent works (trusted)
    (node / "work.txt").write_text("agent\n")
    git(node, "add", "-A")
    git(node, "commit", "-q", "-m", "work")
    mirror(project, capture(node, [base]), branch="main", must_descend=base)
    assert os.readlink(project / "dict") == "/usr/share/dict" and (project / "work.txt").read_text() == "agent\n"
    git(node, "rm", "-q", "dict")
    os.symlink("/etc", node / "dict")  # the same name, another target: the agent's, refused
    git(node, "add", "-A")
    git(node, "commit", "-q", "-m", "retarget")
    refused(project, capture(node, [head(project)]), "absolute path", must_descend=head(project))


def test_uncommitted_changes_that_make_an_escaping_symlink_are_refused(pair) -> None:
    project, node = pair
    (node / "notes.txt").unlink()
    os.symlink("/root/.bashrc", node / "notes.txt")
    refused(project, capture(node, [head(project)]), "uncommitted|symlink")


def test_a_bundle_must_hold_exactly_the_shipped_head(pair) -> None:
    project, node = pair
    base = head(project)
    (node / "a.txt").write_text("a\n")
    git(node, "add", "a.txt")
    git(node, "commit", "-q", "-m", "a")
    first = head(node)
    state = capture(node, [base])
    (node / "b.txt").write_text("b\n")
    git(node, "add", "b.txt")
    git(node, "commit", "-q", "-m", "b")
    other = capture(node, [first])
    forged = inside.WorkspaceState(first, other.bundle, b"", b"")  # a bundle of another commit
    refused(project, forged, "exactly the shipped HEAD|missing")
    missing = inside.WorkspaceState(head(node), state.bundle, b"", b"")
    refused(project, missing, "exactly the shipped HEAD")
    # a bundle whose prerequisite the project lacks
    unknown = inside.WorkspaceState(head(node), other.bundle, b"", b"")
    refused(project, unknown, "does not have")


@pytest.mark.parametrize("mangle", [
    lambda data: b"not a state" + data,
    lambda data: data[:-1],
    lambda data: data + b"x",
    lambda data: data.replace(b'"head":"', b'"head":"zz', 1),
    lambda data: data.replace(b'"diff":0', b'"diff":true', 1),
])
def test_a_forged_frame_is_refused_by_the_exchange(pair, mangle, tmp_path) -> None:
    project, node = pair
    exchange = AgentCheckout(project, str(node), [])
    exchange.base, exchange.branch = head(project), "main"
    (node / "scratch.txt").write_text("x\n")
    data = mangle(encode(capture(node, [head(project)])))
    before = project_files(project)
    with pytest.raises(WorkspaceRefused, match=r"kept as .*refused-1\.ship"):
        exchange.accept(InsideResult(0, data), keep=tmp_path / "kept")
    assert project_files(project) == before
    assert (tmp_path / "kept" / "refused-1.ship").read_bytes() == data


def test_decode_is_the_inverse_of_encode() -> None:
    state = inside.WorkspaceState("a" * 40, b"bundle", b"diff", b"tar")
    back, extra = decode(encode(state, branch="main"))
    assert (back.head, back.bundle, back.diff, back.untracked, extra) == (state.head, b"bundle", b"diff", b"tar",
                                                                         {"branch": "main"})
    none, _ = decode(encode(inside.WorkspaceState("b" * 40, None, b"", b"")))
    assert none.bundle is None


def local_inside(cwd: Path) -> Any:
    """The exchange's primitive as a sandbox gives it: run argv (the inside script) with stdin there."""
    def run(argv: Any, stdin: bytes) -> InsideResult:
        result = subprocess.run(list(argv), input=stdin, capture_output=True, cwd=cwd)
        return InsideResult(result.returncode, result.stdout, result.stderr)
    return run


def test_the_exchange_ships_in_and_brings_back_through_the_inside_script(pair, tmp_path) -> None:
    import sys

    from ralph.workspace import inside_script

    project, _ = pair
    checkout = tmp_path / "agent-checkout"
    exchange = AgentCheckout(project, str(checkout), [sys.executable, "-I", "-S", str(inside_script())])
    run = local_inside(tmp_path)
    exchange.ship_in(run)
    assert (checkout / "notes.txt").read_text() == "one\n" and head(checkout) == head(project)
    # what the agent does in its checkout: a commit, an edit, a new file, and planted git config
    (checkout / "feature.txt").write_text("feature\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "feature")
    (checkout / "notes.txt").write_text("edited\n")
    (checkout / "new.txt").write_text("new\n")
    canary = tmp_path / "fsmonitor-ran"
    monitor = checkout / "monitor.sh"
    monitor.write_text(f"#!/bin/sh\necho ran >> {canary}\n")
    monitor.chmod(0o755)
    with open(checkout / ".git" / "config", "a") as config:
        config.write(f"[core]\n\tfsmonitor = {monitor}\n")
    (checkout / ".git" / "hooks").mkdir(exist_ok=True)
    (checkout / ".git" / "hooks" / "post-checkout").write_text(f"#!/bin/sh\necho hook >> {canary}\n")
    (checkout / ".git" / "hooks" / "post-checkout").chmod(0o755)
    state = exchange.bring_back(run)
    assert state.head == head(checkout) == head(project)
    assert (project / "notes.txt").read_text() == "edited\n" and (project / "new.txt").read_text() == "new\n"
    assert "fsmonitor" not in (project / ".git" / "config").read_text()
    # the next ship-in puts the checkout's program-deciding git files back: nothing planted runs
    (project / "notes.txt").write_text("the loop's repair\n")
    exchange.ship_in(run)
    assert (checkout / "notes.txt").read_text() == "the loop's repair\n"
    assert "fsmonitor" not in (checkout / ".git" / "config").read_text()
    assert not (checkout / ".git" / "hooks").exists()
    git(checkout, "status")  # a plain git of the checkout's: the planted monitor is gone
    assert not canary.exists()
    # a checkout that lost its objects: the exchange ships everything again into a fresh .git
    import shutil

    shutil.rmtree(checkout / ".git" / "objects")
    (project / "later.txt").write_text("later\n")
    git(project, "add", "later.txt")
    git(project, "commit", "-q", "-m", "later")
    exchange.ship_in(run)
    assert head(checkout) == head(project) and (checkout / "later.txt").read_text() == "later\n"


def test_the_inside_hardening_is_the_loops() -> None:
    from ralph.gitutil import HARDENING

    assert set(HARDENING) <= set(inside.HARDENING)


@pytest.mark.parametrize("plant", ["filter", "include", "process-filter", "worktree"])
def test_the_inside_capture_never_runs_a_program_the_agent_configured_in_its_git(pair, tmp_path, plant) -> None:
    """A capture runs where the agent's processes run (a Stop check while the agent works, a workspace
    container that outlives it): what the agent wrote into its checkout's .git must not start there."""
    import sys

    from ralph.workspace import inside_script

    project, node = pair
    canary = tmp_path / "agent-program-ran"
    program = tmp_path / "evil.sh"
    program.write_text(f"#!/bin/sh\necho ran >> {canary}\ncat\n")
    program.chmod(0o755)
    config = {
        "filter": f"[filter \"evil\"]\n\tclean = {program}\n\tsmudge = {program}\n",
        "process-filter": f"[filter \"evil\"]\n\tprocess = {program}\n\trequired = true\n",
        "include": f"[include]\n\tpath = {tmp_path / 'included'}\n",
        "worktree": f"[core]\n\tworktree = {tmp_path}\n[filter \"evil\"]\n\tclean = {program}\n",
    }[plant]
    (tmp_path / "included").write_text(f"[filter \"evil\"]\n\tclean = {program}\n")
    with open(node / ".git" / "config", "a") as handle:
        handle.write(config)
    (node / ".gitattributes").write_text("* filter=evil\n")
    (node / ".git" / "info").mkdir(exist_ok=True)
    (node / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    (node / "notes.txt").write_text("changed\n")
    # the test can fail: the loop-side capture with the checkout's own config runs the program
    if plant in ("filter", "include"):
        subprocess.run(["git", "diff", "HEAD"], cwd=node, capture_output=True)
        assert canary.exists()
        canary.unlink()

    done = subprocess.run([sys.executable, "-I", "-S", str(inside_script()), "capture", str(node)], capture_output=True)

    assert done.returncode == 0, done.stderr
    assert not canary.exists()
    state, _ = decode(done.stdout)
    assert b"+changed" in state.diff and b".gitattributes" in state.untracked


def test_a_phase_clock_adds_each_phase_since_the_previous_lap() -> None:
    """The runners' ``timings`` (ship-in, sandbox, bring-back): a phase named twice adds up."""
    from ralph.api.workspace import PhaseClock

    ticks = iter([10.0, 12.5, 20.0, 21.0])
    clock = PhaseClock()
    clock._time = lambda: next(ticks)
    clock._last = clock._time()
    clock.lap("ship_in")
    clock.lap("sandbox")
    clock.lap("ship_in")
    assert clock.laps == {"ship_in": 3.5, "sandbox": 7.5}


def counting(calls: list[tuple[str, ...]]) -> Any:
    """``inside.run_git`` that records each call's arguments."""
    def run(repo: Path, *args: str, **kw: Any) -> Any:
        calls.append(args)
        return inside.run_git(repo, *args, **kw)
    return run


def inside_exchange(project: Path, checkout: Path, tmp_path: Path) -> tuple[AgentCheckout, Any]:
    import sys

    from ralph.workspace import inside_script

    return AgentCheckout(project, str(checkout), [sys.executable, "-I", "-S", str(inside_script())]), local_inside(tmp_path)


def test_a_ship_in_puts_the_projects_bytes_back_whatever_the_agents_index_and_stat_data_say(pair, tmp_path) -> None:
    """The agent's index is never what decides which files the ship-in rewrites: flags, forged stat data,
    a mode, a deleted file, a file made a directory, a .gitignore that hides a stray file."""
    project, _ = pair
    for name, text in [("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n"), ("d.txt", "d\n"), ("e.sh", "e\n"),
                       ("f.txt", "f\n"), ("sub/g.txt", "g\n"), (".gitignore", "*.log\n")]:
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text(text)
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "files")
    checkout = tmp_path / "agent-checkout"
    exchange, run = inside_exchange(project, checkout, tmp_path)
    exchange.ship_in(run)
    reference = {path: (checkout / path).stat() for path in ("a.txt", "c.txt")}

    (checkout / "a.txt").write_text("A\n")
    git(checkout, "update-index", "--assume-unchanged", "a.txt")
    (checkout / "b.txt").write_text("B\n")
    git(checkout, "update-index", "--skip-worktree", "b.txt")
    (checkout / "c.txt").write_text("C\n")  # same size, the old mtime: only the bytes differ
    os.utime(checkout / "c.txt", ns=(reference["c.txt"].st_atime_ns, reference["c.txt"].st_mtime_ns))
    (checkout / "d.txt").unlink()
    (checkout / "e.sh").chmod(0o755)
    (checkout / "f.txt").unlink()
    (checkout / "f.txt").mkdir()
    (checkout / "f.txt" / "inner").write_text("x\n")
    (checkout / "sub" / "g.txt").write_text("G\n")
    (checkout / ".gitignore").write_text("*.log\nstray.txt\n")
    (checkout / "stray.txt").write_text("the agent's\n")
    (checkout / "kept.log").write_text("ignored: the agent's own\n")

    exchange.ship_in(run)

    for path in ("a.txt", "b.txt", "c.txt", "d.txt", "e.sh", "f.txt", "sub/g.txt", ".gitignore"):
        assert (checkout / path).read_bytes() == (project / path).read_bytes(), path
    assert not (checkout / "e.sh").stat().st_mode & 0o111
    assert not (checkout / "stray.txt").exists()  # not ignored once the project's .gitignore is back
    assert not (checkout / "kept.log").exists()  # ignored leftovers of the agent's go too: the gates see the project
    assert git(checkout, "status", "--porcelain") == ""
    assert {line[0] for line in git(checkout, "ls-files", "-v").splitlines()} == {"H"}  # no flag left in the index


def test_an_unchanged_checkout_is_shipped_into_with_three_git_calls_and_no_file_rewritten(pair, tmp_path) -> None:
    project, node = pair
    before = {path: (node / path).stat().st_mtime_ns for path in ("notes.txt", "blob.bin")}
    calls: list[tuple[str, ...]] = []

    inside.apply(node, capture(project, [head(project)]), "main", git=counting(calls))

    assert [call[0] for call in calls] == ["reset", "status", "ls-files"]  # ls-files: the agent's ignored leftovers
    assert {path: (node / path).stat().st_mtime_ns for path in before} == before
    assert git(node, "symbolic-ref", "HEAD") == "refs/heads/main\n" and head(node) == head(project)


def test_a_ship_in_replaces_a_linked_head_and_never_writes_through_it(pair, tmp_path) -> None:
    project, node = pair
    outside = tmp_path / "outside"
    outside.write_text("the person's\n")
    (node / ".git" / "HEAD").unlink()
    (node / ".git" / "HEAD").symlink_to(outside)

    inside.apply(node, capture(project), "main")

    assert outside.read_text() == "the person's\n"
    assert not (node / ".git" / "HEAD").is_symlink() and head(node) == head(project)


def test_an_unchanged_checkout_is_captured_with_one_git_call_and_no_diff_or_tar(pair) -> None:
    project, node = pair
    calls: list[tuple[str, ...]] = []

    state = inside.capture(node, [head(project)], counting(calls))

    assert [call[0] for call in calls] == ["status"]
    assert (state.head, state.bundle, state.diff, state.untracked) == (head(project), None, b"", b"")


def test_the_status_lists_the_untracked_files_ls_files_lists(pair) -> None:
    """One status stands in for ``rev-parse``, ``diff``'s emptiness and ``ls-files --others``: the same names,
    odd ones included (spaces, a newline, a leading "? ", bytes that are not UTF-8, a nested repository)."""
    _, node = pair
    names = ["plain.txt", "with space.txt", "new\nline.txt", "? looks like a record", "dir/deeper/file.txt"]
    for name in names:
        (node / name).parent.mkdir(parents=True, exist_ok=True)
        (node / name).write_text("x\n")
    (node / os.fsdecode(b"bytes-\xff.txt")).write_text("x\n")
    git(node / "dir", "init", "-q", "nested")
    found = inside.checkout_status(node)
    assert sorted(found.untracked or []) == sorted(inside.untracked_names(node))
    assert (found.head, found.branch, found.changed) == (head(node), "main", False)
    (node / "notes.txt").write_text("changed\n")
    assert inside.checkout_status(node).changed
    git(node, "add", "notes.txt")
    git(node, "checkout", "-q", "--detach")
    assert (inside.checkout_status(node).changed, inside.checkout_status(node).branch) == (True, None)
