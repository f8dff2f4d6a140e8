"""The shell analysis behind the guards (and the sandboxes' gate commands): what a command line
really runs and writes.

``analyze(line)`` (an :class:`Analysis` of :class:`Command` entries, :class:`Opaque` parts it cannot
see through, :class:`WriteTarget` files it writes) and ``analyze_for(event)`` (once per hook event,
shared by every guard); ``ShellAnalysis``, ``SHELLS``, ``PRIVILEGE_WRAPPERS``, ``basename``,
``resolve_path`` and ``unplaced`` (why a path's place is not known) for reading a command; the work budget of one analysis (``budget_scope``,
``active_budget``, ``BudgetExceeded``); paths as the agent's process would see them (``real_path``,
``path_stat``, ``MAX_PATH``); git's command line (``parse_git``, ``git_view``, :class:`GitView`,
``short_flag``), programs that fetch (``fetches``, ``has_long``), files read without blocking (``read_regular``, ``Unreadable``), ``find``'s roots and actions
(``find_roots``, ``find_may_act``, ``may_reach_git``) and container CLIs (``CONTAINER_CLIS``,
``read_container``, ``mount_fields``).  See docs/guards.md.  tree-sitter is loaded on the first
analysis, not by importing this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes

if TYPE_CHECKING:
    from ralph.shell import (
        PRIVILEGE_WRAPPERS,
        SHELLS,
        Analysis,
        Command,
        Opaque,
        ShellAnalysis,
        WriteTarget,
        analyze,
        analyze_for,
        basename,
        resolve_path,
        unplaced,
    )
    from ralph.shell.budget import BudgetExceeded
    from ralph.shell.budget import active as active_budget
    from ralph.shell.budget import scope as budget_scope
    from ralph.shell.containers import CONTAINER_CLIS, mount_fields, read_container
    from ralph.shell.findexpr import may_act as find_may_act
    from ralph.shell.findexpr import may_reach_git
    from ralph.shell.git import GitView, parse_git, short_flag
    from ralph.shell.git import view as git_view
    from ralph.shell.paths import MAX_PATH, glob_links, path_stat, real_path, through_links
    from ralph.shell.progutil import Unreadable, fetches, has_long, read_regular
    from ralph.shell.tools import find_roots

__all__ = [
    "glob_links",
    "CONTAINER_CLIS", "MAX_PATH", "PRIVILEGE_WRAPPERS", "SHELLS", "Analysis", "BudgetExceeded", "Command", "GitView",
    "Opaque", "ShellAnalysis", "WriteTarget", "active_budget", "analyze", "analyze_for", "basename", "budget_scope",
    "fetches", "find_may_act", "find_roots", "git_view", "has_long", "may_reach_git", "mount_fields", "parse_git",
    "path_stat", "read_container", "read_regular", "real_path", "resolve_path", "short_flag", "through_links",
    "Unreadable", "unplaced",
]

__getattr__ = lazy_attributes(__name__, {
    **dict.fromkeys(["Analysis", "Command", "Opaque", "PRIVILEGE_WRAPPERS", "SHELLS", "ShellAnalysis", "WriteTarget",
                     "analyze", "analyze_for", "basename", "resolve_path", "unplaced"], "ralph.shell"),
    "BudgetExceeded": "ralph.shell.budget",
    "budget_scope": "ralph.shell.budget:scope",
    "active_budget": "ralph.shell.budget:active",
    **dict.fromkeys(["MAX_PATH", "glob_links", "path_stat", "real_path", "through_links"], "ralph.shell.paths"),
    **dict.fromkeys(["GitView", "parse_git", "short_flag"], "ralph.shell.git"),
    "git_view": "ralph.shell.git:view",
    **dict.fromkeys(["Unreadable", "fetches", "has_long", "read_regular"], "ralph.shell.progutil"),
    "find_roots": "ralph.shell.tools",
    "may_reach_git": "ralph.shell.findexpr",
    "find_may_act": "ralph.shell.findexpr:may_act",
    **dict.fromkeys(["CONTAINER_CLIS", "mount_fields", "read_container"], "ralph.shell.containers"),
})
