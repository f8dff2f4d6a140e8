"""What a fleet engine (``ralph run --parallel --engine NAME``) needs: the units of a parallel run.

``Unit`` is one loop of a parallel run (a PRD folder or a story group), ``UNIT_ENV`` the
environment variable naming it in the child's environment, ``write_group_tasks`` writes a
group's own task list into a clone.  ``NodeRecord`` (where a loop runs) reads what its run
directory holds that was not sent yet, and ``FleetMirror`` (the head) writes it where ``ralph
serve`` finds a fleet's loops.
"""

from __future__ import annotations

from ralph.lifecycle.fleetmirror import FleetMirror, NodeRecord
from ralph.fleetunit import UNIT_ENV, Unit
from ralph.lifecycle.parallel import write_group_tasks

__all__ = ["FleetMirror", "NodeRecord", "UNIT_ENV", "Unit", "write_group_tasks"]
