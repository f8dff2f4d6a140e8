"""The agent's token usage (input, cache read, cache write, output) per iteration and per story:
in the event log, ``summary.json``, ``ralph status`` and ``ralph report``."""

from __future__ import annotations

import pytest

from ralph.contracts import AgentEvent
from ralph.lifecycle.report import tokens
from ralph.loop.records import IterationRecord, add_usage, total_usage
from ralph.testing.model_server import IterationScript
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import bash_turns, commit_command, set_fields_command


def test_usage_is_summed_from_result_events() -> None:
    record = IterationRecord(1, "implement", "US-001")
    add_usage(record.usage, {"input_tokens": 10, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 30,
                             "output_tokens": 4, "server_tool_use": {"web_search_requests": 0}})  # fmt: skip
    add_usage(record.usage, {"input_tokens": 5, "output_tokens": 1})
    add_usage(record.usage, None)
    add_usage(record.usage, {"input_tokens": "many", "output_tokens": True})
    assert record.usage == {"input": 15, "cache_read": 200, "cache_write": 30, "output": 5}
    other = IterationRecord(2, "review", "US-001", usage={"input": 1, "output": 2})
    assert total_usage([record, other]) == {"input": 16, "cache_read": 200, "cache_write": 30, "output": 7}
    assert [tokens(n) for n in (None, 812, 30_412, 1_250_000)] == ["-", "812", "30.4k", "1.25M"]
    assert isinstance(AgentEvent("result", data={"usage": {}}).data, dict)


def _table_row(text: str, first: str) -> list[str]:
    """The first row starting with ``first`` in the token tables (after their heading)."""
    tables = text[text.index("tokens the agent reported") :]
    return next(line.split() for line in tables.splitlines() if line.split()[:1] == [first])


@pytest.mark.real_claude
def test_usage_reaches_events_status_and_report(
    ralph_project: RalphProject, scripted_model, claude_binary, claude_agent_env
) -> None:
    ralph_project.write_stories([story("US-001", "Greeting"), story("US-002", "Farewell", priority=2)])
    script = IterationScript(
        {
            1: bash_turns(["printf hi > a.txt", set_fields_command("US-001", reviewStatus="needs_review"),
                           commit_command("feat: [US-001] - greeting")], "Implemented."),
            2: bash_turns([set_fields_command("US-001", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"),
                           commit_command("review: [US-001] - approved")], "Approved."),
            3: bash_turns(["printf bye > b.txt", set_fields_command("US-002", reviewStatus="needs_review"),
                           commit_command("feat: [US-002] - farewell")], "Implemented."),
        }
    )  # fmt: skip
    # the scripted server simulates prompt caching: the tools + system prefix is written once, then read
    server = scripted_model(script, cache=True)
    env = claude_agent_env(server.url)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", "-n", "3", env=env)
    assert result.returncode == 1, result.stdout + result.stderr  # US-002 still awaits its review

    finished = ralph_project.events("iteration_finished")
    results = [e for e in ralph_project.events("agent_event") if e["type"] == "result"]
    assert len(finished) == len(results) == 3
    for done, reported in zip(finished, results):
        usage = reported["data"]["usage"]  # what the CLI itself reported in stream-json
        assert done["usage"] == {
            "input": usage["input_tokens"], "cache_read": usage["cache_read_input_tokens"],
            "cache_write": usage["cache_creation_input_tokens"], "output": usage["output_tokens"],
        }  # fmt: skip
    # every kind really flowed (a swapped field would show): iterations 1 and 2 write their
    # tools + system prefix to the cache once and read it on later turns ...
    assert min(finished[0]["usage"].values()) > 0 and min(finished[1]["usage"].values()) > 0
    # ... and iteration 3 (implement again, same tools) finds it cached from iteration 1
    assert finished[2]["usage"]["cache_write"] == 0
    assert finished[2]["usage"]["cache_read"] > finished[0]["usage"]["cache_read"]

    summary = ralph_project.summary()
    assert summary["usage"] == {k: sum(e["usage"][k] for e in finished) for k in finished[0]["usage"]}
    assert [r["usage"] for r in summary["records"]] == [e["usage"] for e in finished]

    def cells(usage: dict[str, int]) -> list[str]:
        return [tokens(usage[k]) for k in ("input", "cache_read", "cache_write", "output")]

    status = ralph_project.run("status").stdout
    assert "tokens the agent reported" in status
    assert _table_row(status, "#2") == ["#2", "review", "US-001", *cells(finished[1]["usage"])]
    us1 = {k: finished[0]["usage"][k] + finished[1]["usage"][k] for k in finished[0]["usage"]}
    assert _table_row(status, "US-001")[-4:] == cells(us1)
    assert f"output {summary['usage']['output']:,}" in status  # the totals line of the summary

    report = ralph_project.run("report", "--html", str(ralph_project.path.parent / "r.html"))
    assert report.returncode == 0, report.stderr
    rows = [line.split() for line in report.stdout.splitlines() if line.split()[:1] == ["US-001"]]
    assert rows[-1] == ["US-001", *cells(us1)]  # the per-story token table
    assert _table_row(report.stdout, "#3") == ["#3", "implement", "US-002", *cells(finished[2]["usage"])]
    html = (ralph_project.path.parent / "r.html").read_text()
    assert "<th>cache read</th>" in html and f"<td>{cells(us1)[1]}</td>" in html
