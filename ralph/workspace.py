"""Ship a git workspace to another machine and back: commits, uncommitted changes, untracked files.

A runner whose agent does not share this machine's filesystem (a Ray node, a
Kubernetes pod, a Slurm job) keeps its own checkout of the project.  Before an
iteration the loop sends it a :class:`WorkspaceState` (a git bundle of the
commits it lacks, the binary diff of tracked files against ``HEAD``, and a tar
of untracked, not-ignored files); after the iteration the checkout sends one
back and :func:`mirror` makes the project exactly what the agent left, so the
loop's validators, gates and git checks see what direct mode would show them.

Standard library and the ``git`` binary only.  Ignored files (``.venv``,
build output) never travel: each side keeps its own.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

# Nothing a repository's files configure may run a program while we read or write it: every
# call goes through ralph.gitutil.git (hardened, and on the loop's side after the metadata check).


class WorkspaceError(Exception):
    """A workspace state that cannot be captured or applied; the target was left as it was."""


@dataclass
class WorkspaceState:
    """Everything that differs between two checkouts of one repository, as bytes."""

    head: str
    """The commit checked out (``HEAD``)."""
    bundle: bytes | None
    """A git bundle with the commits the receiver lacks (None: it has ``head``)."""
    diff: bytes
    """``git diff --binary HEAD``: every change to tracked files, staged or not."""
    untracked: bytes
    """A tar of the untracked files git does not ignore."""
    untracked_names: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes that travel."""
        return len(self.bundle or b"") + len(self.diff) + len(self.untracked)


def git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run git in ``repo`` with nothing configurable able to start a program (ralph.gitutil.git)."""
    from ralph.gitutil import git as hardened_git

    result = hardened_git(repo, *args, check=False, binary=True, input=input)
    if check and result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip() or f"exit {result.returncode}"
        raise WorkspaceError(f"git {' '.join(args[:3])} in {repo}: {message}")
    return result


def head(repo: Path) -> str:
    """The commit ``HEAD`` points at."""
    return git(repo, "rev-parse", "--verify", "HEAD").stdout.decode().strip()


def untracked_names(repo: Path) -> list[str]:
    """Untracked files that git does not ignore, relative to ``repo``."""
    out = git(repo, "ls-files", "-z", "--others", "--exclude-standard").stdout
    return [name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]


def capture(repo: Path, known: Iterable[str] = ()) -> WorkspaceState:
    """The state of ``repo``, with a bundle of what a receiver that has ``known`` commits lacks."""
    current = head(repo)
    known = [sha for sha in known if sha]
    bundle = None if current in known else _bundle(repo, current, known)
    diff = git(repo, "diff", "--binary", "--no-ext-diff", "--no-textconv", "HEAD").stdout
    names = untracked_names(repo)
    return WorkspaceState(current, bundle, diff, _tar(repo, names), names)


def _bundle(repo: Path, current: str, known: list[str]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="ralph-bundle-") as tmp:
        path = Path(tmp) / "ship.bundle"
        # a ref name is required in a bundle; a private one avoids touching the user's refs
        git(repo, "update-ref", "refs/ralph/ship", current)
        try:
            exclusions = [f"^{sha}" for sha in known if _has_commit(repo, sha)]
            git(repo, "-c", "pack.compression=1", "bundle", "create", "-q", str(path), "refs/ralph/ship", *exclusions)
        finally:
            git(repo, "update-ref", "-d", "refs/ralph/ship", check=False)
        return path.read_bytes()


def _has_commit(repo: Path, sha: str) -> bool:
    return git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0


def _tar(repo: Path, names: list[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in names:
            archive.add(repo / name, arcname=name, recursive=False)
    return buffer.getvalue()


def init_checkout(repo: Path) -> None:
    """An empty repository to receive a first :class:`WorkspaceState`."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")


def mirror(repo: Path, state: WorkspaceState, *, branch: str | None = None, must_descend: str | None = None) -> None:
    """Make ``repo`` exactly ``state``: ``HEAD`` (on ``branch``), tracked changes and untracked files.

    Everything is checked before anything changes: the bundle must verify, the
    new ``HEAD`` must descend from ``must_descend`` when given, the diff must
    apply to it and the untracked files must stay inside ``repo``.  On any
    failure :class:`WorkspaceError` is raised and ``repo`` is as it was.
    """
    if state.bundle is not None:
        _unbundle(repo, state.bundle)
    if not _has_commit(repo, state.head):
        raise WorkspaceError(f"commit {state.head[:12]} is missing in {repo} and was not shipped")
    if must_descend and git(repo, "merge-base", "--is-ancestor", must_descend, state.head, check=False).returncode:
        raise WorkspaceError(
            f"the workspace's HEAD {state.head[:12]} does not descend from {must_descend[:12]} "
            "(history was rewritten on the other side); nothing was applied"
        )
    _check_diff(repo, state)
    members = _check_tar(state.untracked)
    # -- from here on the repository changes -------------------------------------------
    stale = set(untracked_names(repo)) - set(state.untracked_names)
    if branch:
        git(repo, "checkout", "-q", "-f", "-B", branch, state.head)
    else:
        git(repo, "reset", "-q", "--hard", state.head)
    for name in sorted(stale, reverse=True):
        path = repo / name
        if path.is_symlink() or path.is_file():
            path.unlink()
    if state.diff:
        git(repo, "apply", "--binary", "--whitespace=nowarn", "-", input=state.diff)
    if members:
        with tarfile.open(fileobj=io.BytesIO(state.untracked), mode="r") as archive:
            archive.extractall(repo, members=members, filter="data")


def _unbundle(repo: Path, bundle: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="ralph-bundle-") as tmp:
        path = Path(tmp) / "in.bundle"
        path.write_bytes(bundle)
        git(repo, "bundle", "verify", "-q", str(path))
        git(repo, "fetch", "-q", "--no-tags", "--no-write-fetch-head", str(path), "refs/ralph/ship:refs/ralph/received")
        git(repo, "update-ref", "-d", "refs/ralph/received", check=False)


def _check_diff(repo: Path, state: WorkspaceState) -> None:
    if not state.diff:
        return
    with tempfile.TemporaryDirectory(prefix="ralph-index-") as tmp:
        from ralph.gitutil import git as hardened_git

        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        for args in (["read-tree", state.head], ["apply", "--cached", "--check", "--binary", "-"]):
            result = hardened_git(repo, *args, env=env, check=False, binary=True,
                                  input=state.diff if args[0] == "apply" else None)
            if result.returncode:
                message = result.stderr.decode("utf-8", "replace").strip()
                raise WorkspaceError(f"the uncommitted changes do not apply to {state.head[:12]}: {message}")


def _check_tar(data: bytes) -> list[tarfile.TarInfo]:
    if not data:
        return []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
        members = archive.getmembers()
    for member in members:
        name = Path(member.name)
        if name.is_absolute() or ".." in name.parts or name.parts[:1] == (".git",):
            raise WorkspaceError(f"untracked file {member.name!r} would land outside the checkout; nothing was applied")
        if member.issym() or member.islnk():
            target = Path(member.linkname)
            if target.is_absolute() or ".." in target.parts:
                raise WorkspaceError(
                    f"untracked link {member.name!r} points outside the checkout ({member.linkname}); nothing was applied"
                )
    return members





def receive_branch(repo: Path, state: WorkspaceState, branch: str) -> str:
    """Store ``state``'s commits in ``repo`` as ``refs/heads/BRANCH``, never touching its working tree.

    A new branch is created; an existing one only moves forward (the new head
    must descend from it).  Returns ``created``, ``updated`` or ``unchanged``.
    """
    if state.bundle is not None:
        _unbundle(repo, state.bundle)
    if not _has_commit(repo, state.head):
        raise WorkspaceError(f"commit {state.head[:12]} is missing in {repo} and was not shipped")
    ref = f"refs/heads/{branch}"
    current = git(repo, "rev-parse", "-q", "--verify", ref, check=False).stdout.decode().strip()
    if current == state.head:
        return "unchanged"
    if current and git(repo, "merge-base", "--is-ancestor", current, state.head, check=False).returncode:
        raise WorkspaceError(
            f"branch {branch} already exists at {current[:12]} and {state.head[:12]} does not descend from it; "
            "rename or delete it and run again"
        )
    current_head_ref = git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.decode().strip()
    if current_head_ref == ref:
        raise WorkspaceError(f"branch {branch} is checked out here; switch to another branch and run again")
    git(repo, "update-ref", ref, state.head, *([current] if current else []))
    return "updated" if current else "created"

__all__ = ["WorkspaceError", "WorkspaceState", "capture", "head", "init_checkout", "mirror", "receive_branch", "untracked_names"]
