"""The default task store: ``tasks.json`` (seed 000 §8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.api import TaskStore, hookimpl

if TYPE_CHECKING:
    from ralph.api import TaskList


class TasksJsonStore(TaskStore):
    """Reads and writes ``<ralph dir>/tasks.json``."""

    name = "tasks-json"
    parse_reads_only_its_text = True
    filename = "tasks.json"

    def parse(self, raw: str, source: Path) -> TaskList:
        from ralph.api.stores import parse_tasks_json

        return parse_tasks_json(raw, source)

    def render(self, tasks: TaskList, previous_raw: str | None) -> str:
        """Write back the model, changing only the values that differ (formatting, key order
        and unknown keys stay byte for byte)."""
        new = tasks.model_dump(mode="json", exclude_unset=True)
        try:
            old = json.loads(previous_raw) if previous_raw is not None else None
        except json.JSONDecodeError:
            old = None
        if not isinstance(old, dict):
            return json.dumps(new, indent=2, ensure_ascii=False) + "\n"
        merged = _merge(old, new)
        from ralph.api.stores import JsonScanError, indent_unit, patch_json_text

        assert previous_raw is not None
        try:
            return patch_json_text(previous_raw, merged)
        except JsonScanError:  # text json accepts but the patcher cannot scan: re-serialise instead
            return json.dumps(merged, indent=indent_unit(previous_raw), ensure_ascii=False) + "\n"


def _merge(old: Any, new: Any) -> Any:
    """``new``'s values in ``old``'s key order; stories matched by position.  A key ``new`` does not have is
    gone: the model holds every key the file had (unknown ones too), so it was removed (a policy's own field
    put back to absent when the loop undid an illegal change)."""
    if isinstance(old, dict) and isinstance(new, dict):
        merged = {key: _merge(old[key], new[key]) for key in old if key in new}
        merged.update({key: value for key, value in new.items() if key not in old})
        return merged
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_merge(a, b) for a, b in zip(old, new)]
    return new


@hookimpl(trylast=True)
def ralph_register_task_stores(register):  # type: ignore[no-untyped-def]
    """Register the tasks.json store."""
    register(TasksJsonStore)
