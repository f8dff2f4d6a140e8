"""Running programs the way ralph does: for runners, gates, guards and agents that start a process.

``run_process(spec, on_line, timeout=...)`` runs a :class:`~ralph.api.ProcessSpec` in a pid
namespace of its own where the machine allows it (nothing it started outlives it) and reports each
output line; ``run_shell(command, cwd, timeout)`` runs a shell command the same way (exit code, merged output, timed out); ``descendants(pid)`` lists what
a process started, ``KILL_GRACE_SECONDS`` is how long a stopped process gets before it is killed.
``containment()`` (a :class:`Containment`) says which containment this machine gives and why
(``ralph doctor`` shows it).  ``git(project_dir, *args)`` is one git command hardened as the loop runs
it, after the check of the repository's metadata; ``tree_status(project_dir)`` the work tree's status as
the loop takes it (during a run against the loop's own index, never the repository's).  ``path_outside(PATH, project)`` is a ``PATH`` value
without its relative entries and those inside the project (the agent writes there): what a sandbox's
environment is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes

if TYPE_CHECKING:
    from ralph.containment import Containment, containment
    from ralph.claude_cli import path_outside
    from ralph.gitutil import git, tree_status
    from ralph.process import KILL_GRACE_SECONDS, descendants, run_process, run_shell

__all__ = ["KILL_GRACE_SECONDS", "Containment", "containment", "descendants", "git", "path_outside", "run_process", "run_shell",
           "tree_status"]

__getattr__ = lazy_attributes(__name__, {
    "Containment": "ralph.containment",
    "containment": "ralph.containment",
    "git": "ralph.gitutil",
    "path_outside": "ralph.claude_cli",
    "KILL_GRACE_SECONDS": "ralph.process",
    "descendants": "ralph.process",
    "run_process": "ralph.process",
    "run_shell": "ralph.process",
    "tree_status": "ralph.gitutil",
})
