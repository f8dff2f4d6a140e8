"""Can the sandbox run the gates?  Each ``verifyCommands`` program looked up inside the image.

A gate that cannot start in the sandbox (``No module named pytest``, ``exit 127``) fails every
iteration, each of them paid for.  Before iteration 1 the runner parses every gate command with
ralph's shell model (``ralph.api.shell.analyze``: wrappers such as ``timeout`` or ``env`` stripped,
``bash -c`` code followed), and looks up each program it runs in one throw-away container of the
sandbox image (no network, read-only, as the agent's user, with the ``PATH`` the gates get);
``python3 -m MODULE`` must find the module too.  A program given by a path in the project
(``./gradlew``, ``.venv/bin/python``) must be in the repository: the sandbox works on a checkout
of it, never on what was made on this machine (the host's virtualenv).  ``auto`` falls back to
``direct`` when something is missing; ``--runner docker-sandbox`` stops with exit 2, naming the
program and the config keys that add it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.api.gateprograms import (
    BUILTINS,
    LOOKUP_SCRIPT,
    ProgramNeed,
    gate_calls,
    lookup_answer,
    lookup_payload,
    python_module,
)

__all__ = ["Need", "Missing", "gate_needs", "look_up", "missing_checks"]

OWN_ENVIRONMENT = frozenset({
    "uv", "uvx", "poetry", "pipenv", "pdm", "hatch", "rye", "pixi", "conda", "mamba", "micromamba", "tox", "nox",
    "npm", "pnpm", "yarn", "bun", "nix", "nix-shell", "direnv", "mise", "asdf", "bundle", "pipx", "cargo", "go",
    "dotnet",
})
"""Wrappers that find the program they run themselves (in an environment they make): only they are looked up."""
NODE_RUNNERS = frozenset({"npx", "pnpx", "bunx"})
"""Wrappers that run a program from the project's ``node_modules/.bin`` (never from PATH), else download it."""
PACKAGE_HINTS = {
    "pytest": "python3-pytest", "py.test": "python3-pytest", "node": "nodejs", "npm": "npm", "npx": "npm",
    "go": "golang-go", "gofmt": "golang-go", "make": "make", "cargo": "cargo", "rustc": "rustc", "gcc": "gcc",
    "cc": "gcc", "g++": "g++", "cmake": "cmake", "ninja": "ninja-build", "mvn": "maven", "gradle": "gradle",
    "java": "default-jdk-headless", "javac": "default-jdk-headless", "mypy": "mypy", "black": "black",
    "flake8": "flake8", "pylint": "pylint", "tox": "tox", "jq": "jq", "curl": "curl", "shellcheck": "shellcheck",
    "bats": "bats", "ruby": "ruby", "rake": "rake", "php": "php-cli", "composer": "composer", "yarn": "yarnpkg",
    "perl": "perl", "prove": "perl", "python": "python-is-python3", "pip": "python3-pip", "pip3": "python3-pip",
    "poetry": "python3-poetry", "ruff": "ruff", "sqlite3": "sqlite3", "xvfb-run": "xvfb",
}
"""Debian packages that give a program (shown in the fix)."""
MODULE_HINTS = {"pytest": "python3-pytest", "mypy": "mypy", "coverage": "python3-coverage", "hypothesis": "python3-hypothesis"}



Need = ProgramNeed
"""One program a gate command runs (``ralph.api.gateprograms.ProgramNeed``)."""


@dataclass(frozen=True)
class Missing:
    """A need the sandbox cannot meet, worded for the user."""

    need: Need
    why: str
    fix: str


def gate_needs(commands: list[str], project_dir: Path, tracked: set[str]) -> tuple[list[Need], list[Missing], list[str]]:
    """(programs to look up in the image, what is missing already here, commands not checked and why).

    ``tracked`` holds the repository's files (project-relative): a program or a ``python -m`` module
    given by a path in the project is there when it is tracked, and missing otherwise."""
    needs: list[Need] = []
    missing: list[Missing] = []
    calls, unchecked = gate_calls(commands, str(project_dir))
    for command, each in calls:
        if any(w.split()[0] in OWN_ENVIRONMENT for w in each.wrappers):
            continue  # `uv run pytest`: uv finds pytest in its own environment (uv itself is a need)
        runner = next((w.split()[0] for w in each.wrappers if w.split()[0] in NODE_RUNNERS), None)
        if runner is not None:
            problem = _node_bin(command, runner, each.argv[0], each.cd, each.cd_unknown, tracked)
            if problem is not None:
                missing.append(problem)
            continue
        path = each.assignments.get("PATH")
        if path is not None and "$" in path:
            path = None
        names = [w.split()[0] for w in each.wrappers if w.split()[0] not in BUILTINS] + [each.argv[0]]
        for name in names:
            if name in BUILTINS:
                continue
            if "/" in name and not name.startswith("/") or _inside(name, project_dir):
                problem = _project_program(command, name, each.cd, each.cd_unknown, project_dir, tracked)
                if problem is not None:
                    missing.append(problem)
                continue
            module = python_module(each.argv) if name == each.argv[0] else None
            if module is not None and _project_module(module, each.cd, each.assignments, tracked):
                module = None
            if not any((n.program, n.module, n.path) == (name, module, path) for n in needs):
                needs.append(Need(command, name, module, path))  # looked up once, for its first command
    return needs, missing, unchecked


def look_up(client: Any, image: str, user: str, path: str, needs: list[Need]) -> list[Missing]:
    """What of ``needs`` the image lacks: one container (no network, read-only, all capabilities
    dropped, as ``user``) with the gates' ``path``."""
    if not needs:
        return []
    output = client.containers.run(
        image,
        ["-I", "-S", "-c", LOOKUP_SCRIPT, lookup_payload(needs, path)],
        entrypoint=["python3"],
        environment={"PATH": path, "HOME": "/tmp"},
        user=user,
        network_mode="none",
        read_only=True,
        tmpfs={"/tmp": "rw,size=64m"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        pids_limit=256,
        remove=True,
        stdout=True,
        stderr=False,
    )
    found = lookup_answer(output.decode("utf-8"), needs)
    missing = []
    for need, item in zip(needs, found):
        if not item.get("found"):
            missing.append(Missing(need, f"{need.program} is not installed in the sandbox image {image}",
                                   _fix(PACKAGE_HINTS.get(need.program))))
        elif need.module and not item.get("module"):
            hint = MODULE_HINTS.get(need.module.split(".")[0]) or f"python3-{need.module.split('.')[0].lower().replace('_', '-')}"
            missing.append(Missing(need, f"{need.program} in the sandbox image {image} has no module {need.module}",
                                   _fix(hint, python=True)))
    return missing


def missing_checks(missing: list[Missing], commands: list[str]) -> list[Any]:
    """One failed pre-flight check per missing program (the first gate command that needs it), in
    the order of ``commands``."""
    from ralph.api import Check

    seen: set[tuple[str, str | None]] = set()
    checks = []
    order = {command: index for index, command in reversed(list(enumerate(commands)))}
    for item in sorted(missing, key=lambda m: order.get(m.need.command, len(order))):
        key = (item.need.program, item.need.module)
        if key in seen:
            continue
        seen.add(key)
        checks.append(Check(False, f"the sandbox cannot run the gate `{item.need.command}`: {item.why}", item.fix))
    return checks


def _fix(package: str | None, python: bool = False) -> str:
    where = "[tool.ralph.docker-sandbox]"
    if package:
        how = f'add "{package}" to packages in {where}'
        if python:
            how += " (or install it with setup, e.g. into a venv: docs/sandbox.md, \"Python with pytest\")"
        else:
            how += " (or install it with setup)"
    else:
        how = f'install it in the project\'s image: packages = ["<its Debian package>"] or setup = ["<command>"] in {where}'
    return how + ", then run `ralph sandbox build`"


def _inside(name: str, project_dir: Path) -> bool:
    return name.startswith("/") and Path(name).is_relative_to(project_dir)


def _project_program(command: str, name: str, cd: list[str], cd_unknown: bool, project_dir: Path,
                     tracked: set[str]) -> Missing | None:
    """None when the program at a project path is in the repository (or cannot be known here)."""
    import os

    if cd_unknown:
        return None
    base = project_dir
    for target in cd:
        base = Path(os.path.normpath(base / target))
    full = Path(os.path.normpath(base / name)) if not name.startswith("/") else Path(os.path.normpath(name))
    if not full.is_relative_to(project_dir):
        return None  # outside the project: the image's (looked up as an absolute path would be, not here)
    relative = full.relative_to(project_dir).as_posix()
    if relative in tracked:
        return None
    where = ""
    if os.path.islink(full):
        where = f" (here a link to {os.readlink(full)})"
    need = Need(command, name)
    return Missing(
        need,
        f"{name} is not in the repository{where}: the sandbox works on a checkout of it, without what was made "
        "on this machine (a virtualenv, node_modules)",
        "make the tool part of the project's image (setup, path in [tool.ralph.docker-sandbox]; docs/sandbox.md) "
        "and call it by name in verifyCommands (e.g. `python3 -m pytest`), then run `ralph sandbox build`",
    )


def _node_bin(command: str, runner: str, name: str, cd: list[str], cd_unknown: bool, tracked: set[str]) -> Missing | None:
    """``npx NAME`` runs ``node_modules/.bin/NAME`` of the project (or downloads it): None when the
    repository holds it."""
    import os

    if cd_unknown or "/" in name:
        return None
    here = os.path.normpath(os.path.join(*cd)) if cd else "."
    for depth in range(len(Path(here).parts) + 1):
        base = Path(here).parents[depth - 1] if depth else Path(here)
        candidate = (base / "node_modules" / ".bin" / name).as_posix().removeprefix("./")
        if candidate in tracked:
            return None
    return Missing(
        Need(command, f"{runner} {name}"),
        f"{runner} runs {name} from the project's node_modules (not in the repository, so not in the sandbox's "
        "checkout) or downloads it (the sandbox's network reaches no registry)",
        f"install {name} in the project's image (setup = [\"npm ci\"], path = [\"/opt/ralph/setup/node_modules/.bin\"] "
        f"in [tool.ralph.docker-sandbox]: docs/sandbox.md, \"Node with npm\") and call it by name or through `npm test`, "
        "then run `ralph sandbox build`",
    )


def _project_module(module: str, cd: list[str], assignments: dict[str, str], tracked: set[str]) -> bool:
    """The module is the project's own (``python -m mypackage`` from the project's directory, or
    from a ``PYTHONPATH=src`` it sets): a tracked ``name.py`` or package directory."""
    import os

    top = module.split(".")[0]
    roots = [os.path.normpath(os.path.join(*cd)) if cd else "."]
    roots += [p for p in assignments.get("PYTHONPATH", "").split(":") if p and not p.startswith("/") and "$" not in p]
    for root in roots:
        prefix = "" if root in (".", "") else root.rstrip("/") + "/"
        if f"{prefix}{top}.py" in tracked or any(name.startswith(f"{prefix}{top}/") for name in tracked):
            return True
    return False
