"""A real Ray cluster of several nodes on this machine, for tests of the ``ray`` runner and fleets.

Every node is a real raylet started by Ray's own ``cluster_utils``; all of them
talk only to this machine.  Nodes carry custom resources so tests can force
where an actor lands (``{"node2": 1}``).  Needs the ``ray`` extra.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterator
from contextlib import contextmanager


@dataclass
class LocalCluster:
    """A running cluster: its GCS address and its worker nodes by name."""

    address: str
    cluster: Any
    nodes: dict[str, Any] = field(default_factory=dict)

    def node_id(self, name: str) -> str:
        """The Ray node id of the worker node called ``name``."""
        return self.nodes[name].node_id

    def add_node(self, name: str, num_cpus: int = 1, **resources: float) -> str:
        """Start another worker node offering ``{name: 1, **resources}``; returns its node id."""
        node = self.cluster.add_node(num_cpus=num_cpus, resources={name: 1, **resources})
        self.cluster.wait_for_nodes()
        self.nodes[name] = node
        return node.node_id

    def kill_node(self, name: str) -> None:
        """Stop worker node ``name`` at once, as a machine failure would."""
        node = self.nodes.pop(name)
        self.cluster.remove_node(node, allow_graceful=False)


@contextmanager
def local_cluster(**workers: dict[str, float]) -> Iterator[LocalCluster]:
    """A head node plus one worker node per keyword (``node2={"agent": 1}``); connected as a driver."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Unix socket paths must stay short
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False},
    )
    handle = LocalCluster(cluster.address, cluster)
    try:
        for name, resources in workers.items():
            handle.add_node(name, num_cpus=1, **resources)
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        yield handle
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["LocalCluster", "local_cluster"]
