"""Guard: dangerous shell commands (PreToolUse on ``Bash``; secret paths also on ``Read``).

Every rule has a name (shown to the agent as ``[rule]``) and a reason saying
what to do instead.  The command line is parsed with a real bash grammar and
analysed by :mod:`ralph.shell` (quotes, ``bash -c``, ``eval``,
``$(...)``, wrappers, pipes into a shell, git aliases), so ``r''m -rf /`` and
``bash -c "git push"`` are seen for what they run.  Rules (see docs/guards.md):

``git-push`` (also anything that clears or overrides direct mode's push block: ``env -i``,
``env -u GIT_CONFIG_COUNT``, ``unset GIT_CONFIG_*``, ``GIT_CONFIG_*=``, ``-c url.*.pushInsteadOf=``,
``--config-env``, ``HOME=``/``GIT_DIR=``, and writing git's configuration files), ``git-merge-main``,
``git-force``, ``git-no-verify``,
``git-reset-hard``, ``delete-outside-project``, ``disk-tools``,
``fork-bomb``, ``privilege``, ``pipe-to-shell``, ``read-secrets``,
``write-system-files``, ``unparseable`` and ``opaque-code`` (the last two only
when the agent runs directly on the host: there anything the analysis does not
model is denied; in a sandboxed loop the container is the protection and the
guards are early feedback).

Every call's own work (paths resolved, symlinks followed, files looked up) spends from a budget
(:data:`CHECK_STEPS`), as the analysis does from its own: past it the call is opaque.

``git merge`` is denied when it would merge *into* ``main``/``master``: the
branch checked out by an earlier ``git checkout``/``git switch`` on the same
line, else the repository's current branch (read from ``.git/HEAD``, with
``git rev-parse`` as the fallback).  Merging ``main`` into a feature branch is
allowed.  ``git reset --hard`` is allowed only to the loop's own checkpoint.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from pathlib import Path
from typing import Any

from ralph.api import Denial, HookEvent, hookimpl
from ralph.api.shell import (
    Analysis,
    BudgetExceeded,
    CONTAINER_CLIS,
    Command,
    GitView,
    PRIVILEGE_WRAPPERS,
    WriteTarget,
    analyze_for,
    budget_scope,
    fetches,
    find_roots,
    glob_links,
    has_long,
    may_reach_git,
    mount_fields,
    parse_git,
    path_stat,
    read_container,
    Unreadable,
    read_regular,
    real_path,
    resolve_path,
    short_flag,
    unplaced,
)
from ralph.api.shell import active_budget
from ralph.api.shell import git_view as view

__all__ = ["FILE_WRITE_TOOLS", "PUSH_REASON", "check_command", "check_file_write", "current_branch", "is_direct", "is_secret_path", "parse_git"]

PUSH_REASON = "Pushing is not allowed inside a Ralph loop: commit locally; the user pushes after review."
FILE_WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
"""The tools that write a file: the same outside-the-project rules as a Bash redirection."""
_DELETERS = frozenset({"rm", "unlink", "shred", "srm", "trash-put", "trash", "rmtrash", "gvfs-rm", "gvfs-trash", "wipe"})
_COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma", "lzip", "lz4", "zstd",
                          "unzstd", "compress", "uncompress", "pigz", "unpigz", "pbzip2", "lbzip2", "brotli"})
"""Programs that replace each file they are given by its compressed (or expanded) version: the original goes."""
_DISK_TOOLS = re.compile(
    r"^(dd|mkfs(\..+)?|mke2fs|mkswap|mkntfs|mkdosfs|fdisk|sfdisk|cfdisk|gdisk|sgdisk|parted|wipefs|blkdiscard"
    r"|badblocks|cryptsetup)$"
)
_MAIN_BRANCHES = frozenset({"main", "master"})
_SECRET_PATH = re.compile(
    r"(^|/)(\.ssh|\.gnupg|\.aws|\.azure|\.kube|\.netrc|\.pgpass|\.git-credentials|\.pypirc|\.npmrc|\.vault-token"
    r"|\.docker/config\.json|\.config/gh|\.config/gcloud|\.config/hub|id_rsa[^/]*|id_ecdsa[^/]*|id_ed25519[^/]*"
    r"|id_dsa[^/]*|\.(bash|zsh|sh|python|node_repl|psql|mysql|sqlite)_history)(/|$)"
    r"|(^|/)\.env(\.[^/]*)?$|^/proc/[^/]+/environ$|^/etc/(shadow|gshadow|sudoers)(/|$)"
)
_SAFE_ENV_SUFFIX = re.compile(r"\.env\.(example|sample|template|dist|defaults)$")
_NOT_READING = frozenset(
    {"ls", "stat", "test", "[", "[[", "touch", "mkdir", "echo", "printf", "mv", "rm", "git", "chmod", "file",
     "source", ".", "realpath", "readlink", "basename", "dirname", "cd", "du", "ln", "install", "which"}
)
_NETWORK_TOOLS = frozenset({"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "telnet", "ftp", "http", "https"})
_DEST_LAST = frozenset({"cp", "scp", "rsync", "install"})
_SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/sys", "/proc",
                "/dev", "/opt", "/var/lib", "/var/spool", "/root/.ssh")
_HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})
_FORCE_SUBCOMMANDS = {
    "checkout": ("fB", ("--force",)),
    "switch": ("fC", ("--force", "--discard-changes", "--force-create")),
    "clean": ("f", ("--force",)),
    "branch": ("fDMC", ("--force",)),
    "worktree": ("f", ("--force",)),
    "add": ("f", ("--force",)),
    "rm": ("f", ("--force",)),
    "mv": ("f", ("--force",)),
    "rebase": ("f", ("--force-rebase",)),
    "tag": ("f", ("--force",)),
    "fetch": ("f", ("--force",)),
    "pull": ("f", ("--force",)),
    "submodule": ("f", ("--force",)),
}
"""Seed 001's "git --force": the short letters and long options that force each subcommand."""
_FORCE_STOP = {"checkout": "bco", "switch": "cd", "branch": "t", "rebase": "sXx", "tag": "muF", "add": "", "rm": "",
               "mv": "", "fetch": "j", "pull": "sX"}
_MAIN_REF = re.compile(r"^(refs/heads/)?(main|master)$")
GUARD_CALL_COST = 48
"""Units for one path resolved or placed by the guard (the Python work around the look-ups it charges)."""
CHECK_STEPS = 1_500_000
"""Work units one call's own checks may spend (paths resolved, symlinks followed, files looked up), besides the
analysis's: about as much CPU as the analysis budget.  Past it the call is opaque (denied in direct mode)."""

def is_secret_path(path: str) -> bool:
    """Does ``path`` (absolute or as typed) name a credentials file or directory?"""
    return bool(_SECRET_PATH.search(path)) and not _SAFE_ENV_SUFFIX.search(path)


def is_direct(event: HookEvent) -> bool:
    """No sandbox around the agent: outside a loop, or a loop whose runner does not isolate it
    (``direct``, or ``ray`` where the agent runs unsandboxed on a node)."""
    return event.loop is None or not event.loop.isolates


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Ctx:
    def __init__(self, event: HookEvent) -> None:
        self.event = event
        self.project = os.path.normpath(str(event.project_dir))
        self.project_real = real_path(self.project)
        cwd = event.payload.get("cwd")
        self.cwd = os.path.normpath(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else self.project
        env = event.environ or {}
        self.home = env.get("HOME") or os.environ.get("HOME") or os.path.expanduser("~")
        tmpdir = os.path.normpath(env.get("TMPDIR") or "/tmp")
        self.known = {"CLAUDE_PROJECT_DIR": self.project, "TMPDIR": tmpdir, "TMP": tmpdir, "TEMP": tmpdir}
        # scratch space, unless the project itself lives there (then its neighbours are not scratch)
        self.temp_roots = {
            t for t in ("/tmp", "/var/tmp", "/private/tmp", "/dev/shm", tmpdir)
            if not _under(self.project, t) and not _under(self.project_real, t)
        }
        self.direct = is_direct(event)
        self.denials: dict[str, Denial] = {}
        self.depth = 0
        self.analysis: Analysis | None = None
        self.checked_out: str | None = None
        """The branch the last ``git checkout``/``git switch`` before the command being checked names."""
        self._leaves: bool | None = None
        self._branches: dict[str, str | None] = {}
        self._links: dict[str, str] | None = None
        self._physical: dict[str, str] = {}
        self._landings: dict[tuple[str, bool], list[str]] = {}
        self._repositories: set[str] | None = None

    def leaves(self) -> bool:
        """Does the line send data to the network or write a file (once per line, not per command)?"""
        if self._leaves is None:
            analysis = self.analysis
            self._leaves = analysis is not None and (
                any(c.name in _NETWORK_TOOLS for c in analysis.simple)
                or any(w.path != "/dev/null" for w in analysis.writes)
            )
        return self._leaves

    def branch(self, start: str) -> str | None:
        """:func:`current_branch` of ``start``, read once per line."""
        if start not in self._branches:
            self._branches[start] = current_branch(start)
        return self._branches[start]

    def deny(self, rule: str, reason: str) -> None:
        self.denials.setdefault(rule, Denial(rule, reason))

    def path(self, cmd: Command, i: int, text: str | None = None) -> str | None:
        return self.resolve(cmd.argv[i] if text is None else text, cmd.dynamic[i], cmd.cd, cmd.cd_unknown)

    def resolve(self, text: str, dynamic: bool, cd: list[str], cd_unknown: bool) -> str | None:
        """The path ``text`` names (lexically); where the kernel would open it is kept for :meth:`landing` when
        the two may differ (``link/../x`` is beside the link's target)."""
        active_budget().spend(GUARD_CALL_COST)
        path = resolve_path(text, self.cwd, self.home, dynamic, cd, cd_unknown, self.known)
        if path is not None and ".." in text:
            physical = resolve_path(text, self.cwd, self.home, dynamic, cd, cd_unknown, self.known, physical=True)
            if physical is not None and physical != path:
                self._physical[path] = physical
        return path

    def landing(self, path: str, follow: bool = True) -> list[str]:
        """Where writing ``path`` lands: the path, where its symlinks lead (without ``follow``, those of its
        directories only: ``mv``/``ln`` replace a link at the name itself), and where a link made earlier on the
        line leads (the link does not exist yet, so the file system cannot say)."""
        key = (path, follow)
        if key in self._landings:
            return self._landings[key]
        active_budget().spend(GUARD_CALL_COST)
        places = [path]
        if path in _HARMLESS_DEVICES or path.startswith(("/dev/fd/", "/proc/self/", "/proc/thread-self/")):
            self._landings[key] = places  # the command's own descriptors, not the guard process's: not followed
            return places
        real = real_path(path) if follow else os.path.join(real_path(os.path.dirname(path) or "/"),
                                                            os.path.basename(path))
        for other in (real, self._physical.get(path)):
            if other is not None and other not in places:
                places.append(other)
        for link, target in self.links().items():
            for place in list(places):
                if (place == link and follow) or place.startswith(link.rstrip("/") + "/"):
                    # joined, not concatenated: a link to `/` would give `//etc/...`, which normpath keeps
                    places.append(os.path.normpath(os.path.join(target, place[len(link):].lstrip("/"))))
        self._landings[key] = places
        return places

    def links(self) -> dict[str, str]:
        """Links made on this line that lead out of the project: resolved link path -> resolved target."""
        if self._links is None:
            self._links = {}
            for link in self.analysis.links if self.analysis is not None else []:
                at = resolve_path(link.path, self.cwd, self.home, link.dynamic, link.cd, link.cd_unknown, self.known)
                if at is None or link.source is None:
                    continue
                base = os.path.dirname(at) if link.symbolic else self.cwd
                target = resolve_path(link.source, base, self.home, False, [] if link.symbolic else link.cd,
                                      link.cd_unknown and not link.symbolic, self.known)
                if target is not None and not self.in_project(target):
                    self._links[at] = target
        return self._links

    def repositories(self) -> set[str]:
        """Directories this line makes git repositories of (``git init [--bare] DIR``, ``git clone [--bare] URL
        DIR``): the directory and its ``.git``."""
        if self._repositories is None:
            self._repositories = set()
            for write in self.analysis.writes if self.analysis is not None else []:
                if write.via not in ("git clone", "git init"):
                    continue
                at = self.resolve(write.path, write.dynamic, write.cd, write.cd_unknown)
                if at is not None:
                    self._repositories.update((at, os.path.dirname(at) if os.path.basename(at) == ".git" else at))
        return self._repositories

    def in_project(self, path: str) -> bool:
        return _under(path, self.project) or _under(path, self.project_real)

    def in_temp(self, path: str, strictly: bool = True) -> bool:
        return any(_under(path, t) and (path != t or not strictly) for t in self.temp_roots)

    def is_project_root(self, path: str) -> bool:
        return path in (self.project, self.project_real)


# -- the hook ---------------------------------------------------------------------------------


@hookimpl
def ralph_pre_tool_use(event: HookEvent) -> list[Denial]:
    tool = event.tool_name
    if tool == "Bash":
        command = event.tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return []
        return check_command(command, event)
    if tool in FILE_WRITE_TOOLS:
        raw = event.tool_input.get("file_path") or event.tool_input.get("notebook_path")
        if isinstance(raw, str) and raw:
            return check_file_write(raw, tool, event)
        return []
    if tool in ("Read", "NotebookRead", "Grep"):
        raw = event.tool_input.get("file_path") or event.tool_input.get("notebook_path") or event.tool_input.get("path")
        if isinstance(raw, str) and raw:
            return _bounded(event, lambda ctx: _check_read(raw, ctx))
    return []


def _bounded(event: HookEvent, check: Any) -> list[Denial]:
    """Run ``check(ctx)`` within :data:`CHECK_STEPS` units of work; past them the call is opaque (what was found
    until then is denied as well)."""
    ctx: _Ctx | None = None
    with budget_scope(CHECK_STEPS):
        try:
            ctx = _Ctx(event)
            check(ctx)
        except BudgetExceeded:
            found = list(ctx.denials.values()) if ctx is not None else []
            if not is_direct(event):
                return found
            return [*found, Denial(
                "opaque-code",
                f"Checking this call needs more work than the guard does for one call ({CHECK_STEPS} steps: very "
                "long paths, thousands of files or directories to look up); running directly on the host, ralph "
                "refuses what it cannot check. Split it into smaller commands, with shorter paths.",
            )]
    assert ctx is not None
    return list(ctx.denials.values())


def _check_read(raw: str, ctx: _Ctx) -> None:
    resolved = resolve_path(raw, ctx.cwd, ctx.home) or raw
    if is_secret_path(resolved):
        ctx.deny("read-secrets", _secret_reason(raw))


def check_file_write(raw: str, tool: str, event: HookEvent) -> list[Denial]:
    """The rules for a file the ``Write``/``Edit``/``MultiEdit``/``NotebookEdit`` tools would write: the same as for
    a Bash redirection, with the path resolved (a symlink in the project leading out of it counts as outside)."""

    def check(ctx: _Ctx) -> None:
        path = ctx.resolve(raw, False, [], False)
        if path is None:
            ctx.deny("write-system-files", f"{raw} does not name a file the guard can place: use a path inside "
                                           "the project.")
            return
        _check_system_write(path, raw, ctx)
        _check_ref_write(path, ctx)
        _check_overwrite(path, raw, ctx, must_exist=tool == "Write")

    return _bounded(event, check)


def check_command(command: str, event: HookEvent) -> list[Denial]:
    """Every rule this Bash command line breaks (one denial per rule)."""
    return _bounded(event, lambda ctx: _check_analysis(analyze_for(event, command, ctx.cwd, ctx.project, ctx.home),
                                                       ctx))


def _check_analysis(analysis: Analysis, ctx: _Ctx) -> None:
    ctx.analysis = analysis
    if analysis.unparseable is not None and ctx.direct:
        ctx.deny(
            "unparseable",
            f"The guard could not parse this command ({analysis.unparseable}); running directly on the host, "
            "ralph refuses what it cannot check. Split it into simpler commands with balanced quotes and plain "
            "words (no brace expansion in the command name).",
        )
    if analysis.opaque and ctx.direct and "unparseable" not in ctx.denials:
        shown = "; ".join(f"{o.construct} -- {o.advice}" for o in analysis.opaque[:3])
        ctx.deny(
            "opaque-code",
            f"This runs code the guard cannot check ({shown}). Running directly on the host, ralph refuses what it "
            "cannot check: run the commands themselves instead.",
        )
    if analysis.pipes_into_shell:
        what = (
            "Downloading code and running it unseen"
            if fetches([c.name for c in analysis.simple])
            else f"Piping text into a shell or interpreter ({analysis.pipe_detail})"
        )
        ctx.deny(
            "pipe-to-shell",
            f"{what} runs code the guards cannot review: save it to a file in the project, read it, "
            "then run the commands you need directly.",
        )
    if analysis.push_block and ctx.direct:
        ctx.deny(
            "git-push",
            f"This clears or overrides ralph's block on pushes ({analysis.push_block[0]}): in a Ralph loop that "
            "counts as pushing. Leave the GIT_CONFIG_* variables and the remotes' push URLs alone; commit locally "
            "and the user pushes after review.",
        )
    if analysis.fork_bomb:
        ctx.deny(
            "fork-bomb",
            "This is a fork bomb (a function that pipes into itself in the background): it would exhaust the "
            "machine. Do not run it.",
        )
    for index, cmd in enumerate(analysis.simple):
        _check_command(cmd, index, analysis, ctx)
        if cmd.name == "git" and not cmd.dynamic_name:
            v = cmd.git if isinstance(cmd.git, GitView) else view(cmd.argv)
            names = [a for a in v.args if not a.startswith("-")]
            if v.sub in ("checkout", "switch") and names:
                ctx.checked_out = names[0]
    for write in analysis.writes:
        _check_write(write, ctx)


def _check_write(write: WriteTarget, ctx: _Ctx) -> None:
    """A file (or with ``into``, any file under a directory) the line writes."""
    if write.anywhere:
        return  # no place to check (protected_files denies it in a loop)
    if write.input:
        _deny_input_target(write.path, "writes", ctx)
    _check_startup_file(write.path, ctx)
    if write.into or write.glob:
        base, pattern = _glob_split(write.path) if write.glob else (write.path, [])
        path = ctx.resolve(base, write.dynamic, write.cd, write.cd_unknown)
        if path is not None:
            _check_tree_write(path, pattern, write, ctx)
        return
    path = ctx.resolve(write.path, write.dynamic, write.cd, write.cd_unknown)
    if path is None:
        _check_unplaced(write.path, write.dynamic, write.cd, write.cd_unknown, "writes", ctx)
        return
    _check_system_write(path, write.path, ctx, follow=write.follow)
    _check_ref_write(path, ctx, follow=write.follow)
    if write.truncates:
        _check_overwrite(path, write.path, ctx, follow=write.follow)


def _glob_split(text: str) -> tuple[str, list[str]]:
    """(the literal directory a glob pattern starts in, the pattern's components below it).  A ``..`` after a
    pattern component climbs from what it matched: ``src/*/../../x`` starts in the project's parent."""
    parts = text.split("/")
    first = next((k for k, part in enumerate(parts) if any(ch in part for ch in "*?[")), None)
    if first is None:
        return text, []
    base = parts[:first]
    rest = [p for p in parts[first:] if p and p != "."]
    depth = 0  # components of the pattern below the base; a `..` past them climbs out of the base
    for part in rest:
        if part == "..":
            if depth:
                depth -= 1
            else:
                base.append("..")
        elif part != "**":
            depth += 1
    joined = "/".join(base)
    return (joined or ("/" if text.startswith("/") else ".")), rest


def _check_tree_write(path: str, pattern: list[str], write: WriteTarget, ctx: _Ctx) -> None:
    """Files written under the directory ``path``: any name at any depth (``into``), or the names a glob
    ``pattern`` matches there (bash's rules: a name starting with ``.`` only when the pattern does)."""
    shown = write.path
    anything = write.into or any(p == "**" for p in pattern)
    dot_names = anything or (bool(pattern) and pattern[0].startswith((".", "[")))
    # `*/config` reaches `.git/config` once `dotglob` is on (the agent's shell may have it)
    reaches_git = (anything and not write.skips_git) or (
        len(pattern) >= 2 and fnmatch.fnmatchcase(".git", pattern[0]) and fnmatch.fnmatchcase("config", pattern[1]))
    what = "files of any name" if write.into else f"the files `{shown}` matches"
    places = list(ctx.landing(path))
    if pattern:  # a project link the pattern matches on the way leads the write where it points (`sed -i x l?d/*`)
        into = write.into or write.path.endswith("/")
        places += [m if into else os.path.dirname(m) for m in glob_links(path, pattern, follow_last=into)]
    for where in places:
        if ctx.in_project(where):
            git_dirs = [os.path.join(root, ".git") for root in {ctx.project, ctx.project_real}]
            if ctx.direct and reaches_git and any(_under(g, where) or _under(where, g) for g in git_dirs):
                ctx.deny("git-push", f"`{write.via}` writes {what} under {where}, which can replace .git/config and "
                                     "set a remote's push URL past ralph's block on pushes (in a Ralph loop that "
                                     "counts as pushing): extract or copy into a subdirectory of the project, and "
                                     "leave .git alone.")
            continue
        if ctx.in_temp(where, strictly=False) or where in _HARMLESS_DEVICES:
            continue
        home = os.path.normpath(ctx.home)
        dotted = _under(where, home) and where != home and where[len(home) + 1 :].startswith(".")
        if where == "/" or any(_under(where, d) for d in _SYSTEM_DIRS) or dotted or (where == home and dot_names) or (
                _under(home, where) and anything):
            ctx.deny("write-system-files", f"`{write.via}` writes {what} under {where}: that reaches system files or "
                                           "the dotfiles in your home directory. Keep changes inside the project.")
            return
        ctx.deny("delete-outside-project", f"`{write.via}` writes {what} under {where}, outside the project "
                                           f"{ctx.project}, and can replace what is there: write only inside the "
                                           "project (scratch files under /tmp are fine).")
        return


def _check_command(cmd: Command, index: int, analysis: Analysis, ctx: _Ctx) -> None:
    name = cmd.name
    if name == "git" and not cmd.dynamic_name:
        _check_git(cmd, index, analysis, ctx)
    if name in ("git-push", "git-send-pack", "git-http-push"):
        ctx.deny("git-push", PUSH_REASON)
    if name in _DELETERS:
        _check_delete(cmd, ctx)
    if name == "gio" and cmd.args[:1] in (["remove"], ["rm"], ["trash"]):
        _check_delete(Command(cmd.argv[1:], cmd.dynamic[1:], cmd.glob[1:], cmd.input[1:], cd=cmd.cd,
                              cd_unknown=cmd.cd_unknown), ctx)
    if name in _COMPRESSORS:
        _check_compressor(cmd, ctx)
    if name == "zip" and any(a in ("-m", "--move") or (a.startswith("-") and not a.startswith("--") and "m" in a)
                             for a in cmd.args):  # `zip -m`: the files go into the archive, and away
        files = [k for k in range(1, len(cmd.argv)) if not cmd.argv[k].startswith("-") or cmd.dynamic[k]]
        for k in files[1:]:
            _check_delete_target(cmd, k, "-r" in cmd.args, ctx, allow_root=False)
    if name == "find":
        _check_find(cmd, ctx)
    if name in ("truncate", "rsync", "tar"):
        _check_destroyers(cmd, ctx)
    if name in ("rename", "prename", "perl-rename", "file-rename", "rename.ul"):  # the files given move away
        operands = [k for k in range(1, len(cmd.argv)) if not cmd.argv[k].startswith("-") or cmd.dynamic[k]]
        for k in operands[1:]:
            _check_delete_target(cmd, k, False, ctx, allow_root=False)
    if name in ("sed", "gsed", "perl", "ruby") and any(
        has_long([a], "--in-place", 5) or (a.startswith("-") and not a.startswith("--") and "i" in a) for a in cmd.args
    ):
        _check_in_place(cmd, ctx)
    if _DISK_TOOLS.match(name):
        ctx.deny(
            "disk-tools",
            f"`{name}` can destroy disks and file systems and is never needed to build software: create test "
            "files with `truncate -s SIZE FILE` or a short script instead.",
        )
    if name in PRIVILEGE_WRAPPERS or name in ("setcap", "chroot", "visudo", "passwd", "usermod", "useradd", "shutdown",
                                               "reboot", "poweroff", "halt", "telinit"):
        ctx.deny(
            "privilege",
            f"`{name}` changes privileges and Ralph loops run without them: install what you need inside the "
            "project (a virtualenv, node_modules, a local bin directory) or leave a note for the user.",
        )
    if name in ("mount", "umount", "swapon", "swapoff", "losetup") and len(cmd.argv) > 1 and not all(
            a in ("-l", "--list", "-h", "--help", "-V", "--version", "--show") or a.startswith("-t") for a in cmd.args):
        ctx.deny("privilege", f"`{name}` changes the machine's file systems: work inside the project, or leave a "
                              "note for the user.")
    if name in ("chmod", "chown", "chgrp", "setfacl", "chattr"):
        _check_permissions(cmd, ctx)
    if name in CONTAINER_CLIS:
        _check_container(cmd, ctx)
    if name == "gh" and cmd.args[:2] == ["pr", "merge"]:
        ctx.deny(
            "git-merge-main",
            "Merging pull requests is the user's decision: commit on your branch and leave the merge to the "
            "user after review.",
        )
    _check_secrets(cmd, ctx)
    if name == "mv":  # moving a file away removes it from where it was
        operands, skip, target_dir = [], False, False
        for k in range(1, len(cmd.argv)):
            a = cmd.argv[k]
            if skip:
                skip = False
            elif a in ("-t", "--target-directory", "-S", "--suffix"):
                skip, target_dir = True, target_dir or a in ("-t", "--target-directory")
            elif a.startswith("--target-directory=") or (a.startswith("-t") and not a.startswith("--")):
                target_dir = True
            elif not a.startswith("-") or cmd.dynamic[k]:
                operands.append(k)
        for k in operands if target_dir else operands[:-1]:
            _check_delete_target(cmd, k, False, ctx, allow_root=False)


# -- git ----------------------------------------------------------------------------------


def _check_git(cmd: Command, index: int, analysis: Analysis, ctx: _Ctx) -> None:
    v: GitView = cmd.git if isinstance(cmd.git, GitView) else view(cmd.argv)
    sub, args = v.sub, v.args
    if sub in ("push", "send-pack", "http-push") or (sub in ("subtree", "lfs") and "push" in args) or (
        sub == "svn" and "dcommit" in args
    ) or (sub == "p4" and "submit" in args):
        ctx.deny("git-push", PUSH_REASON)
    if _skips_hooks(cmd, v):
        ctx.deny("git-no-verify", _no_verify_reason())
    flag = _force_flag(sub, args)
    if flag:
        ctx.deny("git-force", _force_reason(sub, flag))
    if sub == "reset" and has_long(args, "--hard", 4):
        _check_reset(args, ctx)
    branch = _moves_main(cmd, index, analysis, v, ctx)
    if branch == UNREADABLE_HEAD:
        ctx.deny("git-merge-main", "The guard cannot tell which branch this `git merge` merges into: the "
                                   "repository's HEAD (or its `.git` file) is not a regular file it can read (a FIFO "
                                   "or a device). Restore a normal .git, or leave the merge to the user.")
    elif branch:
        _deny_merge(branch, ctx)


def _skips_hooks(cmd: Command, v: GitView) -> bool:
    sub, args = v.sub, v.args
    return (
        "core.hookspath" in v.configs
        or bool(has_long(args, "--no-verify", 6))
        or (sub == "commit" and bool(short_flag(args, "n", stop="mFCctSu")))
        or (sub == "config" and any(a.lower() == "core.hookspath" for a in args[:-1]))
        or (sub in ("commit", "push", "merge", "rebase") and (
            cmd.assignments.get("HUSKY") == "0" or "HUSKY_SKIP_HOOKS" in cmd.assignments or "SKIP" in cmd.assignments
        ))
    )


def _force_flag(sub: str, args: list[str]) -> str | None:
    """The option forcing ``git sub`` past its safety checks (seed 001's "git --force"), if any."""
    if sub == "push":
        return None  # that is git-push
    if sub not in _FORCE_SUBCOMMANDS:
        return next((a for a in args if a.startswith("--force")), None) or has_long(args, "--force", 5)
    letters, longs = _FORCE_SUBCOMMANDS[sub]
    flag = (
        next((a for a in args if a.startswith("--force")), None)
        or next((found for name in longs if (found := has_long(args, name, 4))), None)
        or short_flag(args, letters, stop=_FORCE_STOP.get(sub, "bBcCmo"))
    )
    if sub == "clean" and ("--dry-run" in args or short_flag(args, "n")):
        return None
    return flag


def _moves_main(cmd: Command, index: int, analysis: Analysis, v: GitView, ctx: _Ctx) -> str | None:
    """``main``/``master`` when this git command moves it: a merge into it, update-ref, fetch into it."""
    sub, args = v.sub, v.args
    if sub == "merge" and not any(a in ("--abort", "--continue", "--quit") for a in args):
        branch = _target_branch(cmd, index, analysis, v.dirs, ctx)
        return branch if branch in _MAIN_BRANCHES or branch == UNREADABLE_HEAD else None
    refs: list[str] = []
    if sub == "update-ref":
        refs = [a for a in args if not a.startswith("-")][:1]
    elif sub in ("fetch", "pull"):
        refs = [a.rpartition(":")[2].lstrip("+") for a in args if ":" in a and not a.startswith("-")]
    for ref in refs:
        m = _MAIN_REF.match(ref)
        if m:
            return m.group(2)
    return None


_GIT_CONFIG_FILE = re.compile(r"(^|/)\.git/(.+/)?config(\.worktree)?$|(^|/)\.gitconfig$")
"""Files git reads its configuration from (a repository's, a submodule's, a worktree's, a home's)."""


def _points_git_elsewhere(where: str, ctx: _Ctx) -> bool:
    """Is ``where`` a file git reads to find its configuration: a git directory's ``config``/``commondir`` (a
    bare repository's too: a directory with a ``HEAD``, or one ``git init``/``git clone`` makes on this line),
    or a ``.git`` file (``gitdir: ELSEWHERE``) that makes its directory a repository configured elsewhere?"""
    head, name = os.path.split(where)
    if name == ".git":
        return True
    if name not in ("config", "commondir", "config.worktree"):
        return False
    return os.path.basename(head) == ".git" or head in ctx.repositories() or path_stat(os.path.join(head, "HEAD")) is not None


def _check_ref_write(path: str, ctx: _Ctx, follow: bool = True) -> None:
    """Writing ``.git/refs/heads/main`` (or ``packed-refs``) by hand moves main like a merge would; writing git's
    configuration by hand (``.git/config``, a submodule's or worktree's, any repository's or home's
    ``.gitconfig``) can give a remote a push URL of its own, past direct mode's push block."""
    for where in ctx.landing(path, follow):
        for root in {ctx.project, ctx.project_real}:
            rel = os.path.relpath(where, os.path.join(root, ".git"))
            m = re.fullmatch(r"refs/heads/(main|master)|packed-refs", rel)
            if m:
                _deny_merge(m.group(1) or "main", ctx)
        for root in {ctx.project, ctx.project_real}:
            if _under(where, os.path.join(root, ".git", "hooks")):
                ctx.deny("write-system-files", f"Writing {where} installs a git hook: every later `git commit`/`git "
                                               "merge` runs it. Leave .git/hooks alone; run checks directly.")
        if ctx.direct and (_GIT_CONFIG_FILE.search(where) or _points_git_elsewhere(where, ctx)):
            ctx.deny(
                "git-push",
                f"Writing {where} by hand can set a remote's push URL past ralph's block on pushes, which in a "
                "Ralph loop counts as pushing: use `git config` for other settings (push URLs stay as they are).",
            )


def _deny_merge(branch: str, ctx: _Ctx) -> None:
    ctx.deny(
        "git-merge-main",
        f"Merging into {branch} is the user's decision: commit your work on a feature branch and leave "
        f"the merge into {branch} to the user after review.",
    )


def _no_verify_reason() -> str:
    return (
        "Skipping git hooks (--no-verify, commit -n, core.hooksPath, HUSKY=0, SKIP=) is not allowed: run the "
        "hooks, fix what they report, then commit normally."
    )


def _force_reason(sub: str, flag: str) -> str:
    if sub == "clean":
        return (
            f"`git clean {flag}` deletes untracked files for good: remove the specific files you created with "
            "`rm`, or use `git clean -n` to see what would go."
        )
    if sub == "branch":
        return (
            f"`git branch {flag}` can drop unmerged commits: leave branches in place (the user cleans them up), "
            "or use `git branch -d` for merged ones."
        )
    if sub == "add":
        return (
            f"`git add {flag}` adds files that .gitignore excludes (build output, secrets): add only the files you "
            "mean, or leave a note for the user if one really belongs in the repository."
        )
    if sub in ("rm", "mv"):
        return (
            f"`git {sub} {flag}` overrides git's check for uncommitted changes: commit or restore the file first, then "
            f"run `git {sub}` without {flag}."
        )
    if sub == "rebase":
        return (
            f"`git rebase {flag}` rewrites commits that need no rewriting: rebase without it, or leave the history "
            "as it is."
        )
    if sub not in ("checkout", "switch", "worktree"):
        return (
            f"`git {sub} {flag}` forces git past its own safety check: run it without {flag} and deal with what git "
            "reports."
        )
    return (
        f"`git {sub} {flag}` throws away uncommitted changes: commit your work first, or restore single files "
        "with `git restore <file>`."
    )


def _check_reset(args: list[str], ctx: _Ctx) -> None:
    targets = [a for a in args if not a.startswith("-")]
    target = targets[0] if targets else "HEAD"
    loop = ctx.event.loop
    checkpoint = loop.checkpoint if loop is not None else None
    if checkpoint and (target == checkpoint or (len(target) >= 7 and checkpoint.startswith(target))):
        return
    where = f" (to its checkpoint {checkpoint[:12]})" if checkpoint else ""
    ctx.deny(
        "git-reset-hard",
        f"`git reset --hard {target}` discards work; rolling back is the loop's job{where}. Restore single "
        "files with `git restore <file>`, or fix forward and commit.",
    )


def _target_branch(cmd: Command, index: int, analysis: Analysis, dirs: list[str], ctx: _Ctx) -> str | None:
    """The branch a ``git merge`` at ``index`` merges into."""
    if ctx.checked_out is not None:
        return ctx.checked_out
    base = ctx.cwd
    for step in cmd.cd:
        base = resolve_path(step, base, ctx.home) or base
    for d in dirs:
        base = resolve_path(d, base, ctx.home) or base
    return ctx.branch(base)


UNREADABLE_HEAD = "?"
"""What :func:`current_branch` says when the repository's ``.git`` file or ``HEAD`` is not a regular file it can
read without blocking (a FIFO the agent made): no branch is named so (git refuses ``?`` in a ref name)."""


def current_branch(start: str) -> str | None:
    """The checked-out branch of the repository holding ``start`` (None if detached or no repo;
    :data:`UNREADABLE_HEAD` if what names it is not a regular file: a FIFO would block the guard).  Every file is
    read with :func:`~ralph.api.shell.read_regular`: never blocking, regular files only, a size bound."""
    d = os.path.abspath(start)
    head = None
    for _ in range(128):
        git = os.path.join(d, ".git")
        if os.path.isdir(git):
            head = os.path.join(git, "HEAD")
            break
        if os.path.lexists(git):
            try:
                line = _first_line(git)
            except Unreadable:
                return UNREADABLE_HEAD
            except OSError:
                return _rev_parse(start)
            if not line.startswith("gitdir:"):
                return _rev_parse(start)
            head = os.path.join(d, line[7:].strip(), "HEAD")
            break
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
    if head is None:
        return None
    try:
        ref = _first_line(head)
    except Unreadable:
        return UNREADABLE_HEAD
    except OSError:
        return _rev_parse(start)
    if ref.startswith("ref: refs/heads/"):
        return ref[len("ref: refs/heads/") :]
    return None


def _first_line(path: str) -> str:
    return read_regular(path, 64 * 1024).decode("utf-8", "replace").partition("\n")[0].strip()


def _rev_parse(start: str) -> str | None:
    import subprocess

    from ralph.api.process import git  # hardened, after the git metadata check

    try:
        out = git(Path(start), "rev-parse", "--abbrev-ref", "HEAD", check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    branch = out.stdout.strip()
    return branch if out.returncode == 0 and branch and branch != "HEAD" else None


# -- deletion -------------------------------------------------------------------------------


def _is_recursive_flag(arg: str) -> bool:
    if arg.startswith("--"):
        return len(arg) >= 3 and "--recursive".startswith(arg)  # getopt_long takes abbreviations
    return arg.startswith("-") and ("r" in arg or "R" in arg)


def _check_delete(cmd: Command, ctx: _Ctx) -> None:
    recursive = False
    targets: list[int] = []
    end_of_options = False
    for i in range(1, len(cmd.argv)):
        a = cmd.argv[i]
        if not end_of_options and a == "--":
            end_of_options = True
        elif not end_of_options and a.startswith("-") and len(a) > 1 and not cmd.dynamic[i]:
            recursive = recursive or _is_recursive_flag(a)
            if len(a) >= 6 and "--no-preserve-root".startswith(a):
                ctx.deny(
                    "delete-outside-project", "`--no-preserve-root` is never needed: delete only files inside the project."
                )
        else:
            targets.append(i)
    for i in targets:
        _check_delete_target(cmd, i, recursive, ctx, allow_root=False)


def _check_compressor(cmd: Command, ctx: _Ctx) -> None:
    """``gzip FILE`` removes FILE (``FILE.gz`` takes its place), unless it writes to stdout or keeps it."""
    flags = "".join(a[1:] for a in cmd.args if a.startswith("-") and not a.startswith("--"))
    longs = [a for a in cmd.args if a.startswith("--")]
    if set(flags) & set("cklt") or any(a.startswith(("--stdout", "--to-stdout", "--keep", "--list", "--test"))
                                       for a in longs):
        return
    if cmd.name in ("zstd", "unzstd") and "--rm" not in longs:
        return  # zstd keeps its input unless --rm
    recursive = "r" in flags or "--recursive" in longs
    for i in range(1, len(cmd.argv)):
        if not cmd.argv[i].startswith("-") or cmd.dynamic[i]:
            _check_delete_target(cmd, i, recursive, ctx, allow_root=False)


def _check_find(cmd: Command, ctx: _Ctx) -> None:
    args = cmd.args
    deletes = "-delete" in args
    for i, a in enumerate(args):
        if a in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(args):
            deletes = deletes or os.path.basename(args[i + 1]) in _DELETERS
    if not deletes:
        return
    if find_roots(cmd.argv)[1]:
        ctx.deny("delete-outside-project", f"`{_shown(cmd.argv)}` follows symlinks while it deletes: a link in the "
                                           "project to a directory outside it would be emptied. Drop -L/-follow.")
    if "-files0-from" in args or any(cmd.input[1:]):  # `xargs find -delete`: start paths from stdin
        ctx.deny("delete-outside-project", f"`{_shown(cmd.argv)}` deletes under start paths read at run time (a file, "
                                           "stdin): name the directories inside the project on the command line.")
    roots, follow = find_roots(cmd.argv)
    expression = cmd.argv[(roots[-1] + 1) if roots else 1 :]
    starts: list[int | None] = list(roots) or [None]  # no roots: find searches "."
    for start in starts:
        if start is not None:
            _check_delete_target(cmd, start, True, ctx, allow_root=True, follow=follow)
        root = cmd.argv[start] if start is not None else "."
        where = ctx.path(cmd, start) if start is not None else ctx.resolve(".", False, cmd.cd, cmd.cd_unknown)
        if "-delete" in args and where is not None and ctx.in_project(where) and any(
                _under(os.path.join(r, ".git"), where) for r in {ctx.project, ctx.project_real}) and \
                may_reach_git(expression, root):
            ctx.deny("delete-outside-project", f"`{_shown(cmd.argv)}` can delete the project's .git (the git history "
                                               "and the loop's checkpoints): add `-name PATTERN` for what you mean, "
                                               "or `-path ./.git -prune -o ...`.")


def _check_destroyers(cmd: Command, ctx: _Ctx) -> None:
    """``truncate`` outside the project, ``rsync --delete`` into it, ``tar --remove-files`` of it."""
    argv = cmd.argv
    if cmd.name == "truncate":
        skip = False
        for i in range(1, len(argv)):
            if skip:
                skip = False
            elif argv[i] in ("-s", "--size", "-r", "--reference"):
                skip = True
            elif not argv[i].startswith("-"):
                _check_delete_target(cmd, i, False, ctx, allow_root=False)
        return
    operands = [i for i in range(1, len(argv)) if not argv[i].startswith("-")]
    if cmd.name == "rsync":
        remove = has_long(argv, "--remove-source-files", 5)
        if (any(a.startswith("--del") for a in argv) or remove) and operands:
            if any(a.startswith("--del") for a in argv):
                _check_delete_target(cmd, operands[-1], True, ctx, allow_root=False)
            if remove:
                for i in operands[:-1]:
                    _check_delete_target(cmd, i, True, ctx, allow_root=False)
        return
    if cmd.name == "tar" and has_long(argv, "--remove-files", 5):
        archive = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-f" or (
            a.startswith("-") and not a.startswith("--") and a.endswith("f"))), None)
        for i in operands:
            if argv[i] != archive:
                _check_delete_target(cmd, i, True, ctx, allow_root=False)


def _check_delete_target(cmd: Command, i: int, recursive: bool, ctx: _Ctx, allow_root: bool,
                         follow: bool = False) -> None:
    text = cmd.argv[i]
    shown = _shown(cmd.argv)
    glob = cmd.glob[i]
    base_text, pattern = _glob_split(text) if glob else (text, [])
    # any path under the base, `.git` included (find's `{}`, globstar); `*` matches `.git` too once `dotglob` is on
    anything = "**" in pattern or (bool(pattern) and fnmatch.fnmatchcase(".git", pattern[0]))
    path = ctx.path(cmd, i, base_text)
    if path is None:
        if not (i < len(cmd.input) and cmd.input[i]) and _check_unplaced(text, cmd.dynamic[i], cmd.cd, cmd.cd_unknown,
                                                                         "deletes", ctx):
            pass
        elif i < len(cmd.input) and cmd.input[i]:
            ctx.deny(
                "delete-outside-project",
                f"`{shown}` deletes paths read at run time (from stdin, a file or a command's output): they can be "
                "anything, a crafted file name included, so the guard cannot check that they are inside the project. "
                "Delete with `find DIR ... -delete` or `find DIR ... -exec rm {} +` on a directory inside the project.",
            )
        elif recursive or text.startswith("~"):
            ctx.deny(
                "delete-outside-project",
                f"`{shown}`: {text} is only known at run time, so the guard cannot check that it is inside the "
                "project. Delete a literal path inside the project instead.",
            )
        return
    if ctx.in_project(path):  # where the kernel acts: through the symlinks of the directories on the way
        trimmed = base_text.rstrip("/") or "/"
        last = os.path.basename(trimmed)
        whole = glob or follow or text.endswith("/") or last in ("..", ".", "") or trimmed == "/"
        head = trimmed if whole else (os.path.dirname(trimmed) or ".")
        where = resolve_path(head, ctx.cwd, ctx.home, cmd.dynamic[i], cmd.cd, cmd.cd_unknown, ctx.known,
                             physical=True)
        if where is not None and not whole:
            where = os.path.join(where, last)
        if where is not None and not ctx.in_project(where):
            path = where  # `rm lod/x`, `rm -rf lod/*`, `cd lod && rm x`, `link/../x`: a project link leads out
        elif pattern:  # `rm -rf l?d/*`: a link the pattern matches on the way (the last component: the link itself)
            path = next((r for r in glob_links(path, pattern, follow_last=text.endswith("/"))
                         if not ctx.in_project(r)), path)
    if ctx.in_project(path):
        git_dirs = (os.path.join(ctx.project, ".git"), os.path.join(ctx.project_real, ".git"))
        if ctx.is_project_root(path) and not glob and not allow_root:
            ctx.deny("delete-outside-project", f"`{shown}` would delete the whole project: delete only the files you mean.")
        elif any(_under(path, g) or (anything and _under(g, path)) for g in git_dirs):
            ctx.deny(
                "delete-outside-project",
                f"`{shown}` would destroy the git history and the loop's checkpoints: leave .git alone.",
            )
        return
    if ctx.in_temp(path, strictly=True) or (ctx.in_temp(path, strictly=False) and not glob and not recursive):
        return
    ctx.deny(
        "delete-outside-project",
        f"`{shown}` deletes {path}, outside the project {ctx.project}: only delete files inside the project "
        "(scratch files under /tmp are fine).",
    )


_STARTUP_FILE_VARS = re.compile(r'^"?\$\{?(CLAUDE_ENV_FILE|BASH_ENV|ENV)\b')


def _check_startup_file(shown: str, ctx: _Ctx) -> None:
    """``>> "$CLAUDE_ENV_FILE"``: a file the agent's later shells run before each command (its path is only
    known at run time, so the path rules cannot see it)."""
    if _STARTUP_FILE_VARS.match(shown):
        ctx.deny(
            "write-system-files",
            f"Writing {shown} changes what every later shell command runs first (aliases, functions, the push "
            "block's variables): set what a command needs on that command line instead.",
        )


def _check_unplaced(shown: str, dynamic: bool, cd: list[str], cd_unknown: bool, what: str, ctx: _Ctx) -> bool:
    """A path the guard cannot place although it depends on where the shell is (``unplaced``: after a ``cd`` it
    could not follow, a step of the directory stack, a path built out of a known one): it may be any file, so the
    write is denied as a write anywhere.  True if denied."""
    why = unplaced(shown, dynamic, cd, cd_unknown)
    if why is None:
        return False
    lost = ctx.analysis.cwd_lost if ctx.analysis is not None else []
    since = f" ({lost[0]})" if lost and why.endswith("could not follow)") else ""
    ctx.deny(
        "delete-outside-project",
        f"This {what} {shown}, but {why}{since}: it can be any file, outside the project too. Name the path from a "
        "directory the line goes to plainly (`cd DIR && ...` with a literal DIR inside the project), or from the "
        "project root.",
    )
    return True


def _deny_input_target(shown: str, what: str, ctx: _Ctx) -> None:
    ctx.deny(
        "delete-outside-project",
        f"This {what} {shown}, a path read at run time (from stdin, a file or a command's output): it can be any "
        "file, outside the project too. Name the files inside the project literally, or loop over `find DIR` "
        "of a directory inside the project with `-exec`.",
    )


def _shown(argv: list[str]) -> str:
    """A command as the agent is shown it in a reason (a long one shortened)."""
    text = " ".join(argv[:12]) + (" ..." if len(argv) > 12 else "")
    return text if len(text) <= 200 else text[:197] + "..."


def _check_in_place(cmd: Command, ctx: _Ctx) -> None:
    """``sed -i`` / ``perl -i`` rewrite their file operands: outside the project that is an overwrite."""
    argv = cmd.argv
    explicit = any(a in ("-e", "-f", "--expression", "--file") or a.startswith(("--expression=", "--file="))
                   for a in argv[1:])
    skip, operands = False, []
    for i in range(1, len(argv)):
        a = argv[i]
        if skip:
            skip = False
        elif a in ("-e", "-f", "--expression", "--file", "-l", "-I", "-M"):
            skip = True
        elif not a.startswith("-") or a == "-":
            operands.append(i)
    for i in operands if explicit else operands[1:]:
        if i < len(cmd.input) and cmd.input[i]:
            _deny_input_target(argv[i], "rewrites", ctx)
        _check_startup_file(argv[i], ctx)
        if cmd.glob[i]:  # `sed -i ... ~/*`, `find ~ -exec sed -i ... {} +`: every file the pattern matches
            _check_write(WriteTarget(argv[i], cmd.dynamic[i], True, cmd.cd, cmd.cd_unknown, cmd.name), ctx)
            continue
        path = ctx.path(cmd, i)
        if path is None:
            _check_unplaced(argv[i], cmd.dynamic[i], cmd.cd, cmd.cd_unknown, "rewrites", ctx)
        if path is not None:
            _check_ref_write(path, ctx)
            _check_system_write(path, argv[i], ctx)
            _check_overwrite(path, argv[i], ctx, must_exist=False)


def _check_overwrite(path: str, shown: str, ctx: _Ctx, must_exist: bool = True, follow: bool = True) -> None:
    """A truncating redirection (``>``) or an in-place edit of a file outside the project changes it for good
    (through a symlink or a link made on the line too); so does writing a project file with other hard links."""
    if "write-system-files" in ctx.denials:
        return
    for where in ctx.landing(path, follow):
        if ctx.in_project(where) or ctx.in_temp(where, strictly=False) or where in _HARMLESS_DEVICES:
            continue
        if where.startswith(("/dev/", "/proc/")):
            continue
        info = path_stat(where, follow)
        if not must_exist or (info is not None and not stat.S_ISDIR(info.st_mode)):
            ctx.deny(
                "delete-outside-project",
                f"`{shown}` would be overwritten at {where}, outside the project {ctx.project}: change only files "
                "inside the project (scratch files under /tmp are fine).",
            )
            return
    _check_hard_links(path, shown, ctx)


def _check_hard_links(path: str, shown: str, ctx: _Ctx) -> None:
    """In direct mode, a file in the project with more than one name is refused: another may be outside."""
    if not ctx.direct:
        return
    info = path_stat(path)
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        ctx.deny(
            "delete-outside-project",
            f"{shown} has {info.st_nlink} hard links: writing it changes the same file under its other names, "
            "which may be outside the project. Make a copy (`cp --remove-destination`) and change that.",
        )


# -- privileges, secrets, system files --------------------------------------------------------------


def _check_permissions(cmd: Command, ctx: _Ctx) -> None:
    args = [i for i in range(1, len(cmd.argv)) if not cmd.argv[i].startswith("-")]
    if not args:
        return
    if cmd.name == "chmod":
        mode = cmd.argv[args[0]]
        if re.fullmatch(r"[2467][0-7]{3}", mode) or re.search(r"[+=][rwxXt]*s", mode):
            ctx.deny(
                "privilege",
                f"`chmod {mode}` sets a setuid/setgid bit: not needed for building software; use plain permissions.",
            )
    for i in args[1:]:
        path = ctx.path(cmd, i)
        # where it acts: symlinks followed (`chmod 777 lod/x`, `chmod -R 777 link-to-home`)
        places = ctx.landing(path) if path is not None else []
        if path is None or any(not ctx.in_project(p) and not ctx.in_temp(p) for p in places):
            ctx.deny(
                "privilege",
                f"`{cmd.name}` on {cmd.argv[i]} changes files outside the project: only change permissions of "
                "files inside the project.",
            )
            return


_STARTS = frozenset({"run", "create", "service create", "service update", "pod create", "pod clone", "clone", "from",
                     "build", "bud", "buildx build", "image build"})
"""Subcommands whose options decide what a container (or a build's steps) can reach on the host."""
_KNOWN_RUNTIMES = frozenset({"runc", "crun", "runsc", "kata", "kata-runtime", "youki", "io.containerd.runc.v2",
                             "krun", "nvidia"})
_HOST_NAMESPACES = frozenset({"--pid", "--network", "--net", "--userns", "--ipc", "--uts", "--cgroupns"})
_ALWAYS_HOST = frozenset({"--cap-add", "--device", "--device-cgroup-rule", "--volumes-from", "--use-api-socket",
                          "--rootfs", "--hooks-dir"})
_SAFE_SECURITY_OPTS = frozenset({"no-new-privileges", "no-new-privileges:true", "no-new-privileges=true"})


def _check_container(cmd: Command, ctx: _Ctx) -> None:
    """A container started with host privileges or host directories is a way around every other rule."""
    view = read_container(cmd.argv, cmd.dynamic)
    action = view.action
    bad = None
    if action in _STARTS:
        flag = _container_flags(cmd, view, ctx)
        bad = f"{action} {flag}" if flag else None
    elif action == "volume create":  # the local driver's `device=` option is a bind mount of that path
        for value, dynamic in view.values("--opt", "-o"):
            key, _, device = value.partition("=")
            if key.strip() == "device" and not _mountable(device, dynamic, cmd, ctx):
                bad = f"volume create --opt {value}"
    elif action in ("plugin install", "plugin enable", "plugin upgrade", "plugin set"):
        bad = action
    if action in ("build", "buildx build", "bud", "image build"):
        for value, dynamic in view.values("--build-context"):  # `--build-context name=/`: the build reads it
            source = value.partition("=")[2]
            if source and not re.match(r"[a-z0-9+.-]+://|docker-image://|target:", source) and not _mountable(
                    source, dynamic, cmd, ctx):
                bad = f"build --build-context {value}"
        for value, _ in view.values("--allow"):
            if "insecure" in value or "host" in value:
                bad = f"build --allow {value}"
        for value, dynamic in view.values("--output", "-o"):
            fields = mount_fields(value) if "=" in value else {"dest": value}
            dest = fields.get("dest") or fields.get("destination")
            path = resolve_path(dest, ctx.cwd, ctx.home, dynamic, cmd.cd, cmd.cd_unknown, ctx.known) if dest else None
            if path is not None:
                _check_system_write(path, dest or "", ctx)
    elif action == "cp" and len(view.operands) == 2:
        dest, dynamic = view.operands[1]
        if not re.match(r"[A-Za-z0-9][A-Za-z0-9_.-]*:", dest) and dest != "-":  # a host path, not CONTAINER:PATH
            # the file, and (a directory given, or a directory copied) any name under it: checked as a copy is
            for into in (False, True):
                _check_write(WriteTarget(dest, dynamic, False, cmd.cd, cmd.cd_unknown, f"{cmd.name} cp", into=into),
                             ctx)
    if bad:
        ctx.deny(
            "privilege",
            f"`{cmd.name} {bad}` gives a container the host's files, devices, namespaces or privileges, which gets "
            "around every other rule: mount only the project (e.g. `-v \"$PWD\":/work`, a directory that exists) "
            "and run without extra privileges.",
        )


def _container_flags(cmd: Command, view: Any, ctx: _Ctx) -> str | None:
    """The first option of ``run``/``create`` that reaches the host, shown as typed."""
    for name, value, dynamic in view.options:
        shown = f"{name}={value}" if value else name
        if name == "--privileged" and value.lower() not in ("false", "0"):
            return shown
        if name in _HOST_NAMESPACES and (dynamic or value == "host" or value.startswith(("container:", "ns:"))
                                         or "/" in value):
            return shown
        if name in _ALWAYS_HOST:
            return shown
        if name == "--runtime" and (dynamic or value not in _KNOWN_RUNTIMES):  # podman takes a program's path
            return shown
        if name == "--security-opt" and value.replace(" ", "").lower() not in _SAFE_SECURITY_OPTS:
            return shown
        if name in ("-v", "--volume", "--mount", "--mount-add") and dynamic and ":" not in value and \
                "type=" not in value:
            return shown  # the whole mount is only known at run time
        if name in ("-v", "--volume") and ":" in value:
            source = value.split(":", 1)[0]
            if (dynamic or source.startswith(("/", ".", "~", "$")) or "/" in source) and not _mountable(
                    source, dynamic, cmd, ctx):
                return shown
        if name in ("--mount", "--mount-add"):
            fields = mount_fields(value)
            kind = fields.get("type", "volume")
            source = fields.get("source") or fields.get("src") or ""
            device = fields.get("volume-opt:device")
            if kind in ("bind", "glob") and not _mountable(source, dynamic, cmd, ctx):
                return shown
            if device is not None and not _mountable(device, dynamic, cmd, ctx):
                return shown
    return None


def _mountable(text: str, dynamic: bool, cmd: Command, ctx: _Ctx) -> bool:
    """May a container get this host path: it exists and, symlinks followed, is in the project or scratch space?
    (A path that does not exist yet is refused: a link made on the same line would land there.)"""
    if not text:
        return False
    path = resolve_path(text, ctx.cwd, ctx.home, dynamic, cmd.cd, cmd.cd_unknown, ctx.known)
    real = resolve_path(text, ctx.cwd, ctx.home, dynamic, cmd.cd, cmd.cd_unknown, ctx.known, physical=True)
    if path is None or real is None or not os.path.lexists(path):
        return False
    return all(ctx.in_project(p) or ctx.in_temp(p) for p in (path, real))  # a scratch dir, not all of /tmp


def _secret_reason(path: str) -> str:
    return (
        f"{path} holds credentials: do not read it. Ask the user for what you need, or use the documented "
        "example configuration (e.g. .env.example)."
    )


def _check_secrets(cmd: Command, ctx: _Ctx) -> None:
    name = cmd.name
    if name in ("printenv", "env", "set", "export", "declare", "typeset", "compgen"):
        dumps = (
            (name in ("printenv", "env") and not any(a for a in cmd.args if not a.startswith("-")))
            or (name == "set" and not cmd.args)
            or (name in ("export", "declare", "typeset") and (not cmd.args or cmd.args[0] in ("-p", "-x", "-px")))
            or (name == "compgen" and "-v" in cmd.args)
        )
        to_file = any(
            op.lstrip("0123456789") in (">", ">>", ">|", "&>", "&>>") and not op.startswith("2") and target != "/dev/null"
            for op, target in cmd.redirects
        )
        outward = to_file or (cmd.piped_out and ctx.leaves())
        if dumps and outward:
            ctx.deny(
                "read-secrets",
                "Piping or writing out the whole environment leaks credentials: print only the variables you "
                'need (e.g. `echo "$PATH"`).',
            )
        return
    candidates: list[tuple[str, bool, bool]] = []
    for op, target in cmd.redirects:
        if op.lstrip("0123456789") in ("<", "<>"):
            candidates.append((target, False, False))
    if name not in _NOT_READING:
        for i in range(1, len(cmd.argv) - (1 if name in _DEST_LAST else 0)):
            arg = cmd.argv[i]
            if arg.startswith("-") and "=" not in arg and "@" not in arg:
                continue
            if "@" in arg:
                arg = arg.split("@", 1)[1]
            elif arg.startswith("-") or (arg.count("=") == 1 and not arg.startswith("/")):
                arg = arg.split("=", 1)[1]
            candidates.append((arg, cmd.dynamic[i], cmd.glob[i]))
    for text, dynamic, glob in candidates:
        path = resolve_path(text, ctx.cwd, ctx.home, dynamic, cmd.cd, cmd.cd_unknown, ctx.known) if text else None
        places = ctx.landing(path) if path is not None else []  # symlinks, and links made earlier on the line
        if is_secret_path(path or text) or any(is_secret_path(p) or (glob and _pattern_is_secret(p)) for p in places):
            ctx.deny("read-secrets", _secret_reason(text))
            return


_SECRET_NAMES = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".netrc", ".pgpass", ".git-credentials", ".pypirc",
                 ".npmrc", ".vault-token", ".docker", ".config", ".bash_history", ".zsh_history", ".sh_history",
                 ".python_history", ".node_repl_history", ".psql_history", ".mysql_history", ".sqlite_history", ".env",
                 "shadow", "gshadow", "sudoers")
"""Names a glob component may stand for in a secret path (``~/.s?h``, ``/etc/sha*``); the other names of secret
paths (``id_rsa``, ``environ``) are caught where they are written out."""


def _pattern_is_secret(path: str) -> bool:
    """Can the glob pattern ``path`` (``~/.s?h/known_hosts``) match a secret path?  Each pattern component is
    tried against the names secret paths are made of (bash's rule: a leading ``.`` only matches a ``.``)."""
    if not any(ch in path for ch in "*?["):
        return False
    options: list[list[str]] = []
    for part in path.split("/"):
        if not any(ch in part for ch in "*?["):
            options.append([part])
            continue
        matches = [n for n in _SECRET_NAMES if fnmatch.fnmatchcase(n, part) and (n.startswith(".") ==
                                                                                 part.startswith("."))]
        options.append(matches or [part])
    from itertools import islice, product

    return any(is_secret_path("/".join(combo)) for combo in islice(product(*options), 256))


def _check_system_write(path: str, shown: str, ctx: _Ctx, follow: bool = True) -> None:
    home = os.path.normpath(ctx.home)
    for where in ctx.landing(path, follow):
        if ctx.in_project(where):
            continue
        dotfile = _under(where, home) and where != home and where[len(home) + 1 :].startswith(".")
        if not dotfile and (ctx.in_temp(where, strictly=False) or where in _HARMLESS_DEVICES or where.startswith(
                ("/dev/fd/", "/dev/shm/", "/proc/self/fd/", "/tmp/", "/var/tmp/"))):
            continue  # scratch space (a home directory under /tmp, as in tests, still has its dotfiles)
        if dotfile or any(_under(where, d) for d in _SYSTEM_DIRS):
            via = "" if where == path else f" (it leads to {where})"
            ctx.deny(
                "write-system-files",
                f"Writing {shown}{via} changes the machine outside the project: keep changes inside the project "
                "(a local config file, a virtualenv) or leave a note for the user.",
            )
            return
