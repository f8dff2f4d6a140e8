"""Check 3 (seed 000 §5b): no uncommitted changes when the agent stops."""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl

MESSAGE = (
    "There are uncommitted changes:\n{files}\nBefore stopping: (1) update {progress} with what was "
    "accomplished and what you learned, (2) consider whether any lasting pattern belongs in CLAUDE.md or "
    ".claude/rules/, (3) commit ALL changes, including progress.txt and the task list."
)


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """One violation listing the uncommitted paths (``git status --porcelain``; after an iteration the
    status the loop shares, :attr:`ValidationContext.tree_status`)."""
    if not context.check_git:
        return []
    import subprocess

    from ralph.api.process import git  # hardened, after the git metadata check

    if context.tree_status is not None:
        try:
            lines = context.tree_status().porcelain()
        except subprocess.CalledProcessError as exc:
            error = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
            return [Violation("git-clean", f"git status failed in {context.project_dir}: {error.strip()}")]
    else:
        result = git(context.project_dir, "status", "--porcelain", check=False)
        if result.returncode != 0:
            return [Violation("git-clean", f"git status failed in {context.project_dir}: {result.stderr.strip()}")]
        lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        return []
    shown = "\n".join(f"  {line}" for line in lines[:20]) + ("\n  ..." if len(lines) > 20 else "")
    from ralph.api.project import progress_log

    progress = progress_log(context.tasks_path.parent)
    try:
        progress = progress.relative_to(context.project_dir)
    except ValueError:
        pass
    return [Violation("git-clean", MESSAGE.format(files=shown, progress=progress))]
