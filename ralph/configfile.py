"""The config file of a project, read without pydantic: which file, its ralph table, ``state_dir``.

``ralph status``, ``restore`` and the plugin loader need these before (or without) validating the
config, and importing pydantic would double the start-up of ``ralph status``.  Validation is
:mod:`ralph.config`'s.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from ralph.errors import ConfigError

ENV_PREFIX = "RALPH_"
"""Environment variables ``RALPH_<KEY>`` set config keys."""

__all__ = ["ENV_PREFIX", "find_config_file", "state_dir_setting", "table_prefix"]


def find_config_file(project_dir: Path) -> tuple[Path | None, dict[str, Any]]:
    """Return the config file used and its ralph table (``{}`` when none).

    ``ralph.toml`` wins over pyproject.toml when both exist, since it exists
    for no other reason.
    """
    ralph_toml = project_dir / "ralph.toml"
    if ralph_toml.is_file():
        return ralph_toml, _read_toml(ralph_toml)
    pyproject = project_dir / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject).get("tool", {}).get("ralph", {})
        if not isinstance(table, dict):
            raise ConfigError(f"{pyproject}: tool.ralph must be a table, e.g. [tool.ralph]")
        return (pyproject if table else None), table
    return None, {}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def table_prefix(source: Path | None) -> str:
    """How a key is spelled in the source file: ``tool.ralph.`` in pyproject.toml."""
    if source is not None and source.name == "pyproject.toml":
        return "tool.ralph."
    return ""


def state_dir_setting(project_dir: Path, environ: dict[str, str] | None = None) -> str | None:
    """The ``state_dir`` a ``ralph run`` in ``project_dir`` uses: ``RALPH_STATE_DIR``, else the
    config file's (None: the default state directory).

    Read without validating the rest of the config or loading plugins, for the commands that
    look at past runs (``ralph status``, ``restore``, ``archive``): they must find the runs
    where ``ralph run`` put them.
    """
    environ = dict(os.environ) if environ is None else environ
    from_env = environ.get(f"{ENV_PREFIX}STATE_DIR", "")
    if from_env:
        return from_env
    source, table = find_config_file(project_dir)
    value = table.get("state_dir")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{source}: `{table_prefix(source)}state_dir` must be a string (a directory)")
    return value
