"""A project's ``.devcontainer/devcontainer.json``, as the sandbox's toolchain reads it (stdlib only).

What is taken: the image (``image``) or the Dockerfile (``build.dockerfile``, ``build.context``,
``build.args``, ``build.target``; the older ``dockerFile``/``context``), ``containerEnv``, and the
commands a dev container runs once when it is created (``onCreateCommand``,
``updateContentCommand``, ``postCreateCommand``: a string runs in a shell, a list is an argv, an
object holds named commands of either form).  Everything else (``features``, which come from a
registry; ``mounts``, ``runArgs``, ``forwardPorts``, the commands run at every start ...) is left
out; :attr:`DevContainer.ignored` names what a file sets of it, so ``ralph sandbox build`` can say so.
The file is JSON with comments (``//``, ``/* */``) and trailing commas.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CREATE_COMMANDS", "DevContainer", "DevContainerError", "find", "parse_jsonc", "read"]

CANDIDATES = (".devcontainer/devcontainer.json", ".devcontainer.json")
"""Where a dev container's configuration lives in a project, first match wins (as the spec says)."""
CREATE_COMMANDS = ("onCreateCommand", "updateContentCommand", "postCreateCommand")
"""The lifecycle commands run once when the container is created, in this order."""
UNUSED = ("features", "postStartCommand", "postAttachCommand", "initializeCommand", "mounts", "runArgs",
          "remoteEnv", "dockerComposeFile")
"""Keys the sandbox does not apply (said when a file sets them)."""
_CONTAINER_ENV_REF = re.compile(r"\$\{containerEnv:([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
_ANY_REF = re.compile(r"\$\{[^}]*\}")


class DevContainerError(ValueError):
    """The file cannot be used; the message names the file and the key."""


@dataclass
class DevContainer:
    """The parts of one devcontainer.json the sandbox uses."""

    path: Path
    """The file."""
    text: str
    """Its text as read (part of the image's hash)."""
    image: str | None = None
    dockerfile: Path | None = None
    context: Path | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    target: str | None = None
    container_env: dict[str, str] = field(default_factory=dict)
    """``containerEnv``; values may refer to ``${containerEnv:NAME}`` (the image's own variables)."""
    commands: list[str] = field(default_factory=list)
    """The create commands, each as one shell line, in the order they run."""
    ignored: list[str] = field(default_factory=list)
    """What the file sets that the sandbox does not apply (keys; env entries it cannot expand)."""


def find(project_dir: Path, setting: bool | str = True) -> Path | None:
    """The devcontainer.json the sandbox uses: ``setting`` is the ``devcontainer`` config key
    (True: the usual places, False: none, a path: that file, relative to the project)."""
    if setting is False:
        return None
    if isinstance(setting, str):
        path = Path(setting)
        return path if path.is_absolute() else project_dir / path
    for candidate in CANDIDATES:
        if (project_dir / candidate).is_file():
            return project_dir / candidate
    return None


def read(path: Path, text: str | None = None) -> DevContainer:
    """Check ``path``'s ``text`` (read from ``path`` when not given; :class:`DevContainerError` naming
    the key that is wrong)."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DevContainerError(f"{path}: cannot be read ({exc})") from None
    try:
        data = parse_jsonc(text)
    except ValueError as exc:
        raise DevContainerError(f"{path}: not valid JSON with comments ({exc})") from None
    if not isinstance(data, dict):
        raise DevContainerError(f"{path}: the top level is not an object")
    found = DevContainer(path=path, text=text)
    build = data.get("build") or {}
    if not isinstance(build, dict):
        raise DevContainerError(f"{path}: `build` is not an object")
    dockerfile = build.get("dockerfile") or data.get("dockerFile")
    image = data.get("image")
    if dockerfile is not None and not isinstance(dockerfile, str):
        raise DevContainerError(f"{path}: `build.dockerfile` is not a string")
    if image is not None and not isinstance(image, str):
        raise DevContainerError(f"{path}: `image` is not a string")
    if dockerfile:
        found.dockerfile = path.parent / dockerfile
        found.context = path.parent / str(build.get("context") or data.get("context") or ".")
        args = build.get("args") or {}
        if not isinstance(args, dict) or not all(isinstance(v, str) for v in args.values()):
            raise DevContainerError(f"{path}: `build.args` is not an object of strings")
        found.build_args = {str(k): v for k, v in args.items()}
        target = build.get("target")
        found.target = str(target) if target else None
    elif image:
        found.image = image
    else:
        raise DevContainerError(f"{path}: names neither `image` nor `build.dockerfile` (a compose file is not supported)")
    env = data.get("containerEnv") or {}
    if not isinstance(env, dict):
        raise DevContainerError(f"{path}: `containerEnv` is not an object")
    for name, value in env.items():
        if not isinstance(value, str):
            raise DevContainerError(f"{path}: `containerEnv.{name}` is not a string")
        if _ANY_REF.search(_CONTAINER_ENV_REF.sub("", value)):
            found.ignored.append(f"containerEnv.{name} (only ${{containerEnv:NAME}} is expanded)")
            continue
        found.container_env[str(name)] = value
    for key in CREATE_COMMANDS:
        found.commands += [line for line in _command_lines(path, key, data.get(key))]
    found.ignored += [key for key in UNUSED if data.get(key)]
    return found


def _command_lines(path: Path, key: str, value: Any) -> list[str]:
    """A lifecycle command as shell lines (a string as it is, an argv quoted, an object's values in order)."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return [shlex.join(value)]
    if isinstance(value, dict):
        lines: list[str] = []
        for name, each in value.items():
            lines += _command_lines(path, f"{key}.{name}", each)
        return lines
    raise DevContainerError(f"{path}: `{key}` is not a string, a list of strings or an object of them")


def expand_env(value: str, image_env: dict[str, str]) -> str:
    """``value`` with ``${containerEnv:NAME}`` (and ``${containerEnv:NAME:default}``) taken from ``image_env``."""
    return _CONTAINER_ENV_REF.sub(lambda m: image_env.get(m.group(1), m.group(2) or ""), value)


def parse_jsonc(text: str) -> Any:
    """JSON with ``//`` and ``/* */`` comments and trailing commas (what devcontainer.json allows)."""
    return json.loads(_drop_trailing_commas(_drop_comments(text)))


def _strings_and_rest(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into (is a JSON string, piece) pieces."""
    pieces: list[tuple[bool, str]] = []
    i = start = 0
    n = len(text)
    while i < n:
        if text[i] == '"':
            pieces.append((False, text[start:i]))
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            pieces.append((True, text[i : end + 1]))
            i = start = end + 1
        else:
            i += 1
    pieces.append((False, text[start:]))
    return pieces


def _drop_comments(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments (strings kept as they are)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("a /* comment is not closed")
            out.append(" ")
            i = end + 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _drop_trailing_commas(text: str) -> str:
    out = []
    for is_string, piece in _strings_and_rest(text):
        out.append(piece if is_string else re.sub(r",(\s*[}\]])", r"\1", piece))
    return "".join(out)  # a comma and its bracket are never in two pieces: only a string separates pieces
