"""ralph's own tests use the fixtures it offers plugin authors (opt-in, as for them)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from fakedists import FakeDists

pytest_plugins = ["ralph.testing"]


@pytest.fixture
def bwrap_available() -> None:
    """The system's bubblewrap makes the bwrap runner's sandbox here (skip, or fail under CI=true)."""
    from ralph.testing.requirements import require
    from ralph_plugins.runners.bwrap.probe import probe

    found = probe()
    require(found.ok, f"the bwrap runner cannot be used here: {found.reason}")


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


@pytest.fixture
def calls_to(monkeypatch: pytest.MonkeyPatch) -> Callable[[object, str], list[Any]]:
    """``calls_to(owner, "name")`` wraps ``owner.name`` for the test and gives the list of its calls' first
    arguments (the project, for the git reads counted with it), each appended before the real call runs."""

    def spy(owner: object, name: str) -> list[Any]:
        seen: list[Any] = []
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            seen.append(args[0] if args else None)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
        return seen

    return spy


@pytest.fixture(autouse=True)
def _fresh_plugin_commands() -> Iterator[None]:
    """Plugin commands are looked up afresh in each test (tests install fake plugins in-process)."""
    from ralph.cli.main import cli

    cli.forget_plugin_commands()
    yield
    cli.forget_plugin_commands()


# -- a real browser (the dashboard's tests) -------------------------------------------------------


def _chromium() -> str | None:
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def chromium_browser() -> Iterator[Any]:
    """The system's Chromium, headless, driven by Playwright (skips without them; CI=true fails instead)."""
    from ralph.testing.requirements import require

    chromium = _chromium()
    require(chromium is not None, "a headless Chromium is needed (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "Playwright is needed to drive Chromium (pip install -e '.[test]')")
        raise
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield instance
        instance.close()


@pytest.fixture
def chromium_page(chromium_browser: Any) -> Iterator[Any]:
    """A fresh page; ``page.dialogs`` collects every alert/confirm/prompt (each dismissed)."""
    # without the pages' script policy: escaping alone must keep agent text inert (the policy is a second line)
    context = chromium_browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    yield page
    context.close()
