"""``ralph serve``: the live dashboard, as a person (in headless Chromium) and an attacker (plain HTTP) meet it.

Every test starts ``ralph serve`` as a real process on a free port of 127.0.0.1 over a state directory
of its own: recorded runs written here (hostile text in every field an agent can reach), or a real
``ralph run`` going on beside it.  The browser tests drive the system's Chromium through Playwright;
without it they skip (CI=true makes that a failure).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from ralph.testing.project import RalphProject, ralph_command, story
from ralph.testing.requirements import require

PROJECT_KEY = "shop-0123456789"
RUN = "20260101-120000-4242"
RUN_ID = f"{PROJECT_KEY}~runs~{RUN}"

# what an agent could put wherever it can write: its text, a story title (the task list), a command's output
XSS_IMG = '<img src=x onerror="window.__pwned=1;document.title=\'pwned\'">'
XSS_SCRIPT = "</pre></details><script>window.__pwned=2;document.title='pwned'</script>"
XSS_TITLE = "Login <script>window.__pwned=3</script> form"
CONTROL_TITLE = "Checkout\x1b[2J\x1b]52;c;cHduZWQ=\x07 \u202eflow"  # clears a terminal, writes a clipboard, flips text
XSS_QUESTION = 'Which colour? <a href="javascript:window.__pwned=4">click</a> <svg onload="window.__pwned=5">'


@dataclass
class Served:
    """A running ``ralph serve``: its base URL, token and process."""

    base: str
    token: str
    process: subprocess.Popen[str]
    first_lines: list[str]

    def url(self, path: str, **params: str) -> str:
        query = "&".join(f"{k}={quote(v)}" for k, v in {"token": self.token, **params}.items())
        return f"{self.base}{path}?{query}"


def start_serve(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> Served:
    """``ralph serve --port 0 --state-dir STATE_DIR ARGS`` started; returns once it printed its address."""
    import importlib.util

    missing = [name for name in ("jinja2", "sse_starlette") if importlib.util.find_spec(name) is None]
    require(not missing, f"the serve extra is not installed ({', '.join(missing)}): pip install -e '.[test]'")
    process = subprocess.Popen(
        [*ralph_command(), "serve", "--port", "0", "--state-dir", str(state_dir), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    second = process.stdout.readline()
    if not first.startswith("ralph serve: http://"):
        process.kill()
        raise AssertionError(f"ralph serve did not start: {first!r} {process.communicate()[1][-2000:]}")
    address = first.split(": ", 1)[1].strip()
    base, _, token = address.partition("/?token=")
    return Served(base, token, process, [first, second])


def stop(served: Served) -> int:
    """Ctrl-C for the server; its exit code."""
    if served.process.poll() is None:
        served.process.send_signal(signal.SIGINT)
        try:
            served.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            served.process.kill()
            served.process.wait()
            raise AssertionError("ralph serve did not stop on Ctrl-C") from None
    return served.process.returncode


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    (root / "projects").mkdir(parents=True)
    return root


@pytest.fixture
def served(state_dir: Path) -> Iterator[Served]:
    server = start_serve(state_dir)
    yield server
    stop(server)


# -- a recorded run, hostile text included ---------------------------------------------------


def event(kind: str, **payload: Any) -> dict[str, Any]:
    return {"ts": "2026-01-01T12:00:05", "kind": kind, **payload}


def recorded_run(state_dir: Path, project_dir: Path, finished: bool = True) -> Path:
    """A run directory as the loop writes it: two stories, a failed gate, a question, agent text."""
    run_dir = state_dir / "projects" / PROJECT_KEY / "runs" / RUN
    run_dir.mkdir(parents=True)
    stories = [
        {"id": "US-001", "title": XSS_TITLE, "passes": True, "reviewStatus": "approved", "reviewCount": 1,
         "autoApproved": False, "failed": False, "failureReason": ""},
        {"id": "US-002", "title": CONTROL_TITLE, "passes": False, "reviewStatus": "", "reviewCount": 0,
         "autoApproved": False, "failed": False, "failureReason": ""},
    ]
    gate_log = run_dir / "iteration-002.gate-tests.txt"
    gate_log.write_text("FAILED test_checkout\n" + XSS_SCRIPT + "\n" + XSS_IMG + "\n[exit 1]\n")
    events = [
        event("run_started", project=str(project_dir), run_dir=str(run_dir), runner="direct", agent="claude",
              review_agent="claude", policy="review", max_iterations=10, review_cap=5, stories=2, stories_done=0),
        event("story_states", stories=[{**s, "passes": False, "reviewStatus": ""} for s in stories], done=0),
        event("iteration_started", iteration=1, max_iterations=10, mode="implement", story="US-001",
              reason="highest priority", cost_so_far=0.0, agent="claude", model="sonnet"),
        event("agent_event", iteration=1, type="text", text="I will now say " + XSS_IMG, data={}),
        event("agent_event", iteration=1, type="tool_use", text="", data={"name": "Bash", "input": {"command": XSS_SCRIPT}}),
        event("iteration_finished", iteration=1, mode="implement", story="US-001", exit_code=0, timed_out=False,
              seconds=12.5, cost=0.25, usage={"input": 1000, "cache_read": 200, "cache_write": 100, "output": 300},
              cost_so_far=0.25, violations=0, undone=[]),
        event("gate", iteration=1, story="US-001", gate="tests", passed=True, hard=True, exit_code=0, timed_out=False,
              seconds=1.0, output="1 passed", log=None),
        event("story_states", stories=stories, done=1),
        event("iteration_started", iteration=2, max_iterations=10, mode="implement", story="US-002",
              reason="next", cost_so_far=0.25, agent="claude", model="sonnet"),
        event("question_asked", iteration=2, story="US-002", mode="implement", id=f"{RUN}/2.1", question=XSS_QUESTION,
              title=CONTROL_TITLE, tools=["Write " + XSS_IMG, "Bash ralph ask ..."], answer_with='ralph answer US-002 "ANSWER"'),
        event("story_parked", iteration=2, story="US-002", ids=[f"{RUN}/2.1"]),
        event("iteration_finished", iteration=2, mode="implement", story="US-002", exit_code=0, timed_out=False,
              seconds=20.0, cost=0.5, usage={"input": 2000, "cache_read": 0, "cache_write": 0, "output": 500},
              cost_so_far=0.75, violations=0, undone=[]),
        event("gate", iteration=2, story="US-002", gate="tests", passed=False, hard=True, exit_code=1, timed_out=False,
              seconds=2.0, output="FAILED test_checkout\n" + XSS_SCRIPT + "\n" + XSS_IMG, log=str(gate_log)),
        event("gate_failed", iteration=2, story="US-002", gate="tests", exit_code=1, timed_out=False, sent_back=[],
              excerpt="FAILED test_checkout\n" + XSS_SCRIPT, left_out=0, log=str(gate_log)),
    ]
    if finished:
        events.append(event("run_finished", exit_code=1, reason="max iterations (2) reached", iterations=2, cost_usd=0.75,
                            stories=stories, records=[], usage={}))
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    write_book(state_dir / "projects" / PROJECT_KEY, [
        {"id": f"{RUN}/2.1", "story": "US-002", "iteration": 2, "mode": "implement", "question": XSS_QUESTION,
         "asked_at": "2026-01-01T12:00:05Z", "run": RUN, "context": {"title": CONTROL_TITLE, "tools": ["Write " + XSS_IMG]}},
    ])
    if finished:
        (run_dir / "summary.json").write_text(json.dumps({
            "exit_code": 1, "reason": "max iterations (2) reached", "iterations": 2, "cost_usd": 0.75, "stories": stories,
            "records": [], "usage": {"input": 3000, "cache_read": 200, "cache_write": 100, "output": 800}, "elapsed": 40.0,
        }))
    return run_dir


def write_book(project_state: Path, questions: list[dict[str, Any]]) -> None:
    """The project's question book (questions.json), as ``ralph ask`` leaves it."""
    from ralph.questions import Question, QuestionBook

    book = QuestionBook([q for q in (Question.from_dict(entry) for entry in questions) if q is not None])
    (project_state / "questions.json").write_text(book.render())


# -- the door: token, host, forms, addresses --------------------------------------------------


def test_it_listens_on_loopback_prints_its_address_once_and_stops_on_ctrl_c(served: Served) -> None:
    assert served.base.startswith("http://127.0.0.1:")
    assert len(served.token) >= 16
    assert "Ctrl-C" in served.first_lines[1]
    assert httpx.get(served.url("/"), timeout=10).status_code == 200
    assert stop(served) == 0
    rest = served.process.stdout.read() if served.process.stdout else ""
    assert served.token not in rest  # printed once


def test_every_request_without_the_token_is_refused(served: Served, state_dir: Path, tmp_path: Path) -> None:
    recorded_run(state_dir, tmp_path / "shop")
    paths = ["/", "/stream", f"/run/{RUN_ID}", f"/run/{RUN_ID}/events", f"/run/{RUN_ID}/report",
             f"/run/{RUN_ID}/gate/iteration-002.gate-tests.txt", "/static/dashboard.js", "/nothing"]
    with httpx.Client(timeout=10) as client:
        for path in paths:
            for query in ("", "?token=", "?token=" + served.token[:-1], "?token=" + served.token + "x"):
                answer = client.get(served.base + path + query)
                assert answer.status_code == 403, (path, query, answer.status_code)
                assert "needs its token" in answer.text and "FAILED" not in answer.text
            assert client.get(served.base + path, headers={"authorization": "Bearer nope-nope-nope-nope"}).status_code == 403
        refused = client.post(served.base + f"/run/{RUN_ID}/answer", data={"story": "US-002", "answer": "blue"})
        assert refused.status_code == 403
        # with it: in the query, or as a bearer token
        assert client.get(served.url(f"/run/{RUN_ID}")).status_code == 200
        assert client.get(served.base + f"/run/{RUN_ID}", headers={"authorization": f"Bearer {served.token}"}).status_code == 200


def test_other_hosts_cross_site_forms_and_unknown_runs_are_refused(served: Served, state_dir: Path, tmp_path: Path) -> None:
    run_dir = recorded_run(state_dir, tmp_path / "shop")
    outside = tmp_path / "secret.txt"
    outside.write_text("the person's secret\n")
    (run_dir / "iteration-003.gate-tests.txt").symlink_to(outside)
    with httpx.Client(timeout=10) as client:
        # a DNS-rebinding page reaches 127.0.0.1 under its own name
        rebound = client.get(served.url("/"), headers={"host": "attacker.example:" + served.base.rsplit(":", 1)[1]})
        assert rebound.status_code == 421
        form = {"story": "US-002", "answer": "blue", "key": "x"}
        for headers in ({"origin": "http://attacker.example"}, {"sec-fetch-site": "cross-site"}):
            answer = client.post(served.url(f"/run/{RUN_ID}/answer"), data=form, headers=headers)
            assert answer.status_code == 403 and "another site" in answer.text
        assert client.post(served.url(f"/run/{RUN_ID}/answer"), data=form).status_code == 403  # the form's key
        for path in (f"/run/{PROJECT_KEY}~runs~..~..~..", f"/run/..~..~{PROJECT_KEY}~runs~{RUN}", "/run/x~runs~y",
                     f"/run/{RUN_ID}/gate/summary.json", f"/run/{RUN_ID}/gate/..%2f..%2fsecret.txt",
                     f"/run/{RUN_ID}/gate/iteration-003.gate-tests.txt", "/static/..%2fprd.md"):
            answer = client.get(served.url(path))
            assert answer.status_code == 404, (path, answer.status_code)
            assert "secret" not in answer.text
        whole = client.get(served.url(f"/run/{RUN_ID}/gate/iteration-002.gate-tests.txt"))
        assert whole.status_code == 200 and whole.text.startswith("FAILED test_checkout")
        assert whole.headers["content-type"].startswith("text/plain") and whole.headers["x-content-type-options"] == "nosniff"
        page = client.get(served.url(f"/run/{RUN_ID}"))
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        assert page.headers["referrer-policy"] == "same-origin" and "set-cookie" not in page.headers


def test_pages_escape_agent_text(served: Served, state_dir: Path, tmp_path: Path) -> None:
    recorded_run(state_dir, tmp_path / "shop")
    with httpx.Client(timeout=10) as client:
        page = client.get(served.url(f"/run/{RUN_ID}")).text
        report = client.get(served.url(f"/run/{RUN_ID}/report"))
        index = client.get(served.url("/")).text
    for text in (XSS_IMG, XSS_SCRIPT, XSS_TITLE, XSS_QUESTION):
        assert text not in page and text not in report.text
    assert "<script>window.__pwned" not in page + index + report.text
    assert "&lt;script&gt;window.__pwned=3&lt;/script&gt;" in page  # the title, shown as text
    assert "script-src" not in report.headers["content-security-policy"]  # the report page runs no script at all


@pytest.mark.parametrize("args, message", [
    (["--host", "0.0.0.0"], "not a loopback address"),
    (["--host", "::"], "not a loopback address"),
    (["--token", "short"], "at least 16 characters"),
])
def test_a_risky_address_or_a_weak_token_is_refused(state_dir: Path, args: list[str], message: str) -> None:
    result = subprocess.run([*ralph_command(), "serve", "--port", "0", "--state-dir", str(state_dir), *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_a_port_in_use_is_one_line(state_dir: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([*ralph_command(), "serve", "--port", str(port), "--state-dir", str(state_dir)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in result.stderr


def test_allow_remote_listens_beyond_loopback_and_still_wants_the_token(state_dir: Path) -> None:
    server = start_serve(state_dir, "--host", "0.0.0.0", "--allow-remote")
    try:
        port = server.base.rsplit(":", 1)[1]
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 403
        assert httpx.get(f"http://127.0.0.1:{port}/?token={server.token}", timeout=10).status_code == 200
    finally:
        stop(server)
    assert "warning: listening beyond this machine" in "".join(server.first_lines) + (
        server.process.stdout.read() if server.process.stdout else "")


def test_without_the_serve_extra_it_names_the_extra(state_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "jinja2.py").write_text("raise ImportError('blocked for this test')\n")
    code = (
        "import importlib.util, sys; real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'jinja2' else real(name, *a)\n"
        "from ralph.cli.main import main; sys.argv = ['ralph', 'serve', '--port', '0', '--state-dir', sys.argv[1]]; main()"
    )
    result = subprocess.run([sys.executable, "-P", "-c", code, str(state_dir)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "needs jinja2" in result.stderr and "ralph-trustloop[serve]" in result.stderr


# -- the data side, without the web stack ------------------------------------------------------


def test_a_recorded_run_folds_into_stories_gates_cost_and_questions(state_dir: Path, tmp_path: Path) -> None:
    from ralph.dashboard.runs import RunIndex

    recorded_run(state_dir, tmp_path / "shop", finished=False)
    (entry,) = RunIndex(state_dir).refresh()
    fold = entry.fold
    assert entry.ref.id == f"{PROJECT_KEY}/runs/{RUN}" and entry.project_name == "shop"
    assert entry.state.startswith("stopped (no summary") and entry.tone == "fail"  # no loop holds a lock there
    assert [s["id"] for s in fold.stories] == ["US-001", "US-002"] and fold.done() == (1, 2)
    assert round(fold.cost, 2) == 0.75 and fold.tokens == 4100 and fold.story_cost == {"US-001": 0.25, "US-002": 0.5}
    (failed,) = [g for g in fold.gates if not g.passed]
    assert failed.status == "exit 1" and XSS_SCRIPT in failed.output and failed.log == "iteration-002.gate-tests.txt"
    assert [q.story for q in fold.pending] == ["US-002"] and fold.story_state(fold.stories[1]) == "waiting for a person"
    assert fold.stories[1]["title"] == "Checkout flow"  # escape sequences and the bidi override taken out


def test_the_stream_resumes_after_the_last_event_it_sent(served: Served, state_dir: Path, tmp_path: Path) -> None:
    run_dir = recorded_run(state_dir, tmp_path / "shop", finished=False)
    log = run_dir / "events.jsonl"
    middle = sum(len(line) + 1 for line in log.read_bytes().split(b"\n")[:5])  # the end of the 5th line
    with httpx.Client(timeout=10) as client:
        with client.stream("GET", served.url(f"/run/{RUN_ID}/events"), headers={"last-event-id": str(middle)}) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            data, seen_id = "", False
            for line in answer.iter_lines():
                data += line + "\n"
                seen_id = seen_id or line.startswith("id: ")
                if seen_id and not line:
                    break  # the end of the first message with an id: the rows
    rows = json.loads(next(line for line in data.splitlines() if line.startswith("data: ") and '"html"' in line)[6:])
    # only what came after the 5th line: the second iteration, not the first one's events
    assert "iteration_started" in rows["html"] and "highest priority" not in rows["html"]
    assert "question_asked" in rows["html"]


# -- in a real browser ---------------------------------------------------------------------------


def pwned(page: Any) -> Any:
    """What injected script would have left: a flag, the title, an alert."""
    return page.evaluate("window.__pwned"), page.title() == "pwned", page.dialogs


def test_a_person_sees_stories_gate_output_and_questions_as_text(served: Served, state_dir: Path, tmp_path: Path,
                                                                chromium_page: Any) -> None:
    page = chromium_page
    recorded_run(state_dir, tmp_path / "shop")
    page.goto(served.url("/"))
    row = page.locator("tr.run", has_text=RUN)
    assert "shop" in row.inner_text() and "ended (exit 1)" in row.inner_text() and "$0.7500" in row.inner_text()
    row.get_by_role("link").click()
    page.wait_for_selector("#stories")
    assert page.locator("tr.story[data-story=US-001] td").nth(1).inner_text() == XSS_TITLE
    assert "waiting for a person" in page.locator("tr.story[data-story=US-002]").inner_text()
    assert page.locator("tr.story[data-story=US-002] td").nth(1).inner_text() == "Checkout flow"
    failed = page.locator("details.gate-run.fail").first
    assert failed.get_attribute("open") is not None
    output = failed.locator("pre.output").inner_text()
    assert XSS_SCRIPT in output and XSS_IMG in output and output.startswith("FAILED test_checkout")
    assert page.locator(".question blockquote").inner_text() == XSS_QUESTION
    assert XSS_IMG in page.locator("#stream").inner_text()
    assert page.locator("main img, main svg, main script, main a[href^=javascript]").count() == 0
    assert pwned(page) == (None, False, [])
    facts = page.locator("#header").inner_text()
    assert "$0.7500" in facts and "4,100" in facts and "claude" in facts
    # the whole output of the failed gate, and the HTML report
    page.locator("details.gate-run.fail a").first.click()
    assert page.locator("body").inner_text().startswith("FAILED test_checkout")
    assert pwned(page) == (None, False, [])
    page.go_back()
    page.get_by_role("link", name="HTML report").click()
    page.wait_for_selector("svg")
    assert "ralph report: shop" in page.title()
    assert XSS_TITLE[:36] in page.locator("body").inner_text() and pwned(page) == (None, False, [])  # (cut at 36)


def test_new_events_appear_live_escaped(served: Served, state_dir: Path, tmp_path: Path, chromium_page: Any) -> None:
    """Events appended while the page is open arrive over the stream; the streamed sections stay text."""
    page = chromium_page
    run_dir = recorded_run(state_dir, tmp_path / "shop", finished=False)
    page.goto(served.url(f"/run/{RUN_ID}"))
    page.wait_for_function("document.getElementById('live').textContent === 'live'")
    before = page.locator("#stream li").count()
    more = [
        event("iteration_started", iteration=3, max_iterations=10, mode="implement", story="US-002", reason="again",
              cost_so_far=0.75, agent="claude", model="sonnet"),
        event("agent_event", iteration=3, type="text", text="live " + XSS_IMG + XSS_SCRIPT, data={}),
        event("gate", iteration=3, story="US-002", gate="lint", passed=False, hard=True, exit_code=2, timed_out=False,
              seconds=1.0, output="lint said " + XSS_SCRIPT + XSS_IMG, log=None),
        event("story_states", stories=[{"id": "US-001", "title": XSS_TITLE, "passes": True}, {
            "id": "US-002", "title": "Checkout " + XSS_IMG, "passes": False, "reviewStatus": "needs_review"}], done=1),
    ]
    with (run_dir / "events.jsonl").open("a") as log:
        for record in more:
            log.write(json.dumps(record) + "\n")
    page.wait_for_function(f"document.querySelectorAll('#stream li').length >= {before + len(more)}", timeout=20_000)
    page.wait_for_selector("details.gate-run.fail >> text=lint")
    assert "live " + XSS_IMG + XSS_SCRIPT in page.locator("#stream li").first.inner_text() or any(
        "live " + XSS_IMG in t for t in page.locator("#stream li").all_inner_texts())
    assert page.locator("tr.story[data-story=US-002] td").nth(1).inner_text() == "Checkout " + XSS_IMG
    assert "lint said " + XSS_SCRIPT + XSS_IMG in page.locator("details.gate-run", has_text="lint").locator("pre").inner_text()
    assert "#3" in page.locator("#run-iteration").inner_text() or "3" in page.locator("#run-iteration").inner_text()
    assert page.locator("main img, main svg, main script").count() == 0
    assert pwned(page) == (None, False, [])


def test_a_running_loop_appears_and_goes_on_live(served: Served, state_dir: Path, ralph_project: RalphProject,
                                                  tmp_path: Path, chromium_page: Any) -> None:
    """A real ``ralph run`` (the replay agent, slowed down) beside the dashboard: the index shows it as it
    starts, its page gets each new event, and both say it completed."""
    page = chromium_page
    project = ralph_project
    project.state_dir = state_dir
    project.write_stories([story("US-001", title="Greets <b>people</b>"), story("US-002", priority=2)],
                          verifyCommands=["echo 'checked-<i>ok</i>'"])

    def implement(sid: str) -> list[dict[str, Any]]:
        return [{"say": f"Implementing {sid}"}, {"sleep": 0.8}, {"write": {"path": f"{sid}.txt", "content": sid}},
                {"set": {"story": sid, "fields": {"reviewStatus": "needs_review"}}}, {"commit": f"feat {sid}"},
                {"cost": 0.02}, {"sleep": 0.8}, {"say": f"{sid} ready for review"}]

    def review(sid: str) -> list[dict[str, Any]]:
        return [{"say": f"Reviewing {sid}"}, {"sleep": 0.8},
                {"set": {"story": sid, "fields": {"reviewStatus": "approved", "passes": True, "reviewCount": 1,
                                                   "notes": "ok"}}},
                {"commit": f"review {sid}"}, {"cost": 0.01}, {"say": "Approved"}]

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"iterations": {"1": implement("US-001"), "2": review("US-001"),
                                                 "3": implement("US-002"), "4": review("US-002")}}))
    page.goto(served.url("/"))
    page.wait_for_function("document.getElementById('live').textContent === 'live'")
    assert page.locator("tr.run").count() == 0
    run = project.start("run", "--runner", "direct", "--agent", "replay",
                        env={"RALPH_REPLAY_SCRIPT": str(script)})
    try:
        page.wait_for_selector("tr.run >> text=running", timeout=60_000)  # the index, over its stream
        assert "project" in page.locator("tr.run").inner_text()
        page.locator("tr.run a").click()
        page.wait_for_function("document.getElementById('live').textContent === 'live'")
        shown = set(page.locator("#stream li").all_inner_texts())
        page.wait_for_selector("#stream li[data-kind=iteration_started] >> text=US-002", timeout=60_000)
        new = set(page.locator("#stream li").all_inner_texts()) - shown
        assert any("US-002" in text for text in new)  # arrived after the page was rendered
        page.wait_for_selector("#run-state >> text=complete", timeout=60_000)
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
    assert "Greets <b>people</b>" in page.locator("tr.story[data-story=US-001]").inner_text()
    assert page.locator("tr.story[data-story=US-002] td").nth(2).inner_text() == "approved"
    assert "checked-<i>ok</i>" in "".join(page.locator("#gates pre").all_text_contents())  # (in closed <details>)
    assert page.locator("main b, main i").count() == 0
    assert page.locator("#live").inner_text() == "the run has ended"
    page.goto(served.url("/"))
    assert "complete" in page.locator("tr.run").inner_text()


def test_many_runs_index_quickly_enough_to_use(state_dir: Path, tmp_path: Path) -> None:
    """Finished runs are read from their summaries: a hundred of them index without folding their logs."""
    from ralph.dashboard.runs import RunIndex

    for number in range(100):
        run_dir = state_dir / "projects" / f"p{number % 5}-0123456789" / "runs" / f"20260101-1200{number:02d}-1"
        run_dir.mkdir(parents=True)
        (run_dir / "events.jsonl").write_text(json.dumps(event("run_started", project=str(tmp_path / f"p{number % 5}"),
                                                               stories=1)) + "\n" + ("x" * 1000 + "\n") * 2000)
        (run_dir / "summary.json").write_text(json.dumps({"exit_code": 0, "reason": "complete", "iterations": 1,
                                                          "cost_usd": 0.1, "stories": []}))
    entries = RunIndex(state_dir).refresh()
    assert len(entries) == 100 and all(e.state == "complete" for e in entries)
    assert all(e.fold.events == 1 for e in entries)  # one line read per log, not 2000
    assert entries[0].ref.name.endswith("120099-1")  # newest first


# -- the answer form -----------------------------------------------------------------------------


def parked_run(project: RalphProject, state_dir: Path, question: str) -> Path:
    """A run of ``project`` that ended with US-001 waiting for a person (exit 8), with its question book."""
    from ralph.loop.rundir import project_state_dir, runs_dir

    run_dir = runs_dir(project.path, str(state_dir)) / RUN
    run_dir.mkdir(parents=True)
    stories = [{"id": "US-001", "title": "Export", "passes": False, "reviewStatus": "", "reviewCount": 0}]
    events = [
        event("run_started", project=str(project.path), runner="direct", agent="claude", policy="review",
              max_iterations=5, review_cap=5, stories=1, stories_done=0),
        event("story_states", stories=stories, done=0),
        event("iteration_started", iteration=1, max_iterations=5, mode="implement", story="US-001", reason="first",
              cost_so_far=0.0, agent="claude"),
        event("question_asked", iteration=1, story="US-001", mode="implement", id=f"{RUN}/1.1", question=question,
              title="Export", tools=["Bash printf wip > notes.txt"]),
        event("story_parked", iteration=1, story="US-001", ids=[f"{RUN}/1.1"]),
        event("run_finished", exit_code=8, reason="waiting for a person: US-001 asked", iterations=1, stories=stories),
    ]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run_dir / "summary.json").write_text(json.dumps({"exit_code": 8, "reason": "waiting for a person: US-001 asked",
                                                      "iterations": 1, "stories": stories}))
    write_book(project_state_dir(project.path, str(state_dir)), [
        {"id": f"{RUN}/1.1", "story": "US-001", "iteration": 1, "mode": "implement", "question": question,
         "asked_at": "2026-01-01T12:00:05Z", "run": RUN, "context": {"title": "Export", "tools": ["Bash printf wip"]}},
    ])
    return run_dir


def test_the_answer_form_records_the_persons_answer(served: Served, state_dir: Path, ralph_project: RalphProject,
                                                    chromium_page: Any) -> None:
    page = chromium_page
    from ralph.questions import load_book

    parked_run(ralph_project, state_dir, "Semicolon or comma? " + XSS_IMG)
    answer = "Semicolon. <b>Not</b> a comma; see docs/csv.md"
    page.goto(served.url("/"))
    row = page.locator("tr.run")
    assert "1 question waiting for a person" in row.inner_text()
    row.get_by_role("link").click()
    question = page.locator(".question[data-story=US-001]")
    assert question.locator("blockquote").inner_text() == "Semicolon or comma? " + XSS_IMG
    assert "waiting for a person" in page.locator("tr.story[data-story=US-001]").inner_text()
    question.locator("textarea").fill(answer)
    question.get_by_role("button", name="Answer US-001").click()
    page.wait_for_selector("#notice")
    assert page.locator("#notice").inner_text() == "answer recorded for US-001; the next `ralph run` goes on with it"
    assert page.locator(".question").count() == 0  # nothing waits any more
    assert pwned(page) == (None, False, [])
    (recorded,) = load_book(ralph_project.path, str(state_dir)).questions
    assert recorded.answer == answer and recorded.answered_by == "ralph serve"  # the person's words, as typed
    status = ralph_project.run("status")
    assert status.returncode == 0 and "answer: ralph answer US-001" not in status.stdout  # ralph status agrees
    # a second answer finds nothing to answer and says so (nothing changes)
    with httpx.Client(timeout=10) as client:
        from ralph.dashboard.access import form_key

        again = client.post(served.url(f"/run/{ralph_project.run_dirs()[-1].parent.parent.name}~runs~{RUN}/answer"),
                            data={"story": "US-001", "answer": "comma", "key": form_key(served.token)})
        assert again.status_code == 303 and "answered+already" in again.headers["location"]
    assert load_book(ralph_project.path, str(state_dir)).questions[0].answer == answer
