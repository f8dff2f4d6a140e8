"""The bubblewrap command line of one sandbox: what the agent (or a gate command) sees of this machine.

Standard library only, no I/O but ``lstat``: :func:`bwrap_argv` turns a :class:`Layout` into argv,
so the rules are in one place and a unit test reads them.

Namespaces: user (where the system allows it), pid, ipc, uts, cgroup and network (every policy: its
ways out are the runner's relays); ``--disable-userns`` (no user namespace of its own inside, so nothing can be remounted
or unhidden), ``--cap-drop ALL`` (bubblewrap keeps every capability for a sandbox whose user is root
otherwise), ``--die-with-parent`` and ``--new-session`` (no ``TIOCSTI`` into the person's terminal).

Mounts, in this order (a later one covers an earlier one):

1. the whole host read-only (``--ro-bind / /``), a fresh ``/dev`` and a ``/proc`` of the sandbox's pid
   namespace whose ``sys``, ``sysrq-trigger``, ``irq`` and ``bus`` are read-only (a root user,
   even without capabilities, may write ``/proc/sys/kernel/core_pattern``, which runs a program as
   the host's root);
2. empty, private directories over ``/tmp``, ``/var/tmp``, ``/run`` (sockets: the Docker engine's,
   the session bus, an SSH agent's), the person's home and the configured ``hide`` paths (each a
   tmpfs of at most ``tmpfs_size`` bytes);
3. the agent's checkout, read-write, at the project's own path (the project itself is not visible);
4. the project's ``toolchain`` entries (a ``.venv``) read-only at their place in the checkout;
5. read-only paths the sandbox needs (this Python, ralph's packages, the agent's CLI, ``ro_binds``);
6. the run directory and the hook socket's directory read-only, the agent CLI's run-owned config
   home read-write, and the runner's private directory read-only at :data:`PRIVATE_MOUNT` (the
   network relays' sockets, the ``ralph`` command for ``ralph ask``, the loop's object store of the
   checkout, read-write only in the workspace side's sandbox);
7. extra read-write paths (a gate's working directory outside the project).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PRIVATE_MOUNT = Path("/run/ralph-bwrap")
"""Where the runner's private directory appears inside the sandbox."""
ALWAYS_HIDDEN = ("/tmp", "/var/tmp", "/run")
"""Host directories every sandbox gets an empty, private one in place of."""
PROC_COVERED = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
"""Parts of ``/proc`` that write to the kernel's global state: read-only inside."""


@dataclass
class Features:
    """What this machine's bubblewrap can do (found by the probe)."""

    user_namespace: bool = True
    """``--unshare-user`` works (the sandbox's user is in a user namespace of its own)."""
    disable_userns: bool = True
    """``--disable-userns`` works (bubblewrap 0.8 and later)."""
    tmpfs_size: bool = True
    """``--size`` before ``--tmpfs`` works (a private directory's size can be limited)."""


@dataclass
class Layout:
    """One sandbox, as host paths."""

    project: Path
    """The project's path: the checkout appears here."""
    checkout: Path
    """The agent's checkout on this machine."""
    chdir: Path
    """The working directory inside."""
    hidden: list[Path] = field(default_factory=list)
    """Host paths covered by an empty directory (a file: by an empty file), :func:`hidden_roots`."""
    toolchain: list[str] = field(default_factory=list)
    """Entries of the project (relative names) shown read-only at their place in the checkout."""
    read_only: list[Path] = field(default_factory=list)
    """Host paths shown read-only at their own path (after the checkout and the toolchain)."""
    read_write: list[Path] = field(default_factory=list)
    """Host paths shown read-write at their own path (last)."""
    private: Path | None = None
    """The runner's private directory, read-only at :data:`PRIVATE_MOUNT`."""
    tmpfs_size: int | None = None
    """Bytes each private directory may hold (None: the kernel's default, half the memory)."""
    checkout_read_only: bool = False
    """Show the checkout read-only (a look at the project itself, before the run has a checkout)."""
    private_read_write: list[str] = field(default_factory=list)
    """Entries of ``private`` shown read-write at their place under :data:`PRIVATE_MOUNT` (the workspace side's
    sandbox writes the loop's object store of the checkout there; every other sandbox reads it)."""


def hidden_roots(home: str | None, extra: list[Path]) -> list[Path]:
    """The host paths a sandbox hides: :data:`ALWAYS_HIDDEN`, ``/var/run`` (where it is not a link to
    ``/run``), the home directories ``home`` and the user's (from the password database), ``extra``."""
    import pwd

    roots = [Path(p) for p in ALWAYS_HIDDEN]
    if os.path.isdir("/var/run") and not os.path.islink("/var/run"):
        roots.append(Path("/var/run"))
    homes = [home]
    try:
        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    for path in homes:
        if path and os.path.isabs(path) and os.path.realpath(path) != "/":
            roots.append(Path(os.path.realpath(path)))
    roots += [Path(os.path.realpath(os.path.expanduser(p))) for p in extra]
    unique: list[Path] = []
    for root in roots:
        if root not in unique and str(root) != "/":
            unique.append(root)
    return unique


def under(path: Path, roots: list[Path]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies under one."""
    return any(path == root or root in path.parents for root in roots)


def bwrap_argv(bwrap: str, layout: Layout, command: list[str], features: Features) -> list[str]:
    """The bubblewrap command line that runs ``command`` in ``layout`` (see the module's docstring)."""
    argv = [bwrap]
    if features.user_namespace:
        argv.append("--unshare-user")
        if features.disable_userns:
            argv.append("--disable-userns")
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net"]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for covered in PROC_COVERED:
        argv += ["--ro-bind-try", covered, covered]
    for hidden in sorted(layout.hidden, key=lambda p: len(p.parts)):  # a parent before what lies under it
        if os.path.isdir(hidden):
            sized = layout.tmpfs_size and features.tmpfs_size
            argv += [*(["--size", str(layout.tmpfs_size)] if sized else []), "--tmpfs", str(hidden)]
        elif os.path.lexists(hidden):
            argv += ["--ro-bind", "/dev/null", str(hidden)]
    argv += ["--ro-bind" if layout.checkout_read_only else "--bind", str(layout.checkout), str(layout.project)]
    for name in layout.toolchain:
        entry = str(layout.project / name)
        argv += ["--ro-bind", entry, entry]
    for path in layout.read_only:
        argv += ["--ro-bind", str(path), str(path)]
    if layout.private is not None:
        argv += ["--ro-bind", str(layout.private), str(PRIVATE_MOUNT)]
        for name in layout.private_read_write:
            argv += ["--bind", str(layout.private / name), str(PRIVATE_MOUNT / name)]
    for path in layout.read_write:
        argv += ["--bind", str(path), str(path)]
    argv += ["--chdir", str(layout.chdir), "--", *command]
    return argv


__all__ = ["ALWAYS_HIDDEN", "Features", "Layout", "PRIVATE_MOUNT", "PROC_COVERED", "bwrap_argv", "hidden_roots", "under"]
