"""The run's trusted copy of the files that steer the agent (DESIGN.md, Trust boundary rule 1).

``prd.md``, ``prompt.md`` and the agent CLIs' project settings (``.claude/settings*.json``,
``.codex/config.toml``, ``.codex/hooks.json``) are read once when the run starts: their bytes
(or their absence) are kept in this process and copied to ``<run dir>/trusted/``. After each
iteration :meth:`TrustedFiles.restore` puts back whatever the agent changed, by whatever means
(a Write tool call, ``sort -o``, ``curl -o``, ``git apply``, ``tar -x``, ``git stash pop``, a
symlink ...), and says what it restored; the loop logs it and commits the restored files that
git tracks. The protected-files guard stays as early feedback.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path



def protected_files(project_dir: Path, ralph_dir: Path) -> list[Path]:
    """The files the agent may not change during a run (the marker is the loop's own, not here)."""
    return [
        ralph_dir / "prd.md",
        ralph_dir / "prompt.md",
        project_dir / ".claude" / "settings.json",
        project_dir / ".claude" / "settings.local.json",
        project_dir / ".codex" / "config.toml",
        project_dir / ".codex" / "hooks.json",
        project_dir / "ralph.toml",
    ]


@dataclass
class Restored:
    """One protected file the loop put back."""

    path: Path
    how: str
    """``changed``, ``deleted``, ``created`` or ``replaced`` (a symlink or directory in its place)."""


class TrustedFiles:
    """Bytes of the protected files at run start; restores them after an iteration."""

    def __init__(self, project_dir: Path, paths: list[Path]) -> None:
        self.project_dir = project_dir
        self.paths = paths
        self.content: dict[Path, bytes | None] = {path: _read(path) for path in paths}

    def save(self, run_dir: Path) -> None:
        """Copy the trusted versions to ``<run dir>/trusted/`` (outside the agent's reach)."""
        target = run_dir / "trusted"
        target.mkdir(parents=True, exist_ok=True)
        for path, data in self.content.items():
            if data is not None:
                name = str(self._rel(path)).replace(os.sep, "__")
                (target / name).write_bytes(data)

    def text(self, path: Path) -> str | None:
        """The trusted text of ``path`` (None: it did not exist at run start)."""
        data = self.content.get(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def changed(self) -> list[Path]:
        """Protected files that differ from the trusted copy now."""
        return [path for path in self.paths if _read(path) != self.content[path] or _replaced(path, self.project_dir)]

    def restore(self) -> list[Restored]:
        """Put every changed file back as it was at run start."""
        restored = []
        for path in self.changed():
            trusted = self.content[path]
            current = _read(path)
            if _replaced(path, self.project_dir):
                how = "replaced"
            elif trusted is None:
                how = "created"
            elif current is None:
                how = "deleted"
            else:
                how = "changed"
            _clear_way(path, self.project_dir)
            if trusted is None:
                if path.exists() or path.is_symlink():
                    path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.ralph-restore")
                tmp.write_bytes(trusted)
                os.replace(tmp, path)
            restored.append(Restored(path, how))
        return restored

    def _rel(self, path: Path) -> Path:
        try:
            return path.relative_to(self.project_dir)
        except ValueError:
            return Path(path.name)


def _read(path: Path) -> bytes | None:
    """The file's bytes; None when it is absent or not a regular file reached without symlinks."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return path.read_bytes()
    except OSError:
        return None


def _replaced(path: Path, root: Path) -> bool:
    """Is ``path`` (or a directory on the way to it below ``root``) a symlink, or a directory?"""
    if path.is_symlink() or path.is_dir():
        return True
    return any(parent.is_symlink() for parent in _parents_below(path, root))


def _parents_below(path: Path, root: Path) -> list[Path]:
    parents = []
    for parent in path.parents:
        if parent == root or root not in parent.parents:
            break
        parents.append(parent)
    return list(reversed(parents))


def _clear_way(path: Path, root: Path) -> None:
    """Remove symlinks on the way to ``path`` and anything that is not a regular file in its place."""
    for parent in _parents_below(path, root):
        if parent.is_symlink():
            parent.unlink()
        elif parent.exists() and not parent.is_dir():
            parent.unlink()
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


class TrustedConfigTable:
    """``[tool.ralph]`` of ``pyproject.toml`` as the run started.

    The run uses its in-process copy of the config anyway; this tells the agent (and the
    person) when it changed the table.  ``pyproject.toml`` is also the project's own file, so
    it is restored whole only when nothing but ``[tool.ralph]`` changed; otherwise the change
    is reported and left for the person to judge.
    """

    def __init__(self, project_dir: Path) -> None:
        self.path = project_dir / "pyproject.toml"
        self.content = _read(self.path)
        self.table, self.rest = _split_table(self.content)

    def check(self) -> tuple[Restored | None, str | None]:
        """(what was restored, or None; a message when ``[tool.ralph]`` changed, or None)."""
        current = _read(self.path)
        if current == self.content:
            return None, None
        table, rest = _split_table(current)
        if table == self.table:
            return None, None
        if rest == self.rest and self.content is not None:
            tmp = self.path.with_name(f".{self.path.name}.ralph-restore")
            tmp.write_bytes(self.content)
            os.replace(tmp, self.path)
            return Restored(self.path, "changed"), None
        return None, (
            "pyproject.toml's [tool.ralph] was changed by the agent together with other parts of the file; "
            "this run keeps using its trusted config, but the next run would read the change: the loop left "
            "the file as it is for the person to review (revert the [tool.ralph] part unless it was asked for)."
        )


def _split_table(data: bytes | None) -> tuple[object, object]:
    """(the ``tool.ralph`` table, everything else) of a pyproject file; unparseable text is compared as is."""
    import tomllib

    if data is None:
        return None, None
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ("unparseable", data), ("unparseable", data)
    tool = parsed.get("tool")
    table = tool.pop("ralph", None) if isinstance(tool, dict) else None
    return table, parsed
