"""The project's toolchain in the sandbox: what its image is made of, and the hash that names it.

A project describes its toolchain once, in ``[tool.ralph.docker-sandbox]`` (``packages``,
``setup``, ``setup_files``, ``path``, ``image_env``) and/or a ``.devcontainer/devcontainer.json``
(its image or Dockerfile, ``containerEnv``, its create commands).  ``ralph sandbox build`` makes
the project's image from it (:mod:`.projectimage`); the runner runs that image.  The image's tag
is the hash of everything the build reads (:func:`inputs`): the base image's id, the config, the
devcontainer files and the content of the files setup reads, so a change to any of them names
another image, and a run finds its image missing ("older than the config": run ``ralph sandbox
build``).  Stdlib only (the docker client is passed in where an image id is needed).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .devcontainer import DevContainer, DevContainerError
from .devcontainer import find as find_devcontainer
from .devcontainer import read as read_devcontainer

__all__ = [
    "BUILDER_VERSION",
    "LABEL_INPUTS",
    "LABEL_PROJECT",
    "LABEL_TOOLCHAIN",
    "MANIFESTS",
    "SETUP_DIR",
    "Toolchain",
    "ToolchainError",
    "image_repository",
    "read_project_file",
    "toolchain_of",
]

BUILDER_VERSION = "1"
"""Part of every hash: a change in how ralph builds the image names new images."""
SETUP_DIR = "/opt/ralph/setup"
"""Where setup runs: a copy of the files it reads, kept in the image (with what setup put next to them)."""
LABEL_TOOLCHAIN = "ralph.toolchain"
"""The hash of the inputs (also the image's tag)."""
LABEL_PROJECT = "ralph.toolchain.project"
"""The project the image was built for (its absolute path)."""
LABEL_INPUTS = "ralph.toolchain.inputs"
"""JSON: each input's name and digest, to say what changed since the image was built."""
MANIFESTS = (
    "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "requirements-dev.txt", "requirements-test.txt",
    "constraints.txt", "Pipfile", "Pipfile.lock", "poetry.lock", "uv.lock", "pdm.lock",
    "package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
    "go.mod", "go.sum", "Cargo.toml", "Cargo.lock", "Gemfile", "Gemfile.lock", "composer.json", "composer.lock",
)
"""Files setup usually reads, taken when present at the project's top (unless ``setup_files`` says which)."""
MAX_FILE = 16 * 1024 * 1024
_NAME = re.compile(r"[^a-z0-9_.-]+")


class ToolchainError(ValueError):
    """The toolchain cannot be read or built as configured; the message names the file or key."""


@dataclass
class Toolchain:
    """The project's toolchain as configured: what ``ralph sandbox build`` puts into its image."""

    project_dir: Path
    base: str
    """The image it starts from: the ``image`` key (``ralph-sandbox:latest``), unless a devcontainer names one."""
    devcontainer: DevContainer | None = None
    packages: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    """The devcontainer's create commands, then the config's ``setup``."""
    setup_files: list[str] = field(default_factory=list)
    """Project-relative files copied to :data:`SETUP_DIR` before setup runs (and hashed)."""
    path: list[str] = field(default_factory=list)
    image_env: dict[str, str] = field(default_factory=dict)
    """The devcontainer's ``containerEnv``, then the config's ``image_env`` (which wins)."""

    @property
    def repository(self) -> str:
        """The image repository of this project's images (one tag per hash)."""
        return image_repository(self.project_dir)

    def file_digests(self) -> dict[str, str]:
        """Each setup file's content digest (read without following a link: :func:`read_project_file`)."""
        return {name: _digest(read_project_file(self.project_dir, name)) for name in self.setup_files}

    def inputs(self, base_id: str) -> dict[str, str]:
        """Every input of the build by name, each as a digest; ``base_id`` is the base image's id
        (for a devcontainer's Dockerfile, the ids of the images it starts from)."""
        items = {
            "builder": _digest(BUILDER_VERSION.encode(), *_recipe_parts(self.devcontainer is not None)),
            "base image": _digest(self.base.encode(), base_id.encode()),
            "packages": _digest(json.dumps(self.packages).encode()),
            "setup": _digest(json.dumps(self.setup).encode()),
            "path": _digest(json.dumps(self.path).encode()),
            "image_env": _digest(json.dumps(self.image_env, sort_keys=True).encode()),
            "setup_files": _digest(json.dumps(self.setup_files).encode()),
        }
        if self.devcontainer is not None:
            items[_relative(self.devcontainer.path, self.project_dir)] = _digest(self.devcontainer.text.encode())
            if self.devcontainer.dockerfile is not None:
                name = _relative(self.devcontainer.dockerfile, self.project_dir)
                items[name] = _digest(_read_plain(self.devcontainer.dockerfile, "the devcontainer's Dockerfile",
                                                  self.project_dir))
        for name, digest in self.file_digests().items():
            items[name] = digest
        return items

    def tag(self, inputs: dict[str, str]) -> str:
        """``<repository>:<hash of the inputs>``."""
        return f"{self.repository}:{hash_of(inputs)}"


def hash_of(inputs: dict[str, str]) -> str:
    """The hash of the build's inputs (the tag of the image they make)."""
    return _digest(*(f"{name}={digest}".encode() for name, digest in sorted(inputs.items())))[:16]


def changed(built: dict[str, str], now: dict[str, str]) -> list[str]:
    """The names of the inputs that differ between an image's label and the config now."""
    return sorted(name for name in set(built) | set(now) if built.get(name) != now.get(name))


def image_repository(project_dir: Path) -> str:
    """``ralph-sandbox-<directory name>-<hash of its path>``: a project's images, never ``ralph-sandbox`` itself."""
    name = _NAME.sub("-", project_dir.name.lower()).strip("-._")[:30] or "project"
    return f"ralph-sandbox-{name}-{hashlib.sha256(str(project_dir).encode()).hexdigest()[:8]}"


def toolchain_of(project_dir: Path, config: Any) -> Toolchain | None:
    """The project's toolchain from the ``[tool.ralph.docker-sandbox]`` section ``config`` and its
    devcontainer, or None when it has none (the sandbox then runs ``config.image`` as it is).
    :class:`ToolchainError` when the devcontainer cannot be read."""
    project_dir = Path(project_dir)
    found = find_devcontainer(project_dir, config.devcontainer)
    devcontainer = None
    if found is not None:
        if not found.is_file():
            raise ToolchainError(f"[tool.ralph.docker-sandbox] devcontainer: {found} does not exist")
        try:
            text = _read_plain(found, "the devcontainer file", project_dir).decode("utf-8")
        except UnicodeDecodeError:
            raise ToolchainError(f"{found}: not UTF-8 text") from None
        try:
            devcontainer = read_devcontainer(found, text)
        except DevContainerError as exc:
            raise ToolchainError(f"{exc} (or set devcontainer = false in [tool.ralph.docker-sandbox])") from None
    if devcontainer is None and not config.has_toolchain():
        return None
    setup = (devcontainer.commands if devcontainer else []) + list(config.setup)
    image_env = {**(devcontainer.container_env if devcontainer else {}), **config.image_env}
    if config.setup_files is not None:
        files = expand_setup_files(project_dir, config.setup_files)
    else:
        files = derived_setup_files(project_dir, setup)
    return Toolchain(
        project_dir=project_dir,
        base=(devcontainer.image or "") if devcontainer else config.image,
        devcontainer=devcontainer,
        packages=list(config.packages),
        setup=setup,
        setup_files=files,
        path=list(config.path),
        image_env=image_env,
    )


def expand_setup_files(project_dir: Path, patterns: list[str]) -> list[str]:
    """The files ``setup_files`` names (globs matched against the project's files, ``.git`` left out)."""
    files: list[str] = []
    for pattern in patterns:
        if not any(ch in pattern for ch in "*?["):
            if not _plain_file(project_dir, pattern):
                raise ToolchainError(f"[tool.ralph.docker-sandbox] setup_files: {pattern} is not a file in the project "
                                     "(a regular file, not a link)")
            files.append(pattern)
            continue
        matched = [name for name in _project_files(project_dir) if fnmatch.fnmatch(name, pattern)]
        files += matched
    return sorted(set(files))


def derived_setup_files(project_dir: Path, commands: list[str]) -> list[str]:
    """The files setup reads when ``setup_files`` is not set: the project files its commands name
    (``-r requirements.txt``, ``--requirement=dev.txt``, ``./install.sh``) and the usual manifests
    (:data:`MANIFESTS`) at the project's top."""
    files = {name for name in MANIFESTS if _plain_file(project_dir, name)}
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        for word in words:
            for part in (word, word.partition("=")[2]):
                name = part[2:] if part.startswith("./") else part
                if name and not name.startswith(("/", "-", "~")) and ".." not in name.split("/") \
                        and _plain_file(project_dir, name):
                    files.add(name)
    return sorted(files)


def read_project_file(project_dir: Path, name: str) -> bytes:
    """The content of the project file ``name``, opened without following a link in any component
    (an agent could leave ``requirements.txt`` as a link to a secret on this machine, which the
    build would copy into the image), a regular file with one link, at most 16 MiB."""
    parts = [part for part in Path(name).parts if part not in ("", ".")]
    if not parts or ".." in parts or Path(name).is_absolute():
        raise ToolchainError(f"setup file {name!r} is not inside the project")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(project_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, flags | getattr(os, "O_DIRECTORY", 0), dir_fd=fd)
            except OSError as exc:
                raise ToolchainError(f"setup file {name}: {part} is not a directory of the project ({exc.strerror})") from None
            os.close(fd)
            fd = next_fd
        try:
            file_fd = os.open(parts[-1], flags, dir_fd=fd)
        except OSError as exc:
            raise ToolchainError(f"setup file {name} cannot be read ({exc.strerror}; a link is never followed)") from None
        with os.fdopen(file_fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                raise ToolchainError(f"setup file {name} is not a regular file with one link")
            if info.st_size > MAX_FILE:
                raise ToolchainError(f"setup file {name} is larger than 16 MiB")
            return handle.read()
    finally:
        os.close(fd)


def _plain_file(project_dir: Path, name: str) -> bool:
    try:
        read_project_file(project_dir, name)
        return True
    except (ToolchainError, OSError):
        return False


def _project_files(project_dir: Path) -> list[str]:
    """Every regular file under the project (links not followed, ``.git`` skipped), relative."""
    found = []
    for root, dirs, files in os.walk(project_dir, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in files:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                found.append(path.relative_to(project_dir).as_posix())
    return sorted(found)


def _recipe_parts(with_ralph_layer: bool) -> list[bytes]:
    """What the builder puts in besides the config: ralph's layer (on a devcontainer's image)."""
    if not with_ralph_layer:
        return []
    from .projectimage import RALPH_LAYER_FILES, RALPH_LAYER_SCRIPT, recipe_dir

    return [RALPH_LAYER_SCRIPT.encode(), *((recipe_dir() / name).read_bytes() for name in RALPH_LAYER_FILES)]


def _read_plain(path: Path, what: str, project_dir: Path) -> bytes:
    """``path``'s bytes: through :func:`read_project_file` inside the project (no link followed), as
    they are outside it (a file the person named)."""
    normalized = Path(os.path.normpath(path))
    if normalized.is_relative_to(project_dir):
        try:
            return read_project_file(project_dir, normalized.relative_to(project_dir).as_posix())
        except ToolchainError as exc:
            raise ToolchainError(f"{what}: {exc}") from None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ToolchainError(f"{what} {path} cannot be read ({exc.strerror})") from None


def _relative(path: Path, project_dir: Path) -> str:
    try:
        return path.relative_to(project_dir).as_posix()
    except ValueError:
        return str(path)


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]
