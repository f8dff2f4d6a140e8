"""Shipping a workspace to where the agent runs and back: for runners that do not share this
machine's filesystem (a cluster node, a pod).  See ralph/workspace.py for the format.

``capture(repo, known)`` packs what the other side lacks (commits as a git bundle, the
uncommitted diff, untracked files); ``mirror(repo, state)`` applies it; ``init_checkout``
makes an empty checkout to mirror into; ``head`` and ``git`` are the hardened git helpers both
sides use.
"""

from __future__ import annotations

from ralph.workspace import (
    WorkspaceError,
    WorkspaceState,
    capture,
    git,
    head,
    init_checkout,
    mirror,
    receive_branch,
    untracked_names,
)

__all__ = ["WorkspaceError", "WorkspaceState", "capture", "git", "head", "init_checkout", "mirror", "receive_branch", "untracked_names"]
