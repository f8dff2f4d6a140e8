"""A fast reader of one entry-point group from the installed distributions.

``importlib.metadata`` pulls in the email package and parses every
distribution's metadata (~15-20 ms), which matters for hook calls that start
a fresh process for every tool use.  This reads only ``entry_points.txt`` of
the ``*.dist-info`` / ``*.egg-info`` directories on ``sys.path``, in path order
(the first distribution of a name wins, as with importlib.metadata).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

_INFO_DIR = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+?)(?:-py[^-]*)?\.(?:dist|egg)-info$")


def normalize(name: str) -> str:
    """PEP 503 normalisation: ``Ralph_TrustLoop`` -> ``ralph-trustloop``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: ``name = module:attr`` of distribution ``dist``."""

    name: str
    value: str
    dist: str
    version: str

    def load(self) -> Any:
        module_name, _, attr = self.value.partition(":")
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def _parse(text: str, group: str) -> list[tuple[str, str]]:
    entries = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current == group and "=" in line:
            name, _, value = line.partition("=")
            entries.append((name.strip(), value.strip()))
    return entries


def entry_points(group: str, path: list[str] | None = None) -> list[EntryPoint]:
    """Entry points of ``group`` from every distribution visible on ``path`` (sys.path)."""
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in path if path is not None else sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for dirname in names:
            match = _INFO_DIR.match(dirname)
            if match is None:
                continue
            dist = normalize(match["name"])
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(entry or ".", dirname, "entry_points.txt"), encoding="utf-8") as handle:
                    text = handle.read()
            except OSError:
                continue
            for name, value in _parse(text, group):
                found.append(EntryPoint(name, value, dist, match["version"]))
    return found
