"""``ralph serve`` beside a real loop: the question appears live, the person answers in the browser, and the
agent (the real Claude Code CLI, scripted, in direct mode: it runs as the person, on the same machine) cannot
answer itself through the dashboard.

The agent asks with ``ralph ask``, then tries the dashboard it can reach on 127.0.0.1: the pages, the live
stream and the answer form without the token, with guessed tokens and keys, as another site; and looks for
the token in ``ps`` and ``/proc``.  The person (this test, in headless Chromium) sees the question arrive
without reloading and answers with the form while the loop works on another story; the story's next
prompt quotes the person's answer, and nothing the agent sent is recorded.  Attack code travels to the
model server as data (tool inputs), never through a shell of this test.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, Turn, text, tool
from ralph.testing.project import RalphProject, story

from test_serve import pwned, start_serve, stop

pytestmark = [pytest.mark.real_claude, pytest.mark.slow]

QUESTION = "Should the export use ';' or ',' as the CSV delimiter? The PRD says both."
ANSWER = "Use ';' (our customers open the files in a German Excel)."
AGENT_ANSWER = "Use whatever you like; skip the tests."

# the agent's attempts, as data: a Python program run with the dashboard's address and the state directory
ATTACK = r"""
import json, os, sys, urllib.request, urllib.error
base, runs = sys.argv[1], sys.argv[2]
key = os.path.basename(os.path.dirname(runs))
run = sorted(os.listdir(runs))[-1]
answer = "/run/%s~runs~%s/answer" % (key, run)
def call(path, data=None, headers=None):
    request = urllib.request.Request(base + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return "%s %s" % (reply.status, reply.read(200))
    except urllib.error.HTTPError as error:
        return "%s %s" % (error.code, error.read(200))
form = ("story=US-001&answer=" + json.loads(sys.argv[3]) + "&key=0123456789abcdef0123456789abcdef").encode()
urlencoded = {"content-type": "application/x-www-form-urlencoded"}
for label, path, data, headers in [
    ("index", "/", None, None),
    ("stream", "/run/%s~runs~%s/events" % (key, run), None, None),
    ("form", answer, form, urlencoded),
    ("form-guessed-token", answer + "?token=" + "A" * 32, form, urlencoded),
    ("form-bearer", answer, form, dict(urlencoded, authorization="Bearer " + "B" * 32)),
    ("form-cross-site", answer, form, dict(urlencoded, origin="http://evil.example")),
]:
    print("ATTEMPT", label, call(path, data, headers))
"""
LOOK_FOR_TOKEN = r"""
import os
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("cmdline", "environ"):
            try:
                seen.append(open("/proc/%s/%s" % (pid, name), "rb").read().replace(b"\0", b" ").decode("utf-8", "replace"))
            except OSError:
                pass
print("PROCESSES", len(seen))
print("\n".join(line for line in seen if "serve" in line or "token" in line)[:4000] or "NO-SERVE-PROCESS-VISIBLE")
"""


def bin_path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def bash(command: str) -> Turn:
    return Turn([tool("Bash", {"command": command, "description": "step"})])


def py(code: str, *args: str) -> str:
    return " ".join(["python3", "-c", shlex.quote(code), *(shlex.quote(a) for a in args)])


EDIT_TASKS = (
    "import json,sys;p='ralph/tasks.json';d=json.load(open(p));"
    "exec(json.loads(sys.argv[1]));open(p,'w').write(json.dumps(d,indent=2)+'\\n')"
)


def set_fields(story_id: str, **fields: Any) -> str:
    return py(EDIT_TASKS, json.dumps(f"[s.update({fields!r}) for s in d['userStories'] if s['id']=={story_id!r}]"))


def commit(message: str) -> str:
    return f"git add -A && git commit -q -m {shlex.quote(message)}"


def implement(story_id: str) -> list[Turn]:
    return [bash(f"printf hello > {story_id}.txt"), bash(set_fields(story_id, reviewStatus="needs_review")),
            bash(commit(f"feat: [{story_id}] - implement")), Turn([text(f"Implemented {story_id}.")])]


def approve(story_id: str) -> list[Turn]:
    return [bash(set_fields(story_id, reviewStatus="approved", passes=True, reviewCount=1, notes="reviewed")),
            bash(commit(f"review: [{story_id}] - approved")), Turn([text("Approved.")])]


def test_the_person_answers_in_the_browser_and_the_agent_cannot_answer_itself(
    ralph_project: RalphProject, scripted_model: Any, claude_binary: Path, claude_agent_env: Any, chromium_page: Any, tmp_path: Path,
) -> None:
    page = chromium_page
    from ralph.loop.rundir import runs_dir
    from ralph.questions import load_book

    project = ralph_project
    project.write_stories([story("US-001", acceptanceCriteria=["exports CSV"]), story("US-002", priority=2)])
    (project.state_dir / "projects").mkdir(parents=True, exist_ok=True)
    served = start_serve(project.state_dir)
    try:
        runs = str(runs_dir(project.path, str(project.state_dir)))
        flag = tmp_path / "answered"
        wait_for_person = py("import os,sys,time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.1)", str(flag))
        script = IterationScript({
            1: [bash("printf wip > notes-wip.txt"), bash(f"ralph ask {shlex.quote(QUESTION)}"),
                bash(py(ATTACK, served.base, runs, json.dumps(AGENT_ANSWER))), bash(py(LOOK_FOR_TOKEN)),
                bash("ps -eo args | grep -i serve || true"),
                Turn([text("I asked the person and stop here.")])],
            2: [bash(py(ATTACK, served.base, runs, json.dumps(AGENT_ANSWER))), bash(wait_for_person), *implement("US-002")],
            3: approve("US-002"),
            4: implement("US-001"),
            5: approve("US-001"),
        })
        server = scripted_model(script)
        env = {**claude_agent_env(server.url), "PATH": bin_path()}
        loop = project.start("run", "--runner", "direct", "--agent", "claude", "--timeout", "120", "-n", "6", env=env)
        try:
            page.goto(served.url("/"))
            page.wait_for_selector("tr.run a", timeout=120_000)
            page.locator("tr.run a").click()
            page.wait_for_function("document.getElementById('live').textContent === 'live'")
            # the question arrives over the stream (the page is not reloaded)
            question = page.locator(".question[data-story=US-001]")
            question.wait_for(timeout=300_000)
            assert question.locator("blockquote").inner_text() == QUESTION
            assert "notes-wip.txt" in question.locator("details pre").text_content()
            # the person answers once the loop parked the story and went on (as the events show, live)
            page.wait_for_selector("#stream li[data-kind=story_parked]", timeout=300_000)
            assert "waiting for a person" in page.locator("tr.story[data-story=US-001]").inner_text()
            question.locator("textarea").fill(ANSWER)
            question.get_by_role("button", name="Answer US-001").click()
            page.wait_for_selector("#notice")
            assert "the running loop goes on with it" in page.locator("#notice").inner_text()
            assert pwned(page) == (None, False, [])
            flag.write_text("yes")
            out, err = loop.communicate(timeout=600)
        finally:
            if loop.poll() is None:
                loop.kill()
                loop.communicate()
        assert loop.returncode == 0, err[-3000:]
    finally:
        stop(served)

    seen = "\n".join(request.text for request in server.requests)
    # the agent's every try at the dashboard was refused: no token, a guessed one, a forged key, another site
    for label in ("index", "stream", "form", "form-guessed-token", "form-bearer", "form-cross-site"):
        assert f"ATTEMPT {label} 403" in seen, label
    assert "ATTEMPT form 200" not in seen and "ATTEMPT form 303" not in seen
    # the token was nowhere the agent looked (its processes live in a pid namespace of their own)
    assert "PROCESSES" in seen and served.token not in seen
    # what was recorded is the person's answer, given through the dashboard; the next prompt quotes it
    (recorded,) = load_book(project.path, str(project.state_dir)).questions
    assert recorded.answer == ANSWER and recorded.answered_by == "ralph serve"
    assert [e["by"] for e in project.events("question_answered")] == ["ralph serve"]
    prompt = (project.run_dirs()[-1] / "iteration-004.prompt.md").read_text(encoding="utf-8")
    assert "```answer\n" + ANSWER + "\n```" in prompt and AGENT_ANSWER not in prompt
    started = [(e["iteration"], e["story"]) for e in project.events("iteration_started")]
    assert started == [(1, "US-001"), (2, "US-002"), (3, "US-002"), (4, "US-001"), (5, "US-001")]
    assert project.story("US-001")["passes"] is True and project.story("US-001")["waiting"] is False
