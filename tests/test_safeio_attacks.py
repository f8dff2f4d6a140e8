"""The loop never acts through a path the agent controls: attacks through the real Claude Code CLI.

A scripted agent replaces a file the loop reads and writes (the task list, the progress log, the
``.ralph-active`` marker, ``.git/COMMIT_EDITMSG``, a reflog, a ref) with a symlink to a host file; the
tests check what a person would: the host file is untouched, its text never reaches the run directory
or the model, the project's files are regular files again, and the run says what happened.
Attack programs are built here as data and reach the CLI only as tool inputs (Write, then Bash).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, ScriptedModelServer
from ralph.testing.project import RalphProject, story

import test_trust_boundary_claude as _boundary
from test_trust_boundary_claude import RUNNERS, bash, done, write

# the fixtures: ``run_loop`` (ralph run with the real CLI), and the docker ones its sandbox cases request
run_loop, docker_client, gateway, sandbox_image, sandbox_project = (
    _boundary.run_loop, _boundary.docker_client, _boundary.gateway, _boundary.sandbox_image, _boundary.sandbox_project)

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]

SECRET = "export HOST_ONLY_SECRET=7f3a9c"
CANARY = f"# the person's shell rc\n{SECRET}\n"
FORGED = "touch /tmp/ralph-forged-by-the-agent"


def attack_program(*lines: str) -> str:
    """A Python program the agent writes and runs (``import os`` first)."""
    return "\n".join(["import json, os", *lines]) + "\n"


def illegal_transition_with_a_newline_key() -> list[str]:
    """Task-list edits the loop undoes (so it writes a note): a story approved in an implement iteration,
    and a top-level key whose name carries a line meant for a shell rc file."""
    return [
        "p = 'ralph/tasks.json'",
        "d = json.load(open(p))",
        "d['userStories'][0].update(reviewStatus='approved', passes=True, reviewCount=1)",
        f"d['x\\n{FORGED}\\n'] = 1",
        "open(p, 'w').write(json.dumps(d, indent=2) + '\\n')",
    ]


def run_dir_text(project: RalphProject) -> str:
    """Everything the last run wrote to its run directory, as text."""
    run_dir = project.run_dirs()[-1]
    return "\n".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())


def sent_to_model(server: ScriptedModelServer) -> str:
    return "\n".join(request.text for request in server.requests)


LOOP_FILES = {
    "tasks": "ralph/tasks.json",
    "progress": "ralph/progress.txt",
    "marker": ".ralph-active",
}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("which", sorted(LOOP_FILES))
def test_a_loop_file_replaced_by_a_symlink_to_a_host_file_is_never_followed(
    run_loop: Any, ralph_project: RalphProject, tmp_path: Path, runner: str, which: str
) -> None:
    project = ralph_project
    project.write_stories([story("US-001"), story("US-002", priority=2)])
    before = project.tasks_path.read_text()
    canary = tmp_path / "host-bashrc"
    canary.write_text(CANARY)
    name = LOOP_FILES[which]
    attack = attack_program(
        *(illegal_transition_with_a_newline_key() if which == "progress" else []),
        f"if os.path.lexists({name!r}): os.remove({name!r})",
        f"os.symlink({str(canary)!r}, {name!r})",
    )
    script = IterationScript({
        1: [write(project.path / "attack.py", attack), bash("python3 attack.py && rm attack.py"), done()],
        2: [done("Nothing to do.")],
    })
    result, server = run_loop(runner, script, "-n", "2")
    output = result.stdout + result.stderr

    assert result.returncode in (1, 2), output  # max iterations (or a clean stop): never a crash
    assert "internal error" not in output and "Traceback" not in output, output
    assert canary.read_text() == CANARY  # not overwritten, not appended to
    assert SECRET not in run_dir_text(project)  # not copied into the run directory ...
    assert SECRET not in sent_to_model(server)  # ... nor into any prompt or tool result the model saw
    assert FORGED not in canary.read_text()
    path = project.path / name
    assert not path.is_symlink()
    if which == "tasks":
        assert project.tasks_path.read_text() == before  # the loop's own copy went back
    if runner == "direct":
        replaced = project.events("loop_file_replaced")
        assert [(e["iteration"], e["path"], e["what"]) for e in replaced] == [(1, name, "a symlink")], output
        assert any(v["check"] == "unsafe-file" and name in v["message"] for v in project.events("violation"))
        assert f"{name} was a symlink" in output  # the console says it


def test_a_symlinked_ralph_folder_is_replaced_not_followed(
    run_loop: Any, ralph_project: RalphProject, tmp_path: Path
) -> None:
    """A symlink in a middle component: ``ralph/`` itself moved away and linked to a host directory."""
    project = ralph_project
    project.write_stories([story("US-001")])
    before = project.tasks_path.read_text()
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    (host_dir / "tasks.json").write_text(CANARY)
    (host_dir / "progress.txt").write_text(CANARY)
    attack = attack_program(
        "os.rename('ralph', 'moved-away')",
        f"os.symlink({str(host_dir)!r}, 'ralph')",
    )
    script = IterationScript({1: [write(project.path / "attack.py", attack), bash("python3 attack.py"), done()],
                              2: [done()]})
    result, server = run_loop("direct", script, "-n", "2")
    output = result.stdout + result.stderr

    assert result.returncode in (1, 2) and "internal error" not in output, output
    assert sorted(p.name for p in host_dir.iterdir()) == ["progress.txt", "tasks.json"]
    assert all(p.read_text() == CANARY for p in host_dir.iterdir())
    assert SECRET not in run_dir_text(project) and SECRET not in sent_to_model(server)
    assert not (project.path / "ralph").is_symlink() and project.tasks_path.read_text() == before
    assert [e["path"] for e in project.events("loop_file_replaced")] == ["ralph"]


GIT_ENTRIES = ["COMMIT_EDITMSG", "logs/HEAD", "logs/refs/heads/ralph/demo", "refs/heads/ralph/demo"]


@pytest.mark.parametrize("entry", GIT_ENTRIES)
def test_a_git_entry_replaced_by_a_symlink_stops_the_run_before_git_writes_through_it(
    run_loop: Any, ralph_project: RalphProject, tmp_path: Path, entry: str
) -> None:
    project = ralph_project
    project.write_stories([story("US-001")], branchName="ralph/demo")
    canary = tmp_path / "host-bashrc"
    canary.write_text(CANARY)
    target = f".git/{entry}"
    attack = attack_program(
        *illegal_transition_with_a_newline_key(),  # so the loop commits its repair (git commit)
        f"if os.path.lexists({target!r}): os.remove({target!r})",
        f"os.symlink({str(canary)!r}, {target!r})",
    )
    script = IterationScript({1: [write(project.path / "attack.py", attack), bash("python3 attack.py"), done()],
                              2: [done()]})
    result, server = run_loop("direct", script, "-n", "2")
    output = result.stdout + result.stderr

    assert canary.read_text() == CANARY, output  # no commit message, no reflog line written through the link
    assert result.returncode == 2, output
    last_line = result.stderr.strip().splitlines()[-1]
    assert f".git/{entry} is a symlink" in last_line and "removed" in last_line
    assert not (project.path / ".git" / entry).is_symlink()
    if entry.startswith("refs/"):  # the branch is put back as the message says (the reflog has its last value)
        assert "put the branch back with `git update-ref refs/heads/ralph/demo " in last_line
        project.git(*last_line.split("`git ")[1].split("`")[0].split())
    assert project.events("git_metadata_changed")
    assert SECRET not in sent_to_model(server)


def test_a_run_refuses_to_start_on_a_planted_reflog_link(ralph_project: RalphProject, tmp_path: Path) -> None:
    """A link an earlier agent left behind: nothing (not even the opening's stash or branch switch) runs git."""
    project = ralph_project
    project.write_stories([story("US-001")])
    canary = tmp_path / "host-bashrc"
    canary.write_text(CANARY)
    (project.path / "dirty.txt").write_text("the person's uncommitted work\n")  # the opening would stash it
    log = project.path / ".git" / "logs" / "HEAD"
    log.unlink()
    log.symlink_to(canary)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": [{"say": "done"}]}}))
    result = project.run("run", "--runner", "direct", "--agent", "replay", "-n", "1",
                         env={"RALPH_REPLAY_SCRIPT": str(script)})
    assert result.returncode == 2
    assert ".git/logs/HEAD is a symlink" in result.stderr and "rm .git/logs/HEAD" in result.stderr
    assert canary.read_text() == CANARY and log.is_symlink()  # the person's to look at: nothing changed


def test_ralph_archive_never_writes_through_a_ralph_archive_symlink(
    run_loop: Any, ralph_project: RalphProject, tmp_path: Path
) -> None:
    """The agent commits ``ralph-archive`` as a link to a host folder; the person's later ``ralph archive``."""
    from test_trust_loop_claude import approve, implement

    project = ralph_project
    project.write_stories([story("US-001")], branchName="ralph/demo")
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    plant = attack_program(f"os.symlink({str(host_dir)!r}, 'ralph-archive')")
    script = IterationScript({
        1: [write(project.path / "plant.py", plant), bash("python3 plant.py && rm plant.py"), *implement("US-001")],
        2: approve("US-001"),
    })
    result, _ = run_loop("direct", script, "-n", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project.path / "ralph-archive").is_symlink()
    before = {name: (project.ralph_dir / name).read_bytes() for name in ("prd.md", "tasks.json", "progress.txt")}

    archived = project.run("archive")
    assert archived.returncode == 2, archived.stdout + archived.stderr
    assert "ralph-archive is a symlink" in archived.stderr and "nothing was moved" in archived.stderr
    assert list(host_dir.iterdir()) == []  # nothing written outside the project
    assert {name: (project.ralph_dir / name).read_bytes() for name in before} == before
