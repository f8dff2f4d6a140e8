"""Whether bubblewrap can make the runner's sandbox here, and if not, why and what to do.

One trial sandbox per process (cached), with every namespace and option the runner uses; where
``--unshare-user`` or ``--disable-userns`` is refused the trial is made again without it, and
:class:`Probe` says what works.  Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from .command import Features

INSTALL_FIX = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
USERNS_FIX = (
    "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces "
    "above 0; on Ubuntu 23.10+ also kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for "
    "bwrap), or run ralph as root"
)
TRIAL_TIMEOUT = 30.0


@dataclass
class Probe:
    """What the trial found."""

    ok: bool
    reason: str = ""
    """Why the runner cannot be used, with the fix (empty when it can)."""
    binary: str = ""
    version: str = ""
    features: Features = field(default_factory=Features)
    notes: list[str] = field(default_factory=list)
    """What works differently here (shown by pre-flight)."""


_cached: Probe | None = None


def probe() -> Probe:
    """The cached :func:`run_probe`."""
    global _cached
    if _cached is None:
        _cached = run_probe()
    return _cached


def run_probe(binary: str | None = None) -> Probe:
    """Find ``bwrap`` and make one trial sandbox with the runner's options."""
    if not sys.platform.startswith("linux"):
        return Probe(False, f"bubblewrap needs Linux (this is {sys.platform}); use the docker-sandbox runner")
    found = binary or shutil.which("bwrap")
    if not found:
        return Probe(False, f"`bwrap` is not on PATH: {INSTALL_FIX}")
    version = _version(found)
    tried: list[str] = []
    for features in (Features(True, True, True), Features(True, True, False), Features(True, False, False),
                     Features(False, False, False)):
        if not features.user_namespace and os.getuid() != 0:
            break  # without a user namespace bwrap needs root (or setuid, which the runner does not rely on)
        problem = _trial(found, features)
        if problem is None:
            notes = []
            if not features.disable_userns:
                notes.append(f"{version or 'this bubblewrap'} has no --disable-userns (0.8 and later): the agent may "
                             "make user namespaces of its own inside (the host stays read-only)")
            if not features.user_namespace:
                notes.append("no user namespace for the sandbox (it runs as this machine's root, without capabilities)")
            if not features.tmpfs_size:
                notes.append(f"{version or 'this bubblewrap'} cannot limit a private directory's size (--size): "
                             "/tmp and the home may fill the memory")
            return Probe(True, "", found, version, features, notes)
        tried.append(problem)
    first = tried[0] if tried else "the trial sandbox did not start"
    if any(word in first.lower() for word in ("uid map", "user namespace", "no space left", "operation not permitted",
                                               "permission denied", "setting up uid")):
        return Probe(False, f"bubblewrap cannot make a sandbox here ({first}): {USERNS_FIX}", found, version)
    return Probe(False, f"bubblewrap cannot make a sandbox here: {first}", found, version)


def _version(binary: str) -> str:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=TRIAL_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _trial(binary: str, features: Features) -> str | None:
    """None when the trial sandbox ran ``true``; otherwise its error, one line."""
    import tempfile
    from pathlib import Path

    from .command import Layout, bwrap_argv

    scratch = Path(tempfile.mkdtemp(prefix="ralph-bwrap-probe-"))
    target = Path("/tmp/ralph-bwrap-probe")  # inside the sandbox's private /tmp
    layout = Layout(project=target, checkout=scratch, chdir=target, hidden=[Path("/tmp")], tmpfs_size=1 << 20)
    argv = bwrap_argv(binary, layout, ["/bin/true"], features)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TRIAL_TIMEOUT, stdin=subprocess.DEVNULL,
                              cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"


__all__ = ["INSTALL_FIX", "USERNS_FIX", "Probe", "probe", "run_probe"]
