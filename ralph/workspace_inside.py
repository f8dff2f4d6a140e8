"""The side of workspace shipping that runs where the agent's checkout is: standard library only.

A sandboxed runner keeps the agent on a checkout of its own (a container's volume, a bubblewrap
sandbox's directory, a Ray node's temp directory) and runs this file there, never ralph's host-side
code and never host git on the agent's ``.git``::

    python3 -I -S workspace_inside.py apply CHECKOUT [--objects DIR]            # a shipped state on stdin
    python3 -I -S workspace_inside.py capture CHECKOUT [--objects DIR] [KNOWN]  # the state on stdout

``apply`` makes ``CHECKOUT`` exactly the shipped state (``HEAD`` on the shipped branch, the
uncommitted diff, the untracked files, and nothing else: what the agent left there untracked or
ignored is removed), after putting back the parts of its ``.git`` that decide which programs git runs
(``config``, ``hooks/``, ``info/attributes``, alternates): whatever the agent left there never runs in
the next container, the gates' included.  ``capture`` writes the checkout's state, with a bundle of
the commits a peer that has the ``KNOWN`` commits lacks.

``--objects DIR``: the loop's own object store for the checkout, which only ``apply`` writes (the
agent's sandboxes show it read-only).  The shipped commits go there, the checkout is written from
there alone, and the checkout's ``.git/objects`` borrows from it (an alternate): an object the agent
forged in its own store (git does not re-hash a loose object it reads) never reaches a file.
Nothing here trusts what it reads back: the loop's side (:mod:`ralph.workspace`) checks a captured
state as bytes before anything touches the project.

The same functions, with the loop's hardened git, capture the project on the loop's side; the
wire format (:func:`encode`, :func:`decode`) is the one both sides speak.  Importing this module
imports nothing of ralph: it runs as a file (``-I -S``) in images that have only python3 and git.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

TYPE_CHECKING = False  # (not typing's: importing typing costs as much as a git call here)
if TYPE_CHECKING:
    import tarfile
    from typing import Any, Callable, Iterable

    GitRunner = Callable[..., "subprocess.CompletedProcess[bytes]"]
    """``git(repo, *args, input=None, check=True, env=None)``: one git call, bytes out."""

# ``tarfile``, ``io`` and ``tempfile`` are imported where a state has untracked files or commits to carry:
# both sides start this file once per exchange, and most exchanges carry neither.

FORMAT = b"ralph-workspace/1\n"
"""The first line of every shipped state."""
MAX_HEADER = 1 << 20
"""Bytes a state's header (one JSON line) may have."""
APPLY_FAILED = 3
"""``apply``'s exit code when the state could not be applied (the checkout may be half-made: ship a
full state with ``--fresh`` next)."""

HARDENING: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("core.untrackedCache", "false"),
    ("safe.directory", "*"),
    ("core.symlinks", "true"),
    ("diff.renames", "false"),
)
"""``-c`` settings of every git call here: ``ralph.gitutil.HARDENING`` (a test keeps them equal), and
``safe.directory`` (the system config, which the image sets it in, is not read)."""

CHECKOUT_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
)
"""``.git/config`` as ``apply`` writes it: nothing the agent configured (filters, fsmonitor, hooks,
aliases, an object directory elsewhere) survives into the next command run on the checkout."""

IDENTITY = {"GIT_COMMITTER_NAME": "Ralph Loop", "GIT_COMMITTER_EMAIL": "ralph@localhost",
            "GIT_AUTHOR_NAME": "Ralph Loop", "GIT_AUTHOR_EMAIL": "ralph@localhost"}


class WorkspaceError(Exception):
    """A workspace state that cannot be captured or applied; the target was left as it was."""


class WorkspaceState:
    """Everything that differs between two checkouts of one repository, as bytes.

    A plain class rather than a dataclass: this file starts once per exchange, and :mod:`dataclasses`
    (with the :mod:`inspect` it imports) would be a third of its imports."""

    __slots__ = ("head", "bundle", "diff", "untracked", "untracked_names")

    def __init__(self, head: str, bundle: bytes | None, diff: bytes, untracked: bytes,
                 untracked_names: list[str] | None = None) -> None:
        self.head = head
        """The commit checked out (``HEAD``)."""
        self.bundle = bundle
        """A git bundle with the commits the receiver lacks (None: it has ``head``)."""
        self.diff = diff
        """``git diff --binary HEAD``: every change to tracked files, staged or not."""
        self.untracked = untracked
        """A tar of the untracked files git does not ignore (regular files and symlinks; no bytes: none)."""
        self.untracked_names: list[str] = [] if untracked_names is None else untracked_names
        """The untracked files' names (as captured, or as checked)."""

    @property
    def size(self) -> int:
        """Bytes that travel."""
        return len(self.bundle or b"") + len(self.diff) + len(self.untracked)

    def replace(self, **changes: Any) -> "WorkspaceState":
        """A copy with ``changes`` (field name to value)."""
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return WorkspaceState(**fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkspaceState):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return (f"WorkspaceState(head={self.head!r}, bundle={len(self.bundle or b'')} bytes, diff={len(self.diff)} "
                f"bytes, untracked={self.untracked_names!r})")


GIT = ["git"]
"""The git program :func:`run_git` runs: :func:`main` makes it an absolute path found outside the checkout."""


def find_git(checkout: Path) -> str:
    """git, found on ``PATH`` without relative entries and entries inside ``checkout`` (the agent's: a
    ``bin/git`` it committed, on the person's ``PATH`` by direnv's ``PATH_add bin``, never runs)."""
    import shutil

    tree = os.path.normpath(os.path.abspath(checkout))
    real = os.path.realpath(checkout)

    def inside(entry: str) -> bool:
        return any(e == t or e.startswith(t.rstrip("/") + "/")
                   for e in (os.path.normpath(entry), os.path.realpath(entry)) for t in (tree, real))

    search = [e for e in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(e) and not inside(e)]
    found = shutil.which("git", path=os.pathsep.join(search))
    if found is None or inside(found):
        raise WorkspaceError("git was not found on PATH outside the checkout")
    return os.path.abspath(found)


def run_git(repo: Path, *args: str, input: bytes | None = None, check: bool = True,  # noqa: A002
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """git in ``repo`` with :data:`HARDENING`, no system or global config and no inherited ``GIT_*``."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    environ.update(IDENTITY)
    environ.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
                    "GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1", "LC_ALL": "C"})
    environ.update(env or {})
    argv = [GIT[0], "--no-pager"]
    for key, value in HARDENING:
        argv += ["-c", f"{key}={value}"]
    if input is None:
        result = subprocess.run([*argv, *args], cwd=repo, stdin=subprocess.DEVNULL, capture_output=True, env=environ)
    else:
        result = subprocess.run([*argv, *args], cwd=repo, input=input, capture_output=True, env=environ)
    if check and result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip() or f"exit {result.returncode}"
        raise WorkspaceError(f"git {' '.join(args[:3])} in {repo}: {message}")
    return result


# -- the wire format ---------------------------------------------------------------------------


def encode(state: WorkspaceState, **extra: Any) -> bytes:
    """``state`` (and ``extra`` fields, JSON) as one byte string: :data:`FORMAT`, a JSON header line, the parts."""
    header = {
        "head": state.head,
        "bundle": None if state.bundle is None else len(state.bundle),
        "diff": len(state.diff),
        "untracked": len(state.untracked),
        **extra,
    }
    return b"".join([FORMAT, json.dumps(header, separators=(",", ":")).encode(), b"\n", state.bundle or b"",
                     state.diff, state.untracked])


def decode(data: bytes) -> tuple[WorkspaceState, dict[str, Any]]:
    """(state, the header's other fields) from :func:`encode`'s bytes; :class:`WorkspaceError` when
    they are not exactly that (bytes from a sandbox are the agent's: nothing is guessed)."""
    if not data.startswith(FORMAT):
        raise WorkspaceError("not a shipped workspace state (no ralph-workspace/1 header)")
    end = data.find(b"\n", len(FORMAT), len(FORMAT) + MAX_HEADER + 1)
    if end < 0:
        raise WorkspaceError("a shipped workspace state without a complete header")
    try:
        header = json.loads(data[len(FORMAT):end].decode("utf-8"))
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise WorkspaceError("a shipped workspace state whose header is not a JSON object")
    head = header.pop("head", None)
    sizes = [header.pop(key, 0) for key in ("bundle", "diff", "untracked")]
    if not isinstance(head, str) or len(head) not in (40, 64) or any(c not in "0123456789abcdef" for c in head):
        raise WorkspaceError(f"a shipped workspace state whose HEAD is not a commit id: {str(head)[:80]!r}")
    for index, size in enumerate(sizes):
        if size is None and index == 0:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise WorkspaceError("a shipped workspace state with a bad part size")
    start = end + 1
    total = sum(size or 0 for size in sizes)
    if len(data) - start != total:
        raise WorkspaceError(f"a shipped workspace state of {len(data) - start} bytes where its header says {total}")
    parts = []
    for size in sizes:
        parts.append(None if size is None else data[start:start + size])
        start += size or 0
    bundle, diff, untracked = parts
    state = WorkspaceState(head, bundle, diff or b"", untracked or b"")
    return state, header


# -- capture -------------------------------------------------------------------------------------


def head(repo: Path, git: GitRunner = run_git) -> str:
    """The commit ``HEAD`` points at."""
    return git(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}").stdout.decode().strip()


def untracked_names(repo: Path, git: GitRunner = run_git) -> list[str]:
    """Untracked files that git does not ignore, relative to ``repo``."""
    out = git(repo, "ls-files", "-z", "--others", "--exclude-standard").stdout
    return [name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]


STATUS_ARGS = ("status", "--porcelain=v2", "-z", "--branch", "--no-ahead-behind", "--untracked-files=all",
               "--ignore-submodules=all", "--no-renames")


class CheckoutStatus:
    """What one ``git status`` says of a checkout: where three or four git calls would each ask a part."""

    __slots__ = ("head", "branch", "changed", "untracked")

    def __init__(self, head: str, branch: str | None, changed: bool, untracked: list[str] | None) -> None:
        self.head = head
        """The commit ``HEAD`` is (``""``: none, or status named none)."""
        self.branch = branch
        """The branch ``HEAD`` is on (None: detached, or a name status cannot say plainly)."""
        self.changed = changed
        """Whether a tracked file differs from ``HEAD`` (in the index or the work tree): ``git diff HEAD``
        has something to say.  True as well for any record this does not know."""
        self.untracked = untracked
        """The untracked files git does not ignore, as :func:`untracked_names` lists them (None: not known
        from this status)."""


def checkout_status(repo: Path, git: GitRunner = run_git) -> CheckoutStatus:
    """``HEAD``, its branch, whether tracked files changed, and the untracked files, in one git call."""
    out = git(repo, *STATUS_ARGS).stdout
    found = CheckoutStatus("", None, False, [])
    for record in out.split(b"\0"):
        kind = record[:2]
        if not record or record == b"# branch.oid (initial)":
            continue
        if record.startswith(b"# branch.oid "):
            oid = record[len(b"# branch.oid "):].decode("ascii", "replace")
            found.head = oid if _is_commit_id(oid) else ""
        elif record.startswith(b"# branch.head "):
            try:
                name = record[len(b"# branch.head "):].decode("utf-8")
            except UnicodeDecodeError:
                name = "(detached)"
            found.branch = None if name == "(detached)" else name
        elif kind == b"# ":
            continue
        elif kind == b"? " and found.untracked is not None:
            found.untracked.append(record[2:].decode("utf-8", "surrogateescape"))
        else:  # "1", "u" (and "2", not asked for: its second path is a record of its own) is a change
            found.changed = True
            if kind not in (b"1 ", b"u "):
                found.untracked = None
    return found


def _is_commit_id(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def capture(repo: Path, known: Iterable[str] = (), git: GitRunner = run_git, skip: Iterable[str] = (),
            found: CheckoutStatus | None = None) -> WorkspaceState:
    """The state of ``repo``, with a bundle of what a receiver that has the ``known`` commits lacks.

    Untracked files travel as what they are: regular files (their bytes and executable bit) and
    symlinks (their target text); fifos, sockets and devices do not travel.  Nothing is written into
    ``repo`` (no ref, no index refresh): a checkout whose agent still runs can be captured.  Untracked
    files at or under a path of ``skip`` (what git ignored there when the run started) do not travel.
    ``found``: the :func:`checkout_status` of ``repo`` taken just before (else it is taken here).
    """
    found = found or checkout_status(repo, git)
    current = found.head or head(repo, git)
    wanted = [sha for sha in known if sha]
    bundle = None if current in wanted else _bundle(repo, current, wanted, git)
    diff = git(repo, "diff", "--binary", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames",
               "HEAD").stdout if found.changed or not found.head else b""
    skipped = frozenset(skip)
    listed = found.untracked if found.untracked is not None else untracked_names(repo, git)
    names = [name for name in listed if not under_any(name, skipped)]
    tar, shipped = _tar(repo, names)
    return WorkspaceState(current, bundle, diff, tar, shipped)


def capture_isolated(repo: Path, known: Iterable[str] = (), objects: Path | None = None) -> WorkspaceState:
    """:func:`capture` of an agent's checkout without reading what the agent configured in its ``.git``.

    git runs with a private git directory made here (``GIT_DIR``): the loop's config, a copy of the
    checkout's ``HEAD``, its refs, objects and index reached where they are, and no ``info/`` or
    hooks.  So no filter, fsmonitor, include, ``core.worktree`` or attribute file the agent wrote into
    its ``.git`` is read: a capture, which may run while the agent's processes still run and in a
    container that outlives it, never starts a program of the agent's."""
    source = repo / ".git"
    with _private_dir("ralph-capture-") as private:
        (private / "config").write_bytes(CHECKOUT_CONFIG.encode())
        try:
            fd = os.open(source / "HEAD", os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise WorkspaceError(f"the checkout's .git/HEAD cannot be read: {exc}") from None
        with os.fdopen(fd, "rb") as handle:
            (private / "HEAD").write_bytes(handle.read(4096))
        for name in ("refs", "packed-refs", "shallow"):
            if os.path.lexists(source / name):
                os.symlink(source / name, private / name)
        if not os.path.lexists(private / "refs"):
            (private / "refs").mkdir()
        env = {"GIT_DIR": str(private), "GIT_WORK_TREE": str(repo), "GIT_OBJECT_DIRECTORY": str(source / "objects"),
               "GIT_INDEX_FILE": str(source / "index")}
        if objects is not None:  # the loop's store, whatever the agent did to its alternates
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(objects)

        def isolated(where: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
            return run_git(where, *args, **{**kw, "env": {**env, **(kw.get("env") or {})}})

        return capture(repo, known, isolated)


def under_any(name: str, entries: "frozenset[str] | set[str]") -> bool:
    """Whether the relative path ``name`` is one of ``entries`` or lies under one."""
    if not entries:
        return False
    parts = name.split("/")
    return any("/".join(parts[:end]) in entries for end in range(1, len(parts) + 1))


def _bundle(repo: Path, current: str, known: list[str], git: GitRunner) -> bytes | None:
    exclusions = [f"^{sha}" for sha in known if _has_commit(repo, sha, git)]
    result = git(repo, "-c", "pack.compression=1", "bundle", "create", "-q", "-", "HEAD", *exclusions, check=False)
    if result.returncode != 0:
        if b"empty bundle" in result.stderr:  # HEAD is an ancestor of what the receiver has
            return None
        message = result.stderr.decode("utf-8", "replace").strip()
        raise WorkspaceError(f"git bundle create in {repo}: {message}")
    return result.stdout


def _has_commit(repo: Path, sha: str, git: GitRunner) -> bool:
    return git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0


def _tar(repo: Path, names: list[str]) -> tuple[bytes, list[str]]:
    """A tar of the untracked ``names`` that are regular files or symlinks (no bytes when there are none)."""
    if not names:
        return b"", []
    import io
    import tarfile

    buffer = io.BytesIO()
    shipped = []
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in names:
            full = os.path.join(repo, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue  # gone meanwhile
            member = tarfile.TarInfo(name)
            member.mtime = int(info.st_mtime)
            if stat.S_ISLNK(info.st_mode):
                member.type, member.linkname = tarfile.SYMTYPE, os.readlink(full)
                archive.addfile(member)
            elif stat.S_ISREG(info.st_mode):
                try:
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                with os.fdopen(fd, "rb") as handle:
                    data = handle.read()
                member.size, member.mode = len(data), 0o755 if info.st_mode & 0o111 else 0o644
                archive.addfile(member, io.BytesIO(data))
            else:
                continue  # a fifo, socket or device is not data
            shipped.append(name)
    return (buffer.getvalue() if shipped else b""), shipped


# -- apply ---------------------------------------------------------------------------------------


def apply(repo: Path, state: WorkspaceState, branch: str | None = None, *, fresh: bool = False,
          git: GitRunner = run_git, objects: Path | None = None) -> None:
    """Make ``repo`` exactly ``state``: ``HEAD`` (on ``branch``), tracked changes and untracked files.

    For the agent's side (the state comes from the loop, the checkout is the agent's): ``.git``'s
    program-deciding parts are put back first (``fresh``: ``.git`` is made anew), every untracked or
    ignored entry the agent left is removed (the gates see the project's state, not the agent's
    leftovers), and untracked files are written without following a link on the way.  ``objects``:
    the loop's object store (see the module's docstring; ``fresh`` empties it too).
    """
    repo = Path(repo)
    repo.mkdir(parents=True, exist_ok=True)
    _own_git_dir(repo, fresh, git)
    _write_file(repo, ".git/HEAD", (f"ref: refs/heads/{branch}\n" if branch else f"{state.head}\n").encode(), 0o644)
    if objects is not None:
        git = _trusted_store(repo, Path(objects), fresh, git)
    if state.bundle is not None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ralph-bundle-") as tmp:
            path = Path(tmp) / "in.bundle"
            path.write_bytes(state.bundle)
            if objects is None:
                git(repo, "bundle", "unbundle", str(path))  # the objects only: no ref is written
            else:  # the pack alone: unbundle's check walks the checkout's refs, whose commits are the agent's
                end = state.bundle.find(b"\n\n")
                if end < 0:
                    raise WorkspaceError("the shipped bundle has no header")
                git(repo, "index-pack", "--stdin", "--fix-thin", input=state.bundle[end + 2:])
    # The agent's index is not trusted: its stat data and flags (assume-unchanged, skip-worktree) decide
    # which files a checkout rewrites, so a file it marked "unchanged" would keep the agent's bytes while
    # the project got others.  So the index is made anew from the shipped HEAD by ``git reset`` (on the
    # branch ``HEAD`` was written to above), which takes a file's stat data only where its bytes hash to
    # the commit's; what the status after it sees changed, a checkout makes right.  Stat data is trusted
    # only from that reset on: no process of the agent's runs in between.
    _remove(repo, ".git/index")
    reset = git(repo, "reset", "-q", state.head, "--", check=False)
    if reset.returncode != 0:
        if not _has_commit(repo, state.head, git):
            raise WorkspaceError(f"commit {state.head[:12]} is missing in {repo} and was not shipped")
        message = reset.stderr.decode("utf-8", "replace").strip() or f"exit {reset.returncode}"
        raise WorkspaceError(f"git reset in {repo}: {message}")
    found = checkout_status(repo, git)
    listed = found.untracked
    if found.changed or listed is None:
        git(repo, "checkout", "-q", "-f")  # the work tree as the index (HEAD) is: only what differs is written
        listed = untracked_names(repo, git)  # (the checkout may have put back a .gitignore)
    members = _members(state.untracked)
    # Everything untracked goes, ignored or not (a folder that ignores itself, a nested repository, a
    # virtualenv): the agent's later processes and the gates get the project's tracked state, its
    # untracked files and what the runner mounts from this machine, as the person's tree has them.
    leftovers = git(repo, "ls-files", "-z", "--others", "--directory").stdout.decode("utf-8", "surrogateescape")
    for name in sorted({name.rstrip("/") for name in leftovers.split("\0") if name}, reverse=True):
        _remove_stubborn(repo, name)
    if state.diff:
        git(repo, "apply", "--binary", "--whitespace=nowarn", "-", input=state.diff)
    if members:
        import io
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(state.untracked), mode="r") as archive:
            for member in members:
                data = archive.extractfile(member).read() if member.isreg() else b""  # type: ignore[union-attr]
                _write_member(repo, member, data)


def _trusted_store(repo: Path, objects: Path, fresh: bool, git: GitRunner) -> GitRunner:
    """The loop's object store ``objects`` made ready (emptied when ``fresh``), the checkout's alternate;
    a git runner that reads and writes objects there alone."""
    import shutil

    if fresh and objects.is_dir():
        for child in list(objects.iterdir()):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    for name in ("pack", "info"):
        (objects / name).mkdir(parents=True, exist_ok=True)
    _write_file(repo, ".git/objects/info/alternates", f"{objects}\n".encode(), 0o644)
    own = {"GIT_OBJECT_DIRECTORY": str(objects)}

    def trusted(where: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return git(where, *args, **{**kw, "env": {**own, **(kw.get("env") or {})}})

    return trusted


def _remove_stubborn(repo: Path, name: str) -> None:
    """:func:`_remove`, after making the directories the agent locked (mode 000) this user's again."""
    try:
        _remove(repo, name)
    except PermissionError:
        for directory, names, _files in os.walk(repo / name):  # no agent process runs meanwhile
            for child in names:
                path = os.path.join(directory, child)
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    os.chmod(path, 0o700)
        if stat.S_ISDIR(os.lstat(repo / name).st_mode):
            os.chmod(repo / name, 0o700)
        _remove(repo, name)


def _own_git_dir(repo: Path, fresh: bool, git: GitRunner) -> None:
    """``repo/.git`` as a real directory whose config, hooks and attributes are the loop's."""
    dot_git = repo / ".git"
    try:
        info = os.lstat(dot_git)
    except FileNotFoundError:
        info = None
    if info is not None and (fresh or not stat.S_ISDIR(info.st_mode)):
        _remove(repo, ".git")
        info = None
    if info is None:
        git(repo, "init", "-q")
    for name in ("config", "info/attributes", "objects/info/alternates", "commondir", "gitdir", "config.worktree"):
        _remove(repo, f".git/{name}")
    _remove(repo, ".git/hooks")
    _write_file(repo, ".git/config", CHECKOUT_CONFIG.encode(), 0o644)


def _members(data: bytes) -> list[tarfile.TarInfo]:
    if not data:
        return []
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
        members = archive.getmembers()
    for member in members:
        parts = member.name.split("/")
        if member.name.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts):
            raise WorkspaceError(f"untracked file {member.name!r} would land outside the checkout")
        if not (member.isreg() or member.issym() or member.isdir()):
            raise WorkspaceError(f"untracked {member.name!r} is not a regular file, a symlink or a directory")
    return members


def _walk(repo: Path, parts: list[str]) -> int:
    """A descriptor of ``repo/parts...``, made as directories where missing or not a directory
    (a symlink or file on the way is removed, never followed)."""
    fd = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    for part in parts:
        try:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                os.close(fd)
                raise
            if exc.errno != errno.ENOENT:
                os.unlink(part, dir_fd=fd)
            os.mkdir(part, 0o755, dir_fd=fd)
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        os.close(fd)
        fd = next_fd
    return fd


def _remove(repo: Path, name: str) -> None:
    """Remove ``repo/name`` (a link as itself; a directory with what is in it), never through a link."""
    parts = name.split("/")
    try:
        fd = _walk_existing(repo, parts[:-1])
    except OSError:
        return
    try:
        try:
            info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            import shutil

            shutil.rmtree(parts[-1], dir_fd=fd)  # fd-based: links inside are removed, not followed
        else:
            os.unlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def _walk_existing(repo: Path, parts: list[str]) -> int:
    fd = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    for part in parts:
        try:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = next_fd
    return fd


def _write_file(repo: Path, name: str, data: bytes, mode: int) -> None:
    parts = name.split("/")
    fd = _walk(repo, parts[:-1])
    try:
        _replace(fd, parts[-1], data, mode, None)
    finally:
        os.close(fd)


def _write_member(repo: Path, member: tarfile.TarInfo, data: bytes) -> None:
    parts = member.name.split("/")
    if member.isdir():
        os.close(_walk(repo, parts))
        return
    fd = _walk(repo, parts[:-1])
    try:
        if member.issym():
            _replace(fd, parts[-1], b"", 0, member.linkname)
        else:
            _replace(fd, parts[-1], data, 0o755 if member.mode & 0o111 else 0o644, None)
    finally:
        os.close(fd)


def _replace(dir_fd: int, name: str, data: bytes, mode: int, link: str | None) -> None:
    """Put a file (or the symlink ``link``) at ``name`` in ``dir_fd``: made aside, renamed over it."""
    tmp = f".{name[:200]}.ralph-{os.getpid()}.tmp"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    if link is not None:
        os.symlink(link, tmp, dir_fd=dir_fd)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    try:
        current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        current = None
    if current is not None and stat.S_ISDIR(current.st_mode):
        import shutil

        shutil.rmtree(name, dir_fd=dir_fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


class _private_dir:
    """A directory of this process's own under the temporary directory (``with``: removed after), made
    without :mod:`tempfile` (whose imports cost more than this whole side's work when nothing changed)."""

    def __init__(self, prefix: str) -> None:
        base = os.environ.get("TMPDIR") or "/tmp"
        for _ in range(100):
            path = os.path.join(base, prefix + os.urandom(8).hex())
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            self.path = Path(path)
            return
        raise WorkspaceError(f"no private directory could be made in {base}")

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *_exc: object) -> None:
        _remove_all(self.path)


def _remove_all(path: Path) -> None:
    """Remove ``path`` and what is in it (links as themselves, never followed)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_all(Path(entry.path))
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _tar_error() -> type[Exception]:
    """``tarfile.TarError`` once :mod:`tarfile` was imported (by a state with untracked files), else an
    exception nothing raises."""
    module = sys.modules.get("tarfile")
    return module.TarError if module is not None else WorkspaceError


# -- the command line ----------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``apply CHECKOUT [--fresh] [--objects DIR]`` (state on stdin) or ``capture CHECKOUT [--objects DIR]
    [KNOWN ...]`` (state on stdout)."""
    usage = "usage: workspace_inside.py apply CHECKOUT [--fresh] [--objects DIR] | capture CHECKOUT [--objects DIR] [KNOWN ...]\n"
    if len(argv) < 2 or argv[0] not in ("apply", "capture"):
        sys.stderr.write(usage)
        return 2
    command, checkout, rest = argv[0], Path(argv[1]), list(argv[2:])
    objects = None
    if "--objects" in rest:
        at = rest.index("--objects")
        if at + 1 >= len(rest) or not os.path.isabs(rest[at + 1]):
            sys.stderr.write(usage)
            return 2
        objects = Path(rest[at + 1])
        del rest[at:at + 2]
    try:
        GIT[0] = find_git(checkout)
        if command == "apply":
            state, header = decode(sys.stdin.buffer.read())
            apply(checkout, state, header.get("branch"), fresh="--fresh" in rest, objects=objects)
            return 0
        data = encode(capture_isolated(checkout, rest, objects))
        out = sys.stdout.buffer
        out.write(data)
        out.flush()
        return 0
    except (WorkspaceError, OSError, _tar_error()) as exc:
        sys.stderr.write(f"ralph workspace {command}: {exc}\n")
        return APPLY_FAILED if command == "apply" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
