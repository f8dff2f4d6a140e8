"""Shipping the project to the agent's own checkout and its work back: for every runner whose agent
does not work on the project itself (a container's volume, a bubblewrap sandbox, a cluster node).

The one mechanism, with a runner-given primitive that runs a command where the checkout is::

    from ralph.api.workspace import AgentCheckout, InsideResult, inside_script

    def run_inside(argv, stdin):                       # the runner's primitive (here: bubblewrap)
        done = subprocess.run(["bwrap", ..., *argv], input=stdin, capture_output=True)
        return InsideResult(done.returncode, done.stdout, done.stderr)

    checkout = AgentCheckout(project_dir, "/sandbox/project", ["python3", "-I", "-S", str(inside_script())])
    checkout.ship_in(run_inside)                       # before the agent (or a gate command) starts
    ...                                                # the agent works on /sandbox/project
    checkout.bring_back(run_inside, keep=run_dir)      # after its processes are gone (and for Stop checks)

- :class:`AgentCheckout` keeps which commits the checkout has (only the others travel), the branch
  and the ``HEAD`` the work must descend from; ``ship_in`` retries once with a fresh ``.git`` and
  every commit when the checkout cannot take the state; its methods never interleave.
- :func:`inside_script` is this machine's copy of the checkout's side (``ralph/workspace_inside.py``,
  standard library only, run with ``python3 -I -S``): ``apply CHECKOUT`` (a state on stdin) and
  ``capture CHECKOUT [KNOWN ...]`` (a state on stdout).  Mount it, or name the node's own copy.
- What comes back is checked as bytes before anything touches the project (:func:`check`; a
  refusal is :class:`WorkspaceRefused`, a :class:`~ralph.api.RalphError` naming the entry): the
  bundle's objects pass git's fsck in a quarantine and must be complete, the new ``HEAD`` descends
  from the run's branch, no tree or untracked file holds a gitlink, a ``.git`` path, a path out of
  the tree, a special file or a symlink that leads out of the tree or into ``.git``.  Then
  :func:`mirror` applies it with git's checkout and :mod:`ralph.safeio`, never through a link.

The lower-level pieces, for runners with their own exchange (``ray``): :func:`capture` (the
project's state, with a bundle of what a peer that has ``known`` commits lacks), :func:`apply` (make
a checkout a state the loop sent: the receiving side that trusts it), :func:`mirror` (check and
apply a state from the agent's side onto the project), :func:`receive_branch` (only its commits,
as a branch), ``head``, ``init_checkout`` and ``git`` (hardened git, as the loop runs it).

:class:`PhaseClock` times a run's phases (ship-in, the agent's sandbox, bring-back) for a runner's
``timings``: ``clock.lap("ship_in")`` after each, the seconds by name in ``clock.laps``.
"""

from __future__ import annotations

from ralph.workspace import (
    AgentCheckout,
    Checked,
    InsideResult,
    PhaseClock,
    RunInside,
    WorkspaceError,
    WorkspaceRefused,
    WorkspaceState,
    capture,
    check,
    git,
    head,
    init_checkout,
    inside_script,
    mirror,
    receive_branch,
)
from ralph.workspace_inside import apply

__all__ = [
    "AgentCheckout", "Checked", "InsideResult", "PhaseClock", "RunInside", "WorkspaceError", "WorkspaceRefused", "WorkspaceState",
    "apply", "capture", "check", "git", "head", "init_checkout", "inside_script", "mirror", "receive_branch",
]
