"""Can the bwrap sandbox run the gates?  Each ``verifyCommands`` program looked up where the gates run.

The sandbox shows this machine read-only, so most tools are there; what is not: programs under
the hidden paths (your home: a pyenv shim, ``~/.cargo/bin``; ``/tmp``), and what git ignores in the
project (a virtualenv, ``node_modules``) unless it is one of the runner's ``toolchain`` entries, since
the gates run on the agent's checkout.  A ``python3`` found there may also be another interpreter
than yours (the system's, when your pyenv shim is hidden), without your ``pytest``.

Each command is parsed with ralph's shell model (``ralph.api.shell.analyze``: ``timeout``, ``env`` and
other wrappers included, ``bash -c`` code followed); the programs are looked up in one sandbox
made like a gate's (the project read-only at its path, the toolchain entries, the gates' ``PATH``),
``python -m MODULE`` must find its module there too.  A program in the project counts when git
tracks it (or does not ignore it) or it lies in a toolchain entry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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

Need = ProgramNeed
"""One program a gate command runs, from its ``cwd`` (``ralph.api.gateprograms.ProgramNeed``)."""


def gate_needs(commands: list[str], project: Path) -> tuple[list[Need], list[str]]:
    """(programs to look up, commands not checked and why)."""
    needs: list[Need] = []
    calls, unchecked = gate_calls(commands, str(project))
    for command, each in calls:
        if each.cd_unknown:
            unchecked.append(f"`{command}`: `{each.argv[0]}` runs in a directory only known at run time")
            continue
        cwd = os.path.normpath(os.path.join(str(project), *each.cd))
        for name in [w.split()[0] for w in each.wrappers] + [each.argv[0]]:
            if name in BUILTINS:
                continue
            module = python_module(each.argv) if name == each.argv[0] else None
            need = Need(command, name, module, cwd=cwd)
            if need not in needs:
                needs.append(need)
    return needs, unchecked


def missing_checks(needs: list[Need], found: list[dict[str, Any]], project: Path, toolchain: list[str],
                   hidden: list[Path]) -> list[Any]:
    """A failed check per program (or module) the sandbox lacks, with the fix; a passed one when none."""
    from ralph.api import Check

    from .command import under

    checks = []
    seen: set[tuple[str, str | None]] = set()
    shown = [project / name for name in toolchain]
    for need, item in zip(needs, found):
        if (need.program, need.module) in seen:
            continue
        seen.add((need.program, need.module))
        path = item.get("found")
        gate = f"the bwrap sandbox cannot run the gate `{need.command}`"
        if path and under(Path(path), [project]) and not under(Path(path), shown) and _ignored(project, Path(path)):
            checks.append(Check(False, f"{gate}: {need.program} ({path}) is ignored by git, and the gates run on the "
                                       "agent's checkout, which has only what git does not ignore",
                                f"add its folder to [tool.ralph.bwrap] toolchain (shown read-only from the project: "
                                f"toolchain = [\"{Path(path).relative_to(project).parts[0]}\"])"))
        elif not path:
            here: str | None
            if "/" in need.program:  # a path (in the project, or absolute): what is it here?
                joined = os.path.join(need.cwd or str(project), need.program)
                here = joined if os.path.lexists(joined) else None
            else:
                here = shutil.which(need.program, path=os.environ.get("PATH"))
            real = Path(os.path.realpath(here)) if here else None
            if here and real is not None and (under(real, hidden) or under(Path(here), hidden)):
                covered = real if under(real, hidden) else Path(here)
                link = f" (a link to {real})" if str(real) != here else ""
                checks.append(Check(False, f"{gate}: {need.program} is {here}{link} here, under a path the sandbox "
                                           "hides", f"show it read-only with [tool.ralph.bwrap] ro_binds = "
                                                    f"[\"{_top(covered, hidden)}\"], or install it outside your home"))
            else:
                checks.append(Check(False, f"{gate}: {need.program} is not installed on this machine "
                                           "(not on the gates' PATH)", f"install {need.program}"))
        elif need.module and not item.get("module"):
            checks.append(Check(False, f"{gate}: {path} in the sandbox has no module {need.module}",
                                f"install {need.module} for that interpreter, or make the project's virtualenv "
                                "(it is shown to the gates: [tool.ralph.bwrap] toolchain) and call its python"))
    return checks


def look_up(argv: list[str], env: dict[str, str], needs: list[Need], timeout: float = 60.0) -> list[dict[str, Any]]:
    """Run ``ralph.api.gateprograms.LOOKUP_SCRIPT`` through ``argv`` (a sandbox command line ending in
    ``python -I -S``)."""
    done = subprocess.run([*argv, "-c", LOOKUP_SCRIPT, lookup_payload(needs)], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd="/")
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError((done.stderr or done.stdout).strip()[-300:] or f"exit {done.returncode}")
    return lookup_answer(done.stdout, needs)


def _ignored(project: Path, path: Path) -> bool:
    from ralph.api.process import git

    relative = os.path.relpath(path, project)
    try:
        return git(project, "check-ignore", "-q", "--no-index", "--", relative, check=False).returncode == 0
    except OSError:
        return False


def _top(path: Path, hidden: list[Path]) -> str:
    """The first directory of ``path`` below the hidden root it lies under (``~/.pyenv``)."""
    for root in hidden:
        if root in path.parents:
            top = root / path.relative_to(root).parts[0]
            home = Path.home()
            return "~/" + str(top.relative_to(home)) if home in top.parents else str(top)
    return str(path.parent)


__all__ = ["Need", "gate_needs", "look_up", "missing_checks"]
