"""Regenerate docs/hooks.md from the hookspec docstrings: ``python docs/generate_hooks_md.py``.

tests/test_docs.py fails when docs/hooks.md is out of date.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

HEADER = """# Hook reference

Generated from `ralph/plugin/hookspecs.py` by `docs/generate_hooks_md.py`; do not edit by hand.
Implement a hook with `@ralph.hookimpl` in a module registered under the `ralph` entry-point
group (see CONTRIBUTING.md, "Writing a plugin").
"""


def render() -> str:
    from ralph.plugin import hookspecs

    parts = [HEADER]
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if not name.startswith("ralph_"):
            continue
        signature = str(inspect.signature(func)).replace("'", "")
        opts = getattr(func, "ralph_spec", {}) or {}
        first = " (firstresult)" if opts.get("firstresult") else ""
        parts.append(f"## `{name}{signature}`{first}\n\n{inspect.cleandoc(func.__doc__ or '')}\n")
    return "\n".join(parts)


if __name__ == "__main__":
    target = Path(__file__).with_name("hooks.md")
    target.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {target}\n")
