"""Connecting to a Ray cluster, or starting a local one for the run."""

from __future__ import annotations

import logging
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from ralph.api import RalphError


@dataclass
class ClusterConnection:
    """This process's connection to Ray; ``started`` when ralph started the cluster itself."""

    address: str
    started: bool

    def close(self) -> None:
        """Disconnect; a cluster ralph started for the run is stopped with it."""
        import ray

        if ray.is_initialized():
            ray.shutdown()


def connect(cfg: Any) -> ClusterConnection:
    """Join ``cfg.address`` ("auto", "ray://host:port", "host:port"), or start a local cluster when unset."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return ClusterConnection(ray.get_runtime_context().gcs_address, started=False)
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR, "include_dashboard": False}
    try:
        with _neutral_cwd():
            if cfg.address:
                ray.init(address=cfg.address, **options)
                return ClusterConnection(cfg.address, started=False)
            ray.init(**options)
            return ClusterConnection(ray.get_runtime_context().gcs_address, started=True)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError from ray.init
        where = f"at {cfg.address!r}" if cfg.address else "(a local one)"
        raise RalphError(
            f"ray runner: could not connect to the Ray cluster {where}: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''} — check [tool.ralph.ray] address and `ray status`"
        ) from exc


@contextmanager
def _neutral_cwd() -> Iterator[None]:
    """Ray puts the driver's working directory on every worker's ``sys.path``.

    The driver runs in the project, whose ``ralph/`` folder would then shadow the
    ralph package on the nodes; connect from an empty directory instead.
    """
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ralph-ray-driver-") as empty:
        os.chdir(empty)
        try:
            yield
        finally:
            os.chdir(previous)


def actor_options(cfg: Any, max_concurrency: int) -> dict[str, Any]:
    """Ray actor options for one iteration's (or one fleet loop's) placement, from ``[tool.ralph.ray]``."""
    options: dict[str, Any] = {"num_cpus": cfg.num_cpus, "max_concurrency": max_concurrency, "max_restarts": 0}
    if cfg.memory:
        options["memory"] = cfg.memory
    if cfg.resources:
        options["resources"] = dict(cfg.resources)
    if cfg.label_selector:
        options["label_selector"] = dict(cfg.label_selector)
    if cfg.runtime_env:
        options["runtime_env"] = dict(cfg.runtime_env)
    return options


def describe_cluster(cfg: Any) -> tuple[list[str], list[str]]:
    """Lines for `ralph doctor` (address, nodes, resources) and the ids of nodes that fit one iteration."""
    import ray

    connection = connect(cfg)
    try:
        fitting = fitting_nodes(cfg)
        lines = [f"ray: cluster at {connection.address}" + (" (local, started for this check)" if connection.started else "")]
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            resources = ", ".join(f"{k}={v:g}" for k, v in sorted(node.get("Resources", {}).items())
                                  if not k.startswith("node:") and k != "object_store_memory")
            lines.append(f"  node {node['NodeID'][:12]} {node.get('NodeManagerAddress', '?')}: {resources}")
        return lines, fitting
    finally:
        connection.close()


def wanted_resources(cfg: Any) -> dict[str, float]:
    """What one iteration asks of a node: ``num_cpus`` and the custom ``resources``."""
    return {"CPU": cfg.num_cpus, **cfg.resources}


def fitting_nodes(cfg: Any) -> list[str]:
    """Ids of the alive nodes that offer what one iteration asks."""
    import ray

    wanted = wanted_resources(cfg)
    return [
        node["NodeID"]
        for node in ray.nodes()
        if node.get("Alive") and all(node.get("Resources", {}).get(k, 0) >= v for k, v in wanted.items())
    ]
