"""``ralph plugin export DIR``: the Claude Code plugin bundle for interactive use.

Writes a marketplace (``DIR/.claude-plugin/marketplace.json``) holding one
plugin, ``DIR/ralph``: the manifest, ``hooks/hooks.json`` running ralph's hook
client with ``${CLAUDE_PLUGIN_ROOT}``, and the ralph-plan skill.  The hooks
run the same guards, monitors and Stop checks as ``ralph run``, in-process.

The bundle is portable (a team shares it through a marketplace): its hooks start
``hooks/ralph-hook.sh``, which finds the Python that has ralph installed when the hook
runs (the interpreter of ``ralph`` on PATH, else ``python3``) and allows the action,
saying why, where there is none.  ``ralph plan`` pins its own interpreter instead.
"""

from __future__ import annotations

import json
import shlex
from importlib.resources import files
from pathlib import Path
from typing import Any

from ralph import __version__
from ralph.errors import UsageError
from ralph.fsutil import atomic_write_text

BUNDLE = "claude-plugin"
PLUGIN_DIR = "ralph"
HOOK_SCRIPT = "hooks/ralph_hook.py"
LAUNCHER = "hooks/ralph-hook.sh"


def bundle_hook_command(python: str | None = None) -> str:
    """The hook command inside the bundle: the launcher that finds ralph's Python when the hook runs,
    or, given ``python``, that interpreter running the bundled client (a bundle for this machine only)."""
    if python is None:
        return f'/bin/sh "${{CLAUDE_PLUGIN_ROOT}}/{LAUNCHER}"'
    return f'{shlex.quote(python)} -S -P "${{CLAUDE_PLUGIN_ROOT}}/{HOOK_SCRIPT}"'


def _fill(value: Any, tokens: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in tokens.items():
            value = value.replace("{{" + key + "}}", replacement)
        return value
    if isinstance(value, list):
        return [_fill(v, tokens) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, tokens) for k, v in value.items()}
    return value


def _template(*parts: str) -> str:
    return files("ralph_templates").joinpath(BUNDLE, *parts).read_text(encoding="utf-8")


def _json(name: str, tokens: dict[str, str]) -> str:
    return json.dumps(_fill(json.loads(_template(*name.split("/"))), tokens), indent=2) + "\n"


def export_bundle(dest: Path, force: bool = False, python: str | None = None) -> list[Path]:
    """Write the marketplace and plugin under ``dest``; returns the files written.

    ``python`` pins the hooks to that interpreter (``ralph plan``'s own bundle); by default they find
    ralph's Python when they run (a portable bundle)."""
    plugin_root = dest / PLUGIN_DIR
    if plugin_root.exists() and any(plugin_root.iterdir()) and not force:
        raise UsageError(f"{plugin_root} already exists; use --force to overwrite the bundle's files")
    tokens = {"VERSION": __version__, "HOOK_COMMAND": bundle_hook_command(python)}
    client = Path(__file__).with_name("client.py").read_text(encoding="utf-8")
    outputs = {
        dest / ".claude-plugin" / "marketplace.json": _json("marketplace.json", tokens),
        plugin_root / ".claude-plugin" / "plugin.json": _json(".claude-plugin/plugin.json", tokens),
        plugin_root / "hooks" / "hooks.json": _json("hooks/hooks.json", tokens),
        plugin_root / HOOK_SCRIPT: client,
        plugin_root / LAUNCHER: _template("hooks", "ralph-hook.sh"),
        plugin_root / "skills" / "ralph-plan" / "SKILL.md": _template("skills", "ralph-plan", "SKILL.md"),
        plugin_root / "README.md": _template("README.md"),
    }
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    (plugin_root / LAUNCHER).chmod(0o755)
    return list(outputs)
