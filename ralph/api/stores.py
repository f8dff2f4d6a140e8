"""What a task store plugin needs beyond ``ralph.api.TaskStore``: reading a task list and editing
its file in place.

``parse_tasks(data, source)`` makes a :class:`~ralph.api.TaskList` of the decoded data a format
holds (a :class:`~ralph.api.TaskListError` naming file, story and field when it is not one),
``parse_tasks_json(raw, source)`` the same of JSON text, validated as it is read (faster, same errors),
``structural_problems`` lists the rules beyond field types it breaks (unique ids, notes on
finished stories: the schema validator reports them), ``story_id_problem`` what is wrong with one id.
The format-preserving JSON edits of the JSON stores: ``decode_json`` (a
:class:`JsonScanError` with the line), ``patch_json_text`` (only the changed values rewritten),
``same_json``, ``indent_unit`` and ``json_line_of``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ralph.lazymodule import lazy_attributes

if TYPE_CHECKING:
    from ralph.jsonpatch import JsonScanError, decode_json, indent_unit, json_line_of, patch_json_text, same_json
    from ralph.ralphfiles import story_id_problem
    from ralph.tasks import parse_tasks, parse_tasks_json, structural_problems

__all__ = ["JsonScanError", "decode_json", "indent_unit", "json_line_of", "parse_tasks", "parse_tasks_json", "patch_json_text",
           "same_json", "story_id_problem", "structural_problems"]

__getattr__ = lazy_attributes(__name__, {
    **dict.fromkeys(["JsonScanError", "decode_json", "indent_unit", "json_line_of", "patch_json_text", "same_json"],
                    "ralph.jsonpatch"),
    "story_id_problem": "ralph.ralphfiles",
    "parse_tasks": "ralph.tasks",
    "parse_tasks_json": "ralph.tasks",
    "structural_problems": "ralph.tasks",
})
