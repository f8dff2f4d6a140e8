"""The test sections of a shared file, put back as they were at story start; the rest stays the agent's.

- ``pyproject.toml``: ``[tool.pytest]`` (and ``.ini_options``), ``[tool.coverage.*]``, ``[tool.tox]``;
- ``Cargo.toml``: ``[[test]]`` targets and ``[profile.test]``;
- ``setup.cfg``: ``[tool:pytest]``, ``[pytest]``, ``[coverage:*]``, ``[tox:*]``, ``[testenv*]``;
- ``package.json``: the test scripts (``test``, ``pretest``, ``test:*`` ..., and every script they run
  through ``npm run``/``yarn``/``pnpm``), and the ``jest``, ``vitest``, ``mocha``, ``ava``, ``c8`` and
  ``nyc`` keys.

TOML keeps its formatting (tomlkit).  :func:`merge_sections` returns the merged text; a file of the
agent's that does not parse is replaced by the story-start text whole (the test configuration must be as
it was; the rest is then the story-start version too).
"""

from __future__ import annotations

import json
import re
from typing import Any

PYPROJECT_KEYS = (("tool", "pytest"), ("tool", "coverage"), ("tool", "tox"))
CARGO_KEYS = (("test",), ("profile", "test"))
PACKAGE_KEYS = ("jest", "vitest", "mocha", "ava", "c8", "nyc")
INI_SECTIONS = re.compile(r"^(tool:pytest|pytest|coverage:.*|tox:.*|testenv.*)$")
_TEST_SCRIPT = re.compile(r"^(pre|post)?test([:\-_.].*)?$")
_RUNS_SCRIPT = re.compile(r"\b(?:npm|pnpm|yarn|bun)\s+(?:run(?:-script)?\s+)?([\w:.\-]+)")


def merge_sections(name: str, agent: str | None, start: str | None) -> str | None:
    """The agent's ``name`` file with its test sections as in ``start`` (None: the file is not there).

    ``agent`` None: the agent deleted the file (the story-start version comes back whole);
    ``start`` None: the file is new (its test sections are set aside).
    """
    if agent is None:
        return start
    base = name.rsplit("/", 1)[-1]
    try:
        if base in ("pyproject.toml", "Cargo.toml"):
            return _merge_toml(agent, start, PYPROJECT_KEYS if base == "pyproject.toml" else CARGO_KEYS)
        if base == "package.json":
            return _merge_package(agent, start)
        if base == "setup.cfg":
            return _merge_ini(agent, start)
    except (ValueError, TypeError, KeyError):  # a file of the agent's that does not parse
        return start
    return agent


def sections_of(name: str, text: str | None) -> Any:
    """A comparable value of the test sections of ``text`` (None when there are none or it does not parse)."""
    if text is None:
        return None
    base = name.rsplit("/", 1)[-1]
    try:
        if base in ("pyproject.toml", "Cargo.toml"):
            import tomllib

            data = tomllib.loads(text)
            keys = PYPROJECT_KEYS if base == "pyproject.toml" else CARGO_KEYS
            found = {".".join(k): _get(data, k) for k in keys if _get(data, k) is not None}
            return found or None
        if base == "package.json":
            return _package_tests(json.loads(text)) or None
        if base == "setup.cfg":
            return [body for header, body in _ini_blocks(text) if header and INI_SECTIONS.match(header)] or None
    except (ValueError, TypeError):
        return "<does not parse>"
    return None


def _get(data: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


# -- TOML ----------------------------------------------------------------------------------------


def _merge_toml(agent: str, start: str | None, keys: tuple[tuple[str, ...], ...]) -> str:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(agent)
    except TOMLKitError as exc:
        raise ValueError(str(exc)) from None
    try:
        old = tomlkit.parse(start) if start is not None else None
    except TOMLKitError:
        old = None
    for path in keys:
        _toml_delete(doc, path)
        wanted = _get(old, path) if old is not None else None
        if wanted is not None:
            _toml_set(doc, path, wanted)
    return tomlkit.dumps(doc)


def _toml_delete(doc: Any, path: tuple[str, ...]) -> None:
    parent = _get(doc, path[:-1]) if len(path) > 1 else doc
    if isinstance(parent, dict) and path[-1] in parent:
        del parent[path[-1]]


def _toml_set(doc: Any, path: tuple[str, ...], value: Any) -> None:
    import tomlkit

    node = doc
    for key in path[:-1]:
        if key not in node or not isinstance(node[key], dict):
            node[key] = tomlkit.table(is_super_table=True)
        node = node[key]
    node[path[-1]] = value


# -- package.json --------------------------------------------------------------------------------


def _package_tests(data: Any) -> dict[str, Any]:
    """The test part of a parsed package.json: test scripts (and what they run) and test tool keys."""
    if not isinstance(data, dict):
        raise ValueError("package.json is not an object")
    found: dict[str, Any] = {key: data[key] for key in PACKAGE_KEYS if key in data}
    scripts = data.get("scripts")
    if isinstance(scripts, dict):
        names = _test_scripts(scripts)
        if names:
            found["scripts"] = {name: scripts[name] for name in sorted(names)}
    return found


def _test_scripts(scripts: dict[str, Any]) -> set[str]:
    """Scripts named like tests, and every script they run (transitively)."""
    names = {name for name in scripts if _TEST_SCRIPT.match(name)}
    todo = list(names)
    while todo:
        body = scripts.get(todo.pop())
        for called in _RUNS_SCRIPT.findall(body if isinstance(body, str) else ""):
            if called in scripts and called not in names:
                names.add(called)
                todo.append(called)
    return names


def _merge_package(agent: str, start: str | None) -> str:
    data = json.loads(agent)
    if not isinstance(data, dict):
        raise ValueError("package.json is not an object")
    try:
        old = json.loads(start) if start is not None else {}
    except ValueError:
        old = {}
    old_tests = _package_tests(old) if isinstance(old, dict) else {}
    for key in PACKAGE_KEYS:
        data.pop(key, None)
        if key in old_tests:
            data[key] = old_tests[key]
    scripts = data.get("scripts")
    if isinstance(scripts, dict):
        for name in _test_scripts(scripts):
            del scripts[name]
    old_scripts = old_tests.get("scripts", {})
    if old_scripts:
        if not isinstance(scripts, dict):
            scripts = data["scripts"] = {}
        scripts.update(old_scripts)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# -- setup.cfg -------------------------------------------------------------------------------------

_CONFIGPARSER_HEADER = re.compile(r"\[(?P<header>.+)\]")
_OPTION = re.compile(r"\s*[^=:\s][^=:]*[=:]")


def _iniconfig_header(line: str) -> str | None:
    """The section a line opens as iniconfig (pytest's parser) reads it: ``[`` in the first column, comments
    (``#``, ``;`` anywhere) and trailing space stripped, ``]`` last."""
    if not line.startswith("[") or line.lstrip()[:1] in ("#", ";"):
        return None
    for comment in "#;":
        line = line.split(comment)[0]
    line = line.rstrip()
    return line[1:-1] if len(line) > 1 and line.endswith("]") else None


def _headers(text: str) -> list[str | None]:
    """Per line, the name of the section it opens (None: it opens none).

    Two parsers read this file: iniconfig (pytest) and configparser (setuptools, coverage.py, tox).  A line
    only one of them takes for a header (``[tool:pytest] # note`` is one for both; ``[a] ; [b]`` names
    different sections), or a header they name differently, makes the file ambiguous: ``ValueError``, so the
    caller takes the story-start file whole rather than guess which sections a runner sees."""
    names: list[str | None] = []
    in_option, option_indent = False, 0
    for line in text.splitlines():
        value = line.strip()
        indent = len(line) - len(line.lstrip())
        ours = _iniconfig_header(line)
        theirs = None
        if not value or value[0] in "#;":
            names.append(None)
            continue
        if not (in_option and indent > option_indent):  # configparser: not a continuation of a value
            match = _CONFIGPARSER_HEADER.match(value)
            theirs = match.group("header") if match else None
        if (ours is None) != (theirs is None) or (ours is not None and ours.strip() != (theirs or "").strip()):
            raise ValueError(f"ambiguous section header: {line.strip()!r}")
        if theirs is not None:
            in_option = False
        elif not (in_option and indent > option_indent) and _OPTION.match(line):
            in_option, option_indent = True, indent
        names.append(ours.strip() if ours is not None else None)
    return names


def _ini_blocks(text: str) -> list[tuple[str | None, str]]:
    """(section name, text of the section with its header line) in order; the part before the first header has None."""
    blocks: list[tuple[str | None, list[str]]] = [(None, [])]
    lines = text.splitlines(keepends=True)
    for line, header in zip(lines, _headers(text)):
        if header is not None:
            blocks.append((header, []))
        blocks[-1][1].append(line)
    return [(name, "".join(lines)) for name, lines in blocks if lines]


def _merge_ini(agent: str, start: str | None) -> str:
    kept = [body for header, body in _ini_blocks(agent) if not (header and INI_SECTIONS.match(header))]
    restored = [body for header, body in _ini_blocks(start or "") if header and INI_SECTIONS.match(header)]
    parts = kept + restored
    text = ""
    for part in parts:
        if text and not text.endswith("\n"):
            text += "\n"
        text += part
    return text
