"""Check 3 (seed 000 §5b): no uncommitted changes when the agent stops."""

from __future__ import annotations

from ralph.api import ValidationContext, Violation, hookimpl
from ralph.api.text import quote

MESSAGE = (
    "There are uncommitted changes:\n{files}\nBefore stopping: (1) update {progress} with what was "
    "accomplished and what you learned, (2) consider whether any lasting pattern belongs in CLAUDE.md or "
    ".claude/rules/, (3) commit ALL changes, including progress.txt and the task list."
)

NESTED = (
    "Nested repositories were committed into the project as gitlinks (submodules): {paths}. The loop cannot "
    "tell whether the work inside them is committed, so the tree does not count as clean: commit their files "
    "into this project instead (remove the nested `.git`, `git rm --cached PATH`, `git add PATH`)."
)


@hookimpl
def ralph_validate(context: ValidationContext) -> list[Violation]:
    """One violation listing the uncommitted paths (``git status --porcelain``; after an iteration the
    status the loop shares, :attr:`ValidationContext.tree_status`; in a run taken against the loop's own
    index, :mod:`ralph.privateindex`), one naming the nested repositories committed during the run."""
    if not context.check_git:
        return []
    import subprocess

    from ralph.api.process import tree_status

    try:
        if context.tree_status is not None:
            status = context.tree_status()
        else:  # a Stop hook (the agent's processes run) or outside a loop
            status = tree_status(context.project_dir, while_agent_runs=True)
    except subprocess.CalledProcessError as exc:
        error = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
        return [Violation("git-clean", f"git status failed in {context.project_dir}: {error.strip()}")]
    lines = status.porcelain()
    violations = [Violation("git-clean", NESTED.format(paths=", ".join(quote(path) for path in status.gitlinks)))
                  ] if status.gitlinks else []
    if not lines:
        return violations
    shown = "\n".join(f"  {line}" for line in lines[:20]) + ("\n  ..." if len(lines) > 20 else "")
    from ralph.api.project import progress_log

    progress = progress_log(context.tasks_path.parent)
    try:
        progress = progress.relative_to(context.project_dir)
    except ValueError:
        pass
    return [Violation("git-clean", MESSAGE.format(files=shown, progress=progress)), *violations]
