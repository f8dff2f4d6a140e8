"""Fake third-party distributions for the plugin tests.

A ``fake_dist-1.0.dist-info`` directory with ``METADATA`` and ``entry_points.txt`` plus the
plugin modules, written into a directory put on ``sys.path`` (where ``ralph.plugin.entrypoints``
finds them, exactly as it finds installed distributions; a subprocess finds them through
``PYTHONPATH``).  The ``fake_dists`` fixture (tests/conftest.py) removes the modules from
``sys.modules`` afterwards.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

RUNNER_MODULE = """
from ralph import hookimpl
from ralph.contracts import Availability, ProcessOutcome, Runner


class FakeRunner(Runner):
    name = {runner_name!r}
    description = "a third-party runner (test)"

    def availability(self):
        return Availability.yes()

    def run(self, spec, on_line, timeout, cancel):
        return ProcessOutcome(0)


@hookimpl
def ralph_register_runners(register):
    register(FakeRunner)
"""

BROKEN_MODULE = """
raise RuntimeError("boom at import")
"""


def runner_module(runner_name: str = "fake") -> str:
    """The source of a plugin registering a runner called ``runner_name``."""
    return RUNNER_MODULE.format(runner_name=runner_name)


class FakeDists:
    """Writes fake distributions into one directory on ``sys.path``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(
        self,
        entry_points: dict[str, str],
        modules: dict[str, str],
        name: str = "fake_dist",
        version: str = "1.0",
        commands: dict[str, str] | None = None,
        declared: dict[str, dict[str, str]] | None = None,
    ) -> Path:
        """``entry_points``: plugin name -> module; ``modules``: module name -> source;
        ``commands``: ``ralph.commands`` entry-point name (``<plugin>.<command>``) -> ``module:attr``;
        ``declared``: a group of registered names (``ralph.runners`` ...) -> ``<plugin>.<name>`` -> ``module:Class``."""
        info = self.root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
        )
        lines = ["[console_scripts]", "fake-tool = fake_tool:main", "", "[ralph]"]
        lines += [f"{ep} = {module}" for ep, module in entry_points.items()]
        if commands:
            lines += ["", "[ralph.commands]", *(f"{ep} = {target}" for ep, target in commands.items())]
        for group, entries in (declared or {}).items():
            lines += ["", f"[{group}]", *(f"{ep} = {target}" for ep, target in entries.items())]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for module, source in modules.items():
            (self.root / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
            self.modules.append(module)
        importlib.invalidate_caches()
        return info

    def standard(self) -> None:
        """The usual third-party set: a working runner plugin and one that fails at import."""
        self.add(
            {"fake-runner": "ralph_fake_runner", "fake-broken": "ralph_fake_broken"},
            {"ralph_fake_runner": runner_module("fake"), "ralph_fake_broken": BROKEN_MODULE},
        )

    def imported(self) -> list[str]:
        """The fake modules this process has imported."""
        return [module for module in self.modules if module in sys.modules]
