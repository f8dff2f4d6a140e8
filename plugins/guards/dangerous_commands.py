"""Guard: dangerous shell commands (PreToolUse on ``Bash``; secret paths also on ``Read``).

Every rule has a name (shown to the agent as ``[rule]``) and a reason saying
what to do instead.  The command line is parsed with a real bash grammar and
analysed by :mod:`ralph.shell` (quotes, ``bash -c``, ``eval``,
``$(...)``, wrappers, pipes into a shell, git aliases), so ``r''m -rf /`` and
``bash -c "git push"`` are seen for what they run.  Rules (see docs/guards.md):

``git-push`` (also anything that clears or overrides direct mode's push block: ``env -i``,
``env -u GIT_CONFIG_COUNT``, ``unset GIT_CONFIG_*``, ``GIT_CONFIG_*=``, ``-c url.*.pushInsteadOf=``,
``--config-env``), ``git-merge-main``, ``git-force``, ``git-no-verify``,
``git-reset-hard``, ``delete-outside-project``, ``disk-tools``,
``fork-bomb``, ``privilege``, ``pipe-to-shell``, ``read-secrets``,
``write-system-files``, ``unparseable`` and ``opaque-code`` (the last two only
when the agent runs directly on the host: there anything the analysis does not
model is denied; in a sandboxed loop the container is the protection and the
guards are early feedback).

``git merge`` is denied when it would merge *into* ``main``/``master``: the
branch checked out by an earlier ``git checkout``/``git switch`` on the same
line, else the repository's current branch (read from ``.git/HEAD``, with
``git rev-parse`` as the fallback).  Merging ``main`` into a feature branch is
allowed.  ``git reset --hard`` is allowed only to the loop's own checkpoint.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ralph.api import (
    CONTAINER_CLIS,
    PRIVILEGE_WRAPPERS,
    Analysis,
    Command,
    Denial,
    GitView,
    HookEvent,
    analyze_for,
    fetches,
    find_roots,
    has_long,
    hookimpl,
    mount_fields,
    parse_git,
    read_container,
    resolve_path,
    short_flag,
)
from ralph.api import git_view as view

__all__ = ["FILE_WRITE_TOOLS", "PUSH_REASON", "check_command", "check_file_write", "current_branch", "is_direct", "is_secret_path", "parse_git"]

PUSH_REASON = "Pushing is not allowed inside a Ralph loop: commit locally; the user pushes after review."
FILE_WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
"""The tools that write a file: the same outside-the-project rules as a Bash redirection."""
_DELETERS = frozenset({"rm", "unlink", "shred", "srm"})
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
        self.project_real = os.path.realpath(self.project)
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
        path = resolve_path(text, self.cwd, self.home, dynamic, cd, cd_unknown, self.known)
        if path is not None and ".." in text:
            physical = resolve_path(text, self.cwd, self.home, dynamic, cd, cd_unknown, self.known, physical=True)
            if physical is not None and physical != path:
                self._physical[path] = physical
        return path

    def landing(self, path: str) -> list[str]:
        """Where writing ``path`` lands: the path, where its symlinks lead, and where a link made earlier on the
        line leads (the link does not exist yet, so the file system cannot say)."""
        places = [path]
        for other in (os.path.realpath(path), self._physical.get(path)):
            if other is not None and other not in places:
                places.append(other)
        for link, target in self.links().items():
            for place in list(places):
                if place == link or place.startswith(link.rstrip("/") + "/"):
                    places.append(os.path.normpath(target + place[len(link):]))
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
            ctx = _Ctx(event)
            resolved = resolve_path(raw, ctx.cwd, ctx.home) or raw
            if is_secret_path(resolved):
                return [Denial("read-secrets", _secret_reason(raw))]
    return []


def check_file_write(raw: str, tool: str, event: HookEvent) -> list[Denial]:
    """The rules for a file the ``Write``/``Edit``/``MultiEdit``/``NotebookEdit`` tools would write: the same as for
    a Bash redirection, with the path resolved (a symlink in the project leading out of it counts as outside)."""
    ctx = _Ctx(event)
    path = ctx.resolve(raw, False, [], False)
    if path is None:
        return [Denial("write-system-files", f"{raw} does not name a file the guard can place: use a path inside "
                                             "the project.")]
    _check_system_write(path, raw, ctx)
    _check_ref_write(path, ctx)
    _check_overwrite(path, raw, ctx, must_exist=tool == "Write")
    return list(ctx.denials.values())


def check_command(command: str, event: HookEvent) -> list[Denial]:
    """Every rule this Bash command line breaks (one denial per rule)."""
    ctx = _Ctx(event)
    _check_analysis(analyze_for(event, command, ctx.cwd, ctx.project, ctx.home), ctx)
    return list(ctx.denials.values())


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
        if write.input and write.truncates:
            _deny_input_target(write.path, "overwrites", ctx)
        _check_startup_file(write.path, ctx)
        path = ctx.resolve(write.path, write.dynamic, write.cd, write.cd_unknown)
        if path is not None:
            _check_system_write(path, write.path, ctx)
            _check_ref_write(path, ctx)
            if write.truncates and not write.glob:
                _check_overwrite(path, write.path, ctx)


def _check_command(cmd: Command, index: int, analysis: Analysis, ctx: _Ctx) -> None:
    name = cmd.name
    if name == "git" and not cmd.dynamic_name:
        _check_git(cmd, index, analysis, ctx)
    if name in ("git-push", "git-send-pack", "git-http-push"):
        ctx.deny("git-push", PUSH_REASON)
    if name in _DELETERS:
        _check_delete(cmd, ctx)
    if name == "find":
        _check_find(cmd, ctx)
    if name in ("truncate", "rsync", "tar"):
        _check_destroyers(cmd, ctx)
    if name in ("sed", "gsed", "perl") and any(
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
    if name in ("chmod", "chown", "chgrp"):
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
    if name == "dd":
        for arg in cmd.args:
            if arg.startswith("of="):
                path = resolve_path(arg[3:], ctx.cwd, ctx.home, False, cmd.cd, cmd.cd_unknown, ctx.known)
                if path is not None:
                    _check_system_write(path, arg[3:], ctx)
    if name in ("cp", "mv", "install", "ln") and len(cmd.args) >= 2 and not cmd.args[-1].startswith("-"):
        i = len(cmd.argv) - 1
        if i < len(cmd.input) and cmd.input[i]:
            _deny_input_target(cmd.argv[i], "writes", ctx)
        _check_startup_file(cmd.argv[i], ctx)
        path = ctx.path(cmd, i)
        if path is not None:  # `ln` and `mv` replace a link at the destination, `cp` and `install` write through it
            _check_system_write(path, cmd.argv[i], ctx, follow=name in ("cp", "install"))
            _check_ref_write(path, ctx)
            if name in ("cp", "install"):
                _check_overwrite(path, cmd.argv[i], ctx)
    if name == "mv":  # moving a file away removes it from where it was
        operands = [k for k in range(1, len(cmd.argv)) if not cmd.argv[k].startswith("-")]
        for k in operands[:-1]:
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
    if branch:
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
        return branch if branch in _MAIN_BRANCHES else None
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


def _check_ref_write(path: str, ctx: _Ctx) -> None:
    """Writing ``.git/refs/heads/main`` (or ``packed-refs``) by hand moves main like a merge would; writing
    ``.git/config`` by hand can give a remote a push URL of its own, past direct mode's push block."""
    for root in {ctx.project, ctx.project_real}:
        rel = os.path.relpath(path, os.path.join(root, ".git"))
        m = re.fullmatch(r"refs/heads/(main|master)|packed-refs", rel)
        if m:
            _deny_merge(m.group(1) or "main", ctx)
        if rel in ("config", "config.worktree") and ctx.direct:
            ctx.deny(
                "git-push",
                f"Writing .git/{rel} by hand can set a remote's push URL past ralph's block on pushes, which in a "
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


def current_branch(start: str) -> str | None:
    """The checked-out branch of the repository holding ``start`` (None if detached or no repo)."""
    d = os.path.abspath(start)
    head = None
    for _ in range(128):
        git = os.path.join(d, ".git")
        if os.path.isdir(git):
            head = os.path.join(git, "HEAD")
            break
        if os.path.isfile(git):
            try:
                with open(git, encoding="utf-8") as handle:
                    line = handle.readline().strip()
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
        with open(head, encoding="utf-8") as handle:
            ref = handle.readline().strip()
    except OSError:
        return _rev_parse(start)
    if ref.startswith("ref: refs/heads/"):
        return ref[len("ref: refs/heads/") :]
    return None


def _rev_parse(start: str) -> str | None:
    import subprocess

    from ralph.api import git  # hardened, after the git metadata check

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
    if "-files0-from" in args:
        ctx.deny("delete-outside-project", f"`{_shown(cmd.argv)}` deletes under start paths read from a file: name the "
                                           "directories inside the project on the command line.")
    roots, follow = find_roots(cmd.argv)
    for i in roots:  # no roots: find searches "."
        _check_delete_target(cmd, i, True, ctx, allow_root=True, follow=follow)


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
    base_text = text
    if glob:
        kept = []
        for part in text.split("/"):
            if any(ch in part for ch in "*?["):
                break
            kept.append(part)
        base_text = "/".join(kept) or ("/" if text.startswith("/") else ".")
    path = ctx.path(cmd, i, base_text)
    if path is None:
        if i < len(cmd.input) and cmd.input[i]:
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
    if ".." in text and ctx.in_project(path):  # `link/../x`: the kernel goes up from the link's target
        trimmed = base_text.rstrip("/") or "/"
        last = os.path.basename(trimmed)
        head = trimmed if last in ("..", ".") else (os.path.dirname(trimmed) or ".")
        where = resolve_path(head, ctx.cwd, ctx.home, cmd.dynamic[i], cmd.cd, cmd.cd_unknown, ctx.known,
                             physical=True)
        if where is not None and last not in ("..", "."):
            where = os.path.join(where, last)
        if where is not None and not ctx.in_project(where):
            path = where
    if ctx.in_project(path) and (follow or text.endswith("/")) and os.path.islink(path.rstrip("/") or "/"):
        real = os.path.realpath(path)
        if not ctx.in_project(real) and not ctx.in_temp(real):
            path = real  # a symlink in the project pointing outside, followed
    if ctx.in_project(path):
        if ctx.is_project_root(path) and not glob and not allow_root:
            ctx.deny("delete-outside-project", f"`{shown}` would delete the whole project: delete only the files you mean.")
        elif _under(path, os.path.join(ctx.project, ".git")) or _under(path, os.path.join(ctx.project_real, ".git")):
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
        path = ctx.path(cmd, i)
        if path is not None and not cmd.glob[i]:
            _check_ref_write(path, ctx)
            _check_system_write(path, argv[i], ctx)
            _check_overwrite(path, argv[i], ctx, must_exist=False)


def _check_overwrite(path: str, shown: str, ctx: _Ctx, must_exist: bool = True) -> None:
    """A truncating redirection (``>``) or an in-place edit of a file outside the project changes it for good
    (through a symlink or a link made on the line too); so does writing a project file with other hard links."""
    if "write-system-files" in ctx.denials:
        return
    for where in ctx.landing(path):
        if ctx.in_project(where) or ctx.in_temp(where, strictly=False) or where in _HARMLESS_DEVICES:
            continue
        if where.startswith(("/dev/", "/proc/")):
            continue
        if not must_exist or os.path.isfile(where):
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
    try:
        info = os.stat(path)
    except OSError:
        return
    import stat

    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
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
        if path is None or (not ctx.in_project(path) and not ctx.in_temp(path)):
            ctx.deny(
                "privilege",
                f"`{cmd.name}` on {cmd.argv[i]} changes files outside the project: only change permissions of "
                "files inside the project.",
            )
            return


_STARTS = frozenset({"run", "create", "service create", "service update", "pod create", "pod clone", "clone"})
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
    elif action in ("plugin install", "plugin enable", "plugin upgrade"):
        bad = action
    elif action in ("build", "buildx build"):
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
        if not re.match(r"[A-Za-z0-9][A-Za-z0-9_.-]*:", dest):  # a host path, not CONTAINER:PATH
            path = resolve_path(dest, ctx.cwd, ctx.home, dynamic, cmd.cd, cmd.cd_unknown, ctx.known)
            if path is not None:
                _check_system_write(path, dest, ctx)
                _check_overwrite(path, dest, ctx)
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
        if name == "--security-opt" and value.replace(" ", "").lower() not in _SAFE_SECURITY_OPTS:
            return shown
        if name in ("-v", "--volume", "--mount") and dynamic and ":" not in value and "type=" not in value:
            return shown  # the whole mount is only known at run time
        if name in ("-v", "--volume") and ":" in value:
            source = value.split(":", 1)[0]
            if (dynamic or source.startswith(("/", ".", "~", "$")) or "/" in source) and not _mountable(
                    source, dynamic, cmd, ctx):
                return shown
        if name == "--mount":
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
    candidates: list[tuple[str, bool]] = []
    for op, target in cmd.redirects:
        if op.lstrip("0123456789") in ("<", "<>"):
            candidates.append((target, False))
    if name not in _NOT_READING:
        for i in range(1, len(cmd.argv) - (1 if name in _DEST_LAST else 0)):
            arg = cmd.argv[i]
            if arg.startswith("-") and "=" not in arg and "@" not in arg:
                continue
            if "@" in arg:
                arg = arg.split("@", 1)[1]
            elif arg.startswith("-") or (arg.count("=") == 1 and not arg.startswith("/")):
                arg = arg.split("=", 1)[1]
            candidates.append((arg, cmd.dynamic[i]))
    for text, dynamic in candidates:
        path = resolve_path(text, ctx.cwd, ctx.home, dynamic, cmd.cd, cmd.cd_unknown, ctx.known) if text else None
        if is_secret_path(path or text):
            ctx.deny("read-secrets", _secret_reason(text))
            return


def _check_system_write(path: str, shown: str, ctx: _Ctx, follow: bool = True) -> None:
    home = os.path.normpath(ctx.home)
    for where in ctx.landing(path) if follow else [path]:
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
