"""ralph's own tests use the fixtures it offers plugin authors (opt-in, as for them)."""

from __future__ import annotations

from typing import Iterator

import pytest

pytest_plugins = ["ralph.testing"]


@pytest.fixture(autouse=True)
def _fresh_plugin_commands() -> Iterator[None]:
    """Plugin commands are looked up afresh in each test (tests install fake plugins in-process)."""
    from ralph.cli.main import cli

    cli.forget_plugin_commands()
    yield
    cli.forget_plugin_commands()
