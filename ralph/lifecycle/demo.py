"""``ralph demo``: a real loop on a small example project, with a scripted model.

No credentials and no network: the real Claude Code CLI (when installed; or,
with ``--agent codex``, the real OpenAI Codex CLI) talks to ralph's scripted
local model server, otherwise the replay agent acts out the same steps.  Either way the loop, its validators, git and the
review cycle are real; only the model's decisions are scripted.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from ralph.scripted.scripting import commit_command, set_fields_command
from ralph.scripted.stories import story

GREET_BUGGY = 'def greet(name):\n    return "Hello " + name\n'
GREET_FIXED = 'def greet(name: str) -> str:\n    """Greet someone by name."""\n    return f"Hello, {name}!"\n'
TEST_GREET = 'from greet import greet\n\n\ndef test_greet():\n    assert greet("Ada") == "Hello, Ada!"\n'

STORY = story(
    "US-001",
    "greet() says hello",
    description="A greet(name) function for the welcome banner.",
    acceptanceCriteria=['greet("Ada") returns "Hello, Ada!"', "greet has type hints and a docstring"],
)

FEEDBACK = 'greet("Ada") returns "Hello Ada" (missing comma and "!"); add type hints and a docstring.'


def _write(path: str, content: str) -> str:
    import shlex

    return f"printf %s {shlex.quote(content)} > {path}"


def demo_steps() -> dict[int, tuple[list[str], str]]:
    """Per iteration: the shell steps the scripted model takes and what it says."""
    return {
        1: (
            [
                _write("greet.py", GREET_BUGGY),
                _write("test_greet.py", TEST_GREET),
                set_fields_command("US-001", reviewStatus="needs_review"),
                'printf "\\n## Iteration 1 (implement) US-001\\n- added greet.py\\n" >> ralph/progress.txt',
                commit_command("feat: [US-001] - greet() says hello"),
            ],
            "Implemented greet() and a test; submitted US-001 for review.",
        ),
        2: (
            [
                set_fields_command("US-001", reviewStatus="changes_requested", reviewCount=1, reviewFeedback=FEEDBACK),
                'printf "\\n## Iteration 2 (review) US-001\\n- changes requested\\n" >> ralph/progress.txt',
                commit_command("review: [US-001] - changes requested"),
            ],
            "Review: the greeting misses punctuation and type hints. Changes requested.",
        ),
        3: (
            [
                _write("greet.py", GREET_FIXED),
                set_fields_command("US-001", reviewStatus="needs_review", reviewFeedback=""),
                'printf "\\n## Iteration 3 (review-fix) US-001\\n- fixed punctuation, added hints\\n" >> ralph/progress.txt',
                commit_command("fix: [US-001] - address review feedback"),
            ],
            "Addressed every review item; back to review.",
        ),
        4: (
            [
                set_fields_command(
                    "US-001", reviewStatus="approved", passes=True, reviewCount=2, notes="greet() verified by review 2"
                ),
                'printf "\\n## Iteration 4 (review) US-001\\n- approved\\n" >> ralph/progress.txt',
                commit_command("review: [US-001] - approved"),
            ],
            "Every criterion verified. Approved. <promise>COMPLETE</promise>",
        ),
    }


def prepare_project(path: Path) -> None:
    """A git repository with ``ralph init`` done and the one-story task list."""
    from ralph.lifecycle.init import init_project

    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        from ralph.errors import UsageError

        raise UsageError(f"{path} is not empty; give `ralph demo --dir` a new or empty directory")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    init_project(path, name="greeting")
    tasks_path = path / "ralph" / "tasks.json"
    data = json.loads(tasks_path.read_text(encoding="utf-8"))
    data.update(description="A friendlier welcome banner.", userStories=[STORY])
    tasks_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "ralph init: greeting demo"], cwd=path, check=True)


def demo_environment() -> dict[str, str]:
    """A git identity for the demo's commits (the user's, when set).

    The run is recorded in the usual state directory, like any project's, so the closing
    ``ralph status -d <project>`` finds it.
    """
    env = {}
    for key, value in (("GIT_AUTHOR_NAME", "Ralph Demo"), ("GIT_AUTHOR_EMAIL", "ralph-demo@localhost")):
        env[key] = os.environ.get(key, value)
        env[key.replace("AUTHOR", "COMMITTER")] = os.environ.get(key.replace("AUTHOR", "COMMITTER"), value)
    return env


def ralph_command_hint() -> tuple[str, str | None]:
    """How to call ``ralph`` in the printed hints, and a note when it is not on PATH (a venv not activated)."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "ralph"
    found = shutil.which("ralph")
    if found and (not beside.exists() or Path(found).resolve() == beside.resolve()):
        return "ralph", None
    if beside.exists():
        return str(beside), (
            f"`ralph` is not on your PATH; it is {beside} (or activate its venv: "
            f"source {beside.parent / 'activate'})"
        )
    return "ralph", None


def _scripted_server(
    server_class: Callable[[Any], Any], env_of: Callable[[str, Path], dict[str, str]], home: Path,
    steps: dict[int, tuple[list[str], str]],
) -> Any:
    """Start a scripted model server acting out ``steps`` and point the agent CLI at it
    (``env_of(url, home)`` into this process's environment, with a fresh ``home``)."""
    from ralph.scripted.model_server import IterationScript
    from ralph.scripted.scripting import bash_turns

    server = server_class(IterationScript({n: bash_turns(cmds, say) for n, (cmds, say) in steps.items()})).start()
    home.mkdir()
    os.environ.update(env_of(server.url, home))
    return server


def replay_note(chosen: bool) -> str:
    """What the demo says when the replay agent acts out the model's moves (``chosen``: ``--agent replay``)."""
    if chosen:
        return "ralph demo: the scripted replay agent acts out the model's moves. The loop, checks and git are real."
    return ("ralph demo: no Claude Code CLI found, so the scripted replay agent acts out the model's moves "
            "(pip install claude-agent-sdk to see the real CLI). The loop, checks and git are real.")


def run_demo(directory: Path | None, agent: str, echo: Any) -> int:
    """Run the demo loop; returns the loop's exit code."""
    requested = agent
    from ralph.session import open_session

    from ralph.claude_cli import resolve_binary

    import shutil

    from ralph.loop.rundir import state_root

    # where `ralph status` will look, settled before the scripted CLI's environment changes HOME
    state_dir = str(state_root())
    work = Path(tempfile.mkdtemp(prefix="ralph-demo-"))
    project = (directory or work / "greeting").resolve()
    binary, source = resolve_binary() if agent in ("auto", "claude") else (None, None)
    if agent == "auto":
        agent = "claude" if binary is not None else "replay"
    os.environ.update(demo_environment())
    try:
        prepare_project(project)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise

    steps = demo_steps()
    server: Any = None
    if agent == "claude":
        from ralph.scripted.model_server import ScriptedModelServer, claude_env

        server = _scripted_server(ScriptedModelServer, claude_env, work / "claude-home", steps)
        echo(f"ralph demo: the real Claude Code CLI ({binary}, found via {source}) talks to a SCRIPTED local "
             f"model server at {server.url}: the model's moves are scripted, everything else is real. "
             "Costs shown are computed by the CLI from the scripted token counts; nothing is billed.")
    elif agent == "codex":
        from ralph.config import RalphConfig
        from ralph.plugin.manager import PluginHost
        from ralph.settings import Settings

        from ralph.errors import UnavailableError
        from ralph.scripted.responses_server import ScriptedResponsesServer, codex_env

        # the codex agent plugin finds its CLI (config, RALPH_CODEX_BINARY, PATH, the wheel)
        codex_agent = PluginHost().agents.get("codex")(Settings(project_dir=project, config=RalphConfig()))
        codex, codex_source = codex_agent.resolve_binary()
        if codex is None:
            raise UnavailableError("ralph demo --agent codex: the Codex CLI was not found (pip install openai-codex-cli-bin)")
        server = _scripted_server(ScriptedResponsesServer, codex_env, work / "codex-user-home", steps)
        echo(f"ralph demo: the real Codex CLI ({codex}, found via {codex_source}) talks to a SCRIPTED local "
             f"Responses API server at {server.url}: the model's moves are scripted, everything else is real "
             "(Codex reports tokens, not cost). Nothing is billed.")
    else:
        from ralph.scripted.scripting import replay_actions

        script_path = work / "replay-script.json"
        script_path.write_text(
            json.dumps({"iterations": {str(n): replay_actions(cmds, say) for n, (cmds, say) in steps.items()}})
        )
        os.environ["RALPH_REPLAY_SCRIPT"] = str(script_path)
        echo(replay_note(chosen=requested == "replay"))
    echo(f"ralph demo: project {project}\n")
    try:
        session = open_session(project, {"runner": "direct", "agent": agent, "max_iterations": 8, "timeout": 300,
                                         "state_dir": state_dir})
        result = session.build_loop().run()
    finally:
        if server is not None:
            server.stop()
        # the scripted CLI's home and the replay script are of no use afterwards; the project is
        for leftover in (work / "claude-home", work / "codex-user-home", work / "replay-script.json"):
            shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        if directory is not None:
            shutil.rmtree(work, ignore_errors=True)
    log = subprocess.run(["git", "log", "--format=  %h %s"], cwd=project, capture_output=True, text=True).stdout
    echo(f"\nCommits the loop produced:\n{log}")
    ralph, note = ralph_command_hint()
    echo(f"Look around: cd {project} && git log -p; {ralph} status -d {project}; {ralph} report -d {project}")
    if note:
        echo(note)
    if directory is None:
        echo(f"The example project is kept in {work} so you can look around; remove it with: rm -rf {work}")
    return result.exit_code
