"""Codex's own sandbox in direct mode, with and without a system bubblewrap (issue 24 item 4).

Codex runs the agent's commands through its helper ``codex-linux-sandbox`` inside bubblewrap: the
system's ``bwrap`` when ``PATH`` has one, else the one in the wheel.  A system bubblewrap older than
0.9.0 (Debian's 0.8.0) has no ``--argv0``, so Codex starts its helper through an alias it makes in
``$CODEX_HOME`` -- and refuses to when that home lies in the temporary directory, which the tests'
state directory does.  Every command then failed (``bwrap: execvp codex-linux-sandbox``) while each
iteration "finished" with exit 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript
from ralph.testing.project import RalphProject, story
from ralph.testing.requirements import require
from ralph.testing.scripting import approve_turns, bash_turns, implement_turns

from ralph_plugins.agents.codex_sandbox import AGENT_TMP, helper_placement


def path_without_bwrap(bin_dir: Path) -> str:
    """A PATH with every program of this one except ``bwrap`` (links in ``bin_dir``)."""
    bin_dir.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            target = bin_dir / name
            if name == "bwrap" or os.path.lexists(target):
                continue
            source = os.path.join(entry, name)
            if os.path.isfile(source) and os.access(source, os.X_OK):
                target.symlink_to(source)
    return str(bin_dir)


def run_loop(project: RalphProject, env: dict[str, str], *args: str) -> Any:
    return project.run("run", "--runner", "direct", "--agent", "codex", "--timeout", "120", *args, env=env)


def outputs(server: Any) -> list[str]:
    """Every command output Codex sent back to the model (``function_call_output``), in order."""
    seen: dict[str, str] = {}
    for request in server.requests:
        for item in request.input:
            if item.get("type") == "function_call_output":
                seen.setdefault(str(item.get("call_id")), str(item.get("output")))
    return list(seen.values())


# -- the loop progresses, with the system's bubblewrap and without one ---------------------------------


@pytest.mark.real_codex
@pytest.mark.parametrize("system_bwrap", ["installed", "absent"])
def test_codex_loop_progresses_with_and_without_system_bwrap(
    system_bwrap, ralph_project, scripted_responses, codex_binary, codex_agent_env, tmp_path
) -> None:
    env_extra: dict[str, str] = {}
    if system_bwrap == "installed":
        require(shutil.which("bwrap") is not None, "no system bubblewrap (apt-get install bubblewrap)")
    else:
        env_extra["PATH"] = path_without_bwrap(tmp_path / "bin-without-bwrap")
    ralph_project.write_stories([story("US-001", "Greeting file")])
    script = IterationScript({1: implement_turns("US-001", "hello.txt", "hello"), 2: approve_turns("US-001", 1)})
    server = scripted_responses(script)
    result = run_loop(ralph_project, {**codex_agent_env(server.url), **env_extra})

    assert result.returncode == 0, result.stderr + result.stdout
    assert (ralph_project.path / "hello.txt").read_text() == "hello"
    assert ralph_project.story("US-001")["passes"] is True
    assert not any("codex-linux-sandbox" in out for out in outputs(server)), outputs(server)
    # the state directory is under /tmp here: the agent's TMPDIR is its own, and /tmp is not writable
    assert "Refusing to create helper binaries" not in result.stderr


# -- the helper stays out of the sandbox's reach -------------------------------------------------------


@pytest.mark.real_codex
def test_the_agent_cannot_replace_codex_sandbox_helper(
    ralph_project, scripted_responses, codex_binary, codex_agent_env
) -> None:
    """An agent that has read Codex's source replaces the helper alias in CODEX_HOME with its own
    program: Codex would start it, outside the sandbox, for the next command.  The alias lies where
    the sandbox cannot write (a state directory under /tmp included), so the next command runs in
    the real sandbox and the agent's program never runs."""
    require(shutil.which("bwrap") is not None, "no system bubblewrap: Codex then needs no alias")
    escaped = ralph_project.path / "ESCAPED"
    probe = ralph_project.path.parent / "outside-probe"  # under /tmp, outside the project and the run
    fake = f"#!/bin/sh\necho escaped > {shlex.quote(str(escaped))}\nexec /bin/sh -c true\n"
    # the guards cannot see what a project script does: the sandbox is the boundary
    script_text = "\n".join([
        "import glob, os",
        f"FAKE = {fake!r}",
        "for f in glob.glob(os.path.join(os.environ['CODEX_HOME'], 'tmp', 'arg0*', '*', 'codex-linux-sandbox')):",
        "    print('HELPER', f)",
        "    try:",
        "        os.rename(f, f + '.real')",
        "        with open(f, 'w') as handle:",
        "            handle.write(FAKE)",
        "        os.chmod(f, 0o755)",
        "        print('REPLACED')",
        "    except OSError as exc:",
        "        print('REFUSED', exc)",
        "print('TMPDIR=' + os.environ.get('TMPDIR', ''))",
        "try:",
        f"    open({str(probe)!r}, 'w').close()",
        "    print('OUTSIDE-WRITABLE')",
        "except OSError as exc:",
        "    print('OUTSIDE', exc)",
    ]) + "\n"
    ralph_project.write_stories([story("US-001", "Greeting file")])
    steps = [f"printf %s {shlex.quote(script_text)} > swap.py", "python3 swap.py", "printf after > after.txt"]
    script = IterationScript({1: bash_turns(steps, say="Done.")})
    server = scripted_responses(script)
    result = run_loop(ralph_project, codex_agent_env(server.url), "-n", "1")

    assert result.returncode == 1, result.stderr + result.stdout  # max iterations: the story stays open
    _, swapped, _ = outputs(server)
    assert "HELPER" in swapped and "REFUSED" in swapped and "REPLACED" not in swapped, swapped
    assert "Read-only file system" in swapped, swapped
    assert not escaped.exists(), "Codex ran the agent's program as its sandbox helper"
    assert (ralph_project.path / "after.txt").read_text() == "after"  # the next command ran, sandboxed
    assert f"TMPDIR={ralph_project.state_dir}" in swapped and AGENT_TMP in swapped
    assert "OUTSIDE-WRITABLE" not in swapped and not probe.exists()


# -- where the helper goes ----------------------------------------------------------------------------


def test_helper_placement_outside_the_temporary_directory_changes_nothing(tmp_path) -> None:
    import tempfile

    # a home outside /tmp and outside TMPDIR (pytest's tmp_path is under /tmp on most machines)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="ralph-codex-home-") as outside:
        home = Path(outside)
        placement = helper_placement(home, {"TMPDIR": str(tmp_path / "elsewhere")}, "workspace-write")
        assert placement.env == {} and placement.overrides == [] and placement.why is None
        assert not (home / "agent-tmp").exists()


@pytest.mark.parametrize("sandbox, overrides", [
    ("workspace-write", [("sandbox_workspace_write.exclude_slash_tmp", True)]),
    ("read-only", []),
])
def test_a_home_under_tmpdir_gets_its_own_temporary_directory(tmp_path, sandbox, overrides) -> None:
    home = tmp_path / "run" / "agent-homes" / "codex"
    home.mkdir(parents=True)
    placement = helper_placement(home, {"TMPDIR": str(tmp_path)}, sandbox)
    assert placement.env == {"TMPDIR": str(home / AGENT_TMP)}
    assert placement.overrides == overrides
    assert (home / AGENT_TMP).is_dir() and oct((home / AGENT_TMP).stat().st_mode & 0o777) == "0o700"
    assert placement.why and str(home) in placement.why


def test_no_sandbox_needs_no_helper(tmp_path) -> None:
    home = tmp_path / "codex"
    home.mkdir()
    assert helper_placement(home, {"TMPDIR": str(tmp_path)}, "danger-full-access").env == {}


def test_a_link_in_place_of_the_agent_tmp_is_removed_never_followed(tmp_path) -> None:
    home, target = tmp_path / "codex", tmp_path / "precious"
    home.mkdir()
    target.mkdir()
    (home / AGENT_TMP).symlink_to(target)
    helper_placement(home, {"TMPDIR": str(tmp_path)}, "workspace-write")
    assert not (home / AGENT_TMP).is_symlink() and (home / AGENT_TMP).is_dir()
    assert target.is_dir()  # left alone


# -- ralph doctor / pre-flight: Codex's sandbox starts a command ----------------------------------------

FAKE_BWRAP = """#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = "--help" ]; then echo "usage: bwrap --as-pid-1 --perms --argv0"; exit 0; fi
done
echo "bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces" >&2
exit 1
"""


@pytest.mark.real_codex
def test_doctor_says_codex_sandbox_runs_a_command_and_in_which_bubblewrap(ralph_project, codex_binary) -> None:
    result = ralph_project.run("doctor", "--agent", "codex", "--runner", "direct", env={"OPENAI_API_KEY": "x"})
    line = next(line for line in result.stdout.splitlines() if "Codex's sandbox" in line)
    assert line.startswith("[ok  ] Codex's sandbox runs a command"), result.stdout
    system = shutil.which("bwrap")
    assert (f"the system's bubblewrap {Path(system).resolve()}" if system else "the bubblewrap bundled with Codex") in line


@pytest.mark.real_codex
def test_a_codex_sandbox_that_cannot_start_a_command_stops_the_run_before_iteration_1(
    ralph_project, scripted_responses, codex_binary, codex_agent_env, tmp_path
) -> None:
    """A bubblewrap that cannot make namespaces (a kernel or AppArmor without unprivileged user
    namespaces): every command of the agent would fail; the run says so before it pays for any."""
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    (fake_bin / "bwrap").write_text(FAKE_BWRAP)
    (fake_bin / "bwrap").chmod(0o755)
    ralph_project.write_stories([story("US-001")])
    server = scripted_responses(IterationScript({}))
    env = {**codex_agent_env(server.url), "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    result = run_loop(ralph_project, env, "-n", "3")

    assert result.returncode == 2, result.stderr + result.stdout
    assert "Codex's sandbox cannot run a command here" in result.stderr
    assert f"the system's bubblewrap {fake_bin / 'bwrap'}" in result.stderr
    assert "No permissions to create a new namespace" in result.stderr
    assert "danger-full-access" in result.stderr and "--runner docker-sandbox" in result.stderr
    assert server.requests == []  # no model call paid for


@pytest.mark.real_codex
def test_the_check_catches_a_helper_codex_refuses_to_make(codex_binary, tmp_path, monkeypatch) -> None:
    """Without the helper's placement (the code before this fix), a CODEX_HOME under /tmp and Debian's
    bubblewrap 0.8: the check fails with Codex's own error."""
    from ralph_plugins.agents import codex_sandbox
    from ralph_plugins.agents.codex_preflight import sandbox_check

    found = codex_sandbox.system_bubblewrap(os.environ, tmp_path)
    require(found is not None and not found[1], "needs a system bubblewrap without --argv0 (Debian 12's 0.8.0)")
    monkeypatch.setattr(codex_sandbox, "helper_placement", lambda *a: codex_sandbox.HelperPlacement())
    check = sandbox_check(codex_binary, "workspace-write", tmp_path)
    assert check is not None and check.ok is False
    assert "execvp codex-linux-sandbox: No such file or directory" in check.what
