"""File-system lookups that spend from the work budget: the guards' own path work is bounded too.

``os.path.realpath`` costs one ``lstat`` per component and copies the path at every step, so a
crafted 100 KB path (``a/a/a/...`` or thousands of ``../x/..``) kept a guard busy for seconds outside
any analysis budget.  These helpers do the same lookups and spend from the budget active in this
thread (:func:`ralph.shell.budget.active`: the analysis's, or the one a guard opens with
:func:`ralph.shell.budget.scope`): characters handled and a fixed price per system call, never a
clock.  Past the budget they raise :class:`~ralph.shell.budget.BudgetExceeded`; the caller reports
the command as opaque.  Results are kept for the rest of the budget's life (one hook call), so the
same directory is looked up once however often the line names it.
"""

from __future__ import annotations

import os
import stat

from ralph.shell.budget import active

SYSCALL_COST = 48
"""Units for one ``lstat``/``stat``/``readlink`` (measured: about as much CPU as 48 units of analysis)."""
MAX_PATH = 4096
"""Bytes the kernel accepts in one path (``PATH_MAX``): a longer path cannot be opened, so it is not looked up."""
_MAX_LINKS = 40


def real_path(path: str) -> str:
    """``os.path.realpath(path)`` (not strict: a missing tail stays as it is, a symlink loop is left where it
    loops), paid for from the active budget."""
    budget = active()
    cache = budget.memo
    hit = cache.get(("real", path))
    if hit is not None:
        budget.spend(1 + len(hit) // 64)
        return hit
    budget.spend(len(path))
    full = path if path.startswith("/") else os.getcwd() + "/" + path  # joined, not normalised: `link/..`
    result, ok = _join_real("/", full[1:], budget, cache, {}, 0)
    if not ok:  # as os.path.realpath leaves a loop: the rest appended, then normalised
        result = os.path.normpath(result)
    if len(path) <= MAX_PATH:
        cache[("real", path)] = result
    return result


def _join_real(done: str, rest: str, budget, cache: dict, seen: dict, depth: int) -> tuple[str, bool]:  # type: ignore[no-untyped-def]
    """``posixpath._joinrealpath``: follow ``rest`` from the resolved directory ``done`` (False: a symlink loop,
    left unresolved as Python leaves it).  Steps that meet no symlink are remembered for the whole call."""
    if rest.startswith("/"):
        rest, done = rest.lstrip("/"), "/"
    while rest:
        name, _, rest = rest.partition("/")
        if not name or name == ".":
            continue
        if name == "..":
            budget.spend(1 + len(done) // 64)
            head, tail = os.path.split(done)
            done = os.path.join(head, "..", "..") if tail == ".." else head
            continue
        step = cache.get(("step", done, name))
        if step is not None:
            budget.spend(2)
            done = step
            continue
        nxt = os.path.join(done, name)
        budget.spend(SYSCALL_COST + len(nxt))
        target = _readlink(nxt, cache)
        if target is None:
            if len(nxt) <= MAX_PATH:
                cache[("step", done, name)] = nxt
            done = nxt
            continue
        if nxt in seen:
            resolved = seen[nxt]
            if resolved is not None:
                done = resolved
                continue
            return os.path.join(nxt, rest), False  # a loop
        if depth >= _MAX_LINKS:  # the kernel gives up here too (ELOOP)
            return os.path.join(nxt, rest), False
        budget.spend(len(target))
        seen[nxt] = None
        done, ok = _join_real(done, target, budget, cache, seen, depth + 1)
        if not ok:
            return os.path.join(done, rest), False
        seen[nxt] = done
    return done, True


def _readlink(path: str, cache: dict) -> str | None:
    """The target of ``path`` if it is a symlink (None: not a link, missing, or too long to open)."""
    key = ("link", path)
    if key in cache:
        return cache[key]
    target = None
    if len(path) <= MAX_PATH:
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                target = os.readlink(path)
        except (OSError, ValueError):
            target = None
    cache[key] = target
    return target


def path_stat(path: str, follow: bool = True) -> os.stat_result | None:
    """``os.stat`` (``follow``) or ``os.lstat`` of ``path``, or None if it cannot be looked up; paid for."""
    budget = active()
    key = ("stat" if follow else "lstat", path)
    cache = budget.memo
    if key in cache:
        budget.spend(1)
        return cache[key]
    budget.spend(SYSCALL_COST + len(path))
    info = None
    if len(path) <= MAX_PATH:
        try:
            info = os.stat(path) if follow else os.lstat(path)
        except (OSError, ValueError):
            info = None
    cache[key] = info
    return info


def is_link(path: str) -> bool:
    """``os.path.islink``, paid for."""
    info = path_stat(path, follow=False)
    return info is not None and stat.S_ISLNK(info.st_mode)


def is_file(path: str) -> bool:
    """``os.path.isfile``, paid for."""
    info = path_stat(path)
    return info is not None and stat.S_ISREG(info.st_mode)


def is_dir(path: str) -> bool:
    """``os.path.isdir``, paid for."""
    info = path_stat(path)
    return info is not None and stat.S_ISDIR(info.st_mode)


def exists(path: str, follow: bool = True) -> bool:
    """``os.path.exists`` (``follow``) or ``os.path.lexists``, paid for."""
    return path_stat(path, follow) is not None


ENTRY_COST = 8
"""Units for one directory entry read while a glob pattern is matched."""


def glob_links(base: str, pattern: list[str], follow_last: bool = False) -> list[str]:
    """The directories, symlinks followed, that the glob ``pattern`` (its components below the directory
    ``base``, as ``dangerous_commands._glob_split`` gives them) reaches through a symlink on the file system now:
    what bash would expand it to, where a match's directory is not where its name says (``l?d/*`` matches the
    files in the directory a project link ``lod`` leads to).  A pattern that matches nothing stays a word, as
    in bash; names starting with ``.`` only where the component does (bash without ``dotglob``); ``**`` ends
    the walk (the caller counts anything under it).  ``follow_last``: a match that is a link is followed too (a
    directory written into, ``cp x l?d/``).  Paid for: a directory listed costs a system call, each
    entry :data:`ENTRY_COST`."""
    import fnmatch

    budget = active()
    frontier = [base]
    for part in pattern:
        if part == "**" or not frontier:
            return []
        nxt: list[str] = []
        for directory in frontier:
            if part == ".." or not any(ch in part for ch in "*?["):
                path = os.path.join(directory, part)
                if exists(path, follow=False):
                    nxt.append(path)
                continue
            budget.spend(SYSCALL_COST + len(directory))
            if len(directory) > MAX_PATH:
                continue
            try:
                names = [entry.name for entry in os.scandir(directory)]
            except (OSError, ValueError):
                continue
            budget.spend(ENTRY_COST * len(names))
            for name in names:
                if (part.startswith(".") or not name.startswith(".")) and fnmatch.fnmatchcase(name, part):
                    budget.spend(len(name))
                    nxt.append(os.path.join(directory, name))
        frontier = nxt
    found = []
    for match in frontier:  # where each match is: its directory (``follow_last``: itself) with symlinks followed
        if follow_last:
            real = real_path(match)
            if real != os.path.normpath(match):
                found.append(real)
            continue
        head = real_path(os.path.dirname(match) or "/")
        if head != os.path.normpath(os.path.dirname(match)):
            found.append(os.path.join(head, os.path.basename(match)))
    return found


def through_links(path: str, links: dict[str, str]) -> str:
    """The absolute ``path`` (``..`` not yet resolved) read component by component as the kernel reads it, with the
    links made earlier on the line (``links``: link path -> its target, both absolute) followed where it passes
    them: ``r/prd.md`` after ``ln -s ralph r`` is ``ralph/prd.md``, and ``l/../x`` is beside the link's target.
    Links that exist already are left to :func:`real_path`; each component costs one unit of the budget."""
    budget = active()
    done = "/"
    for _ in range(_MAX_LINKS):
        rest = path.split("/")
        jumped = False
        for k, name in enumerate(rest):
            budget.spend(1 + len(name))
            if not name or name == ".":
                continue
            done = os.path.dirname(done) if name == ".." else os.path.join(done, name)
            if done in links:
                path = "/".join([links[done], *rest[k + 1 :]])
                done, jumped = "/", True
                break
        if not jumped:
            return done
    return done
