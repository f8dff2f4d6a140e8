"""The person's branches are safe, end to end: a scripted agent (through the real Claude Code CLI)
moves HEAD, commits on the person's ``main``, rewinds another branch and prunes its objects; the
loop puts everything back (Trust boundary rule 8; ``ralph/loop/personrefs.py``).

The git commands are built here in Python and travel as JSON to the model server; they run in
the test's temporary project only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any, Callable

import pytest

from ralph.testing.model_server import IterationScript, Turn, text
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import bash_turn as bash, python_line as py

pytestmark = pytest.mark.real_claude

RUN_BRANCH = "ralph/feature"


def git_steps(*argvs: list[str]) -> str:
    """One Bash command running each git argv in turn (from Python: as an agent would script it)."""
    code = "import json,subprocess,sys\nfor a in json.loads(sys.argv[1]): subprocess.run(['git', *a], check=False)"
    return py(code, [list(a) for a in argvs])


EDIT_TASKS = (
    "import json,sys;p='ralph/tasks.json';d=json.load(open(p));"
    "exec(json.loads(sys.argv[1]));open(p,'w').write(json.dumps(d,indent=2)+'\\n')"
)


def set_fields(story_id: str, **fields: Any) -> str:
    return py(EDIT_TASKS, f"[s.update({fields!r}) for s in d['userStories'] if s['id']=={story_id!r}]")


def implement(story_id: str, *extra: str) -> list[Turn]:
    return [
        bash(f"printf hello > {story_id}.txt"),
        bash(set_fields(story_id, reviewStatus="needs_review")),
        bash(f"git add -A && git commit -q -m {shlex.quote('feat: [' + story_id + '] - implement')}"),
        *(bash(command) for command in extra),
        Turn([text(f"Implemented {story_id}.")]),
    ]


def run_loop(project: RalphProject, url: str, env_factory: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return project.run("run", "--runner", "direct", "--agent", "claude", "--timeout", "120", *args, env=env_factory(url), timeout=600)


def sha(project: RalphProject, rev: str) -> str:
    return project.git("rev-parse", rev).strip()


RUNNERS = ["direct", pytest.param("docker-sandbox", id="sandbox", marks=pytest.mark.slow)]


@pytest.fixture
def loop_in(request: pytest.FixtureRequest, ralph_project: RalphProject, scripted_model: Any, claude_binary: Any,
            claude_agent_env: Any) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``result = loop_in(runner, script, *args)``: ``ralph run`` with the real CLI, in ``runner``."""

    def run(runner: str, script: IterationScript, *args: str) -> subprocess.CompletedProcess[str]:
        host = "127.0.0.1"
        if runner == "docker-sandbox":
            request.getfixturevalue("sandbox_project")
            host = request.getfixturevalue("gateway")
            section = '[docker-sandbox]\nnetwork = "allowlist"\nenv = ["CLAUDE_CODE_MAX_RETRIES", "API_TIMEOUT_MS"]\n'
            (ralph_project.path / "ralph.toml").write_text(section)
            ralph_project.commit_all("sandbox config")
        server = scripted_model(script, host=host)
        return ralph_project.run("run", "--runner", runner, "--agent", "claude", "--timeout", "180", *args,
                                 env=claude_agent_env(server.url), timeout=900)

    return run


# the docker fixtures, for the sandbox cases (requested lazily above)
import test_docker_sandbox as _docker  # noqa: E402

docker_client, gateway, sandbox_image, sandbox_project = (
    _docker.docker_client, _docker.gateway, _docker.sandbox_image, _docker.sandbox_project)


@pytest.mark.parametrize("runner", RUNNERS)
def test_checkout_main_and_commit_leaves_main_untouched_and_head_on_the_run_branch(
    ralph_project: RalphProject, loop_in: Any, runner: str
) -> None:
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2)], branchName=RUN_BRANCH)
    landing = [
        git_steps(["checkout", "-q", "main"]),
        set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="approved on main"),
        "printf work > on-main.txt && git add -A && git commit -q -m 'approve US-001 on main'",
    ]
    script = IterationScript({1: implement("US-001", *landing), 2: [Turn([text("Looking around.")])]})
    result = loop_in(runner, script, "-n", "2")

    assert result.returncode == 1, result.stderr  # not complete
    assert "approve US-001 on main" not in ralph_project.git("log", "--format=%s", "main")
    main_before = json.loads((ralph_project.run_dirs()[-1] / "refs.json").read_text())["protected"]["refs/heads/main"]
    assert sha(ralph_project, "main") == main_before  # the person's main: not one commit more
    assert ralph_project.git("symbolic-ref", "HEAD").strip() == f"refs/heads/{RUN_BRANCH}"
    assert ralph_project.story("US-001")["passes"] is False
    if runner != "direct":  # the agent's own checkout holds no branch of the person's (no "main" to check out):
        # what it committed comes back as the run branch's work, the approval undone
        assert ralph_project.story("US-001").get("reviewStatus") != "approved"
        assert not ralph_project.events("refs_restored") and not ralph_project.events("head_restored")
        assert "approve US-001 on main" in ralph_project.git("log", "--format=%s", RUN_BRANCH)
        return
    assert ralph_project.story("US-001")["reviewStatus"] == "needs_review"  # the work on the run branch stands
    assert not (ralph_project.path / "on-main.txt").exists()
    (head,) = ralph_project.events("head_restored")
    assert head["iteration"] == 1 and head["how"] == "moved" and head["saved"]
    (refs,) = ralph_project.events("refs_restored")
    assert [(r["ref"], r["was"]) for r in refs["refs"]] == [("refs/heads/main", main_before)]
    assert refs["refs"][0]["kept_as"]  # where the agent had moved main is kept, outside the project
    checks = {v["check"] for v in ralph_project.events("violation") if v["iteration"] == 1}
    assert {"run-branch", "person-refs"} <= checks
    prompt2 = (ralph_project.run_dirs()[-1] / "iteration-002.prompt.md").read_text(encoding="utf-8")
    assert "never check out another branch" in prompt2
    assert ralph_project.git("status", "--porcelain") == ""


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_rewound_and_pruned_branch_gets_the_persons_commit_back(
    ralph_project: RalphProject, loop_in: Any, runner: str
) -> None:
    ralph_project.write_stories([story("US-001")], branchName=RUN_BRANCH)
    ralph_project.git("checkout", "-q", "-b", "experiment")
    (ralph_project.path / "idea.txt").write_text("my unpushed idea\n")
    ralph_project.commit_all("my unpushed idea")
    mine = sha(ralph_project, "experiment")
    ralph_project.git("tag", "v1", mine)
    ralph_project.git("checkout", "-q", "main")
    destroy = git_steps(
        ["update-ref", "refs/heads/experiment", "main"],
        ["tag", "-d", "v1"],
        ["reflog", "expire", "--expire=now", "--all"],
        ["gc", "-q", "--prune=now"],
    )
    gone = py("import subprocess,sys; sys.exit(subprocess.run(['git','cat-file','-e',sys.argv[1].strip('\"')]).returncode == 0)",
              mine)
    script = IterationScript({1: implement("US-001", destroy, gone + " && echo DESTROYED > destroyed.flag")})
    result = loop_in(runner, script, "-n", "1")

    assert result.returncode == 1, result.stderr
    # the attack really ran inside the iteration (the flag came back with the work)...
    assert "DESTROYED" in (ralph_project.path / "destroyed.flag").read_text()
    # ... and the person's branch and tag point at their commit (again)
    assert sha(ralph_project, "experiment") == mine and sha(ralph_project, "v1^{commit}") == mine
    assert ralph_project.git("show", f"{mine}:idea.txt") == "my unpushed idea\n"
    if runner != "direct":  # the agent's own checkout never had the person's branch: nothing to put back
        assert not ralph_project.events("refs_restored")
        assert ralph_project.story("US-001")["reviewStatus"] == "needs_review"
        return
    (restored,) = ralph_project.events("refs_restored")
    assert sorted(r["ref"] for r in restored["refs"]) == ["refs/heads/experiment", "refs/tags/v1"]
    assert restored["failed"] == []
    recorded = json.loads((ralph_project.run_dirs()[-1] / "refs.json").read_text())
    assert recorded["protected"]["refs/heads/experiment"] == mine and recorded["run_branch"] == f"refs/heads/{RUN_BRANCH}"
    assert any(v["check"] == "person-refs" for v in ralph_project.events("violation"))
    assert ralph_project.story("US-001")["reviewStatus"] == "needs_review"  # the honest part of the work stands


def test_a_rewritten_run_branch_keeps_the_accepted_history(
    ralph_project, scripted_model, claude_binary, claude_agent_env
) -> None:
    ralph_project.write_stories([story("US-001")], branchName=RUN_BRANCH)
    start = sha(ralph_project, "main")
    approve_and_squash = [
        bash(set_fields("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok")),
        bash(git_steps(["add", "-A"], ["reset", "-q", "--soft", start], ["commit", "-q", "-m", "squashed history"],
                       ["reflog", "expire", "--expire=now", "--all"], ["gc", "-q", "--prune=now"])),
        Turn([text("Approved.")]),
    ]
    script = IterationScript({1: implement("US-001"), 2: approve_and_squash})
    server = scripted_model(script)
    run_loop(ralph_project, server.url, claude_agent_env, "-n", "2")

    (fixed,) = ralph_project.events("head_restored")
    assert fixed["how"] == "rewritten" and fixed["iteration"] == 2
    # iteration 1's commit is still in the branch's history; the agent's tree is on top of it
    log = ralph_project.git("log", "--format=%s", RUN_BRANCH)
    assert "feat: [US-001] - implement" in log and "rewrote the run's history" in log
    assert (ralph_project.path / "US-001.txt").read_text() == "hello"
    assert ralph_project.story("US-001")["reviewStatus"] == "approved"  # the review itself stands
    assert any(v["check"] == "run-branch" and v["iteration"] == 2 for v in ralph_project.events("violation"))


MOVE_IN_PLACE = """
import os, subprocess
path = '.git/refs/heads/main'
other = subprocess.run(['git', 'commit-tree', 'HEAD^{tree}', '-p', 'HEAD', '-m', 'elsewhere'],
                       capture_output=True, text=True, check=True).stdout.strip()
before = os.stat(path)
with open(path, 'r+') as handle:
    handle.write(other + '\\n')
os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
after = os.stat(path)
assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
open('moved.flag', 'w').write(other)
"""


def test_a_branch_moved_in_place_with_its_size_and_mtime_kept_is_put_back(
    ralph_project, scripted_model, claude_binary, claude_agent_env
) -> None:
    """The ref guard reuses its last ``for-each-ref`` listing while the stat key of everything it came from is the
    same (``ralph/loop/refkey.py``).  Iteration 1 waits past the key's 2-second window (the checks' listing is keyed
    and reused); in iteration 2 the agent rewrites the person's ``main`` in place to another commit, puts its mtime
    back and waits again: the file's ctime, which no process can set, changed the key, git read the refs again and
    ``main`` is back."""
    ralph_project.write_stories([story("US-001")], branchName=RUN_BRANCH)
    main = sha(ralph_project, "main")
    script = IterationScript({
        1: [bash("sleep 3"), Turn([text("Looking around.")])],
        2: [bash(py(MOVE_IN_PLACE)), bash("sleep 3"), Turn([text("Done.")])],
    })
    server = scripted_model(script)
    result = run_loop(ralph_project, server.url, claude_agent_env, "-n", "2")

    assert result.returncode == 1, result.stderr
    other = (ralph_project.path / "moved.flag").read_text()  # the attack ran
    assert other != main and sha(ralph_project, "main") == main
    (restored,) = ralph_project.events("refs_restored")
    assert restored["iteration"] == 2 and restored["refs"][0]["ref"] == "refs/heads/main"
    assert restored["refs"][0]["moved_to"] == other and restored["failed"] == []
