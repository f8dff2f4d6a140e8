"""ralph's own tests use the fixtures it offers plugin authors (opt-in, as for them)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Iterator

import pytest

from fakedists import FakeDists

pytest_plugins = ["ralph.testing"]


@pytest.fixture
def fake_dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDists]:
    """Fake third-party distributions on ``sys.path`` (tests/fakedists.py), plugin env vars unset."""
    from ralph.plugin.entrypoints import DISABLE_ENV, NO_AUTOLOAD_ENV

    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    monkeypatch.delenv(NO_AUTOLOAD_ENV, raising=False)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    dists = FakeDists(root)
    yield dists
    for module in dists.modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()


@pytest.fixture(autouse=True)
def _fresh_plugin_commands() -> Iterator[None]:
    """Plugin commands are looked up afresh in each test (tests install fake plugins in-process)."""
    from ralph.cli.main import cli

    cli.forget_plugin_commands()
    yield
    cli.forget_plugin_commands()
