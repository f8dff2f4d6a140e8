"""Documentation stays true: the hook reference matches the hookspecs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_hook_reference_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen", DOCS / "generate_hooks_md.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (DOCS / "hooks.md").read_text(encoding="utf-8") == module.render(), (
        "docs/hooks.md is stale: run python docs/generate_hooks_md.py"
    )


def test_every_hookspec_has_a_docstring_and_a_reference_entry() -> None:
    from ralph.plugins import hook_names
    from ralph import hookspecs

    reference = (DOCS / "hooks.md").read_text(encoding="utf-8")
    for name in hook_names():
        assert (getattr(hookspecs, name).__doc__ or "").strip(), f"{name} has no docstring"
        assert f"## `{name}(" in reference
