"""The loop's own index (``ralph.privateindex``): during a run "committed" and "clean" are decided against an index
the loop makes from ``HEAD`` for every status, in its run directory, never the repository's ``.git/index`` (which
the agent can write).  The person's index is left as it was; the skip-worktree paths of a sparse checkout are those
the person's index had when the run started; a nested repository committed during the run is named, a submodule that
was there at the start is compared inside (its metadata protected like the project's).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from ralph import gitutil
from ralph.gitutil import GitMetadataChanged, StatusShare, tree_status
from ralph.testing.project import GIT_IDENTITY
from test_person_refs import commit, sh


@pytest.fixture(name="repo")
def _repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    sh(path, "init", "-q", "-b", "main")
    commit(path, "a")
    return path


@pytest.fixture
def private(repo: Path, tmp_path: Path) -> Iterator[Any]:
    """``repo`` as a run sees it: protected, its status taken against the loop's own index."""
    yield from _private(repo, tmp_path)


def _private(repo: Path, tmp_path: Path) -> Iterator[Any]:
    gitutil.protect(repo)
    try:
        yield gitutil.use_private_index(repo, tmp_path / "run" / "private-index")
    finally:
        gitutil.drop_private_index(repo)
        gitutil.unprotect(repo)


def index_bytes(repo: Path) -> bytes:
    return (Path(sh(repo, "rev-parse", "--absolute-git-dir")) / "index").read_bytes()


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_a_flag_set_in_the_repositorys_index_during_the_run_hides_nothing(repo: Path, private: Any, flag: str) -> None:
    sh(repo, "update-index", flag, "a")
    (repo / "a").write_text("edited after the flag\n")
    assert sh(repo, "status", "--porcelain") == ""  # what git itself says
    person = index_bytes(repo)
    assert tree_status(repo).porcelain() == [" M a"]
    assert index_bytes(repo) == person  # the person's index is left as it was
    assert private.path.parent.name == "private-index" and private.path.is_file()


def test_the_repositorys_index_is_never_read(repo: Path, private: Any) -> None:
    """An index of another tree in ``.git/index`` (what a forged entry amounts to): the status is HEAD's."""
    commit(repo, "b")
    (repo / "b").write_text("edited\n")
    sh(repo, "read-tree", "HEAD~1")  # the repository's index now lists no b at all
    assert tree_status(repo).porcelain() == [" M b"]
    (repo / "b").write_text("b\n")
    assert tree_status(repo).porcelain() == []


def test_git_processes_per_status_and_the_share_still_holds(repo: Path, private: Any,
                                                           calls_to: Callable[[object, str], list[Any]]) -> None:
    spawned = calls_to(gitutil, "git_argv")
    share = StatusShare(repo)
    first = share.get()
    assert share.get() is first  # making the loop's own index is no change of the tree
    assert len(spawned) == 2  # read-tree HEAD, status
    spawned.clear()
    assert tree_status(repo) == first and len(spawned) == 1  # HEAD and the index as the loop made them: the status
    commit(repo, "b")
    spawned.clear()
    assert tree_status(repo).porcelain() == [] and len(spawned) == 2  # HEAD moved: made anew


def test_the_index_is_made_anew_when_its_file_changed(repo: Path, private: Any) -> None:
    assert tree_status(repo).porcelain() == []
    env = {**__import__("os").environ, "GIT_INDEX_FILE": str(private.path)}
    subprocess.run(["git", "update-index", "--assume-unchanged", "a"], cwd=repo, env=env, check=True)
    (repo / "a").write_text("edited, flagged in the loop's own index\n")
    assert tree_status(repo).porcelain() == [" M a"]


def test_head_moved_back_is_seen_whatever_the_key_says(repo: Path, private: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``git reset --soft HEAD~1`` keeps the newer file in the tree: against the older HEAD it is not committed.
    With a key that misses the move (a reftable, say) the status's own HEAD still makes the index anew."""
    commit(repo, "b")
    assert tree_status(repo).porcelain() == []
    monkeypatch.setattr(private, "_head_key", lambda: ("the same",))
    tree_status(repo)  # kept under that key
    sh(repo, "reset", "-q", "--soft", "HEAD~1")
    sh(repo, "rm", "-q", "--cached", "b")
    assert tree_status(repo).porcelain() == ["?? b"]


def test_a_stop_hooks_status_is_not_kept(repo: Path, private: Any, calls_to: Callable[[object, str], list[Any]]) -> None:
    tree_status(repo, while_agent_runs=True)
    spawned = calls_to(gitutil, "git_argv")
    tree_status(repo)
    assert len(spawned) == 2


def test_before_the_first_commit_the_status_is_against_the_empty_tree(tmp_path: Path) -> None:
    path = tmp_path / "fresh"
    path.mkdir()
    sh(path, "init", "-q")
    (path / "new.txt").write_text("n\n")
    for _ in _private(path, tmp_path):
        status = tree_status(path)
        assert status.head == "" and status.untracked == ["new.txt"] and status.tracked == []


# -- sparse checkout: the run-start skip-worktree paths -----------------------------------------------------------


@pytest.fixture
def sparse(repo: Path, tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    for name in ("in/x", "out/y", "out/z"):
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(f"{name}\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "tree")
    sh(repo, "sparse-checkout", "set", "--no-cone", "/in/", "/a")
    assert not (repo / "out").exists() and sh(repo, "status", "--porcelain") == ""
    for private in _private(repo, tmp_path):
        yield repo, private


def test_paths_sparse_at_the_start_are_not_reported_deleted(sparse: tuple[Path, Any]) -> None:
    repo, private = sparse
    assert set(private.sparse) == {"out/y", "out/z"}
    assert tree_status(repo).porcelain() == []


def test_a_sparse_path_the_agent_writes_is_compared(sparse: tuple[Path, Any]) -> None:
    repo, _ = sparse
    (repo / "out").mkdir()
    (repo / "out" / "y").write_text("written where the checkout is sparse\n")
    (repo / "out" / "z").write_text("out/z\n")  # as committed: nothing to report
    assert tree_status(repo).porcelain() == [" M out/y"]


def test_a_local_edit_the_person_hid_with_skip_worktree_stays_theirs_until_it_changes(repo: Path,
                                                                                      tmp_path: Path) -> None:
    commit(repo, "local.cfg")
    sh(repo, "update-index", "--skip-worktree", "local.cfg")  # the person's local setting, kept out of git's sight
    (repo / "local.cfg").write_text("my local setting\n")
    for _ in _private(repo, tmp_path):
        assert tree_status(repo).porcelain() == []
        (repo / "local.cfg").write_text("the agent's edit of the person's file\n")
        assert tree_status(repo).porcelain() == [" M local.cfg"]
        (repo / "local.cfg").unlink()
        assert tree_status(repo).porcelain() == [" D local.cfg"]


def test_a_skip_worktree_flag_added_after_the_start_hides_nothing(sparse: tuple[Path, Any]) -> None:
    repo, _ = sparse
    sh(repo, "update-index", "--skip-worktree", "in/x")
    (repo / "in" / "x").unlink()
    assert tree_status(repo).porcelain() == [" D in/x"]


# -- gitlinks -------------------------------------------------------------------------------------------------------


def nested(path: Path, name: str = "code.py") -> str:
    path.mkdir(parents=True, exist_ok=True)
    sh(path, "init", "-q")
    (path / name).write_text("VALUE = 1\n")
    sh(path, "add", "-A")
    sh(path, "commit", "-qm", "nested")
    return sh(path, "rev-parse", "HEAD")


def test_a_nested_repository_committed_during_the_run_is_named(repo: Path, private: Any) -> None:
    nested(repo / "lib")
    sh(repo, "add", "lib")
    sh(repo, "commit", "-qm", "lib as a gitlink")
    status = tree_status(repo)
    assert status.gitlinks == ("lib",) and status.porcelain() == []


@pytest.fixture
def submodule(repo: Path, tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    upstream = tmp_path / "upstream"
    nested(upstream)
    subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub"], cwd=repo,
                   check=True, capture_output=True, env={**__import__("os").environ, **GIT_IDENTITY})
    sh(repo, "commit", "-qm", "a submodule")
    for private in _private(repo, tmp_path):
        yield repo, private


def test_a_submodule_there_at_the_start_keeps_working(submodule: tuple[Path, Any]) -> None:
    repo, private = submodule
    assert set(private.submodules) == {"sub"}
    status = tree_status(repo)
    assert status.porcelain() == [] and status.gitlinks == ()


def test_uncommitted_work_in_a_submodule_there_at_the_start_counts(submodule: tuple[Path, Any]) -> None:
    repo, _ = submodule
    (repo / "sub" / "code.py").write_text("VALUE = 'uncommitted'\n")
    (repo / "sub" / "new.py").write_text("new\n")
    assert sorted(tree_status(repo).porcelain()) == [" M sub/code.py", "?? sub/new.py"]


def test_a_flag_in_the_submodules_own_index_hides_nothing(submodule: tuple[Path, Any]) -> None:
    repo, _ = submodule
    sh(repo / "sub", "update-index", "--assume-unchanged", "code.py")
    (repo / "sub" / "code.py").write_text("VALUE = 'hidden from its index'\n")
    assert tree_status(repo).porcelain() == [" M sub/code.py"]


def test_a_commit_in_the_submodule_the_project_does_not_record_counts(submodule: tuple[Path, Any]) -> None:
    repo, _ = submodule
    (repo / "sub" / "code.py").write_text("VALUE = 2\n")
    sh(repo / "sub", "commit", "-qam", "inside only")
    assert tree_status(repo).porcelain() == [" M sub", " M sub/code.py"]  # not the commit the project records
    sh(repo, "add", "sub")
    sh(repo, "commit", "-qm", "the project records it")
    assert tree_status(repo).gitlinks == ("sub",)  # moved during the run: no longer vouched for


def test_the_submodules_metadata_is_protected(submodule: tuple[Path, Any]) -> None:
    repo, _ = submodule
    config = Path(sh(repo / "sub", "rev-parse", "--absolute-git-dir")) / "config"
    before = config.read_bytes()
    with config.open("a") as handle:
        handle.write("[filter \"x\"]\n\tclean = false\n")
    with pytest.raises(GitMetadataChanged):
        tree_status(repo)
    assert config.read_bytes() == before


def test_files_put_into_a_submodule_that_was_not_checked_out_are_named(repo: Path, tmp_path: Path) -> None:
    commit_id = nested(tmp_path / "elsewhere")
    sh(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit_id},lib")
    sh(repo, "commit", "-qm", "a submodule, not checked out here")
    (repo / "lib").mkdir()
    for _ in _private(repo, tmp_path):
        assert tree_status(repo).gitlinks == ()
        (repo / "lib" / "code.py").write_text("VALUE = 'in no commit of the project'\n")
        assert sh(repo, "status", "--porcelain") == ""  # git lists nothing in a gitlink's directory
        assert tree_status(repo).gitlinks == ("lib",)


# -- what a file's content is: the person's global filters, taken at the start ----------------------------------------


def test_a_filter_in_the_persons_global_config_applies(repo: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A Git LFS-like clean filter configured only globally: the file is as committed, and stays clean."""
    config = tmp_path / "global.gitconfig"
    config.write_text('[filter "upper"]\n\tclean = tr a-z A-Z\n\tsmudge = cat\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    (repo / ".gitattributes").write_text("*.txt filter=upper\n")
    (repo / "big.txt").write_text("content\n")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-qm", "filtered")
    assert sh(repo, "show", "HEAD:big.txt") == "CONTENT"
    for _ in _private(repo, tmp_path):
        config.write_text("")  # read at the start: a later change decides nothing
        assert tree_status(repo).porcelain() == []
        (repo / "big.txt").write_text("changed\n")
        assert tree_status(repo).porcelain() == [" M big.txt"]


def test_what_differed_in_a_submodule_at_the_start_stays_the_persons_until_it_changes(repo: Path, tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    nested(upstream)
    subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub"], cwd=repo,
                   check=True, capture_output=True, env={**__import__("os").environ, **GIT_IDENTITY})
    sh(repo, "commit", "-qm", "a submodule")
    (repo / "sub" / "mine.txt").write_text("the person's notes\n")
    (repo / "sub" / "more.py").write_text("x\n")
    sh(repo / "sub", "add", "more.py")
    sh(repo / "sub", "commit", "-qm", "the person's commit, not recorded in the project yet")
    for _ in _private(repo, tmp_path):
        assert tree_status(repo).porcelain() == []
        (repo / "sub" / "mine.txt").write_text("the agent's edit\n")
        assert tree_status(repo).porcelain() == ["?? sub/mine.txt"]
        sh(repo / "sub", "commit", "-q", "--allow-empty", "-m", "the agent's")
        assert tree_status(repo).porcelain() == [" M sub", "?? sub/mine.txt"]


def test_the_tree_guard_takes_a_dirty_submodule_before_the_gate_as_it_was(submodule: tuple[Path, Any]) -> None:
    """A gate's snapshot of a tree with uncommitted work in a submodule (which ``git stash create`` does not hold):
    a gate that changed nothing changed nothing; one that writes there is seen."""
    from ralph.loop.treeguard import TreeSnapshot

    repo, _ = submodule
    (repo / "sub" / "code.py").write_text("VALUE = 'uncommitted'\n")
    snapshot = TreeSnapshot.take(repo)
    assert snapshot.changes() == []
    (repo / "sub" / "code.py").write_text("VALUE = 'the gate wrote this'\n")
    assert snapshot.changes() == ["changed sub/code.py"]
