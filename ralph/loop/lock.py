"""A per-project lock so two ``ralph run`` never drive the same checkout.

An ``flock`` on a file inside the git directory: the kernel releases it when
the process dies, so a crashed run never leaves a stale lock.  The holder's
pid and start time are written into the file for the refusal message.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path

from ralph.errors import LockedError

LOCK_NAME = "ralph-run.lock"


class ProjectLock:
    """Hold with ``with ProjectLock(git_dir):``; raises LockedError when taken."""

    def __init__(self, git_dir: Path) -> None:
        self.path = git_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise naming the process that holds it (pid, start time)."""
        fd = self._open(os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.holder()
            os.close(fd)
            who = f"pid {holder.get('pid')}, started {holder.get('started')}" if holder else "another process"
            raise LockedError(
                f"another `ralph run` is active in this project ({who}); wait for it to finish or stop it "
                f"(Ctrl-C in its terminal, or kill {holder.get('pid', '<pid>')})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}).encode())
        self._fd = fd

    def _open(self, flags: int) -> int:
        """Open the lock file itself: a symlink, fifo or hard link there (not ralph's) is refused, never followed."""
        from ralph.safeio import UnsafePath

        refused = UnsafePath(f"{self.path} is not a regular file with one link: remove it (it is not ralph's) and run again")
        try:
            fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise refused from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.close(fd)
            raise refused
        return fd

    def holder(self) -> dict[str, object]:
        """What the holder wrote into the lock file (``pid``, ``started``); empty when unreadable."""
        try:
            fd = self._open(os.O_RDONLY)
        except OSError:
            return {}
        try:
            data = json.loads(os.read(fd, 4096) or b"{}")
            return data if isinstance(data, dict) else {}
        except ValueError:
            return {}
        finally:
            os.close(fd)

    def is_held(self) -> bool:
        """True when some process holds the lock (used by ``ralph status``)."""
        if not self.path.exists():
            return False
        try:
            fd = self._open(os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def release(self) -> None:
        """Give the lock back (a no-op when it is not held here)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ProjectLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
