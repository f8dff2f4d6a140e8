"""The loop's file IO under the project: never through a path the agent controls.

The agent can put a symlink, a hard link, a fifo or a directory wherever the loop reads or
writes (``ralph/tasks.json``, ``ralph/progress.txt``, ``.ralph-active``, ``ralph-archive`` ...),
and swap one in while the loop is between a check and a use.  Every function here takes the
file's path and a ``root``: a directory the caller trusts (the project, as the person gave it).
Below ``root``:

- the path is walked one component at a time with directory descriptors (``openat`` with
  ``O_NOFOLLOW | O_DIRECTORY``), so no component on the way can be a symlink, and a component
  swapped for a symlink after it was opened changes nothing (the walk holds the directory);
- only regular files with a single link are read or appended to (``O_NOFOLLOW`` and ``fstat``
  after the open; a fifo or a device is never opened, a hard link to a file elsewhere is refused);
- writes are atomic: a temporary file created in the already-opened directory, then renamed over
  the name *in that directory*, so a symlink or a hard link at the name is replaced, never written
  through;
- what cannot be done safely raises :class:`UnsafePath`, an ``OSError`` (callers that treat an
  unreadable file as missing keep doing so) and a :class:`~ralph.errors.RalphError` (a run that
  meets one stops with a clear line, exit 2).

Stdlib only, cheap to import.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ralph.errors import RalphError

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "UnsafePath", "append_text", "check", "kind", "make_dirs", "move", "open_dir", "problem", "read_bytes", "read_files",
    "read_text", "read_link", "remove", "remove_empty_dir", "root_for", "symlink", "write_bytes", "write_text",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


_changes = [0]
"""How often the loop wrote, removed or renamed something through this module (any root): with
:func:`ralph.gitutil.StatusShare`, a ``git status`` taken before the last one is no longer now's."""


def note_change() -> None:
    """Something may have changed a work tree (a write here, a git command that writes, a process run)."""
    _changes[0] += 1


def _changing(func: _F) -> _F:
    """``func`` with :func:`note_change` before and after it (a status taken while it runs is never now's)."""

    @functools.wraps(func)
    def noted(*args: Any, **kwargs: Any) -> Any:
        note_change()
        try:
            return func(*args, **kwargs)
        finally:
            note_change()

    return noted  # type: ignore[return-value]


def changes_noted() -> int:
    """The count :func:`note_change` raises (compare two readings: equal means nothing was noted between)."""
    return _changes[0]


class UnsafePath(RalphError, OSError):
    """A path the loop does not use: a symlink on the way, not a regular file, or a file linked elsewhere."""

    def __init__(self, message: str, rel: str = "", what: str = "") -> None:
        super().__init__(message)
        self.errno = errno.ELOOP
        self.rel = rel
        """The offending path relative to the root (a component on the way, or the file itself)."""
        self.what = what
        """What it is: ``a symlink``, ``a fifo``, ``a file with 2 hard links`` ..."""


def _parts(path: Path | str, root: Path | str) -> tuple[str, list[str]]:
    """(``root`` as an absolute path, the components of ``path`` below it); ValueError when outside."""
    base = os.path.abspath(root)
    full = os.path.abspath(os.path.join(base, path))
    rel = os.path.relpath(full, base)
    if rel == ".":
        return base, []
    parts = rel.split(os.sep)
    if parts[0] == os.pardir:
        raise ValueError(f"{full} is not inside {base}")
    return base, parts


def root_for(path: Path | str, root: Path | str) -> Path:
    """``root`` when ``path`` is below it, else ``path``'s folder (a file the person keeps elsewhere)."""
    base = os.path.abspath(root)
    full = os.path.abspath(os.path.join(base, path))
    inside = full != base and os.path.commonpath([base, full]) == base
    return Path(base if inside else os.path.dirname(full))


def _describe(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _unsafe(parts: list[str], index: int, what: str) -> UnsafePath:
    shown = "/".join(parts[: index + 1]) or "."
    return UnsafePath(f"{shown} is {what}: the loop never reads or writes through a symlink, a special file or "
                      "a file with other hard links", shown, what)


def _walk(base: str, parts: list[str], create: bool) -> int:
    """A descriptor of the directory ``base/parts...``, every component opened without following links."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: the open below checks what it is
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    try:
                        mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                    except OSError:
                        mode = stat.S_IFLNK
                    what = "a file where a directory should be" if stat.S_ISREG(mode) else _describe(mode)
                    raise _unsafe(parts, index, what) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def open_dir(path: Path | str, root: Path | str, *, create: bool = False) -> Iterator[int]:
    """A descriptor of the directory ``path`` below ``root`` (made, parents too, when ``create``)."""
    base, parts = _parts(path, root)
    fd = _walk(base, parts, create)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _parent(path: Path | str, root: Path | str, create: bool = False) -> Iterator[tuple[int, str, list[str]]]:
    base, parts = _parts(path, root)
    if not parts:
        raise ValueError(f"{path} is the root itself, not a file below it")
    fd = _walk(base, parts[:-1], create)
    try:
        yield fd, parts[-1], parts
    finally:
        os.close(fd)


def _check_regular(info: os.stat_result, parts: list[str]) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise _unsafe(parts, len(parts) - 1, _describe(info.st_mode))
    if info.st_nlink > 1:
        raise _unsafe(parts, len(parts) - 1, f"a file with {info.st_nlink} hard links")


def read_bytes(path: Path | str, root: Path | str, *, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path``; ``FileNotFoundError`` when absent, :class:`UnsafePath`
    for a symlink (anywhere on the way), a special file, a directory, a file with other links or (``max_bytes``)
    one larger than that."""
    with _parent(path, root) as (dir_fd, name, parts):
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except NotADirectoryError:
            raise FileNotFoundError(errno.ENOENT, "No such file", str(path)) from None
        _check_regular(before, parts)  # a fifo or a device is never opened
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _unsafe(parts, len(parts) - 1, "a symlink") from None
            raise
        try:
            info = os.fstat(fd)
            _check_regular(info, parts)  # what was opened, whatever was swapped in since the stat
            if max_bytes is None:
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                return b"".join(chunks)
            data = os.read(fd, max_bytes + 1) if info.st_size <= max_bytes else b""
            if len(data) > max_bytes or info.st_size > max_bytes:
                raise _unsafe(parts, len(parts) - 1, f"larger than {max_bytes} bytes")
            return data
        finally:
            os.close(fd)


MAX_DEPTH = 32
"""How deep :func:`read_files` goes: a directory deeper down is an entry it does not read (None)."""


def read_files(path: Path | str, root: Path | str, *, max_bytes: int) -> dict[str, bytes | None]:
    """Every file below the directory ``path`` (its subdirectories too, :data:`MAX_DEPTH` deep), walked without
    following a link: the name relative to ``path`` (``/``-separated) and its bytes, or None for an entry that
    is not a regular single-link file of at most ``max_bytes`` (a symlink, a fifo, a hard-linked file ...: it is
    never opened, and a link to a directory is never entered).  ``FileNotFoundError`` when ``path`` is absent,
    :class:`UnsafePath` when a component of it is a link."""
    found: dict[str, bytes | None] = {}
    with open_dir(path, root) as top:
        _read_below(top, "", found, max_bytes, MAX_DEPTH)
    return found


def _read_below(dir_fd: int, rel: str, found: dict[str, bytes | None], max_bytes: int, depth: int) -> None:
    for name in sorted(os.listdir(dir_fd)):
        shown = f"{rel}{name}"
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed meanwhile
        if stat.S_ISDIR(info.st_mode) and depth <= 1:
            found[shown] = None
        elif stat.S_ISDIR(info.st_mode):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                found[shown] = None  # swapped for something else since the stat
                continue
            try:
                _read_below(child, f"{shown}/", found, max_bytes, depth - 1)
            finally:
                os.close(child)
        else:
            found[shown] = _read_small_at(dir_fd, name, max_bytes) if stat.S_ISREG(info.st_mode) else None


def _read_small_at(dir_fd: int, name: str, max_bytes: int) -> bytes | None:
    """The bytes of ``name`` in ``dir_fd`` when it is a regular single-link file of at most ``max_bytes``."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1 or info.st_size > max_bytes:
            return None
        data = os.read(fd, max_bytes + 1)
        return data if len(data) <= max_bytes else None
    finally:
        os.close(fd)


def read_text(path: Path | str, root: Path | str, encoding: str = "utf-8") -> str:
    """:func:`read_bytes` decoded (``UnicodeDecodeError`` when it is not ``encoding``)."""
    return read_bytes(path, root).decode(encoding)


def _remove_entry(dir_fd: int, name: str) -> None:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        import shutil

        shutil.rmtree(name, dir_fd=dir_fd)  # fd-based: never follows a link inside (avoids_symlink_attacks)
    else:
        os.unlink(name, dir_fd=dir_fd)


@_changing
def write_bytes(
    path: Path | str, root: Path | str, data: bytes, *, parents: bool = False, replace_dir: bool = False,
    mode: int | None = None, sync: bool = True,
) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the opened directory, renamed over the name.

    A symlink, hard link or special file at ``path`` is replaced (its target is never written);
    a directory there is removed first only with ``replace_dir`` (restores), else ``IsADirectoryError``.
    An existing regular file keeps its permission bits, or ``mode`` is set.  ``parents``: make
    missing directories on the way (never through a symlink).  ``sync=False``: no ``fsync`` (a file
    that only describes the running process, rewritten soon anyway: readers still see the old or the
    new content, never a mix).
    """
    with _parent(path, root, create=parents) as (dir_fd, name, _parts_):
        try:
            current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        if current is not None and stat.S_ISDIR(current.st_mode):
            if not replace_dir:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
            _remove_entry(dir_fd, name)
        if mode is None and current is not None and stat.S_ISREG(current.st_mode):
            mode = stat.S_IMODE(current.st_mode)
        import secrets  # here: reading (ralph status) needs neither it nor shutil

        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, _TEMP_FLAGS, 0o666, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if sync:
                    os.fsync(fd)
                if mode is not None:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise


def write_text(path: Path | str, root: Path | str, text: str, *, parents: bool = False, replace_dir: bool = False,
               encoding: str = "utf-8") -> None:
    """:func:`write_bytes` of ``text`` (encoded as is: no newline translation)."""
    write_bytes(path, root, text.encode(encoding), parents=parents, replace_dir=replace_dir)


@_changing
def append_text(path: Path | str, root: Path | str, text: str, *, encoding: str = "utf-8", sync: bool = False) -> None:
    """Append ``text`` to the regular file ``path`` (made when absent), by descriptor.

    :class:`UnsafePath` when ``path`` is a symlink (anywhere on the way), a special file or has
    other hard links: nothing is written then.  ``sync``: flushed to disk before returning.
    """
    with _parent(path, root) as (dir_fd, name, parts):
        try:
            fd = os.open(name, _APPEND_FLAGS, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                try:
                    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                except OSError:
                    mode = stat.S_IFLNK
                raise _unsafe(parts, len(parts) - 1, _describe(mode)) from None
            raise
        try:
            _check_regular(os.fstat(fd), parts)
            view = memoryview(text.encode(encoding))
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)


@_changing
def remove(path: Path | str, root: Path | str) -> bool:
    """Remove the name ``path`` (a link itself, never its target; a directory with what is in it).

    False when there was nothing; :class:`UnsafePath` when a component on the way is a symlink.
    """
    try:
        with _parent(path, root) as (dir_fd, name, _parts_):
            _remove_entry(dir_fd, name)
    except FileNotFoundError:
        return False
    return True


@_changing
def symlink(target: str, path: Path | str, root: Path | str) -> None:
    """Make the symlink ``path`` -> ``target`` (putting back a link the person had; its parents are walked)."""
    with _parent(path, root, create=True) as (dir_fd, name, _parts_):
        os.symlink(target, name, dir_fd=dir_fd)


def read_link(path: Path | str, root: Path | str) -> str:
    """Where the symlink ``path`` points (its parents walked without following links)."""
    with _parent(path, root) as (dir_fd, name, _parts_):
        return os.readlink(name, dir_fd=dir_fd)


@_changing
def remove_empty_dir(path: Path | str, root: Path | str) -> bool:
    """Remove the directory ``path`` if it is empty (a link there is left alone); True when removed."""
    try:
        with _parent(path, root) as (dir_fd, name, _parts_):
            os.rmdir(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


@_changing
def make_dirs(path: Path | str, root: Path | str) -> None:
    """Make the directory ``path`` and its parents below ``root``, refusing a symlink on the way."""
    with open_dir(path, root, create=True):
        pass


@_changing
def move(
    source: Path | str, target: Path | str, root: Path | str, *, parents: bool = False,
    target_root: Path | str | None = None,
) -> None:
    """Rename ``source`` to ``target`` (below ``root``, or ``target_root`` for the target); a link
    moves as the link itself.  ``FileExistsError`` when ``target`` exists (nothing is overwritten).
    """
    with _parent(source, root) as (src_fd, src_name, _src_parts):
        with _parent(target, root if target_root is None else target_root, create=parents) as (dst_fd, dst_name, _):
            try:
                os.stat(dst_name, dir_fd=dst_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(errno.EEXIST, "File exists", str(target))
            os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def kind(path: Path | str, root: Path | str) -> str:
    """What ``path`` is, seen without following links: ``absent``, ``file`` (regular, one link),
    ``dir``, ``symlink``, ``hardlink`` (a regular file with other links), ``other`` (fifo, socket,
    device) or ``unsafe`` (a component on the way is a symlink or not a directory)."""
    try:
        with _parent(path, root) as (dir_fd, name, _parts_):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except UnsafePath:
        return "unsafe"
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    if not stat.S_ISREG(info.st_mode):
        return "other"
    return "hardlink" if info.st_nlink > 1 else "file"


def check(path: Path | str, root: Path | str) -> UnsafePath | None:
    """The :class:`UnsafePath` the loop would meet reading or appending to ``path`` (None: a regular
    single-link file, or absent); its ``rel`` names the offending component."""
    try:
        with _parent(path, root) as (dir_fd, name, parts):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            _check_regular(info, parts)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnsafePath as exc:
        return exc
    return None


def problem(path: Path | str, root: Path | str) -> str | None:
    """Why the loop would not read or append to ``path`` (None: a regular file, or absent)."""
    found = check(path, root)
    return None if found is None else str(found)
