"""The project's sandbox image: found by the hash of its toolchain, built by ``ralph sandbox build``.

The build never uses a Dockerfile of ralph's: it starts a container from the base image
(``ralph-sandbox:latest``, or a devcontainer's image or Dockerfile on which ralph's own layer is
put first), runs each step in it as root (the Debian ``packages``, then the copied setup files,
then each ``setup`` command), and commits the result under ``<repository>:<hash>`` with the new
``PATH`` and ``image_env`` in its config.  What the build borrows from this machine (its CA
certificates, its proxy: :mod:`.buildenv`) is given to the steps' processes only, the bundle in the
build's ``/tmp`` (a directory of this machine, mounted), so no layer and no config of the image
holds it.  Imports the docker SDK only inside functions.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .buildenv import BUILD_DIR, BuildEnv, build_env
from .image import recipe_dir
from .naming import IN_CONTAINER_BIN, IN_CONTAINER_HOME, IN_CONTAINER_LIB, STANDARD_PATH
from .toolchain import (
    LABEL_INPUTS,
    LABEL_PROJECT,
    LABEL_TOOLCHAIN,
    SETUP_DIR,
    Toolchain,
    ToolchainError,
    changed,
    image_repository,
    read_project_file,
)

__all__ = [
    "ImageState",
    "RALPH_LAYER_FILES",
    "RALPH_LAYER_SCRIPT",
    "build",
    "image_path",
    "image_state",
    "recipe_dir",
]

BUILD_LIFETIME = 4 * 3600
"""Seconds the build container's ``sleep`` lives: a build left behind by a killed ralph ends by itself."""
RALPH_LAYER_FILES = ("gitconfig", "proxy.py")
"""ralph's files put on a devcontainer's image (from templates/sandbox, as the default image has them)."""
RALPH_LAYER_SCRIPT = """set -e
if ! command -v git >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ralph needs git, python3 and coreutils in the sandbox image, and this image has no apt-get to add them" >&2
    exit 1
  fi
  apt-get $RALPH_APT_OPTIONS update
  DEBIAN_FRONTEND=noninteractive apt-get $RALPH_APT_OPTIONS install -y --no-install-recommends \\
    git python3 ca-certificates coreutils procps
  rm -rf /var/lib/apt/lists/*
fi
mkdir -p /opt/ralph/bin /opt/ralph/lib /home/agent
chmod 1777 /home/agent
"""
"""What ralph's image recipe gives the default image (git, python3, ralph's directories), for a devcontainer's."""
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE | re.MULTILINE)
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?", re.IGNORECASE | re.MULTILINE)
_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass
class ImageState:
    """The project's image as the toolchain names it now, and the older ones of the project."""

    tag: str
    present: bool
    inputs: dict[str, str]
    older: list[tuple[str, list[str], str]] = field(default_factory=list)
    """(tag, the inputs that changed since, when it was built) of this project's other images."""

    def problem(self) -> str | None:
        """Why the run cannot use the image (None: it is there), with what to run."""
        if self.present:
            return None
        if self.older:
            tag, names, created = self.older[0]
            return (f"the project's sandbox image is older than its toolchain config: {tag} was built {created}, "
                    f"before {', '.join(names) or 'the config'} changed; run `ralph sandbox build`")
        return f"the project's sandbox image {self.tag} is not built yet: run `ralph sandbox build`"


# -- finding the image -----------------------------------------------------------------


def base_id(client: Any, toolchain: Toolchain) -> str:
    """The id of what the build starts from (for a devcontainer's Dockerfile: of the images it
    starts from), or :class:`ToolchainError` when one is not on this machine (it is never pulled)."""
    devcontainer = toolchain.devcontainer
    if devcontainer is not None and devcontainer.dockerfile is not None:
        ids = []
        for name in dockerfile_bases(devcontainer.dockerfile, toolchain.project_dir, devcontainer.build_args):
            image = _local(client, name)
            if image is None:
                raise ToolchainError(
                    f"{devcontainer.dockerfile} starts FROM {name}, which is not on this machine (ralph never pulls): "
                    f"`docker pull {name}` where a registry is reachable, or set devcontainer = false in "
                    "[tool.ralph.docker-sandbox]"
                )
            ids.append(image.id)
        return ",".join(ids)
    image = _local(client, toolchain.base)
    if image is None:
        if devcontainer is not None:
            raise ToolchainError(
                f"{devcontainer.path} names the image {toolchain.base}, which is not on this machine (ralph never "
                f"pulls): `docker pull {toolchain.base}` where a registry is reachable, or set devcontainer = false "
                "in [tool.ralph.docker-sandbox]"
            )
        raise ToolchainError(
            f"the sandbox image {toolchain.base!r} does not exist: build it with `ralph sandbox build --offline-base` "
            "(or `ralph sandbox build --base IMAGE`)"
        )
    return str(image.id)


def image_state(client: Any, toolchain: Toolchain) -> ImageState:
    """Whether the image the toolchain names now exists, and which older images of the project do."""
    inputs = toolchain.inputs(base_id(client, toolchain))
    tag = toolchain.tag(inputs)
    state = ImageState(tag=tag, present=_local(client, tag) is not None, inputs=inputs)
    if state.present:
        return state
    for image in client.images.list(filters={"label": f"{LABEL_PROJECT}={toolchain.project_dir}"}):
        labels = image.attrs.get("Config", {}).get("Labels") or {}
        try:
            built = json.loads(labels.get(LABEL_INPUTS) or "{}")
        except ValueError:
            built = {}
        tags = [t for t in image.tags if t.startswith(toolchain.repository + ":")] or [image.short_id]
        created = str(image.attrs.get("Created", ""))[:19].replace("T", " ")
        state.older.append((tags[0], changed(built, inputs), created))
    state.older.sort(key=lambda item: item[2], reverse=True)
    return state


def image_path(client: Any, image: str) -> str:
    """The image's ``PATH`` (its config's), without ralph's own bin directory (the runner puts that first)."""
    local = _local(client, image)
    env = (local.attrs.get("Config", {}).get("Env") or []) if local is not None else []
    return _path_of(env)


def _path_of(env: list[str]) -> str:
    for item in env:
        if item.startswith("PATH="):
            parts = [p for p in item[5:].split(":") if p and p != IN_CONTAINER_BIN]
            return ":".join(parts) or STANDARD_PATH
    return STANDARD_PATH


def dockerfile_bases(dockerfile: Path, project_dir: Path, build_args: dict[str, str]) -> list[str]:
    """The images a Dockerfile starts from (``FROM``, with ``ARG`` defaults and build arguments put
    in; stages it names itself and ``scratch`` left out)."""
    from .toolchain import _read_plain

    text = _read_plain(dockerfile, "the devcontainer's Dockerfile", project_dir).decode("utf-8", "replace")
    first_from = _FROM.search(text)
    header = text[: first_from.start()] if first_from else text
    values = {name: default or "" for name, default in _ARG.findall(header)}
    values.update(build_args)
    stages: set[str] = set()
    bases = []
    for image, alias in _FROM.findall(text):
        name = _REF.sub(lambda m: values.get(m.group(1), ""), image)
        if name.lower() != "scratch" and name not in stages and name not in bases:
            bases.append(name)
        if alias:
            stages.add(alias)
    return bases


def _local(client: Any, name: str) -> Any:
    import docker.errors

    try:
        return client.images.get(name)
    except (docker.errors.ImageNotFound, docker.errors.NullResource):
        return None
    except docker.errors.APIError:  # an invalid reference: certainly not here
        return None


# -- building it --------------------------------------------------------------------------


def build(
    client: Any,
    toolchain: Toolchain,
    force: bool = False,
    echo: Callable[[str], None] = print,
    environ: dict[str, str] | None = None,
) -> str:
    """Build the project's image (unless it is there and ``force`` is off); its tag."""
    state = image_state(client, toolchain)
    if state.present and not force:
        echo(f"image {state.tag} is up to date (toolchain {state.tag.rsplit(':', 1)[1]}); reusing it")
        return state.tag
    if toolchain.devcontainer is not None:
        echo("ignored from the devcontainer (not applied in the sandbox): " + ", ".join(toolchain.devcontainer.ignored)
             if toolchain.devcontainer.ignored else f"toolchain from {toolchain.devcontainer.path}")
    borrowed = build_env(environ)
    echo(borrowed.describe())
    started = time.monotonic()
    base = _base_for_build(client, toolchain, borrowed, echo)
    repository, tag = state.tag.rsplit(":", 1)
    scratch = Path(tempfile.mkdtemp(prefix="ralph-build-"))
    container = _build_container(client, toolchain, base, borrowed, scratch)
    try:
        base_env = client.images.get(base).attrs.get("Config", {}).get("Env") or []
        image_env = _image_env(toolchain, base_env)
        path = ":".join([*toolchain.path, _path_of(base_env)])
        env = {**image_env, "PATH": path, "HOME": "/tmp/ralph-home", "DEBIAN_FRONTEND": "noninteractive",
               "PIP_ROOT_USER_ACTION": "ignore", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "RALPH_APT_OPTIONS": " ".join(borrowed.apt_options()), **borrowed.env}
        run = _Steps(client, container, env, echo)
        if toolchain.devcontainer is not None:
            run("ralph's layer (git, python3, the hook client's directories)", ["sh", "-c", RALPH_LAYER_SCRIPT])
            _put_files(run, {"/etc/gitconfig": (recipe_dir() / "gitconfig").read_bytes(),
                             "/opt/ralph/proxy.py": (recipe_dir() / "proxy.py").read_bytes()})
        if toolchain.packages:
            apt = ["apt-get", *borrowed.apt_options()]
            run("apt-get update", [*apt, "update"])
            run("packages: " + " ".join(toolchain.packages),
                [*apt, "install", "-y", "--no-install-recommends", *toolchain.packages])
            run("clean the package lists", ["sh", "-c", "rm -rf /var/lib/apt/lists/*"])
        run.quietly(["mkdir", "-p", SETUP_DIR])
        _put_files(run, {f"{SETUP_DIR}/{name}": read_project_file(toolchain.project_dir, name)
                         for name in toolchain.setup_files})
        for command in toolchain.setup:
            run(f"setup: {command}", ["sh", "-c", command], workdir=SETUP_DIR)
        labels = {LABEL_TOOLCHAIN: tag, LABEL_PROJECT: str(toolchain.project_dir),
                  LABEL_INPUTS: json.dumps(state.inputs, sort_keys=True)}
        env_list = [f"PATH={path}", *(f"{k}={v}" for k, v in image_env.items())]
        if toolchain.devcontainer is not None:  # what ralph's Dockerfile sets in the default image
            env_list += [f"HOME={IN_CONTAINER_HOME}", f"PYTHONPATH={IN_CONTAINER_LIB}", "PYTHONDONTWRITEBYTECODE=1"]
        container.commit(
            repository=repository,
            tag=tag,
            message="ralph sandbox build",
            author="ralph",
            conf={"Env": env_list, "Cmd": ["sleep", "86400"], "Entrypoint": [], "Labels": labels,
                  "WorkingDir": IN_CONTAINER_HOME},
        )
    finally:
        try:  # what the steps left in /tmp belongs to the container's root: removed from inside
            run_cleanup = _Steps(client, container, {}, lambda line: None)
            run_cleanup.quietly(["sh", "-c", "rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null; true"])
        except Exception:  # noqa: BLE001 - the container died: rmtree below does what it can
            pass
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        shutil.rmtree(scratch, ignore_errors=True)
    echo(f"image {state.tag} built in {time.monotonic() - started:.1f}s")
    remove_older(client, toolchain, state.tag, echo)
    return state.tag


def remove_older(client: Any, toolchain: Toolchain, keep: str, echo: Callable[[str], None] = print) -> list[str]:
    """Untag this project's other images (see :func:`remove_images`); the tags removed."""
    removed = remove_images(client, toolchain.project_dir, keep=keep, echo=echo)
    if removed:
        echo("removed the project's older images: " + ", ".join(removed))
    return removed


def remove_images(client: Any, project_dir: Path | None = None, keep: str | None = None,
                  echo: Callable[[str], None] = print) -> list[str]:
    """Untag the images ``ralph sandbox build`` made (by label): one project's, or every project's.

    Only tags of the image's own project repository (``ralph-sandbox-<project>-<hash>``) go, never
    ``ralph-sandbox`` itself nor another tag someone gave the image, and not ``keep``; an image a
    container still uses stays (``echo`` says why).  The tags removed."""
    import docker.errors

    wanted = f"{LABEL_PROJECT}={project_dir}" if project_dir is not None else LABEL_TOOLCHAIN
    removed = []
    for image in client.images.list(filters={"label": wanted}):
        labels = image.attrs.get("Config", {}).get("Labels") or {}
        if not labels.get(LABEL_TOOLCHAIN) or not labels.get(LABEL_PROJECT):
            continue
        repository = image_repository(Path(labels[LABEL_PROJECT]))
        for tag in image.tags:
            if tag == keep or not tag.startswith(repository + ":"):
                continue
            try:
                client.images.remove(tag)
                removed.append(tag)
            except docker.errors.ImageNotFound:
                pass
            except docker.errors.APIError as exc:
                echo(f"kept {tag}: {exc.explanation or exc}")
    return removed


def _base_for_build(client: Any, toolchain: Toolchain, borrowed: BuildEnv, echo: Callable[[str], None]) -> str:
    """The image the build container starts from: the base, or the devcontainer's Dockerfile built."""
    devcontainer = toolchain.devcontainer
    if devcontainer is None or devcontainer.dockerfile is None:
        return toolchain.base
    assert devcontainer.context is not None
    echo(f"building {devcontainer.dockerfile} (context {devcontainer.context}) ...")
    proxies = {name: value for name, value in borrowed.env.items() if name.lower().endswith("_proxy")}
    image_id = None
    tail: list[str] = []
    for item in client.api.build(
        path=str(devcontainer.context),
        dockerfile=str(devcontainer.dockerfile.resolve()),
        buildargs={**devcontainer.build_args, **proxies},  # the proxy variables are not kept in the image
        target=devcontainer.target,
        pull=False,
        rm=True,
        forcerm=True,
        decode=True,
        network_mode="host" if borrowed.host_network else None,
    ):
        if "error" in item:
            tail.append(str(item["error"]).strip())
            raise ToolchainError(f"building {devcontainer.dockerfile} failed: " + " / ".join(tail[-5:]))
        text = str(item.get("stream") or "").rstrip()
        if text:
            tail = (tail + [text])[-20:]
            echo("  " + text)
        aux = item.get("aux") or {}
        if aux.get("ID"):
            image_id = aux["ID"]
    if image_id is None:
        raise ToolchainError(f"building {devcontainer.dockerfile} gave no image: " + " / ".join(tail[-5:]))
    return str(image_id)


def _build_container(client: Any, toolchain: Toolchain, base: str, borrowed: BuildEnv, scratch: Path) -> Any:
    """The container the steps run in: the base image, its ``/tmp`` the directory ``scratch`` of
    this machine (empty but for the borrowed CA bundle).  A bind mount is never part of a commit,
    and ``/tmp`` exists in every image, so not even a mount point is left in the image (a file
    copied in would be kept, and a mount elsewhere leaves its mount point)."""
    import docker.errors
    from docker.types import Mount

    name = f"{toolchain.repository}-build"
    try:  # a build a killed ralph left behind
        client.containers.get(name).remove(force=True)
    except docker.errors.NotFound:
        pass
    scratch.chmod(0o1777)
    (scratch / "ralph-home").mkdir(mode=0o777)  # setup's $HOME: empty, and gone with the build
    if borrowed.ca_bundle is not None:
        bundle = scratch / Path(BUILD_DIR).name / "ca-certificates.crt"
        bundle.parent.mkdir()
        bundle.write_bytes(borrowed.ca_bundle)
    container = client.containers.create(
        base,
        [str(BUILD_LIFETIME)],
        entrypoint=["sleep"],
        name=name,
        mounts=[Mount("/tmp", str(scratch), type="bind")],
        network_mode="host" if borrowed.host_network else "bridge",
        security_opt=["no-new-privileges:true"],
        pids_limit=4096,
    )
    container.start()
    return container


class _Steps:
    """Runs one build step after the other in the build container, output to ``echo``."""

    def __init__(self, client: Any, container: Any, env: dict[str, str], echo: Callable[[str], None]) -> None:
        self.api = client.api
        self.container = container
        self.env = env
        self.echo = echo

    def quietly(self, argv: list[str]) -> None:
        """A step of ralph's own, its output shown only when it fails."""
        echo, self.echo = self.echo, lambda line: None
        try:
            self(None, argv)
        finally:
            self.echo = echo

    def __call__(self, title: str | None, argv: list[str], workdir: str = "/") -> None:
        if title is not None:
            self.echo(f"- {title}")
        exec_id = self.api.exec_create(self.container.id, argv, user="0:0", environment=self.env, workdir=workdir,
                                       stdout=True, stderr=True)["Id"]
        tail: list[str] = []
        pending = b""
        for chunk in self.api.exec_start(exec_id, stream=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                text = line.decode("utf-8", "replace").rstrip()
                tail = (tail + [text])[-15:]
                self.echo("  " + text)
        if pending:
            tail.append(pending.decode("utf-8", "replace"))
            self.echo("  " + tail[-1])
        code = self.api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            shown = shlex.join(argv) if argv[:2] != ["sh", "-c"] else argv[2]
            raise ToolchainError(f"`{shown.strip().splitlines()[0]}` failed (exit {code}) while building the project's "
                                 "sandbox image:\n" + "\n".join(tail))


def _put_files(run: _Steps, files: dict[str, bytes]) -> None:
    """Put ``files`` (absolute path -> content) into the build container, root's, mode 0644 (their
    directories made first)."""
    if not files:
        return
    directories = sorted({str(Path(path).parent) for path in files})
    run.quietly(["mkdir", "-p", *directories])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    run.container.put_archive("/", buffer.getvalue())


def _image_env(toolchain: Toolchain, base_env: list[str]) -> dict[str, str]:
    """The toolchain's variables, ``${containerEnv:NAME}`` taken from the base image's own."""
    from .devcontainer import expand_env

    own = dict(item.split("=", 1) for item in base_env if "=" in item)
    return {name: expand_env(value, own) for name, value in toolchain.image_env.items()}
