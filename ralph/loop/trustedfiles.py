"""The run's trusted copy of the files that steer the agent (docs/design.md, trust boundary rule 3).

``prd.md``, ``prompt.md`` and the agent CLIs' project settings (``.claude/settings*.json``,
``.mcp.json``, ``.codex/config.toml``, ``.codex/hooks.json``) are read once when the run starts: their bytes
(or their absence) are kept in this process and copied to ``<run dir>/trusted/``. After each
iteration :meth:`TrustedFiles.restore` puts back whatever the agent changed, by whatever means
(a Write tool call, ``sort -o``, ``curl -o``, ``git apply``, ``tar -x``, ``git stash pop``, a
symlink ...), and says what it restored; the loop logs it and commits the restored files that
git tracks. The protected-files guard stays as early feedback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ralph import safeio


def protected_files(project_dir: Path, ralph_dir: Path) -> list[Path]:
    """The files the agent may not change during a run (the marker is the loop's own, not here)."""
    return [
        ralph_dir / "prd.md",
        ralph_dir / "prompt.md",
        project_dir / ".claude" / "settings.json",
        project_dir / ".claude" / "settings.local.json",
        project_dir / ".mcp.json",
        project_dir / ".codex" / "config.toml",
        project_dir / ".codex" / "hooks.json",
        project_dir / "ralph.toml",
        *local_plugin_files(project_dir),
    ]


def local_plugin_files(project_dir: Path) -> list[Path]:
    """The project-local plugin files this process executed (ralph/plugin/local.py): the agent may not
    change what the next run would execute."""
    from ralph.plugin.local import executed

    return [path for path in executed() if path.is_relative_to(project_dir)]


@dataclass
class Restored:
    """One protected file the loop put back."""

    path: Path
    how: str
    """``changed``, ``deleted``, ``created`` or ``replaced`` (a symlink or directory in its place)."""
    part: str = ""
    """The part of the file that was restored (``[tool.ralph]``), or empty for the whole file."""
    note: str = ""
    """More for the person (the agent's other edits kept, where its version went)."""


@dataclass(frozen=True)
class Shape:
    """The first component on the way to a file that is not a plain directory or regular file."""

    rel: str
    what: str
    target: str | None
    """Where it pointed, for a symlink."""


class TrustedFiles:
    """Bytes of the protected files at run start; restores them after an iteration.

    Every read and write goes through :mod:`ralph.safeio` below the project: a protected file the
    agent replaced with a symlink (or a hard link, or a link on the way) reads as replaced, and the
    restore removes the link itself and writes a regular file, never what the link points to.
    """

    def __init__(self, project_dir: Path, paths: list[Path]) -> None:
        self.project_dir = project_dir
        self.paths = paths
        self.content: dict[Path, bytes | None] = {path: self._read(path) for path in paths}
        self.shape: dict[Path, Shape | None] = {path: self._shape(path) for path in paths}
        """A link (or special file) on the way to a protected file at run start: the person's, kept as it is
        (the loop neither reads through it nor replaces it); None: a regular file or absent."""

    def root(self, path: Path) -> Path:
        """The directory below which no link is followed on the way to ``path`` (the project)."""
        return safeio.root_for(path, self.project_dir)

    def _read(self, path: Path) -> bytes | None:
        """The file's bytes; None when it is absent or not a regular file reached without symlinks."""
        try:
            return safeio.read_bytes(path, self.root(path))
        except OSError:
            return None

    def _shape(self, path: Path) -> Shape | None:
        root = self.root(path)
        found = safeio.check(path, root)
        if found is None:
            return None
        target = None
        if found.what == "a symlink":
            try:
                target = safeio.read_link(root / found.rel, root)
            except OSError:
                pass
        return Shape(found.rel, found.what, target)

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
        return [path for path in self.paths if self._read(path) != self.content[path] or self._shape(path) != self.shape[path]]

    def restore(self) -> list[Restored]:
        """Put every changed file back as it was at run start."""
        restored = []
        for path in self.changed():
            trusted, shape = self.content[path], self.shape[path]
            current = self._read(path)
            root = self.root(path)
            unsafe = safeio.check(path, root)
            if unsafe is not None and shape is None:
                how = "replaced"
            elif trusted is None and shape is None:
                how = "created"
            elif current is None:
                how = "deleted"
            else:
                how = "changed"
            if unsafe is not None:  # a link (or special file) on the way or in place: remove it, never follow it
                safeio.remove(root / unsafe.rel, root)
            if shape is not None and shape.target is not None:  # the person's own link: put it back as it was
                safeio.remove(root / shape.rel, root)  # whatever the agent put in its place
                safeio.symlink(shape.target, root / shape.rel, root)
            elif trusted is None:
                safeio.remove(path, root)
            else:
                safeio.write_bytes(path, root, trusted, parents=True, replace_dir=True)
            restored.append(Restored(path, how))
        return restored

    def _rel(self, path: Path) -> Path:
        try:
            return path.relative_to(self.project_dir)
        except ValueError:
            return Path(path.name)


class TrustedConfigTable:
    """``[tool.ralph]`` of ``pyproject.toml`` as the run started, restored whenever it changed.

    The run uses its in-process copy of the config anyway, but a later ``ralph`` command would
    read the file.  ``pyproject.toml`` is also the project's own file, so only the table goes back,
    with a format-preserving TOML editor (tomlkit): the agent's other edits stay.  A table the agent
    added (to a file that had none, or a ``pyproject.toml`` it created) is taken out again.  Every
    edit is checked by parsing the result as the config loader does: the table must be the trusted
    one and everything else exactly the agent's; when no edit achieves that (or the agent's file is
    not valid TOML) the whole trusted file goes back and the agent's version is kept aside.
    """

    def __init__(self, project_dir: Path) -> None:
        self.project_dir = project_dir
        self.path = project_dir / "pyproject.toml"
        self.content = _read(self.path, project_dir)
        self.table, self.rest = _split_table(self.content)

    def check(self, aside: Path | None = None) -> tuple[Restored | None, str | None]:
        """(what was restored, or None; None — kept for callers: a change is always restored).

        ``aside``: where the agent's version goes when the whole file has to be put back.
        """
        current = _read(self.path, self.project_dir)
        replaced = current is None and safeio.kind(self.path, self.project_dir) not in ("absent",)
        if current == self.content and not replaced:
            return None, None
        table, rest = _split_table(current)
        if table == self.table and not replaced and not _unparseable(table):
            return None, None
        if replaced:  # a symlink (or special file) in its place: removed, never read through
            found = safeio.check(self.path, self.project_dir)
            if found is not None:
                safeio.remove(self.project_dir / found.rel, self.project_dir)
            current = None
        how = "replaced" if replaced else ("deleted" if current is None else ("created" if self.table is None else "changed"))
        edited = None if current is None or _unparseable(table) else _with_trusted_table(current, self.content, self.table, rest)
        if edited is not None:
            if _is_blank(edited) and self.content is None:
                safeio.remove(self.path, self.project_dir)  # a pyproject.toml the agent made for [tool.ralph] alone
            else:
                safeio.write_bytes(self.path, self.project_dir, edited)
            return Restored(self.path, how, part="[tool.ralph]", note="the agent's other edits of the file were kept"), None
        note = ""
        if current is not None and aside is not None:
            aside.parent.mkdir(parents=True, exist_ok=True)
            aside.write_bytes(current)
            note = f"the agent's version of the whole file is kept in {aside}"
        if self.content is None:
            safeio.remove(self.path, self.project_dir)
        else:
            safeio.write_bytes(self.path, self.project_dir, self.content, replace_dir=True)
        return Restored(self.path, how, part="" if current is None else "(whole file)", note=note), None


def _with_trusted_table(current: bytes, trusted: bytes | None, table: object, rest: object) -> bytes | None:
    """``current`` with its ``tool.ralph`` replaced by the trusted one (taken out when there was none),
    formatting kept; None when no edit leaves the table trusted and everything else as it was."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    for in_place in (True, False):
        try:
            doc = tomlkit.parse(current.decode("utf-8"))
            tool = doc.get("tool")
            item = tomlkit.parse(trusted.decode("utf-8")).get("tool", {}).get("ralph") if trusted is not None else None
            if tool is None:
                if item is None:
                    return current
                doc["tool"] = tomlkit.table(is_super_table=True)
                tool = doc["tool"]
            if item is not None and in_place and "ralph" in tool:
                tool["ralph"] = item
            else:
                if "ralph" in tool:
                    del tool["ralph"]
                if item is not None:
                    tool["ralph"] = item
                elif not tool:
                    del doc["tool"]
            edited = tomlkit.dumps(doc).encode("utf-8")
        except (TOMLKitError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError):
            continue
        if _split_table(edited) == (table, rest):  # checked as the config loader reads it
            return edited
    return None


def _is_blank(data: bytes) -> bool:
    return not data.strip()


def _unparseable(table: object) -> bool:
    return isinstance(table, tuple) and bool(table) and table[0] == "unparseable"


def _read(path: Path, root: Path) -> bytes | None:
    """The file's bytes; None when it is absent or not a regular file reached without symlinks."""
    try:
        return safeio.read_bytes(path, root)
    except OSError:
        return None


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
    if tool == {}:
        del parsed["tool"]  # an empty [tool] left by taking the table out is nothing
    return table, parsed
