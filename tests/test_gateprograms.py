"""The gate-program look-up a sandbox runner runs inside its sandbox (``ralph.api.gateprograms``),
run here with this machine's Python as a runner runs it there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ralph.api.gateprograms import LOOKUP_SCRIPT, ProgramNeed, lookup_answer, lookup_payload, python_module


def _look_up(needs: list[ProgramNeed], path: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-I", "-S", "-c", LOOKUP_SCRIPT, lookup_payload(needs, path)],
                          capture_output=True, text=True, cwd="/", env={"PATH": path}, timeout=120)
    assert done.returncode == 0, done.stderr
    return lookup_answer(done.stdout, needs)


def test_programs_modules_and_project_paths_are_found_as_the_gate_would_find_them(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    project = tmp_path / "project"
    (project / "tools").mkdir(parents=True)
    tool = project / "tools" / "check"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    (project / "tools" / "notes.txt").write_text("not a program\n")
    (project / "ownmodule.py").write_text("")
    own_bin = tmp_path / "own-bin"  # a PATH the command sets itself (``PATH=own-bin:$PATH make``)
    own_bin.mkdir()
    (own_bin / "make-it").write_text("#!/bin/sh\n")
    (own_bin / "make-it").chmod(0o755)
    needs = [
        ProgramNeed("python3 -m json.tool", "python3", "json.tool"),
        ProgramNeed("python3 -m not_a_module_anywhere", "python3", "not_a_module_anywhere"),
        ProgramNeed("no-such-program-here --x", "no-such-program-here"),
        ProgramNeed("./tools/check", "./tools/check", cwd=str(project)),
        ProgramNeed("./tools/notes.txt", "./tools/notes.txt", cwd=str(project)),
        ProgramNeed("python3 -m ownmodule", "python3", "ownmodule", cwd=str(project)),
        ProgramNeed("python3 -m ownmodule", "python3", "ownmodule"),  # from /tmp: not the project's
        ProgramNeed("PATH=own-bin make-it", "make-it", path=str(own_bin)),
    ]
    found = _look_up(needs, str(bin_dir))
    assert found[0] == {"found": str(bin_dir / "python3"), "module": True}
    assert found[1] == {"found": str(bin_dir / "python3"), "module": False}
    assert found[2] == {"found": None}
    assert found[3] == {"found": str(tool)}  # a path: absolute, from where the command runs
    assert found[4] == {"found": None}  # not executable
    assert found[5]["module"] is True and found[6]["module"] is False
    assert found[7] == {"found": str(own_bin / "make-it")}


@pytest.mark.parametrize(("argv", "module"), [
    (["python3", "-m", "pytest", "-q"], "pytest"),
    (["/usr/bin/python3.11", "-mpytest"], "pytest"),
    (["python", "-W", "error", "-X", "dev", "-m", "mypy"], "mypy"),
    (["python3", "-I", "-m", "unittest"], "unittest"),
    (["python3", "script.py", "-m", "x"], None),
    (["python3", "-c", "pass", "-m", "x"], None),
    (["python3", "-"], None),
    (["python3", "-m"], None),
    (["pytest", "-m", "slow"], None),
    ([], None),
])
def test_python_module_reads_the_interpreters_own_options(argv: list[str], module: str | None) -> None:
    assert python_module(argv) == module


def test_an_answer_that_is_not_one_item_per_program_is_refused() -> None:
    needs = [ProgramNeed("make", "make")]
    for output in ["", "Traceback ...\n", "[]\n", '[{"found": null}, {"found": null}]\n', '{"found": null}\n']:
        with pytest.raises(ValueError, match="no answer for 1 programs"):
            lookup_answer(output, needs)
    assert lookup_answer('noise\n[{"found": "/usr/bin/make"}]\n', needs) == [{"found": "/usr/bin/make"}]


def test_the_script_needs_only_the_standard_library_without_site() -> None:
    done = subprocess.run([sys.executable, "-I", "-S", "-c", LOOKUP_SCRIPT, "[]"], capture_output=True, text=True,
                          env={"PATH": os.defpath}, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "[]")
