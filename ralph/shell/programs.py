"""What programs do with their arguments: the dispatch from a command name to its handler.

Each handler gets the :class:`~ralph.shell.walker.Call` of one simple
command and records what it runs: the command itself, the command it wraps
(:mod:`~ralph.shell.wrappers`), code it runs or reads from stdin
(:mod:`~ralph.shell.interpreters`, :mod:`~ralph.shell.shell_builtins`),
or an opaque finding for what cannot be followed (:mod:`~ralph.shell.tools`
for ``sed e``, ``awk system()``, ``find -exec`` ...).  A program without a handler
is an ordinary command.
"""

from __future__ import annotations

from ralph.shell.containers import COMPOSE_CLIS, CONTAINER_CLIS, OTHER_RUNTIMES, container_program, other_runtime
from ralph.shell.environment import check_env, declaration
from ralph.shell.interpreters import INTERPRETER, INTERPRETER_HANDLERS, _interpreter, _shell
from ralph.shell.progutil import Handler, emit, fetches, getopts, has_long, is_stdin_path
from ralph.shell import SHELLS
from ralph.shell.shell_builtins import BUILTINS
from ralph.shell.tools import TOOLS, find_roots, sed_executes
from ralph.shell.walker import Call, Walker
from ralph.shell.wrappers import WRAPPERS
from ralph.shell.writes import WRITERS, generic_outputs, in_place_writer

__all__ = ["OPAQUE_WRAPPERS", "check_env", "declaration", "dispatch", "fetches", "find_roots", "getopts", "has_long",
           "is_stdin_path", "sed_executes"]

OPAQUE_WRAPPERS = frozenset(
    {"parallel", "strace", "ltrace", "gdb", "lldb", "valgrind", "perf", "firejail", "bwrap", "unshare", "nsenter",
     "fakeroot", "proot", "systemd-run", "tmux", "screen", "dtach", "expect", "rlwrap", "faketime", "torsocks",
     "proxychains", "proxychains4", "xvfb-run", "dbus-run-session", "dbus-launch", "ssh-agent", "entr", "catchsegv",
     "cgexec", "trickle", "numactl", "nix-shell", "direnv", "devbox", "watchexec", "nodemon", "concurrently",
     "npm-run-all", "run-p", "run-s", "sem", "daemonize", "start-stop-daemon", "chpst", "ionice-wrapper", "prlimit",
     "cpulimit", "sshpass", "vipe", "pexec", "rush", "dumb-init", "tini", "catatonit", "setpriv", "capsh", "bindfs",
     "flatpak-spawn", "toolbox", "distrobox-enter", "eatmydata", "nocache", "timelimit", "with-lock-ex", "lckdo",
     "ssh", "mosh", "kubectl-exec", "vagrant", "nsjail", "minijail0", "firecracker", "qemu-user", "box64", "wine",
     "xterm", "uxterm", "gnome-terminal", "konsole", "x-terminal-emulator", "xfce4-terminal", "kitty", "alacritty",
     "wezterm", "tilix", "terminator", "urxvt", "st", "softlimit", "setuidgid", "envuidgid", "setlock", "tcpserver",
     "s6-setuidgid", "s6-envdir", "vidir", "sensible-editor", "sensible-browser", "xdg-open", "open", "zrun",
     "flatpak", "snap", "sshfs", "rclone", "inotifywait", "fswatch", "watchman", "reflex", "air", "pm2", "forever",
     "supervisord", "caffeinate", "osascript", "schroot", "sandbox-exec", "with-contenv"}
)


def dispatch(w: Walker, call: Call) -> None:
    """Record ``call`` and whatever it runs."""
    name = call.name
    handler = _HANDLERS.get(name)
    if handler is not None:
        handler(w, call)
    elif name in SHELLS:
        _shell(w, call)
    elif INTERPRETER.match(name):
        _interpreter(w, call)
    elif name.startswith("git-") or "/git-core/" in call.words[0].text:
        emit(w, call)
        sub = name[4:] if name.startswith("git-") else name
        w.opaque(f"`{call.words[0].text}` runs a git program directly", f"use `git {sub}`")
    elif name in OPAQUE_WRAPPERS:
        emit(w, call)
        w.opaque(f"`{name}` runs other programs in ways the guard does not follow",
                 f"run the program directly, without `{name}`")
    else:
        emit(w, call)
    writer = WRITERS.get(name) or in_place_writer(name)
    if writer is not None:
        writer(w, call)
    else:
        generic_outputs(w, call)


_HANDLERS: dict[str, Handler] = {**WRAPPERS, **INTERPRETER_HANDLERS, **BUILTINS, **TOOLS,
                                 **dict.fromkeys(CONTAINER_CLIS | COMPOSE_CLIS, container_program),
                                 **dict.fromkeys(OTHER_RUNTIMES, other_runtime)}
