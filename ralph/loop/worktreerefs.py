"""The refs only another of the person's worktrees has: its HEAD and its per-worktree refs (``refs/bisect/``,
``refs/worktree/``, ``refs/rewritten/``), which git keeps in that worktree's own git directory
(``<common>/worktrees/<id>/``; the main worktree's in the common directory itself) and lists only from there.

The ref guard (:mod:`ralph.loop.personrefs`) lists the refs from the run's worktree, which does not see these;
it reads them here, from their files, without starting git: a project without other worktrees costs nothing,
and no git process reads the other worktree's ``config.worktree`` or ``commondir``, which no check watches.
Each is named as git names it from any worktree (``worktrees/<id>/HEAD``, ``worktrees/<id>/refs/bisect/bad``,
``main-worktree/HEAD``): names ``git update-ref`` takes, so the guard puts a plain value back with git.  A
symbolic value (a HEAD on a branch) git does not write under those names: :func:`write_symref` writes it into
the file (atomically, no link followed), as git writes a HEAD.

The worktrees are those the common directory lists when the run starts (one the agent adds later is its own),
without the run's own and ralph's (``ralph run --parallel``).  Files are read as :mod:`ralph.safeio` reads: no
link followed on the way or at the end, only regular single-link files of at most :data:`MAX_REF_BYTES`;
anything else reads as no ref (the ``.git`` layout check stops the run at the next git call anyway).  A
reftable repository keeps them in a format not read here: none are listed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ralph import safeio
from ralph.loop.personrefs import PER_WORKTREE, Ref

MAX_REF_BYTES = 4096
"""A ref file is one line (an id or ``ref: NAME``): a larger one is no ref git wrote."""
MAIN = "main-worktree/"
LINKED = "worktrees/"
_HEX = frozenset("0123456789abcdef")
_PART = re.compile(r"[^\x00-\x20\x7f~^:?*\[\\]+")
"""A component of a ref name git takes (``git check-ref-format``; ``@{``, ``..`` and the ends checked apart)."""
ADMIN_FILES = ("gitdir", "commondir", "config.worktree")
"""The files of a worktree's git directory that say where it is and what it reads: ``commondir`` points it at
another repository, ``gitdir`` decides whether it counts as ralph's own (next run), ``config.worktree`` is
config its next git command reads (an fsmonitor program)."""


@dataclass(frozen=True)
class OtherWorktree:
    """One worktree of the person's besides the run's."""

    prefix: str
    """How git names its refs from another worktree: ``worktrees/<id>/`` or ``main-worktree/``."""
    git_dir: Path
    """Its own git directory (``<common>/worktrees/<id>``; the main worktree's: the common directory)."""
    path: str
    """Its folder, as its ``gitdir`` file names it ("" when that cannot be read)."""
    identity: tuple[int, int] = (0, 0)
    """Its git directory's (device, inode) when the run started: one removed and made again is another."""
    admin: tuple[tuple[str, bytes | None], ...] = ()
    """:data:`ADMIN_FILES` and the folder's ``.git`` file as they were (None: absent or not a plain file),
    by the path :func:`admin_changes` names them with."""


def find(common: Path, own_git_dir: Path, ralphs: Path) -> list[OtherWorktree]:
    """The person's other worktrees of the repository whose common directory is ``common``: not the one whose
    git directory is ``own_git_dir`` (the run's), not those under ``ralphs`` (ralph's own)."""
    if safeio.kind(common / "reftable", common) != "absent":
        return []
    found = []
    own = os.path.realpath(own_git_dir)
    if own != os.path.realpath(common) and safeio.kind(common / "HEAD", common) == "file":
        found.append(OtherWorktree(MAIN, common, str(common.parent if common.name == ".git" else common),
                                   _identity(common)))
    try:
        with safeio.open_dir(common / "worktrees", common) as fd:
            names = sorted(name for name in os.listdir(fd) if _worktree_id(name)
                           and stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode))
    except OSError:  # none (most projects), or not a plain directory: the layout check names that
        return found
    ralph_root = os.path.realpath(ralphs)
    for name in names:
        git_dir = common / "worktrees" / name
        if os.path.realpath(git_dir) == own:
            continue
        path = _folder(git_dir, common)
        if path and os.path.commonpath([ralph_root, os.path.realpath(path)]) == ralph_root:
            continue  # a loop's (ralph run --parallel): its refs are that loop's
        worktree = OtherWorktree(f"{LINKED}{name}/", git_dir, path, _identity(git_dir))
        found.append(dataclasses.replace(worktree, admin=tuple(_admin_now(worktree, common))))
    return found


def _worktree_id(name: str) -> bool:
    """A directory name git may have given a worktree (any ref-name component: ``fix#12``, ``-hidden``)."""
    return (_PART.fullmatch(name) is not None and not name.startswith(".") and ".." not in name and "@{" not in name
            and not name.endswith(".lock"))


def _identity(path: Path) -> tuple[int, int]:
    try:
        info = os.lstat(path)
    except OSError:
        return (0, 0)
    return (info.st_dev, info.st_ino)


def _admin_now(worktree: OtherWorktree, common: Path) -> list[tuple[str, bytes | None]]:
    """(path, bytes or None) of the worktree's :data:`ADMIN_FILES` and its folder's ``.git`` file now."""
    now = [(str(worktree.git_dir / name), _read(worktree.git_dir / name, common)) for name in ADMIN_FILES]
    if worktree.path:
        now.append((os.path.join(worktree.path, ".git"), _read(Path(worktree.path) / ".git", worktree.path)))
    return now


def admin_changes(worktree: OtherWorktree, common: Path) -> list[str]:
    """The files that say where the worktree is (its ``commondir``, ``gitdir``, ``config.worktree``, its folder's
    ``.git`` file) that no longer hold what they held when the run started; ``[git_dir]`` when its git directory
    is another one (removed, maybe made again under its id)."""
    if worktree.prefix == MAIN:
        return []
    if _identity(worktree.git_dir) != worktree.identity:
        return [str(worktree.git_dir)]
    gone = worktree.path and not os.path.lexists(worktree.path)  # its folder removed: no .git file to keep there
    return [path for (path, was), (_, now) in zip(worktree.admin, _admin_now(worktree, common))
            if was != now and not (gone and os.path.basename(path) == ".git" and path.startswith(worktree.path))]


def put_back_admin(worktree: OtherWorktree, common: Path, path: str) -> bool:
    """Give the file ``path`` (one :func:`admin_changes` named) its bytes from the run's start (remove it when it
    was not there); never through a link.  False when that failed."""
    was = dict(worktree.admin).get(path, b"")
    root = worktree.path if os.path.basename(path) == ".git" and not path.startswith(str(worktree.git_dir)) else common
    try:
        if was is None:
            safeio.remove(path, root)
        elif was:
            safeio.write_bytes(path, root, was, replace_dir=True)
        else:
            return False
    except OSError:
        return False
    return True


def _folder(git_dir: Path, common: Path) -> str:
    """The worktree's folder: its ``gitdir`` file names the ``.git`` file in it."""
    try:
        text = safeio.read_bytes(git_dir / "gitdir", common, max_bytes=MAX_REF_BYTES).decode(errors="replace").strip()
    except OSError:
        return ""
    return os.path.dirname(text) if text else ""


def read(worktrees: list[OtherWorktree], common: Path) -> dict[str, Ref]:
    """The HEAD and per-worktree refs of ``worktrees`` as their files hold them (no git: an id is not checked
    against the object store here), by the names git gives them from another worktree."""
    refs: dict[str, Ref] = {}
    for worktree in worktrees:
        head = _value(_read(worktree.git_dir / "HEAD", common))
        if head is not None:
            refs[f"{worktree.prefix}HEAD"] = head
        for top in PER_WORKTREE:
            try:
                files = safeio.read_files(worktree.git_dir / top, common, max_bytes=MAX_REF_BYTES)
            except OSError:  # none (FileNotFoundError), or a link on the way
                continue
            for rel, data in files.items():
                value = _value(data)
                if value is not None and _ref_name(rel):
                    refs[f"{worktree.prefix}{top}{rel}"] = value
    return refs


def _ref_name(rel: str) -> bool:
    """Whether ``rel`` (below ``refs/bisect/`` ...) is a name git takes: one it does not (a file git never wrote,
    ``x@{1}``) would never be written back."""
    return "@{" not in rel and ".." not in rel and all(
        _PART.fullmatch(part) and not part.startswith(".") and not part.endswith((".lock", ".")) for part in rel.split("/"))


def _read(path: Path, common: Path | str) -> bytes | None:
    try:
        return safeio.read_bytes(path, common, max_bytes=MAX_REF_BYTES)
    except OSError:
        return None


def _value(data: bytes | None) -> Ref | None:
    """A ref file's value: an id, or ``ref: NAME``; None for anything git would not read as a ref."""
    text = (data or b"").decode(errors="replace").strip()
    if text.startswith("ref: refs/") and "\n" not in text:
        return Ref("", text.removeprefix("ref: "))
    if len(text) in (40, 64) and set(text) <= _HEX:
        return Ref(text)
    return None


def owner(name: str, worktrees: list[OtherWorktree]) -> OtherWorktree | None:
    """The worktree a ref named as :func:`read` names it belongs to (None: a ref of the run's worktree)."""
    return next((worktree for worktree in worktrees if name.startswith(worktree.prefix)), None)


def present(worktree: OtherWorktree, common: Path) -> bool:
    """Whether the worktree's git directory is still the one there when the run started (its ``gitdir`` file; the
    main one's ``HEAD``): git would make a new, broken one if a ref were written into a removed one, and one made
    again under its id is not the person's."""
    if worktree.prefix != MAIN and _identity(worktree.git_dir) != worktree.identity:
        return False
    return safeio.kind(worktree.git_dir / ("HEAD" if worktree.prefix == MAIN else "gitdir"), common) == "file"


def write_symref(worktree: OtherWorktree, name: str, target: str, common: Path) -> None:
    """Make the ref ``name`` (as :func:`read` names it) of ``worktree`` point to the ref ``target``."""
    safeio.write_text(worktree.git_dir / name.removeprefix(worktree.prefix), common, f"ref: {target}\n", parents=True)


def key_roots(worktrees: list[OtherWorktree]) -> list[tuple[Path, bool]]:
    """What the ref key (:func:`ralph.loop.refkey.ref_key`) covers for them: each git directory's ``HEAD``, and
    its ``refs/`` tree (the main worktree's is the common directory's, which the key covers already)."""
    return [(worktree.git_dir, worktree.prefix != MAIN) for worktree in worktrees]
