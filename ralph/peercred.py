"""Who is at the other end of a Unix socket, as the kernel says: for the person's channel to a loop.

``ralph answer`` and a running loop talk over a Unix socket, and each side asks the kernel who the
other is (``SO_PEERCRED``: pid, uid, gid; ``SO_PEERPIDFD`` where the kernel has it, so the answer is
about that very process even if it exits and its pid is reused).  A peer is refused when it runs as
another user, when it lives in a nested pid namespace (every agent process of a loop on Linux: the
loop starts each command in a pid namespace of its own, ``ralph/containment.py``; a container is one
too), or when it descends from the loop process itself (an agent's process where no namespace could
be made).  Nothing a process can write changes these answers: they are the kernel's.

What it cannot tell apart: a process that left the loop's containment (a daemon asked to start it,
``nsenter`` as root) looks like the person's.  docs/operating.md says what holds per runner.

Stdlib only, Linux ``/proc``; elsewhere every peer is refused (there is no way to tell).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

__all__ = ["Peer", "peer_of", "refusal"]

SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)
"""Linux 6.5+: a pidfd of the peer process (Python's socket module does not name it yet)."""


@dataclass
class Peer:
    """The process that connected (or accepted), as the kernel recorded it at ``connect``."""

    pid: int
    uid: int
    gid: int
    pidfd: int | None = None
    """A pidfd of that process (closed by :meth:`close`), or None where the kernel gives none."""

    def close(self) -> None:
        """Close :attr:`pidfd`."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def peer_of(sock: socket.socket) -> Peer | None:
    """The peer of a connected Unix socket, or None where the kernel does not say (not Linux)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    pidfd = None
    try:
        pidfd = struct.unpack("i", sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4))[0]
    except OSError:
        pidfd = None
    return Peer(pid, uid, gid, pidfd if pidfd is not None and pidfd >= 0 else None)


def _status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as a dict (empty when the process is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            return {key: value.strip() for key, _, value in (line.partition(":") for line in handle)}
    except OSError:
        return {}


def namespace_pids(peer: Peer) -> list[int] | None:
    """The peer's pid in this pid namespace and in each nested one below it (``NSpid``), or None when
    it cannot be read (the process is gone).  From the pidfd's ``fdinfo`` when there is one: that is
    the process that connected, whatever runs under its pid now."""
    line = None
    if peer.pidfd is not None:
        try:
            with open(f"/proc/self/fdinfo/{peer.pidfd}", encoding="utf-8") as handle:
                info = {key: value.strip() for key, _, value in (raw.partition(":") for raw in handle)}
        except OSError:
            info = {}
        if info.get("Pid") == "-1":  # the process has exited
            return None
        line = info.get("NSpid")
    if line is None:
        line = _status(peer.pid).get("NSpid")
    if not line:
        return None
    try:
        return [int(value) for value in line.split()]
    except ValueError:
        return None


def ancestors(pid: int, limit: int = 4096) -> list[int]:
    """The parent chain of ``pid`` up to pid 1 (``PPid`` of each; stops where one cannot be read)."""
    chain: list[int] = []
    current = pid
    while current > 1 and len(chain) < limit:
        parent = _status(current).get("PPid")
        if not parent or not parent.isdigit():
            break
        current = int(parent)
        chain.append(current)
    return chain


def refusal(peer: Peer | None, *, not_below: int | None = None) -> str | None:
    """Why ``peer`` is not the person's process, or None when it may be.

    Refused: no peer credentials (not Linux); another user (root excepted); a process in a nested pid
    namespace (an agent's, a container's); a process that descends from ``not_below`` (the loop's pid:
    an agent's process where no namespace could be made); one that is gone.
    """
    if peer is None:
        return "the kernel does not say who connected (peer credentials need Linux)"
    if peer.uid not in (os.getuid(), 0):
        return f"the process at the other end runs as uid {peer.uid}, not as this user"
    if peer.pid <= 0:  # the kernel's answer for a process outside this pid namespace (an ancestor's)
        return "the process at the other end lives outside this pid namespace"
    pids = namespace_pids(peer)
    if pids is None or not pids or pids[0] <= 0:
        return f"the process at the other end (pid {peer.pid}) is gone or cannot be inspected"
    if len(pids) > 1:
        return (f"the process at the other end (pid {peer.pid}) runs in a pid namespace of its own (an agent's "
                "command or a container): only the person answers")
    if not_below is not None and not_below in ancestors(peer.pid):
        return f"the process at the other end (pid {peer.pid}) was started by the loop (an agent's command): only the person answers"
    return None
