"""Which task store reads a ralph directory: the configured one, else the one whose file is there.

:func:`store_for` serves the commands (``ralph plan --check`` may name a file or a store);
:func:`choose_store` is the loop's choice, which falls back to tasks.json so pre-flight can name
the missing file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.errors import RalphError, UsageError

if TYPE_CHECKING:
    from ralph.contracts import TaskStore
    from ralph.plugin.manager import PluginHost
    from ralph.settings import Settings

__all__ = ["choose_store", "store_for"]


def store_for(ralph_dir: Path, host: Any, name: str | None = None, file: Path | None = None) -> TaskStore:
    """The task store: named, else the one whose file name is ``file``'s, else detected."""
    if name:
        return host.stores.get(name)()  # type: ignore[no-any-return]
    stores = [host.stores.get(n)() for n in host.stores.names()]
    if file is not None:
        for store in stores:
            if store.filename == file.name:
                return store  # type: ignore[no-any-return]
        known = ", ".join(sorted(s.filename for s in stores))
        raise UsageError(f"{file}: no task store reads files named {file.name!r} (known: {known}); pass --store")
    present = [store for store in stores if store.detect(ralph_dir)]
    by_name = {store.name: store for store in present}
    if "tasks-json" in by_name:
        return by_name["tasks-json"]  # type: ignore[no-any-return]
    if present:
        return present[0]  # type: ignore[no-any-return]
    known = ", ".join(sorted(s.filename for s in stores))
    for store in stores:
        if (ralph_dir / store.filename).is_dir():
            raise UsageError(f"{ralph_dir / store.filename} is a directory, not a task-list file: remove or rename it")
    raise UsageError(f"{ralph_dir} holds no task list ({known}); run `ralph init` or `ralph plan` first")


def choose_store(settings: Settings, host: PluginHost) -> TaskStore:
    """The configured store, else the one whose file is present (tasks.json first), else tasks.json."""
    if not host.stores.names():
        raise RalphError("no task store plugin is loaded (is ralph-trustloop installed correctly?)")
    try:
        return store_for(settings.ralph_dir, host, settings.config.task_store)
    except UsageError:
        return host.stores.get("tasks-json")()  # preflight then names the missing file
