"""The spec gate (seed 002, hard) through real agent CLIs and scripted model servers.

The implementing agent and the reviewer are real CLIs (Codex by default here);
each reviewer session is a fresh Codex thread whose answer (the verdict) is
scripted per session.  The loop, not the agent, reads the verdict.
"""

from __future__ import annotations

import json
import shlex
import threading
from typing import Any

import pytest

from ralph.testing.model_server import IterationScript, Turn, text, tool
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import bash_turns, commit_command, set_fields_command
from ralph_plugins.gates.spec_verdict import parse_verdict

REVIEWER_MARKER = "independent SPEC REVIEWER"


def verdict_turn(verdict: str, unmet: list[dict[str, str]] | None = None, say: str = "Reviewed.") -> list[Turn]:
    body = json.dumps({"verdict": verdict, "unmet": unmet or [], "extra": []})
    return [Turn([text(f"{say}\n```json\n{body}\n```")])]


class ReviewerScript:
    """Implement iterations from ``iterations``; reviewer sessions answer ``reviews`` in order.

    A reviewer session is recognised by the spec prompt; sessions are told apart by
    Codex's ``session-id`` header (Claude Code: the first user text), so each fresh
    reviewer gets the next scripted answer, retries included.
    """

    def __init__(self, iterations: dict[int, list[Turn]], reviews: list[list[Turn]]) -> None:
        self.iterations = IterationScript(iterations)
        self.reviews = reviews
        self.sessions: dict[str, int] = {}
        self.review_prompts: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, request: Any) -> Any:
        if REVIEWER_MARKER not in request.first_user_text:
            return self.iterations(request)
        key = request.headers.get("session-id") or request.headers.get("Session-Id") or request.first_user_text
        with self._lock:
            if key not in self.sessions:
                self.sessions[key] = len(self.sessions)
                self.review_prompts.append(request.first_user_text)
            index = self.sessions[key]
        turns = self.reviews[index] if index < len(self.reviews) else [Turn([text("(no more reviews scripted)")])]
        return turns[request.assistant_turns] if request.assistant_turns < len(turns) else Turn([text("done")])


def implement_and_pass(story_id: str, content: str) -> list[Turn]:
    return bash_turns(
        [
            f"printf %s {shlex.quote(content)} > greet.txt",
            set_fields_command(story_id, passes=True, notes="implemented"),
            commit_command(f"feat: [{story_id}] - greet"),
        ],
        say="Implemented. <promise>COMPLETE</promise>",
    )


@pytest.fixture
def skip_review_project(ralph_project: RalphProject) -> RalphProject:
    ralph_project.write_stories(
        [story("US-001", "Greeting", acceptanceCriteria=["greet.txt says hello", "greet.txt says bonjour"])]
    )
    return ralph_project


def run_codex(project: RalphProject, url: str, env_factory: Any, *args: str) -> Any:
    return project.run(
        "run", "--runner", "direct", "--agent", "codex", "--skip-review", "--timeout", "120", *args, env=env_factory(url)
    )


@pytest.mark.real_codex
def test_met_lets_the_story_through(skip_review_project, scripted_responses, codex_binary, codex_agent_env) -> None:
    script = ReviewerScript({1: implement_and_pass("US-001", "hello bonjour")}, [verdict_turn("met")])
    server = scripted_responses(script)
    result = run_codex(skip_review_project, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    assert skip_review_project.story("US-001")["passes"] is True
    verdicts = skip_review_project.events("gate_verdict")
    assert [(v["gate"], v["verdict"], v["passed"]) for v in verdicts] == [("spec", "met", True)]
    assert verdicts[0]["reviewer"].startswith("codex")
    # the reviewer saw the story, its criteria, the PRD's constraints and the diff
    prompt = script.review_prompts[0]
    assert "greet.txt says bonjour" in prompt and "+hello bonjour" in prompt and "US-001" in prompt
    report = (skip_review_project.run_dirs()[-1] / "report.md").read_text()
    assert "Spec verdicts" in report and "met" in report
    # the reviewer's session: its raw output beside the iteration's, its cost under the iteration's label
    assert (skip_review_project.run_dirs()[-1] / "iteration-001.spec.agent.jsonl").is_file()
    assert [e["label"] for e in skip_review_project.events("extra_session_cost")] == ["001.spec"]


def test_an_extra_session_names_its_files_and_events_from_its_iteration_and_purpose() -> None:
    import dataclasses

    from ralph.loop.runcontext import ExtraSession

    session = ExtraSession(7, "spec", timeout=30.0)
    assert (session.label, session.file_stem, session.meter_name) == ("007.spec", "iteration-007.spec", "iteration 007.spec")
    reviewer = dataclasses.replace(session, reviewer=True, agent="codex", model=None)
    assert reviewer.file_stem == session.file_stem and reviewer.timeout == 30.0


@pytest.mark.real_codex
def test_not_met_sends_the_story_back_and_escalates(
    skip_review_project, scripted_responses, codex_binary, codex_agent_env
) -> None:
    missing = [{"criterion": "greet.txt says bonjour", "where": "greet.txt:1", "why": "only says hello"}]
    script = ReviewerScript(
        {1: implement_and_pass("US-001", "hello"), 2: implement_and_pass("US-001", "hello again")},
        [verdict_turn("not_met", missing), verdict_turn("not_met", missing)],
    )
    server = scripted_responses(script)
    result = run_codex(skip_review_project, server.url, lambda url: {**codex_agent_env(url), "RALPH_MAX_ATTEMPTS": "2"})

    assert result.returncode == 3, result.stderr + result.stdout  # finished with a failed story
    failed = skip_review_project.events("gate_failed")
    assert [e["gate"] for e in failed] == ["spec", "spec"]
    assert failed[0]["sent_back"] == ["passes true → false"]
    # the verdict, verbatim, is in the next implement prompt (written by the loop, not the agent)
    second = [r.text for r in server.requests if script.iterations.key_of(r) == 2][0]
    assert "only says hello" in second and "greet.txt says bonjour" in second
    stopped = skip_review_project.events("story_failed")
    assert stopped and stopped[0]["branch"].startswith("wip/ralph-fail-US-001-")
    final = skip_review_project.story("US-001")
    assert final["passes"] is False and final.get("failed") is True and "spec gate" in final["failureReason"]


@pytest.mark.real_codex
def test_malformed_verdict_counts_as_not_met(skip_review_project, scripted_responses, codex_binary, codex_agent_env) -> None:
    script = ReviewerScript(
        {1: implement_and_pass("US-001", "hello bonjour"), 2: implement_and_pass("US-001", "hello bonjour!")},
        [[Turn([text("Looks good to me, ship it!")])], verdict_turn("met")],
    )
    server = scripted_responses(script)
    result = run_codex(skip_review_project, server.url, codex_agent_env)

    assert result.returncode == 0, result.stderr + result.stdout
    verdicts = skip_review_project.events("gate_verdict")
    assert [v["verdict"] for v in verdicts] == ["not_met", "met"]
    assert "no JSON object" in verdicts[0]["malformed"]
    second = [r.text for r in server.requests if script.iterations.key_of(r) == 2][0]
    assert "malformed verdict" in second and "Looks good to me" in second


@pytest.mark.real_codex
@pytest.mark.real_claude
def test_reviewer_edit_is_undone_and_logged(
    skip_review_project, scripted_model, scripted_responses, codex_binary, claude_binary, codex_agent_env,
    claude_agent_env,
) -> None:
    # Claude Code reviews (its Bash tool can write; Codex's read-only sandbox would already refuse)
    (skip_review_project.path / "ralph.toml").write_text('[spec]\nagent = "claude"\n')
    skip_review_project.commit_all("config: claude reviews the spec")
    vandal = [Turn([tool("Bash", {"command": "printf tampered > greet.txt && printf x > reviewer-note.txt"})])] + verdict_turn("met")
    claude_script = ReviewerScript({}, [vandal])
    codex_script = IterationScript({1: implement_and_pass("US-001", "hello bonjour")})
    claude_server = scripted_model(claude_script)
    codex_server = scripted_responses(codex_script)
    env = {**codex_agent_env(codex_server.url), **claude_agent_env(claude_server.url)}
    result = skip_review_project.run(
        "run", "--runner", "direct", "--agent", "codex", "--skip-review", "--timeout", "120", env=env
    )

    assert result.returncode == 0, result.stderr + result.stdout
    assert (skip_review_project.path / "greet.txt").read_text() == "hello bonjour"
    assert not (skip_review_project.path / "reviewer-note.txt").exists()
    violations = [e for e in skip_review_project.events("violation") if e["check"] == "gate-read-only"]
    assert violations and "greet.txt" in violations[0]["message"]
    assert skip_review_project.events("gate_verdict")[0]["reviewer"].startswith("claude")
    assert skip_review_project.git("status", "--porcelain") == ""


def test_verdict_parser() -> None:
    assert parse_verdict('ok\n```json\n{"verdict": "met", "unmet": []}\n```').met is True
    not_met = parse_verdict('{"verdict": "not_met", "unmet": [{"criterion": "a", "where": "x.py:3", "why": "no"}]}')
    assert not not_met.met and not_met.unmet[0]["where"] == "x.py:3" and "Missing: a" in not_met.render("codex")
    assert "no JSON object" in (parse_verdict("looks fine").malformed or "")
    assert "expected" in (parse_verdict('{"verdict": "probably"}').malformed or "")
    assert parse_verdict('{"verdict": "met", "unmet": ["x"]}').malformed
    assert parse_verdict("```json\n{bad json}\n```").malformed.startswith("the verdict is not valid JSON")
    assert parse_verdict("").malformed


def test_spec_gate_default_follows_the_policy_and_config_wins(tmp_path) -> None:
    from ralph.session import open_session
    from ralph_plugins.gates.spec_review import SpecReviewGate

    def enabled(policy: str) -> bool:
        session = open_session(tmp_path, {"policy": policy}, environ={})
        return SpecReviewGate(session.settings).enabled()

    assert (enabled("skip-review"), enabled("review")) == (True, False)
    (tmp_path / "ralph.toml").write_text('[spec]\nenabled = true\nagent = "codex"\nhard_timeout = 60\n')
    assert enabled("review") is True
    session = open_session(tmp_path, {}, environ={})
    gate = SpecReviewGate(session.settings)
    assert gate.reviewer() == ("codex", None) and gate.timeouts == (180.0, 60.0)
    (tmp_path / "ralph.toml").write_text("[spec]\nenabled = false\n")
    assert enabled("skip-review") is False


def test_prd_constraints_are_the_constraint_sections() -> None:
    from ralph_plugins.gates.spec_review import prd_constraints

    prd = "# PRD\nIntro.\n## Goals\nShip.\n## Technical Constraints\n- stdlib only\n## Non-Goals\n- no GUI\n"
    text = prd_constraints(prd)
    assert "stdlib only" in text and "no GUI" in text and "Ship." not in text
    assert prd_constraints("just text") == "just text"
