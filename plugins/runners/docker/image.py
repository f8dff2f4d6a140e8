"""Build the sandbox image from ``templates/sandbox`` (and, offline, its base with mmdebstrap).

Used by ``ralph sandbox build``.  Imports the docker SDK only inside functions.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .naming import DEFAULT_IMAGE, LABEL_RECIPE, OFFLINE_BASE_IMAGE

OFFLINE_PACKAGES = ["git", "python3", "ca-certificates", "procps"]
DEFAULT_MIRROR = "http://deb.debian.org/debian"
RECIPE_FILES = ("Dockerfile", "gitconfig", "proxy.py")


def recipe_dir() -> Path:
    import ralph_templates

    return Path(ralph_templates.__file__).parent / "sandbox"


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def recipe_hash(base: str, base_id: str) -> str:
    directory = recipe_dir()
    return _digest(base.encode(), base_id.encode(), *((directory / n).read_bytes() for n in RECIPE_FILES))


def _label_of(image: Any) -> str | None:
    return (image.attrs.get("Config", {}).get("Labels") or {}).get(LABEL_RECIPE)


def _get(client: Any, name: str) -> Any:
    import docker.errors

    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def build_offline_base(
    client: Any,
    tag: str = OFFLINE_BASE_IMAGE,
    suite: str = "bookworm",
    mirror: str = DEFAULT_MIRROR,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> Any:
    """A Debian base image from the package mirror (mmdebstrap, else debootstrap) + ``docker import``."""
    wanted = _digest(suite.encode(), mirror.encode(), ",".join(OFFLINE_PACKAGES).encode())
    existing = _get(client, tag)
    if existing is not None and not force and _label_of(existing) == wanted:
        echo(f"base image {tag} is up to date (recipe {wanted}); reusing it")
        return existing
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ralph-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        if shutil.which("mmdebstrap"):
            command = [
                "mmdebstrap",
                "--variant=minbase",
                "--include=" + ",".join(OFFLINE_PACKAGES),
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin',
                suite,
                str(tarball),
                mirror,
            ]
            echo(f"building base {tag} with mmdebstrap ({suite}, {mirror}) ...")
            _check(command)
        elif shutil.which("debootstrap"):
            root = Path(tmp) / "root"
            echo(f"building base {tag} with debootstrap ({suite}, {mirror}) ...")
            _check(["debootstrap", "--variant=minbase", "--include=" + ",".join(OFFLINE_PACKAGES), suite, str(root), mirror])
            shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
            _check(["tar", "-C", str(root), "-cf", str(tarball), "."])
        else:
            raise RuntimeError(
                "--offline-base needs mmdebstrap or debootstrap: apt-get update && apt-get install -y mmdebstrap"
            )
        repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
        client.api.import_image_from_file(
            str(tarball),
            repository=repository,
            tag=version,
            changes=[f"LABEL {LABEL_RECIPE}={wanted}", 'CMD ["/bin/bash"]'],
        )
    echo(f"base image {tag} built in {time.monotonic() - started:.1f}s")
    return client.images.get(tag)


def _check(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"{command[0]} failed (exit {result.returncode}):\n{tail}")


def build_image(
    client: Any,
    base: str,
    tag: str = DEFAULT_IMAGE,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> Any:
    """Build ``tag`` from the recipe on ``base``; the base must be present locally (never pulled)."""
    base_image = _get(client, base)
    if base_image is None:
        raise RuntimeError(
            f"base image {base!r} is not present locally: `docker pull {base}` where a registry is reachable, "
            "or use `ralph sandbox build --offline-base` to make one from Debian packages"
        )
    wanted = recipe_hash(base, base_image.id)
    existing = _get(client, tag)
    if existing is not None and not force and _label_of(existing) == wanted:
        echo(f"image {tag} is up to date (recipe {wanted}); reusing it")
        return existing
    started = time.monotonic()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name in RECIPE_FILES:
            tar.add(str(recipe_dir() / name), arcname=name)
    context.seek(0)
    echo(f"building {tag} from {base} ...")
    try:
        image, _logs = client.images.build(
            fileobj=context,
            custom_context=True,
            tag=tag,
            pull=False,
            rm=True,
            forcerm=True,
            buildargs={"BASE": base},
            labels={LABEL_RECIPE: wanted},
        )
    except Exception as exc:  # docker.errors.BuildError carries the log
        log = getattr(exc, "build_log", None) or []
        lines = [str(item.get("stream") or item.get("error") or "").rstrip() for item in log]
        tail = "\n".join(line for line in lines if line)[-2000:]
        raise RuntimeError(f"building {tag} failed: {exc}\n{tail}") from None
    echo(f"image {tag} built in {time.monotonic() - started:.1f}s ({image.short_id})")
    return image
