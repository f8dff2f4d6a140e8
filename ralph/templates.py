"""Access to the files shipped in the ``ralph_templates`` package, and token substitution.

Stdlib only, cheap to import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib.resources import files

__all__ = ["TEMPLATE_PACKAGE", "template_text", "render"]

TEMPLATE_PACKAGE = "ralph_templates"

_TOKEN = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")


def template_text(name: str) -> str:
    """Return the text of the shipped template ``name`` (e.g. ``"prompt.md"``).

    ``name`` is relative to the ``ralph_templates`` package and may contain ``/`` for files
    in sub-directories. Raises ``FileNotFoundError`` if there is no such template.
    """
    resource = files(TEMPLATE_PACKAGE)
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise FileNotFoundError(f"invalid template name: {name!r}")
        resource = resource.joinpath(part)
    if not resource.is_file():
        raise FileNotFoundError(f"no template {name!r} in {TEMPLATE_PACKAGE}")
    return resource.read_text(encoding="utf-8")


def render(text: str, values: Mapping[str, str]) -> str:
    """Replace every ``{{KEY}}`` in ``text`` with ``values["KEY"]``.

    Tokens whose key is not in ``values`` are left exactly as they are, so a template can be
    rendered in stages (``ralph init`` fills ``{{DATE}}``; the loop later fills
    ``{{RALPH_ITERATION}}``). Substituted values are not scanned again.
    """

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        return str(values[key]) if key in values else match.group(0)

    return _TOKEN.sub(replace, text)
