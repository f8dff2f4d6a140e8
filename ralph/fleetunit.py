"""The unit of a parallel run (``ralph run --parallel``): one loop, for the local worktrees and for a fleet engine."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BRANCH_PREFIX", "UNIT_ENV", "Unit"]

BRANCH_PREFIX = "ralph/parallel/"
"""Where each unit's branch comes back to the project (``ralph/parallel/PRD-1``)."""
UNIT_ENV = "RALPH_PARALLEL_UNIT"
"""Set in each child's environment (and so in its agent's, with the direct runner)."""


@dataclass(frozen=True)
class Unit:
    """One loop of a parallel run."""

    name: str
    """``PRD-1``, or for a story group ``<ralph dir name>-<first story id>``."""
    ralph_dir: str
    """The unit's ralph directory, relative to the project directory (POSIX)."""
    kind: str = "prd"
    """``prd`` or ``group``."""
    stories: tuple[str, ...] = ()
    """Story ids of a group (empty for a PRD unit)."""

    @property
    def branch(self) -> str:
        """The branch the unit's loop works on, brought back to the project (``ralph/parallel/PRD-1``)."""
        return BRANCH_PREFIX + self.name
