"""Ship a git workspace to where the agent works and back: commits, uncommitted changes, untracked files.

A runner whose agent does not work on the project itself keeps a checkout of its own for it: a
container's volume (``docker-sandbox``), a sandbox directory (bubblewrap), a Ray node's temp
directory (``ray``).  Before the agent runs, the project's state goes there as a
:class:`WorkspaceState` (a git bundle of the commits the checkout lacks, the binary diff of tracked
files against ``HEAD``, a tar of untracked, not-ignored files); after it ran, the checkout's state
comes back, captured *where the checkout is* (:mod:`ralph.workspace_inside`, so no git of this
machine ever runs on the agent's ``.git``), and :func:`mirror` makes the project exactly what the
agent left, so the loop's validators, gates and git checks see what direct mode would show them.

What comes back is the agent's: :func:`check` reads it as bytes before anything touches the project.

- the bundle's objects go to a quarantine object directory first (``index-pack --strict``: git's
  fsck, which refuses ``.git`` entries in trees and malformed objects), must be complete, and the new
  ``HEAD`` must descend from the run's branch (``must_descend``);
- the trees that would be checked out (``HEAD``'s, and ``HEAD`` with the diff applied) may hold only
  files, executables, directories and symlinks: no gitlink (submodule), no path with a ``.git``,
  ``.`` or ``..`` component, and no symlink that leads out of the tree or into ``.git`` (resolved
  through the tree's other symlinks) unless the project's own ``HEAD`` has the very same link;
- untracked files are regular files, symlinks (checked the same way) or directories, each once, on
  no tracked path, under no symlink, and not in the way of a symlinked directory on this machine;
- no path the project does not track now (a tracked one, or an untracked file) lands on or under
  what git ignores in the project (the person's ``.env``, the ``.venv`` a sandbox shows read-only):
  git's checkout would overwrite an ignored file, and the agent never had it.

Only then is the project changed, by git's own checkout (which never writes through a symlink) and
by :mod:`ralph.safeio`; a refusal is :class:`WorkspaceRefused`, naming the entry, with the project
as it was.  Ignored files (``.venv``, build output) never travel: each side keeps its own.

:class:`AgentCheckout` is the one exchange every such runner uses, given its own primitive that runs
a command where the checkout is (``docker exec``, ``bwrap``, a Ray actor call).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Sequence

from ralph.errors import RalphError
from ralph.workspace_inside import CheckoutStatus, WorkspaceError, WorkspaceState, decode, encode
from ralph.workspace_inside import capture as _capture
from ralph.workspace_inside import checkout_status as _checkout_status
from ralph.workspace_inside import under_any
from ralph.workspace_inside import untracked_names as _untracked_names

MAX_STATE_BYTES = 2 << 30
"""Bytes a state from a checkout may have (the rest is refused unread)."""
MAX_SYMLINK_HOPS = 40
"""Symlinks followed while resolving one link's target (the kernel's limit)."""
ALLOWED_MODES = {"100644", "100755", "120000"}

# Nothing a repository's files configure may run a program while we read or write it: every
# call on this machine goes through ralph.gitutil.git (hardened, after the metadata check).


class WorkspaceRefused(WorkspaceError, RalphError):
    """What came back from the agent's checkout breaks a rule of :func:`check`: nothing was applied."""

    exit_code = 2


def git(repo: Path, *args: str, input: bytes | None = None, check: bool = True,  # noqa: A002
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run git in ``repo`` with nothing configurable able to start a program (ralph.gitutil.git)."""
    from ralph.gitutil import git as hardened_git

    result = hardened_git(repo, *args, check=False, binary=True, input=input, env=env)
    if check and result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip() or f"exit {result.returncode}"
        raise WorkspaceError(f"git {' '.join(args[:3])} in {repo}: {message}")
    return result


def head(repo: Path) -> str:
    """The commit ``HEAD`` points at."""
    return git(repo, "rev-parse", "--verify", "HEAD").stdout.decode().strip()


def untracked_names(repo: Path) -> list[str]:
    """Untracked files that git does not ignore, relative to ``repo``."""
    return _untracked_names(repo, git)


def checkout_status(repo: Path) -> CheckoutStatus:
    """``HEAD``, its branch, whether tracked files changed and the untracked files of ``repo``, in one git call."""
    return _checkout_status(repo, git)


def capture(repo: Path, known: Iterable[str] = (), skip: Iterable[str] = (),
            found: CheckoutStatus | None = None) -> WorkspaceState:
    """The state of ``repo`` (a checkout of this machine's that the loop trusts), with a bundle of
    what a receiver that has the ``known`` commits lacks; untracked files at or under ``skip`` left out
    (``found``: its :func:`checkout_status` taken just before)."""
    return _capture(repo, known, git, skip, found)


def ignored_entries(repo: Path) -> frozenset[str]:
    """What git ignores in ``repo`` now: files, and directories ignored as a whole (relative paths)."""
    out = git(repo, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory").stdout
    return frozenset(name.rstrip("/") for name in out.decode("utf-8", "surrogateescape").split("\0") if name)


def init_checkout(repo: Path) -> None:
    """An empty repository to receive a first :class:`WorkspaceState`."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")


# -- the checks --------------------------------------------------------------------------------


@dataclass
class Checked:
    """A state that passed :func:`check`: its objects in ``quarantine``, the tree it makes (``tree``)
    and its untracked members, ready for :func:`mirror` to apply."""

    state: WorkspaceState
    quarantine: Path
    """A private directory holding the bundle's objects (``objects/``) and a scratch index."""
    tree: str
    """The tree of ``HEAD`` with the diff applied: what the tracked files become."""
    objects: str = ""
    """The project's object directory (read as an alternate: the quarantine's objects build on it)."""
    members: list[tarfile.TarInfo] = field(default_factory=list)
    head_tree: str = ""
    """The tree of the state's ``HEAD`` (``tree`` when there is no diff)."""

    def env(self) -> dict[str, str]:
        """git's environment that sees the quarantined objects as well as the project's."""
        return {"GIT_OBJECT_DIRECTORY": str(self.quarantine / "objects"),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": self.objects}

    def discard(self) -> None:
        """Remove the quarantine (its objects were moved, or are not wanted)."""
        shutil.rmtree(self.quarantine, ignore_errors=True)


def check(repo: Path, state: WorkspaceState, *, must_descend: str | None = None,
          ignored: frozenset[str] = frozenset(), objects: str | None = None) -> Checked:
    """Check ``state`` (from a checkout the agent controlled) against ``repo`` without changing ``repo``.

    ``ignored``: what git ignored in ``repo`` when the run started (:func:`ignored_entries`), the person's
    even after the agent's ``.gitignore`` stopped ignoring it; ``objects``: ``repo``'s object directory
    when the caller knows it.
    Returns the :class:`Checked` state (call :meth:`Checked.discard` when not applying it);
    :class:`WorkspaceRefused` names what broke a rule (see the module's docstring).
    """
    if state.size > MAX_STATE_BYTES:
        raise WorkspaceRefused(f"the workspace state is {state.size} bytes, more than {MAX_STATE_BYTES}")
    quarantine = Path(tempfile.mkdtemp(prefix="ralph-incoming-"))
    checked = Checked(state, quarantine, "")
    try:
        checked.objects = objects or _objects_dir(repo)
        (quarantine / "objects" / "pack").mkdir(parents=True)
        env = checked.env()
        if state.bundle is not None:
            _receive_bundle(repo, state, env)
        checked.head_tree = _commit_tree(repo, state.head, env)
        if must_descend and must_descend != state.head and git(
                repo, "merge-base", "--is-ancestor", must_descend, state.head, env=env, check=False).returncode:
            raise WorkspaceRefused(
                f"the workspace's HEAD {state.head[:12]} does not descend from {must_descend[:12]} "
                "(history was rewritten on the other side); nothing was applied"
            )
        base = must_descend or _head_or_none(repo)
        committed = _checked_entries(repo, checked.head_tree, env, "the commit")
        checked.tree = _tree_with_diff(repo, state, checked) if state.diff else checked.head_tree
        same = checked.tree == checked.head_tree
        tracked = committed if same else _checked_entries(repo, checked.tree, env, "the uncommitted changes")
        checked.members, untracked_links = _check_untracked(repo, state.untracked, tracked)
        _check_links(repo, committed if same else committed + tracked, untracked_links, base, env)
        _check_ignored_here(repo, committed if same else committed + tracked, checked.members, ignored)
        state.untracked_names = [member.name for member in checked.members if not member.isdir()]
        return checked
    except BaseException:
        checked.discard()
        raise


def _commit_tree(repo: Path, commit: str, env: dict[str, str]) -> str:
    """The tree of ``commit`` (:class:`WorkspaceRefused` when ``commit`` is not a commit here), one git call."""
    out = git(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)", input=f"{commit}\n{commit}^{{tree}}\n".encode(),
              env=env, check=False).stdout.decode("utf-8", "replace").split("\n")
    if len(out) < 2 or out[0] != f"{commit} commit" or not out[1].endswith(" tree"):
        raise WorkspaceRefused(f"commit {commit[:12]} is missing in {repo} and was not shipped")
    return out[1].split(" ", 1)[0]


def _objects_dir(repo: Path) -> str:
    return git(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects").stdout.decode().strip()


def _head_or_none(repo: Path) -> str | None:
    result = git(repo, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
    return result.stdout.decode().strip() or None


def _receive_bundle(repo: Path, state: WorkspaceState, env: dict[str, str]) -> None:
    """The bundle's objects into the quarantine (fsck'd, thin packs completed from the project)."""
    bundle = state.bundle or b""
    lines, pack = _bundle_header(bundle)
    refs = [line for line in lines if not line.startswith(("-", "@"))]
    prerequisites = [line[1:].split(" ", 1)[0] for line in lines if line.startswith("-")]
    if len(refs) != 1 or refs[0].split(" ", 1)[0] != state.head:
        raise WorkspaceRefused("the bundle does not hold exactly the shipped HEAD")
    for sha in prerequisites:
        if not _is_sha(sha) or git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode:
            raise WorkspaceRefused(f"the bundle needs commit {sha[:12]}, which the project does not have")
    result = git(repo, "index-pack", "--stdin", "--strict", "--fix-thin", input=pack, env=env, check=False)
    if result.returncode:
        raise WorkspaceRefused("the bundle's objects were refused: "
                               + _one_line(result.stderr.decode("utf-8", "replace")))
    listed = git(repo, "rev-list", "--objects", "--quiet", state.head, "--not", *prerequisites, "--", env=env,
                 check=False)
    if listed.returncode:
        raise WorkspaceRefused(f"the bundle does not hold every object of {state.head[:12]}")


def _bundle_header(bundle: bytes) -> tuple[list[str], bytes]:
    end = bundle.find(b"\n\n")
    if end < 0 or end > (1 << 20):
        raise WorkspaceRefused("the bundle has no header")
    lines = bundle[:end].decode("utf-8", "replace").split("\n")
    if lines[0] not in ("# v2 git bundle", "# v3 git bundle"):
        raise WorkspaceRefused("the bundle is not a git bundle (v2 or v3)")
    capabilities = [line for line in lines[1:] if line.startswith("@")]
    if any(c not in ("@object-format=sha1", "@object-format=sha256") for c in capabilities):
        raise WorkspaceRefused("the bundle asks for a capability ralph does not take (a filter?)")
    return lines[1:], bundle[end + 2:]


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


Entry = tuple[str, str, str]
"""(mode, object id, path) of one tree entry."""


_CHECKED_TREES: dict[str, list[Entry]] = {}
"""Trees that passed :func:`_check_entries`, by id (a tree's id names its entries: they cannot change), the
oldest first; a bring-back of work that changed no file lists no tree."""
CHECKED_TREES_KEPT = 8
_checked_trees_lock = threading.Lock()


def _checked_entries(repo: Path, tree: str, env: dict[str, str], what: str) -> list[Entry]:
    """The entries of ``tree`` (present in ``repo`` with ``env``), checked by :func:`_check_entries` once per id."""
    with _checked_trees_lock:
        entries = _CHECKED_TREES.get(tree)
    if entries is None:
        entries = _tree_entries(repo, tree, env)
        _check_entries(entries, what)
        with _checked_trees_lock:
            while len(_CHECKED_TREES) >= CHECKED_TREES_KEPT:
                del _CHECKED_TREES[next(iter(_CHECKED_TREES))]
            _CHECKED_TREES[tree] = entries
    return entries


def _tree_entries(repo: Path, tree: str, env: dict[str, str]) -> list[Entry]:
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", tree, env=env).stdout
    entries = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, _kind, sha = meta.decode().split(" ")
        entries.append((mode, sha, raw_path.decode("utf-8", "surrogateescape")))
    return entries


def _check_entries(entries: list[Entry], what: str) -> None:
    """Every entry a file, an executable or a symlink on a path inside the tree (no gitlink, no ``.git``)."""
    for mode, _sha, path in entries:
        why = _path_problem(path)
        if why:
            raise WorkspaceRefused(f"{what} has {_shown(path)}: {why}; nothing was applied")
        if mode == "160000":
            raise WorkspaceRefused(f"{what} has a submodule (gitlink) at {_shown(path)}, which ralph does not ship; "
                                   "nothing was applied")
        if mode not in ALLOWED_MODES:
            raise WorkspaceRefused(f"{what} has {_shown(path)} with mode {mode}; nothing was applied")


def _check_links(repo: Path, tracked: list[Entry], untracked: dict[str, str], base: str | None,
                 env: dict[str, str]) -> None:
    """No symlink (tracked or not) leads out of the tree or into ``.git``, resolved through all of them;
    a tracked one the project's own ``base`` has with the same target is the person's, and stays."""
    shas = {path: sha for mode, sha, path in tracked if mode == "120000"}
    targets = _blobs(repo, list(shas.values()), env) if shas else {}
    links = {path: targets[sha] for path, sha in shas.items()}
    for path, target in untracked.items():
        links.setdefault(path, target)
    for path, target in links.items():
        why = escapes(path, target, links)
        if why is None:
            continue
        if path in shas and path not in untracked and _same_link_in(repo, base, path, shas[path]):
            continue
        what = "untracked symlink" if path in untracked else "symlink"
        raise WorkspaceRefused(f"{what} {_shown(path)} -> {_shown(target)} {why}; nothing was applied")


def _blobs(repo: Path, shas: list[str], env: dict[str, str]) -> dict[str, str]:
    """The contents of blobs (symlink targets) as text, by object id."""
    wanted = sorted(set(shas))
    out = git(repo, "cat-file", "--batch", input="".join(f"{sha}\n" for sha in wanted).encode(), env=env).stdout
    found, offset = {}, 0
    for sha in wanted:
        line_end = out.index(b"\n", offset)
        name, kind, size = out[offset:line_end].decode().split(" ")
        start = line_end + 1
        data = out[start:start + int(size)]
        offset = start + int(size) + 1
        if kind != "blob" or name != sha:
            raise WorkspaceRefused(f"a symlink's target {sha[:12]} is not a blob")
        found[sha] = data.decode("utf-8", "surrogateescape")
    return found


def _same_link_in(repo: Path, base: str | None, path: str, sha: str) -> bool:
    """Whether the project's own commit ``base`` has the symlink ``path`` with the same target."""
    if not base:
        return False
    out = git(repo, "ls-tree", "-z", "--full-tree", base, "--", path, check=False).stdout
    meta = out.split(b"\t", 1)[0].decode("utf-8", "replace").split(" ")
    return len(meta) == 3 and meta[0] == "120000" and meta[2] == sha


_IGNORABLE = dict.fromkeys([0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])


def is_git_name(name: str) -> bool:
    """Whether a path component names git's directory on some file system (``.git``, ``.GIT.``,
    ``git~1``, with the characters HFS+ ignores)."""
    plain = name.translate(_IGNORABLE).lower().rstrip(". ")
    return plain == ".git" or plain == "git~1"


def _path_problem(path: str) -> str | None:
    if not path or path.startswith("/") or "\0" in path:
        return "a path outside the checkout"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return "a path outside the checkout"
        if is_git_name(part):
            return "a path into .git"
    return None


def escapes(link: str, target: str, links: dict[str, str]) -> str | None:
    """Why the symlink ``link`` -> ``target`` leads out of the tree or into ``.git`` (resolved through the
    tree's other symlinks ``links``, path -> target, as the kernel would), or None when it stays inside."""
    if not target:
        return "is empty"
    if target.startswith("/"):
        return "leads outside the checkout (an absolute path)"
    stack = link.split("/")[:-1]
    todo = target.split("/")
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return "leads outside the checkout"
            stack.pop()
            continue
        if is_git_name(part):
            return "leads into .git"
        stack.append(part)
        inner = links.get("/".join(stack))
        if inner is None:
            continue
        hops += 1
        if hops > MAX_SYMLINK_HOPS:
            return "is a loop of symlinks"
        if inner.startswith("/"):
            return "leads outside the checkout (through a symlink to an absolute path)"
        stack.pop()
        todo = inner.split("/") + todo
    return None


def _tree_with_diff(repo: Path, state: WorkspaceState, checked: Checked) -> str:
    """The tree of ``HEAD`` with the diff applied (in a scratch index: the project's is not touched)."""
    env = {**checked.env(), "GIT_INDEX_FILE": str(checked.quarantine / "index")}
    git(repo, "read-tree", state.head, env=env)
    if state.diff:
        result = git(repo, "apply", "--cached", "--binary", "--whitespace=nowarn", "-", input=state.diff, env=env,
                     check=False)
        if result.returncode:
            message = _one_line(result.stderr.decode("utf-8", "replace"))
            raise WorkspaceRefused(f"the uncommitted changes do not apply to {state.head[:12]}: {message}")
    return git(repo, "write-tree", env=env).stdout.decode().strip()


def _check_untracked(repo: Path, data: bytes, tracked: list[Entry]) -> tuple[list[tarfile.TarInfo], dict[str, str]]:
    """The untracked members (regular files, symlinks, directories; each once, on no tracked path, under no
    symlink) and their symlinks (path -> target)."""
    if not data:
        return [], {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            members = archive.getmembers()
    except (tarfile.TarError, EOFError, ValueError) as exc:
        raise WorkspaceRefused(f"the untracked files are not a tar archive ({exc})") from None
    if not members:
        return [], {}
    files = {path for _mode, _sha, path in tracked}
    tracked_links = {path for mode, _sha, path in tracked if mode == "120000"}
    tracked_dirs = {path[:end] for path in files for end in _slashes(path)}
    names: set[str] = set()
    links: dict[str, str] = {}
    for member in members:
        name = member.name
        why = _path_problem(name)
        if why:
            raise WorkspaceRefused(f"untracked file {_shown(name)} would land outside the checkout ({why}); "
                                   "nothing was applied")
        if not (member.isreg() or member.issym() or member.isdir()):
            raise WorkspaceRefused(f"untracked {_shown(name)} is not a regular file, a symlink or a directory; "
                                   "nothing was applied")
        if name in names:
            raise WorkspaceRefused(f"untracked {_shown(name)} comes twice; nothing was applied")
        if name in files or (name in tracked_dirs and not member.isdir()):
            raise WorkspaceRefused(f"untracked {_shown(name)} is also a tracked path; nothing was applied")
        names.add(name)
        if member.issym():
            links[name] = member.linkname
    for name in names:
        for parent in PurePosixPath(name).parents:
            key = str(parent)
            if key == ".":
                break
            if key in links or key in tracked_links or key in files:
                raise WorkspaceRefused(f"untracked {_shown(name)} lies under {_shown(key)}, which is not a directory; "
                                       "nothing was applied")
    _check_host_parents(repo, names)
    return members, links


def _slashes(path: str) -> Iterable[int]:
    """Where ``path``'s parent directories end (``a/b/c``: 1 and 3), without a ``PurePosixPath`` per path."""
    end = path.find("/")
    while end > 0:
        yield end
        end = path.find("/", end + 1)


def _check_host_parents(repo: Path, names: Iterable[str]) -> None:
    """No untracked file would be written under something of this machine's that stays (an ignored
    symlink or file, which the mirror does not manage)."""
    from ralph import safeio

    kinds: dict[str, str] = {}
    managed: set[str] | None = None
    for name in names:
        for parent in reversed(PurePosixPath(name).parents):
            key = str(parent)
            if key == ".":
                continue
            found = kinds.get(key) or kinds.setdefault(key, safeio.kind(key, repo))
            if found == "absent":
                break
            if found == "dir":
                continue
            if managed is None:  # what the mirror replaces: tracked here now, or untracked and not ignored
                listed = git(repo, "ls-files", "-z").stdout.decode("utf-8", "surrogateescape").split("\0")
                managed = set(listed) | set(untracked_names(repo))
            if key not in managed:
                raise WorkspaceRefused(f"untracked {_shown(name)} would be written under {_shown(key)}, which is "
                                       f"{'a ' if found in ('symlink', 'file') else ''}{found} here (ignored by git); "
                                       "nothing was applied")
            break


def _check_ignored_here(repo: Path, tracked: list[Entry], members: list[tarfile.TarInfo],
                        also: frozenset[str] = frozenset()) -> None:
    """Nothing the mirror would write lands on or under what git ignores in the project now (the person's
    ``.env``, a virtualenv the sandbox shows read-only): ignored files never travel, so the agent never had
    them, and a tracked or untracked path of its own there would replace the person's file (git's checkout
    overwrites an ignored file) or add to the person's directory (a ``.pth`` in ``.venv``)."""
    here = set(git(repo, "ls-files", "-z").stdout.decode("utf-8", "surrogateescape").split("\0"))
    wanted = {path for _mode, _sha, path in tracked if path not in here} | {member.name for member in members}
    if not wanted:
        return
    _check_dirs_replaced(repo, wanted - {member.name for member in members if member.isdir()})
    ignored = ignored_entries(repo) | also
    if not ignored:
        return
    for name in sorted(wanted):
        for key in [name, *(str(parent) for parent in PurePosixPath(name).parents if str(parent) != ".")]:
            if key in ignored:
                where = "over" if key == name else "into"
                raise WorkspaceRefused(f"{_shown(name)} would be written {where} {_shown(key)}, which git ignores "
                                       "in the project (ignored files never travel: it is this machine's own); "
                                       "nothing was applied")


def _check_dirs_replaced(repo: Path, files: set[str]) -> None:
    """No file or symlink coming back replaces a directory here that holds anything git does not track here
    (the person's ignored ``config/.env``, an untracked file): git's checkout and the mirror's writes remove
    such a directory with all that is in it, and the agent never had what git ignores."""
    from ralph import safeio

    for name in sorted(files):
        if safeio.kind(name, repo) != "dir":
            continue
        out = git(repo, "ls-files", "-z", "--others", "--directory", "--", f"{name}/",
                  env={"GIT_LITERAL_PATHSPECS": "1"}).stdout
        held = [entry for entry in out.decode("utf-8", "surrogateescape").split("\0") if entry]
        if held:
            raise WorkspaceRefused(f"{_shown(name)} would replace the directory {_shown(name + '/')} here, which holds "
                                   f"{_shown(held[0].rstrip('/'))} that git does not track (the person's: ignored files "
                                   "never travel); nothing was applied")


def _shown(text: str) -> str:
    from ralph.agenttext import name

    return name(text)


def _one_line(text: str) -> str:
    from ralph.agenttext import one_line

    return one_line(text.strip())[:500]


# -- applying a checked state ------------------------------------------------------------------


def mirror(repo: Path, state: WorkspaceState, *, branch: str | None = None, must_descend: str | None = None,
           ignored: frozenset[str] = frozenset(), objects: str | None = None) -> None:
    """Make ``repo`` exactly ``state``: ``HEAD`` (on ``branch``), tracked changes and untracked files;
    nothing at or under ``ignored`` (what git ignored when the run started) is written or removed
    (``objects``: ``repo``'s object directory, when the caller knows it).

    Everything is checked before anything changes (:func:`check`): on a refusal
    :class:`WorkspaceRefused` (a :class:`WorkspaceError`) is raised and ``repo`` is as it was.
    """
    checked = check(repo, state, must_descend=must_descend, ignored=ignored, objects=objects)
    try:
        _keep_objects(repo, checked)
        _apply(repo, checked, branch, ignored)
    finally:
        checked.discard()


def _keep_objects(repo: Path, checked: Checked) -> None:
    """Move the quarantined packs (and objects ``apply --cached`` wrote) into the project's object store."""
    objects = Path(checked.objects)
    source = checked.quarantine / "objects"
    for directory, _dirs, names in os.walk(source):
        for name in sorted(names, key=lambda n: n.endswith(".idx")):  # the pack before its index
            path = Path(directory) / name
            target = objects / path.relative_to(source)
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(path, target)
            except OSError:  # another file system
                shutil.copyfile(path, target)


def _apply(repo: Path, checked: Checked, branch: str | None, ignored: frozenset[str] = frozenset()) -> None:
    from ralph import safeio

    state = checked.state
    if branch:
        git(repo, "checkout", "-q", "-f", "-B", branch, state.head)
    else:
        git(repo, "checkout", "-q", "-f", "--detach", state.head)
    tree_index = {"GIT_INDEX_FILE": str(checked.quarantine / "index")}
    if checked.tree != checked.head_tree:
        git(repo, "read-tree", checked.tree, env=tree_index)
        out = git(repo, "diff-index", "--cached", "-z", "--name-status", "--no-renames", state.head,
                  env=tree_index).stdout.split(b"\0")
        changes = list(zip(out[0::2], out[1::2]))
        removed = [os.fsdecode(path) for status, path in changes if status == b"D"]
        written = [path for status, path in changes if status != b"D" and path]
        for name in removed:
            safeio.remove(name, repo)
        _prune(repo, removed)
        if written:
            git(repo, "checkout-index", "-f", "-z", "--stdin", input=b"\0".join(written) + b"\0", env=tree_index)
    wanted = {member.name for member in checked.members}
    added = set(_added_paths(repo, state.head, checked))
    stale = [name for name in untracked_names(repo)
             if name not in wanted and name not in added and not under_any(name, ignored)]  # the person's stay
    for name in sorted(stale, reverse=True):
        safeio.remove(name, repo)
    _prune(repo, stale)
    if checked.members:
        with tarfile.open(fileobj=io.BytesIO(state.untracked), mode="r:") as archive:
            for member in checked.members:
                if member.isdir():
                    safeio.make_dirs(member.name, repo)
                elif member.issym():
                    safeio.remove(member.name, repo)
                    safeio.symlink(member.linkname, member.name, repo)
                else:
                    handle = archive.extractfile(member)
                    data = handle.read() if handle is not None else b""
                    safeio.write_bytes(member.name, repo, data, parents=True, replace_dir=True,
                                       mode=0o755 if member.mode & 0o111 else 0o644)


def _added_paths(repo: Path, commit: str, checked: Checked) -> list[str]:
    """Paths of the result tree that ``commit`` lacks (untracked here: the project's index is ``commit``)."""
    if checked.tree == checked.head_tree:
        return []
    out = git(repo, "diff-tree", "-r", "-z", "--name-only", "--no-renames", "--diff-filter=A", commit,
              checked.tree).stdout
    return [os.fsdecode(path) for path in out.split(b"\0") if path]


def _prune(repo: Path, removed: list[str]) -> None:
    """Remove the directories that removing ``removed`` left empty (deepest first)."""
    from ralph import safeio

    parents = {str(parent) for name in removed for parent in PurePosixPath(name).parents if str(parent) != "."}
    for parent in sorted(parents, key=lambda p: p.count("/"), reverse=True):
        safeio.remove_empty_dir(parent, repo)


def receive_branch(repo: Path, state: WorkspaceState, branch: str) -> str:
    """Store ``state``'s commits in ``repo`` as ``refs/heads/BRANCH``, never touching its working tree.

    The commits are checked as :func:`check` checks a bundle (fsck'd, complete); a new branch is
    created; an existing one only moves forward (the new head must descend from it).  Returns
    ``created``, ``updated`` or ``unchanged``.
    """
    ref = f"refs/heads/{branch}"
    current = git(repo, "rev-parse", "-q", "--verify", ref, check=False).stdout.decode().strip()
    if current == state.head:
        return "unchanged"
    checked = check(repo, state.replace(diff=b"", untracked=b""), must_descend=current or None)
    try:
        current_head_ref = git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.decode().strip()
        if current_head_ref == ref:
            raise WorkspaceError(f"branch {branch} is checked out here; switch to another branch and run again")
        _keep_objects(repo, checked)
    finally:
        checked.discard()
    git(repo, "update-ref", ref, state.head, *([current] if current else []))
    return "updated" if current else "created"


# -- the exchange ----------------------------------------------------------------------------------


@dataclass
class InsideResult:
    """How a command run where the agent's checkout is ended."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""


RunInside = Callable[[Sequence[str], bytes], InsideResult]
"""``run_inside(argv, stdin)``: run ``argv`` where the agent's checkout is (a ``docker exec``, a
``bwrap`` command, a Ray actor's subprocess), ``stdin`` on its standard input, and say how it ended."""


def inside_script() -> Path:
    """This machine's copy of :mod:`ralph.workspace_inside` (mount it, or name the node's own copy)."""
    import ralph.workspace_inside as inside

    return Path(inside.__file__).resolve()


class PhaseClock:
    """Seconds a runner's run spent in each phase (``ship_in``, the sandbox or container, ``bring_back``),
    for the benchmarks: :meth:`lap` after each phase adds the time since the previous lap (or since the
    clock was made) to that phase's total in :attr:`laps`."""

    def __init__(self) -> None:
        import time

        self._time = time.monotonic
        self.laps: dict[str, float] = {}
        """Seconds by phase name, in the order the phases first ended."""
        self._last = self._time()

    def lap(self, name: str) -> None:
        """End phase ``name`` now (a phase named again adds to its total)."""
        now = self._time()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now


class AgentCheckout:
    """The agent's own checkout of ``project``, kept where the agent runs; the one way its work goes in
    and comes back, for every runner whose agent does not work on the project itself.

    ``path`` is the checkout as the sandbox sees it; ``command`` runs :mod:`ralph.workspace_inside`
    there (``("python3", "-I", "-S", "/opt/ralph/lib/ralph/workspace_inside.py")``).  A runner calls
    :meth:`ship_in` before the agent (or a gate command) starts, and :meth:`bring_back` after the
    agent's processes are gone (and for the Stop checks, while it runs); each takes the runner's
    ``run_inside`` primitive.  A runner that starts the ship-in itself uses :meth:`ship_in_request`.
    Methods are serialized: a Stop check's bring-back and the run's own never interleave.

    ``objects``: where the sandbox keeps the loop's own object store for the checkout (its path as the
    workspace side sees it), which only a ship-in writes and every other sandbox shows read-only.  The
    checkout is then written from it alone: a blob the agent forged in the checkout's ``.git/objects``
    never reaches the gates.  Commits brought back go into it with the next ship-in (their objects
    re-hashed there by git), so that ship-in bundles the agent's latest commits once more.
    """

    def __init__(self, project: Path, path: str | PurePosixPath, command: Sequence[str],
                 objects: str | PurePosixPath | None = None) -> None:
        self.project = Path(project)
        self.path = str(path)
        self.command = list(command)
        self.objects = str(objects) if objects is not None else None
        self.known: set[str] = set()
        """Commits the checkout is known to have where a ship-in reads them (only the others travel in a bundle)."""
        self.received: set[str] = set()
        """Commits brought back that are only in the agent's own object store (with ``objects``)."""
        self.base: str | None = None
        """``HEAD`` as last shipped in: what the work brought back must descend from."""
        self.branch: str | None = None
        """The project's branch as last shipped in (the checkout's ``HEAD`` is on it)."""
        self.shipped_bytes = 0
        self.ignored: frozenset[str] | None = None
        """What git ignored in the project at the first ship-in: the person's, never shipped either way
        (not even once the agent's ``.gitignore`` stops ignoring it)."""
        self._objects: str | None = None
        self._lock = threading.RLock()

    def ship_in_request(self, fresh: bool = False) -> tuple[list[str], bytes]:
        """(argv, stdin) that makes the checkout the project's current state; ``fresh``: a new ``.git``
        and every commit shipped (after the checkout lost objects, or a first ship-in failed)."""
        with self._lock:
            if fresh:
                self.known.clear()
                self.received.clear()
            if self.ignored is None:
                self.ignored = ignored_entries(self.project)
            found = checkout_status(self.project)
            state = capture(self.project, self.known, skip=self.ignored, found=found)
            branch = found.branch if found.branch is not None and found.head else _branch(self.project)
            self.base, self.branch = state.head, branch
            self.shipped_bytes = state.size
            argv = [*self.command, "apply", self.path, *(["--fresh"] if fresh else []), *self._objects_args()]
            return argv, encode(state, branch=branch)

    def shipped(self) -> None:
        """Record that the last :meth:`ship_in_request` was applied."""
        with self._lock:
            if self.base:
                self.known.add(self.base)

    def ship_in(self, run_inside: RunInside) -> None:
        """Make the checkout the project's current state (once more with ``fresh`` when that fails)."""
        with self._lock:
            argv, data = self.ship_in_request()
            result = run_inside(argv, data)
            if result.exit_code != 0:
                argv, data = self.ship_in_request(fresh=True)
                result = run_inside(argv, data)
            if result.exit_code != 0:
                raise WorkspaceError("the project could not be shipped into the agent's checkout: "
                                     + _one_line(result.stderr.decode("utf-8", "replace")))
            self.shipped()

    def bring_back_request(self) -> list[str]:
        """The argv that captures the checkout (its state on stdout)."""
        with self._lock:
            return [*self.command, "capture", self.path, *self._objects_args(), *sorted(self.known | self.received)]

    def _objects_args(self) -> list[str]:
        return ["--objects", self.objects] if self.objects else []

    def bring_back(self, run_inside: RunInside, keep: Path | None = None) -> WorkspaceState:
        """Capture the checkout where it is, check what came back and mirror it onto the project.

        :class:`WorkspaceRefused` when it breaks a rule (the project is as it was; with ``keep``, a
        directory, the refused bytes are kept there as ``refused-N.ship`` for a person to look at);
        :class:`WorkspaceError` when the capture itself failed.
        """
        with self._lock:
            result = run_inside(self.bring_back_request(), b"")
            return self.accept(result, keep)

    def accept(self, result: InsideResult, keep: Path | None = None) -> WorkspaceState:
        """Check and mirror the output of :meth:`bring_back_request`'s command (see :meth:`bring_back`)."""
        with self._lock:
            if result.exit_code != 0:
                raise WorkspaceError("the agent's work could not be captured in its checkout: "
                                     + _one_line(result.stderr.decode("utf-8", "replace")))
            try:
                if len(result.stdout) > MAX_STATE_BYTES:
                    raise WorkspaceRefused(f"the agent's checkout sent more than {MAX_STATE_BYTES} bytes")
                try:
                    state, _ = decode(result.stdout)
                except WorkspaceError as exc:
                    raise WorkspaceRefused(str(exc)) from None
                if self._objects is None:
                    self._objects = _objects_dir(self.project)
                mirror(self.project, state, branch=self.branch, must_descend=self.base,
                       ignored=self.ignored or frozenset(), objects=self._objects)
            except WorkspaceRefused as exc:
                if keep is not None:
                    exc.args = (f"{exc.args[0]} (kept as {_keep(keep, result.stdout)})",)
                raise
            (self.received if self.objects else self.known).add(state.head)
            return state


def _branch(project: Path) -> str | None:
    result = git(project, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return result.stdout.decode().strip() or None


def _keep(directory: Path, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    number = len(list(directory.glob("refused-*.ship"))) + 1
    path = directory / f"refused-{number}.ship"
    path.write_bytes(data)
    return path


__all__ = [
    "AgentCheckout", "Checked", "InsideResult", "PhaseClock", "RunInside", "WorkspaceError", "WorkspaceRefused", "WorkspaceState",
    "capture", "check", "decode", "encode", "escapes", "head", "ignored_entries", "init_checkout", "inside_script",
    "is_git_name",
    "mirror", "receive_branch", "untracked_names",
]
