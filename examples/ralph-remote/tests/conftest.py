"""The example's tests use ralph's fixtures (opt-in: ralph.testing is a pytest plugin)."""

import importlib.util
from pathlib import Path

pytest_plugins = ["ralph.testing"]


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """ralph's own suite collects these tests too: in a virtualenv made before this example existed they
    are left out (install it: pip install -e examples/ralph-remote), except where everything must run (CI)."""
    if collection_path.name != "test_remote.py" or importlib.util.find_spec("ralph_remote") is not None:
        return None
    from ralph.testing.requirements import must_run

    return None if must_run() else True
