"""The progress log stays bounded: old entries move to an archive (nothing lost), the prompt quotes the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralph.loop import progresslog
from ralph.testing.model_server import IterationScript
from ralph.testing.project import RalphProject, story
from ralph.testing.scripting import approve_turns, implement_turns

HEADER = (
    "# Ralph Progress Log\nStarted: 2026-01-01\nPRD: demo\n\n## Codebase Patterns\n"
    "- run tests with `make test`\n- config lives in settings.toml\n\n---\n"
)


def entry(n: int, story_id: str | None = None) -> str:
    sid = story_id or f"US-{n:03d}"
    return (
        f"\n## 2026-01-01 10:{n % 60:02d} - Iteration {n} - implement - {sid}: story {n}\n"
        f"- What was done: step {n}\n- Learnings: lesson {n}\n---\n"
    )


def log_text(count: int) -> str:
    return HEADER + "".join(entry(n) for n in range(1, count + 1))


def test_parse_splits_header_and_entries_losslessly() -> None:
    text = log_text(4) + "\n[ralph loop 2026-01-01 11:00] iteration 5: the loop undid something\n"
    log = progresslog.parse(text)
    assert "".join([log.header, *log.entries]) == text
    assert len(log.entries) == 5 and log.entries[-1].strip().startswith("[ralph loop")
    assert log.patterns.startswith("## Codebase Patterns") and "make test" in log.patterns
    assert not log.patterns.endswith("---")
    # a log without entries is all header; text without the patterns heading still splits on entries
    assert progresslog.parse(HEADER).entries == []
    assert len(progresslog.parse("notes\n## a\nx\n## b\ny\n").entries) == 2


def test_trim_moves_old_entries_verbatim_and_loses_nothing(tmp_path: Path) -> None:
    progress = tmp_path / "progress.txt"
    original = log_text(30)
    progress.write_text(original)
    assert progresslog.trim(progress, 5) == 25
    kept = progresslog.parse(progress.read_text())
    assert kept.header == HEADER and len(kept.entries) == 5
    assert "Iteration 30 " in kept.entries[-1] and "Iteration 26 " in kept.entries[0]
    archive = progresslog.archive_path(progress)
    assert archive.name == "progress-archive.txt"
    archived = archive.read_text()
    first_line, rest = archived.split("\n", 1)
    assert first_line.startswith("# Progress log archive")
    assert rest + "".join(kept.entries) == original[len(HEADER):]  # every entry, in order, once
    # a second trim appends; trimming off or nothing to trim changes nothing
    progress.write_text(progress.read_text() + entry(31) + entry(32))
    assert progresslog.trim(progress, 5) == 2
    assert archive.read_text().count("# Progress log archive") == 1
    assert "Iteration 27 " in archive.read_text() and "Iteration 28 " not in archive.read_text()
    before = progress.read_text()
    assert progresslog.trim(progress, 0) == 0 and progresslog.trim(progress, 50) == 0
    assert progress.read_text() == before
    assert progresslog.archive_path(tmp_path / "progress.md").name == "progress-archive.md"


def test_excerpt_quotes_patterns_and_the_relevant_entries(tmp_path: Path) -> None:
    progress = tmp_path / "progress.txt"
    progress.write_text(HEADER + entry(1, "US-999") + "".join(entry(n) for n in range(2, 40)))
    text = progresslog.excerpt(progress, "US-999", 3)
    assert "make test" in text
    assert "Iteration 1 " in text  # the selected story's history wins a place
    assert "Iteration 39 " in text and "Iteration 38 " in text and "Iteration 37 " not in text
    assert text.index("Iteration 1 ") < text.index("Iteration 38 ") < text.index("Iteration 39 ")
    assert len(progresslog.excerpt(progress, None, 0)) < len(HEADER)
    huge = tmp_path / "huge.txt"
    huge.write_text(HEADER + "".join(entry(n) + "- detail\n" * 200 for n in range(1, 4)))
    assert len(progresslog.excerpt(huge, None, 3)) <= progresslog.PATTERNS_MAX_CHARS + progresslog.ENTRIES_MAX_CHARS + 50
    assert progresslog.excerpt(tmp_path / "missing.txt", None, 3) == ""


@pytest.mark.real_claude
def test_the_loop_archives_old_entries_and_the_prompt_names_the_archive(
    ralph_project: RalphProject, scripted_model, claude_binary, claude_agent_env
) -> None:
    ralph_project.write_stories([story("US-001", "Greeting file", acceptanceCriteria=["hello.txt says hello"])], commit=False)
    progress = ralph_project.ralph_dir / "progress.txt"
    original_entries = "".join(entry(n) for n in range(1, 31))
    progress.write_text(progress.read_text() + original_entries)
    (ralph_project.path / "ralph.toml").write_text("progress_keep_entries = 5\nprompt_progress_entries = 2\n")
    ralph_project.commit_all("thirty progress entries")
    new_entry = "printf '\\n## Iteration 31 - implement - US-001\\n- done\\n---\\n' >> ralph/progress.txt"
    script = IterationScript({1: implement_turns("US-001", "hello.txt", "hello", steps=[new_entry]),
                              2: approve_turns("US-001", 1)})
    server = scripted_model(script)
    result = ralph_project.run("run", "--runner", "direct", "--agent", "claude", env=claude_agent_env(server.url))
    assert result.returncode == 0, result.stdout + result.stderr

    archive = ralph_project.ralph_dir / "progress-archive.txt"
    kept = progresslog.parse(progress.read_text()).entries
    # 25 moved before iteration 1; iteration 1 added one, so one more moved before iteration 2
    assert [e["moved"] for e in ralph_project.events("progress_trimmed")] == [25, 1]
    assert len(kept) == 5 and "## Iteration 31 - implement - US-001" in kept[-1]
    # nothing lost: every entry is in the archive or still in the log, once, in order
    assert archive.read_text().split("\n", 1)[1] + "".join(kept[:4]) == original_entries
    log = ralph_project.git("log", "--format=%s")
    assert "ralph: before iteration 1 - archive 25 progress entries" in log
    assert "ralph: before iteration 2 - archive 1 progress entries" in log
    assert ralph_project.git("status", "--porcelain") == ""
    # the prompt the CLI really sent: the story's JSON, recent entries, and where the rest is
    first = next(r.first_user_text for r in server.requests if script.key_of(r) == 1)
    assert '"acceptanceCriteria": ["hello.txt says hello"]' in first
    assert "`ralph/progress-archive.txt`" in first
    assert "step 30\n" in first and "step 29\n" in first and "step 28\n" not in first
    assert "step 1\n" not in first
    second = next(r.first_user_text for r in server.requests if script.key_of(r) == 2)
    assert "## Iteration 31 - implement - US-001" in second
    assert json.loads(ralph_project.tasks_path.read_text())["userStories"][0]["passes"] is True
