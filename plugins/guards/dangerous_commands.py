"""Guard: dangerous shell commands (PreToolUse on ``Bash``; secret paths also on ``Read``).

Every rule has a name (shown to the agent as ``[rule]``) and a reason saying
what to do instead.  The command line is parsed with a real bash grammar and
analysed by :mod:`ralph.shell` (quotes, ``bash -c``, ``eval``,
``$(...)``, wrappers, pipes into a shell, git aliases), so ``r''m -rf /`` and
``bash -c "git push"`` are seen for what they run.  Rules (see docs/guards.md):

``git-push``, ``git-merge-main``, ``git-force``, ``git-no-verify``,
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

from ralph.api import (
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
    parse_git,
    resolve_path,
    short_flag,
)
from ralph.api import git_view as view

__all__ = ["PUSH_REASON", "check_command", "current_branch", "is_direct", "is_secret_path", "parse_git"]

PUSH_REASON = "Pushing is not allowed inside a Ralph loop: commit locally; the user pushes after review."
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

    def deny(self, rule: str, reason: str) -> None:
        self.denials.setdefault(rule, Denial(rule, reason))

    def path(self, cmd: Command, i: int, text: str | None = None) -> str | None:
        return resolve_path(
            cmd.argv[i] if text is None else text, self.cwd, self.home, cmd.dynamic[i], cmd.cd, cmd.cd_unknown,
            self.known,
        )

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
    if tool in ("Read", "NotebookRead", "Grep"):
        raw = event.tool_input.get("file_path") or event.tool_input.get("notebook_path") or event.tool_input.get("path")
        if isinstance(raw, str) and raw:
            ctx = _Ctx(event)
            resolved = resolve_path(raw, ctx.cwd, ctx.home) or raw
            if is_secret_path(resolved):
                return [Denial("read-secrets", _secret_reason(raw))]
    return []


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
    if analysis.fork_bomb:
        ctx.deny(
            "fork-bomb",
            "This is a fork bomb (a function that pipes into itself in the background): it would exhaust the "
            "machine. Do not run it.",
        )
    for index, cmd in enumerate(analysis.simple):
        _check_command(cmd, index, analysis, ctx)
    for write in analysis.writes:
        path = resolve_path(write.path, ctx.cwd, ctx.home, write.dynamic, write.cd, write.cd_unknown, ctx.known)
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
    if name in ("docker", "podman", "nerdctl") and any(a in ("run", "create") for a in cmd.args[:3]):
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
        path = ctx.path(cmd, i)
        if path is not None:
            _check_system_write(path, cmd.argv[i], ctx)
            _check_ref_write(path, ctx)
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
    """Writing ``.git/refs/heads/main`` (or ``packed-refs``) by hand moves main like a merge would."""
    for root in {ctx.project, ctx.project_real}:
        rel = os.path.relpath(path, os.path.join(root, ".git"))
        m = re.fullmatch(r"refs/heads/(main|master)|packed-refs", rel)
        if m:
            _deny_merge(m.group(1) or "main", ctx)


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
    for earlier in reversed(analysis.simple[:index]):
        if earlier.name != "git":
            continue
        v = earlier.git if isinstance(earlier.git, GitView) else view(earlier.argv)
        sub, args = v.sub, v.args
        if sub in ("checkout", "switch"):
            names = [a for a in args if not a.startswith("-")]
            if names:
                return names[0]
    base = ctx.cwd
    for step in cmd.cd:
        base = resolve_path(step, base, ctx.home) or base
    for d in dirs:
        base = resolve_path(d, base, ctx.home) or base
    return current_branch(base)


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
    shown = " ".join(cmd.argv)
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
        if recursive or text.startswith("~"):
            ctx.deny(
                "delete-outside-project",
                f"`{shown}`: {text} is only known at run time, so the guard cannot check that it is inside the "
                "project. Delete a literal path inside the project instead.",
            )
        return
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
        path = ctx.path(cmd, i)
        if path is not None and not cmd.glob[i]:
            _check_system_write(path, argv[i], ctx)
            _check_overwrite(path, argv[i], ctx, must_exist=False)


def _check_overwrite(path: str, shown: str, ctx: _Ctx, must_exist: bool = True) -> None:
    """A truncating redirection (``>``) or an in-place edit of a file outside the project changes it for good."""
    if ctx.in_project(path) or ctx.in_temp(path, strictly=False) or path in _HARMLESS_DEVICES:
        return
    if path.startswith(("/dev/", "/proc/")) or "write-system-files" in ctx.denials:
        return
    if not must_exist or os.path.isfile(path):
        ctx.deny(
            "delete-outside-project",
            f"`{shown}` would be overwritten at {path}, outside the project {ctx.project}: change only files inside "
            "the project (scratch files under /tmp are fine).",
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


def _check_container(cmd: Command, ctx: _Ctx) -> None:
    """A container started with host privileges or host directories is a way around every other rule."""
    args = cmd.args
    for k, a in enumerate(args):
        key, eq, inline = a.partition("=")
        value = inline if eq else (args[k + 1] if k + 1 < len(args) else "")
        bad = None
        if a == "--privileged" or (key in ("--pid", "--userns", "--ipc", "--uts") and value == "host"):
            bad = a
        elif key in ("--cap-add", "--device", "--security-opt"):
            bad = a
        elif key in ("-v", "--volume"):
            source = value.split(":", 1)[0]
            if "/" in source or source.startswith(("~", ".", "$")):
                path = resolve_path(source, ctx.cwd, ctx.home, source.startswith("$"), cmd.cd, cmd.cd_unknown, ctx.known)
                if path is None or not (ctx.in_project(path) or ctx.in_temp(path)):
                    bad = f"{key} {value}"
        elif key == "--mount":
            fields = dict(part.partition("=")[::2] for part in value.split(","))
            source = fields.get("source") or fields.get("src") or ""
            if "/" in source:
                path = resolve_path(source, ctx.cwd, ctx.home, False, cmd.cd, cmd.cd_unknown, ctx.known)
                if path is None or not (ctx.in_project(path) or ctx.in_temp(path)):
                    bad = f"--mount {value}"
        if bad:
            ctx.deny(
                "privilege",
                f"`{cmd.name} {bad}` gives a container the host's files or privileges, which gets around every "
                "other rule: mount only the project (e.g. `-v \"$PWD\":/work`) and run without extra privileges.",
            )
            return


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
        analysis = ctx.analysis
        leaves = analysis is not None and (
            any(c.name in _NETWORK_TOOLS for c in analysis.simple)
            or any(w.path != "/dev/null" for w in analysis.writes)
        )
        outward = to_file or (cmd.piped_out and leaves)
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


def _check_system_write(path: str, shown: str, ctx: _Ctx) -> None:
    if ctx.in_project(path) or ctx.in_temp(path, strictly=False) or path in _HARMLESS_DEVICES:
        return
    if path.startswith(("/dev/fd/", "/dev/shm/", "/proc/self/fd/", "/tmp/", "/var/tmp/")):
        return
    home = os.path.normpath(ctx.home)
    dotfile = _under(path, home) and path != home and path[len(home) + 1 :].startswith(".")
    if dotfile or any(_under(path, d) for d in _SYSTEM_DIRS):
        ctx.deny(
            "write-system-files",
            f"Writing {shown} changes the machine outside the project: keep changes inside the project "
            "(a local config file, a virtualenv) or leave a note for the user.",
        )
