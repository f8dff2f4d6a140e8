"""The agent-side monitors: context alerts, test-failure detection, activity and read-log resets.

Every hook goes through the registered plugins (``PluginHost().pm.hook``), as
Claude Code's hook calls do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from ralph.contracts import LoopView
from ralph.plugin.manager import PluginHost
from ralph.testing.hooks import MemorySession, make_event
from ralph_plugins.monitors import context_monitor
from ralph_plugins.monitors.test_failures import detect, is_test_command, latest_failure

NOTICE_TEXT = "Be mindful of remaining space. Plan to finish your current task within this session."
WARNING_TEXT = "Finish your current task and commit soon. Do not start additional tasks."
CRITICAL_TEXT = "Wrap up immediately. Do NOT start new work."


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(environ={})


def call(host: PluginHost, name: str, payload: dict[str, Any], tmp_path: Path, **kwargs: Any) -> list[str]:
    event = make_event(name, payload, tmp_path / "project", tmp_path / "state", **kwargs)
    caller = {
        "PostToolUse": host.pm.hook.ralph_post_tool_use,
        "SessionStart": host.pm.hook.ralph_session_start,
        "UserPromptSubmit": host.pm.hook.ralph_user_prompt_submit,
    }[name]
    return [m for result in caller(event=event) for m in (result or []) if m]


# -- context monitor -------------------------------------------------------------------------------


def usage_entry(tokens: int, **extra: Any) -> dict[str, Any]:
    """An assistant transcript entry whose usage adds up to ``tokens``."""
    usage = {
        "input_tokens": tokens // 10,
        "cache_creation_input_tokens": tokens // 10,
        "cache_read_input_tokens": tokens - 3 * (tokens // 10),
        "output_tokens": tokens // 10,
    }
    return {"type": "assistant", "isSidechain": False, "message": {"role": "assistant", "usage": usage}, **extra}


def write_jsonl(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries), encoding="utf-8")
    return path


def filler(n_bytes: int) -> dict[str, Any]:
    """A user entry (no usage) of roughly ``n_bytes``."""
    return {"type": "user", "message": {"role": "user", "content": "x" * n_bytes}}


def transcript_at(tmp_path: Path, tokens: int, name: str = "t.jsonl") -> Path:
    return write_jsonl(tmp_path / name, [filler(200), usage_entry(tokens)])


def post(host: PluginHost, tmp_path: Path, transcript: Path | str | None, session: MemorySession, **kwargs: Any) -> list[str]:
    payload: dict[str, Any] = {"tool_name": "Read", "tool_input": {"file_path": "x"}, "tool_response": {}}
    if transcript is not None:
        payload["transcript_path"] = str(transcript)
    return call(host, "PostToolUse", payload, tmp_path, session=session, **kwargs)


def context_messages(messages: list[str]) -> list[str]:
    return [m for m in messages if m.startswith("CONTEXT ")]


def test_no_alert_below_fifty_percent(host: PluginHost, tmp_path: Path) -> None:
    session = MemorySession()
    assert post(host, tmp_path, transcript_at(tmp_path, 99_000), session) == []
    assert session.get("context_alerts", []) == []


@pytest.mark.parametrize(
    ("tokens", "level", "text", "fired"),
    [
        (104_000, "NOTICE", NOTICE_TEXT, [50]),
        (122_000, "NOTICE", NOTICE_TEXT, [50, 60]),
        (150_000, "WARNING", WARNING_TEXT, [50, 60, 70]),
        (166_000, "WARNING", WARNING_TEXT, [50, 60, 70, 80]),
        (185_000, "CRITICAL", CRITICAL_TEXT, [50, 60, 70, 80, 90]),
    ],
)
def test_threshold_message_wording(
    host: PluginHost, tmp_path: Path, tokens: int, level: str, text: str, fired: list[int]
) -> None:
    session = MemorySession()
    messages = context_messages(post(host, tmp_path, transcript_at(tmp_path, tokens), session))
    percent = tokens * 100 // 200_000
    assert len(messages) == 1
    assert messages[0].startswith(f"CONTEXT {level} ({percent}% used): {text}")
    assert session.get("context_alerts") == fired


def test_exact_seed_wording_outside_a_loop(host: PluginHost, tmp_path: Path) -> None:
    session = MemorySession()
    [message] = post(host, tmp_path, transcript_at(tmp_path, 181_000), session)
    assert message == (
        "CONTEXT CRITICAL (90% used): Wrap up immediately. Do NOT start new work. Instead: (1) create tasks "
        "in tasks.json for any remaining work, (2) write implementation details, insights, and handoff notes "
        "to progress.txt, (3) commit all changes, (4) stop. The next iteration will continue from where you "
        "left off."
    )


def test_every_threshold_fires_once_per_session(host: PluginHost, tmp_path: Path) -> None:
    session = MemorySession()
    seen = []
    for percent in (40, 51, 55, 59, 60, 65, 71, 79, 80, 85, 90, 95, 99):
        transcript = transcript_at(tmp_path, percent * 2_000, name=f"t{percent}.jsonl")
        seen.append((percent, context_messages(post(host, tmp_path, transcript, session))))
        # the same reading again never repeats an alert
        assert context_messages(post(host, tmp_path, transcript, session)) == []
    fired = [(p, m[0].split(":")[0]) for p, m in seen if m]
    assert fired == [
        (51, "CONTEXT NOTICE (51% used)"),
        (60, "CONTEXT NOTICE (60% used)"),
        (71, "CONTEXT WARNING (71% used)"),
        (80, "CONTEXT WARNING (80% used)"),
        (90, "CONTEXT CRITICAL (90% used)"),
    ]
    assert session.get("context_alerts") == [50, 60, 70, 80, 90]


def test_several_thresholds_at_once_show_only_the_most_severe(host: PluginHost, tmp_path: Path) -> None:
    session = MemorySession(); session.set("context_alerts", [50])
    messages = post(host, tmp_path, transcript_at(tmp_path, 170_000), session)
    assert len(messages) == 1 and messages[0].startswith("CONTEXT WARNING (85% used):")
    assert session.get("context_alerts") == [50, 60, 70, 80]
    assert post(host, tmp_path, transcript_at(tmp_path, 172_000), session) == []


def test_window_from_environment(host: PluginHost, tmp_path: Path) -> None:
    transcript = transcript_at(tmp_path, 52_000)
    assert post(host, tmp_path, transcript, MemorySession()) == []  # 26% of the default 200k
    messages = post(host, tmp_path, transcript, MemorySession(), environ={"CLAUDE_CONTEXT_WINDOW": "100000"})
    assert messages and messages[0].startswith("CONTEXT NOTICE (52% used):")


@pytest.mark.parametrize("value", ["abc", "", "0", "-5", "1e5", "200k"])
def test_bad_window_values_fall_back_to_default(host: PluginHost, tmp_path: Path, value: str) -> None:
    assert context_monitor.context_window({"CLAUDE_CONTEXT_WINDOW": value}) == 200_000
    session = MemorySession()
    messages = post(host, tmp_path, transcript_at(tmp_path, 104_000), session, environ={"CLAUDE_CONTEXT_WINDOW": value})
    assert messages and messages[0].startswith("CONTEXT NOTICE (52% used):")


def test_default_window() -> None:
    assert context_monitor.context_window({}) == 200_000
    assert context_monitor.context_window({"CLAUDE_CONTEXT_WINDOW": "1000000"}) == 1_000_000


@pytest.mark.parametrize("source", ["startup", "resume", "clear", "compact", None])
def test_session_start_rearms_thresholds(host: PluginHost, tmp_path: Path, source: str | None) -> None:
    session = MemorySession()
    transcript = transcript_at(tmp_path, 125_000)
    assert post(host, tmp_path, transcript, session)
    assert post(host, tmp_path, transcript, session) == []
    payload = {} if source is None else {"source": source}
    assert call(host, "SessionStart", payload, tmp_path, session=session) == []
    assert session.get("context_alerts") == []
    assert session.get("files_read") == []
    assert context_messages(post(host, tmp_path, transcript, session))[0].startswith("CONTEXT NOTICE (62% used)")


def test_separate_sessions_alert_separately(host: PluginHost, tmp_path: Path) -> None:
    first, second = MemorySession(), MemorySession()
    transcript = transcript_at(tmp_path, 110_000)
    assert post(host, tmp_path, transcript, first)
    assert post(host, tmp_path, transcript, first) == []
    assert post(host, tmp_path, transcript, second)
    assert second.get("context_alerts") == [50]


def test_loop_messages_name_the_loops_files(host: PluginHost, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "ralph").mkdir(parents=True)
    loop = LoopView(runner="direct", mode="implement", story_id="US-001", ralph_dir=project / "ralph", run_dir=tmp_path / "run")
    [message] = post(host, tmp_path, transcript_at(tmp_path, 150_000), MemorySession(), loop=loop)
    assert "create new stories in ralph/tasks.json" in message
    assert "insights in ralph/progress.txt" in message
    [outside] = post(host, tmp_path, transcript_at(tmp_path, 150_000), MemorySession())
    assert "stories in tasks.json" in outside and "insights in progress.txt" in outside
    assert "ralph/" not in outside


def test_missing_or_unreadable_transcript_is_silent(host: PluginHost, tmp_path: Path) -> None:
    session = MemorySession()
    assert post(host, tmp_path, None, session) == []
    assert post(host, tmp_path, tmp_path / "does-not-exist.jsonl", session) == []
    assert post(host, tmp_path, tmp_path, session) == []  # a directory
    assert session.get("context_alerts") is None
    assert context_monitor.estimate_tokens(tmp_path / "nope.jsonl") is None
    assert context_monitor.estimate_tokens(tmp_path) is None
    event_payload = {"tool_name": "Read", "transcript_path": 42}
    assert call(host, "PostToolUse", event_payload, tmp_path, session=session) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_permission_denied_transcript_is_silent(host: PluginHost, tmp_path: Path) -> None:
    transcript = transcript_at(tmp_path, 190_000)
    transcript.chmod(0)
    try:
        assert post(host, tmp_path, transcript, MemorySession()) == []
    finally:
        transcript.chmod(0o600)


def test_empty_transcript_is_zero(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert context_monitor.estimate_tokens(empty) == 0


def test_real_counts_beat_a_large_file(host: PluginHost, tmp_path: Path) -> None:
    # 800 KB of earlier entries: size/4 would say 100%, the usage says 10%.
    transcript = write_jsonl(tmp_path / "t.jsonl", [filler(100_000) for _ in range(8)] + [usage_entry(20_000)])
    assert transcript.stat().st_size // 4 > 200_000
    assert context_monitor.estimate_tokens(transcript) == 20_000
    assert post(host, tmp_path, transcript, MemorySession()) == []


def test_real_counts_beat_a_small_file(host: PluginHost, tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "t.jsonl", [usage_entry(150_000)])
    assert transcript.stat().st_size < 1_000
    [message] = post(host, tmp_path, transcript, MemorySession())
    assert message.startswith("CONTEXT WARNING (75% used):")


def test_no_usage_falls_back_to_size_over_four(host: PluginHost, tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "t.jsonl", [filler(50_000) for _ in range(9)])
    size = transcript.stat().st_size
    assert context_monitor.estimate_tokens(transcript) == size // 4
    [message] = post(host, tmp_path, transcript, MemorySession(), environ={"CLAUDE_CONTEXT_WINDOW": str(size // 4 * 100 // 55)})
    assert message.startswith("CONTEXT NOTICE (55% used):")


def test_subagent_and_placeholder_entries_are_ignored(tmp_path: Path) -> None:
    placeholder = usage_entry(0)
    sidechain = usage_entry(190_000, isSidechain=True)
    transcript = write_jsonl(tmp_path / "t.jsonl", [usage_entry(30_000), sidechain, placeholder])
    trailing = len(json.dumps(sidechain, separators=(",", ":"))) + len(json.dumps(placeholder, separators=(",", ":"))) + 2
    assert context_monitor.estimate_tokens(transcript) == 30_000 + trailing // 8


def test_non_assistant_usage_entries_are_ignored(tmp_path: Path) -> None:
    other = {"type": "system", "message": {"usage": {"input_tokens": 190_000}}}
    transcript = write_jsonl(tmp_path / "t.jsonl", [usage_entry(10_000), other])
    assert context_monitor.estimate_tokens(transcript) < 11_000


def test_trailing_bytes_count_at_one_token_per_eight(tmp_path: Path) -> None:
    entries = [usage_entry(40_000), filler(20_000), filler(20_000)]
    transcript = write_jsonl(tmp_path / "t.jsonl", entries)
    usage_line = json.dumps(entries[0], separators=(",", ":"))
    after = transcript.stat().st_size - len(usage_line)
    assert context_monitor.estimate_tokens(transcript) == 40_000 + after // 8


def test_usage_beyond_64kb_is_found_in_the_last_megabyte(tmp_path: Path) -> None:
    entries = [filler(300_000), usage_entry(50_000)] + [filler(50_000) for _ in range(4)]
    transcript = write_jsonl(tmp_path / "t.jsonl", entries)
    usage_line = json.dumps(entries[1], separators=(",", ":"))
    head = len(json.dumps(entries[0], separators=(",", ":"))) + 1
    after = transcript.stat().st_size - head - len(usage_line)
    assert after > 64 * 1024
    assert context_monitor.estimate_tokens(transcript) == 50_000 + after // 8


def test_usage_beyond_one_megabyte_falls_back_to_size(tmp_path: Path) -> None:
    entries = [usage_entry(50_000)] + [filler(100_000) for _ in range(11)]
    transcript = write_jsonl(tmp_path / "t.jsonl", entries)
    assert context_monitor.estimate_tokens(transcript) == transcript.stat().st_size // 4


def test_post_tool_use_on_a_large_transcript_reads_its_latest_usage(host: PluginHost, tmp_path: Path) -> None:
    """3 MB of transcript before the latest usage entry: the monitor still finds it (its speed is
    measured in benchmarks/hook_latency.py, not asserted here)."""
    transcript = write_jsonl(
        tmp_path / "t.jsonl", [usage_entry(20_000)] + [filler(100_000) for _ in range(30)] + [usage_entry(150_000)]
    )
    payload = {
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_response": {"stdout": "ok line\n" * 20_000 + "5 passed in 1.00s\n", "stderr": ""},
        "transcript_path": str(transcript),
    }
    messages = call(host, "PostToolUse", payload, tmp_path, session=MemorySession())
    assert any("75%" in m or "WARNING" in m for m in messages), messages


def test_imports_are_cheap_and_patterns_lazy() -> None:
    code = (
        "import sys\n"
        "import ralph_plugins.monitors.context_monitor, ralph_plugins.monitors.activity\n"
        "import ralph_plugins.monitors.test_failures as tf\n"
        "assert tf._compiled is None\n"
        "assert 'pydantic' not in sys.modules\n"
        "from ralph.testing.hooks import make_event\n"
        "from pathlib import Path\n"
        "e = make_event('PostToolUse', {'tool_name': 'Read'}, Path('/tmp'), Path('/tmp/ralph-unused'))\n"
        "tf.ralph_post_tool_use(e)\n"
        "assert tf._compiled is None\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


# -- test-failure detection ------------------------------------------------------------------------

FRAMEWORK_SAMPLES = [
    (
        "jest",
        "npx jest",
        " FAIL  src/sum.test.js\n  ● adds 1 + 2 to equal 3\n\n    expect(received).toBe(expected)\n\n"
        "Test Suites: 1 failed, 1 total\nTests:       1 failed, 2 passed, 3 total\nTime:        0.5 s\n",
        "1 failed",
        " PASS  src/sum.test.js\n  ✓ adds 1 + 2 to equal 3 (2 ms)\n\nTest Suites: 1 passed, 1 total\n"
        "Tests:       3 passed, 3 total\n",
    ),
    (
        "vitest",
        "npx vitest run",
        " FAIL  src/math.test.ts > math > adds\nAssertionError: expected 4 to be 5\n\n"
        " Test Files  1 failed (1)\n      Tests  1 failed | 2 passed (3)\n   Duration  310ms\n",
        "1 failed",
        " ✓ src/math.test.ts (3)\n\n Test Files  1 passed (1)\n      Tests  3 passed (3)\n",
    ),
    (
        "pytest",
        "python -m pytest -q",
        "..F..\n=================================== FAILURES ===================================\n"
        "___ test_x ___\n\n    def test_x():\n>       assert 1 == 2\nE       assert 1 == 2\n\n"
        "FAILED tests/test_a.py::test_x - assert 1 == 2\n"
        "FAILED tests/test_a.py::test_y - assert 0\n2 failed, 3 passed in 0.12s\n",
        "2 failed",
        ".....                                                                    [100%]\n5 passed in 0.10s\n",
    ),
    (
        "go",
        "go test ./...",
        "--- FAIL: TestAdd (0.00s)\n    add_test.go:9: got 3, want 4\nFAIL\nFAIL\texample.com/m\t0.002s\nFAIL\n",
        "TestAdd failed",
        "ok  \texample.com/m\t0.002s\n",
    ),
    (
        "mocha",
        "npx mocha",
        "  Array\n    ✓ works\n    1) fails\n\n  2 passing (8ms)\n  1 failing\n\n  1) Array\n       fails:\n     AssertionError\n",
        "1 failing",
        "  Array\n    ✓ works\n\n  3 passing (5ms)\n",
    ),
    (
        "rspec",
        "bundle exec rspec",
        "..F\n\nFailures:\n\n  1) Calc adds\n     Failure/Error: expect(1 + 1).to eq(3)\n\n"
        "Finished in 0.01 seconds (files took 0.1 seconds to load)\n3 examples, 1 failure\n",
        "3 examples, 1 failure",
        "...\n\nFinished in 0.01 seconds\n3 examples, 0 failures\n",
    ),
    (
        "bats",
        "bats test/",
        "1..2\nok 1 addition works\nnot ok 2 subtraction works\n# (in test file test/math.bats, line 7)\n",
        "1 failed",
        "1..2\nok 1 addition works\nok 2 subtraction works\n",
    ),
    (
        "npm",
        "npm test",
        "> demo@1.0.0 test\n> node test.js\n\nassertion failed: 1 !== 2\n"
        "npm ERR! Test failed.  See above for more details.\n",
        "npm ERR! Test failed",
        "> demo@1.0.0 test\n> node test.js\n\nall good\n",
    ),
    (
        "yarn",
        "yarn test",
        "yarn run v1.22.19\n$ node test.js\nboom\nerror Command failed with exit code 1.\n"
        "info Visit https://yarnpkg.com/en/docs/cli/run for documentation about this command.\n",
        "error Command failed with exit code 1",
        "yarn run v1.22.19\n$ node test.js\nall good\nDone in 0.05s.\n",
    ),
]


def bash(host: PluginHost, tmp_path: Path, command: str, response: Any, session: MemorySession | None = None) -> list[str]:
    payload = {"tool_name": "Bash", "tool_input": {"command": command}, "tool_response": response}
    return call(host, "PostToolUse", payload, tmp_path, session=session or MemorySession())


def log_text(tmp_path: Path) -> str:
    path = tmp_path / "state" / "test-failures.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


@pytest.mark.parametrize(("framework", "command", "failing", "summary", "passing"), FRAMEWORK_SAMPLES, ids=[s[0] for s in FRAMEWORK_SAMPLES])
def test_framework_failure_detected(
    host: PluginHost, tmp_path: Path, framework: str, command: str, failing: str, summary: str, passing: str
) -> None:
    assert detect(command, failing) == (framework, summary)
    messages = bash(host, tmp_path, command, {"stdout": failing, "stderr": "", "interrupted": False})
    assert messages == [
        f"Tests failed ({framework}): {summary}. Fix the failures before committing; details kept in the loop's log."
    ]
    header = log_text(tmp_path).splitlines()[0]
    assert header.startswith("### ralph test failure | ")
    assert header.endswith(f" | {framework} | {summary} | $ {command}")
    assert latest_failure(tmp_path / "state") is not None


@pytest.mark.parametrize(("framework", "command", "failing", "summary", "passing"), FRAMEWORK_SAMPLES, ids=[s[0] for s in FRAMEWORK_SAMPLES])
def test_framework_passing_run_is_quiet_and_clears_the_failure(
    host: PluginHost, tmp_path: Path, framework: str, command: str, failing: str, summary: str, passing: str
) -> None:
    assert detect(command, passing) is None
    bash(host, tmp_path, command, {"stdout": failing, "stderr": ""})
    assert bash(host, tmp_path, command, {"stdout": passing, "stderr": ""}) == []
    assert log_text(tmp_path).splitlines()[-1].startswith("### ralph tests passed | ")
    assert latest_failure(tmp_path / "state") is None


def test_exact_message_for_pytest(host: PluginHost, tmp_path: Path) -> None:
    output = "FAILED a.py::t1\nFAILED a.py::t2\n==== 2 failed, 1 passed in 0.30s ====\n"
    assert bash(host, tmp_path, "pytest", {"stdout": output}) == [
        "Tests failed (pytest): 2 failed. Fix the failures before committing; details kept in the loop's log."
    ]


def test_string_tool_response(host: PluginHost, tmp_path: Path) -> None:
    messages = bash(host, tmp_path, "npm test", "Tests:       2 failed, 1 passed, 3 total\n")
    assert messages and messages[0].startswith("Tests failed (jest): 2 failed.")


def test_stderr_is_read_too(host: PluginHost, tmp_path: Path) -> None:
    messages = bash(host, tmp_path, "go test ./...", {"stdout": "", "stderr": "--- FAIL: TestA (0.00s)\n--- FAIL: TestB (0.00s)\n"})
    assert messages and messages[0].startswith("Tests failed (go): 2 tests failed: TestA, TestB.")


def test_colour_codes_are_stripped(host: PluginHost, tmp_path: Path) -> None:
    output = (
        "\x1b[0m\x1b[7m\x1b[1m\x1b[31m FAIL \x1b[39m\x1b[22m\x1b[27m\x1b[0m \x1b[2msrc/\x1b[22m\x1b[1msum.test.js\x1b[22m\n"
        "\x1b[1mTests:       \x1b[22m\x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m, \x1b[1m\x1b[32m2 passed\x1b[39m\x1b[22m, 3 total\n"
    )
    messages = bash(host, tmp_path, "npx jest", {"stdout": output})
    assert messages and messages[0].startswith("Tests failed (jest): 1 failed.")
    assert "\x1b" not in log_text(tmp_path)
    assert "FAIL  src/sum.test.js" in log_text(tmp_path)


@pytest.mark.parametrize(
    "output",
    [
        "FAILED tests/test_a.py::test_x - assert 0\n",
        " FAIL  src/x.test.js\n",
        "FAIL\texample.com/m\t0.01s\n",
        "not ok 3 something\n",
        "error Command failed with exit code 1.\n",
    ],
)
def test_weak_lines_need_a_test_command(host: PluginHost, tmp_path: Path, output: str) -> None:
    assert bash(host, tmp_path, "cat build.log", {"stdout": output}) == []
    assert log_text(tmp_path) == ""
    messages = bash(host, tmp_path, "make test", {"stdout": output})
    assert messages and messages[0].startswith("Tests failed (")


@pytest.mark.parametrize(
    "output",
    [
        "Tests:       1 failed, 1 total\n",
        "3 failed, 2 passed in 1.20s\n",
        "--- FAIL: TestX (0.00s)\n",
        "4 examples, 2 failures\n",
        "  1 failing\n",
        "npm ERR! Test failed.  See above for more details.\n",
    ],
)
def test_strong_lines_count_after_any_command(host: PluginHost, tmp_path: Path, output: str) -> None:
    messages = bash(host, tmp_path, "cat ci-output.txt", {"stdout": output})
    assert messages and messages[0].startswith("Tests failed (")


def test_grep_output_does_not_trigger(host: PluginHost, tmp_path: Path) -> None:
    output = (
        "pkg/a_test.go:--- FAIL: TestX (0.00s)\n"
        "logs/ci.txt:Tests:       1 failed, 1 total\n"
        "notes.md:2 failed, 1 passed in 0.1s\n"
        "notes.md:not ok 3 x\n"
        "spec.txt:4 examples, 2 failures\n"
    )
    assert bash(host, tmp_path, "grep -rn 'FAIL' .", {"stdout": output}) == []
    assert log_text(tmp_path) == ""


def test_pip_install_pytest_does_not_trigger(host: PluginHost, tmp_path: Path) -> None:
    output = (
        "Collecting pytest\n  Downloading pytest-8.0.0-py3-none-any.whl\n"
        "FAILED building wheel for something\n FAIL  not-a-test\nnot ok 1 whatever\n"
        "Successfully installed pytest-8.0.0\n"
    )
    assert not is_test_command("pip install pytest")
    assert bash(host, tmp_path, "pip install pytest", {"stdout": output}) == []
    assert log_text(tmp_path) == ""  # not a test run: no pass marker either


@pytest.mark.parametrize(
    "command",
    [
        "pytest", "py.test -x tests/", "python -m pytest -q", ".venv/bin/python3 -m pytest", "uv run pytest",
        "poetry run pytest -k foo", "npm test", "npm run test:unit", "npm t", "yarn test", "pnpm test",
        "go test ./...", "npx jest --ci", "npx vitest run", "mocha", "bundle exec rspec", "bats test/",
        "make test", "tox -e py311", "cd app && CI=1 npm test", "timeout 300 pytest", "pytest 2>&1 | tail -40",
        "bash -c 'pytest -q'", "python -m unittest discover", "cargo test",
    ],
)
def test_is_test_command(command: str) -> None:
    assert is_test_command(command)


@pytest.mark.parametrize(
    "command",
    [
        "pip install pytest", "grep -rn FAIL .", "cat test-output.log", "ls tests", "npm install", "yarn add jest",
        "git commit -m 'fix pytest failures'", "echo pytest", "go build ./...", "make", "python app.py", "",
    ],
)
def test_is_not_test_command(command: str) -> None:
    assert not is_test_command(command)


def test_other_tools_are_ignored(host: PluginHost, tmp_path: Path) -> None:
    payload = {"tool_name": "Read", "tool_input": {"file_path": "log"}, "tool_response": "Tests:       1 failed, 1 total\n"}
    assert call(host, "PostToolUse", payload, tmp_path, session=MemorySession()) == []
    assert log_text(tmp_path) == ""


def test_interrupted_or_failed_run_logs_no_pass(host: PluginHost, tmp_path: Path) -> None:
    assert bash(host, tmp_path, "pytest", {"stdout": "collecting ...", "interrupted": True}) == []
    assert bash(host, tmp_path, "pytest", {"stdout": "Killed", "is_error": True}) == []
    assert log_text(tmp_path) == ""


def test_log_keeps_the_last_100_lines_cut_at_500_chars(host: PluginHost, tmp_path: Path) -> None:
    lines = [f"line {i:03d}" for i in range(150)] + ["E" * 900, "1 failed, 2 passed in 0.50s"]
    bash(host, tmp_path, "pytest", {"stdout": "\n".join(lines) + "\n\n\n"})
    block = latest_failure(tmp_path / "state")
    assert block is not None
    block_lines = block.splitlines()
    assert len(block_lines) == 101
    assert block_lines[0].startswith("### ralph test failure | ")
    assert block_lines[1] == "line 052"
    assert block_lines[-2] == "E" * 500
    assert block_lines[-1] == "1 failed, 2 passed in 0.50s"


def test_log_rotates_before_passing_100kb(host: PluginHost, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    old = "### ralph test failure | 2024-01-01T00:00:00.000+00:00 | pytest | 1 failed | $ pytest\n" + "x" * 99 + "\n"
    (state / "test-failures.log").write_text(old * 548, encoding="utf-8")
    size_before = (state / "test-failures.log").stat().st_size
    assert 100 * 1024 - 1000 < size_before <= 100 * 1024
    bash(host, tmp_path, "pytest", {"stdout": "\n".join(f"output line {i}" for i in range(100)) + "\n3 failed in 1.0s\n"})
    rotated = state / "test-failures.log.1"
    assert rotated.stat().st_size == size_before
    fresh = (state / "test-failures.log").read_text(encoding="utf-8")
    assert fresh.startswith("### ralph test failure | ") and "| pytest | 3 failed | $ pytest" in fresh.splitlines()[0]
    assert (state / "test-failures.log").stat().st_size < 100 * 1024


def test_small_appends_do_not_rotate(host: PluginHost, tmp_path: Path) -> None:
    for _ in range(3):
        bash(host, tmp_path, "pytest", {"stdout": "1 failed in 0.1s\n"})
    assert not (tmp_path / "state" / "test-failures.log.1").exists()
    assert log_text(tmp_path).count("### ralph test failure | ") == 3


def test_latest_failure(host: PluginHost, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert latest_failure(state) is None
    before = time.time() - 1
    bash(host, tmp_path, "pytest", {"stdout": "first\n1 failed in 0.1s\n"})
    bash(host, tmp_path, "pytest", {"stdout": "second\n2 failed in 0.1s\n"})
    block = latest_failure(state)
    assert block is not None and "second" in block and "first" not in block
    assert latest_failure(str(state), since=before) == block
    assert latest_failure(state, since=time.time() + 60) is None
    past = (datetime.now(timezone.utc) - timedelta(minutes=5)).isoformat()
    future = (datetime.now(timezone.utc) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert latest_failure(state, since=past) == block
    assert latest_failure(state, since=future) is None
    bash(host, tmp_path, "pytest", {"stdout": "3 passed in 0.1s\n"})
    assert latest_failure(state) is None
    bash(host, tmp_path, "pytest", {"stdout": "third\n1 failed in 0.1s\n"})
    again = latest_failure(state)
    assert again is not None and "third" in again


def test_prompt_context_hook(host: PluginHost, tmp_path: Path) -> None:
    run_dir = tmp_path / "state"
    assert host.prompt_context(run_dir, 2, time.time()) == []
    since = time.time() - 1
    bash(host, tmp_path, "pytest -q", {"stdout": "E   assert 1 == 2\n1 failed in 0.1s\n"})
    [item] = host.prompt_context(run_dir, 2, since)
    block = latest_failure(run_dir)
    assert item == (
        "Tests failed during the previous iteration and no passing run followed. "
        f"The last failure (as the test runner printed it):\n\n```\n{block}\n```"
    )
    assert "E   assert 1 == 2" in item
    assert host.prompt_context(run_dir, 3, time.time() + 60) == []
    bash(host, tmp_path, "pytest -q", {"stdout": "1 passed in 0.1s\n"})
    assert host.prompt_context(run_dir, 3, since) == []


# -- activity and the read log -----------------------------------------------------------------------


def test_activity_log_records_length_never_the_prompt(host: PluginHost, tmp_path: Path) -> None:
    secret = "please refactor the zanzibar-4471 module"
    session = MemorySession(); session.set("files_read", ["/p/a.py"])
    assert call(host, "UserPromptSubmit", {"prompt": secret, "session_id": "s-1"}, tmp_path, session=session) == []
    text = (tmp_path / "state" / "activity.jsonl").read_text(encoding="utf-8")
    assert "zanzibar" not in text and secret not in text
    [record] = [json.loads(line) for line in text.splitlines()]
    assert set(record) == {"ts", "session", "prompt_length"}
    assert record["session"] == "s-1" and record["prompt_length"] == len(secret)
    datetime.fromisoformat(record["ts"])
    assert session.get("files_read") == []
    call(host, "UserPromptSubmit", {"prompt": "again"}, tmp_path, session=session)
    assert len((tmp_path / "state" / "activity.jsonl").read_text(encoding="utf-8").splitlines()) == 2


def test_session_start_resets_read_log_and_alerts(host: PluginHost, tmp_path: Path) -> None:
    session = MemorySession()
    session.set("files_read", ["/p/a.py"])
    session.set("context_alerts", [50, 60])
    call(host, "SessionStart", {"source": "resume"}, tmp_path, session=session)
    assert session.get("files_read") == [] and session.get("context_alerts") == []
