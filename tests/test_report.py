"""``ralph report``: per-story iterations, reviews, gate failures, time and cost; review
analytics; the HTML page, opened in a real headless Chromium and screenshotted.

The run is a real ``ralph run`` (replay agent as a subprocess, real git): implement,
review with changes requested, review-fix, approval; an illegal self-approval the
loop undoes; a timed-out iteration.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from ralph.lifecycle.report import build_project_report, render_text, review_analytics
from ralph.testing.project import RalphProject, story

def _set(story_id: str, **fields: Any) -> dict[str, Any]:
    return {"set": {"story": story_id, "fields": fields}}


SCRIPT = {
    # US-001: implement, review (changes requested), review-fix, review (approved)
    "1": [{"write": {"path": "a.txt", "content": "a"}}, _set("US-001", reviewStatus="needs_review"), {"commit": "feat a"}, {"cost": 0.25}, {"say": "a"}],
    "2": [_set("US-001", reviewStatus="changes_requested", reviewCount=1, reviewFeedback="round it"), {"commit": "review a"}, {"cost": 0.5}, {"say": "changes"}],
    "3": [{"write": {"path": "a.txt", "content": "aa"}}, _set("US-001", reviewStatus="needs_review", reviewFeedback=""), {"commit": "fix a"}, {"cost": 0.125}, {"say": "fixed"}],
    "4": [_set("US-001", reviewStatus="approved", passes=True, reviewCount=2, notes="rounded"), {"commit": "approve a"}, {"cost": 0.0625}, {"say": "ok"}],
    # US-002: an implement iteration that approves itself (undone), one that times out, then the real work
    "5": [{"write": {"path": "b.txt", "content": "b"}}, _set("US-002", reviewStatus="approved", passes=True, notes="x"), {"commit": "b"}, {"cost": 1.0}, {"say": "sneaky"}],
    "6": [{"say": "thinking"}, {"sleep": 5}],
    "7": [{"write": {"path": "b.txt", "content": "bb"}}, _set("US-002", reviewStatus="needs_review"), {"commit": "b2"}, {"cost": 0.5}, {"say": "b"}],
    "8": [_set("US-002", reviewStatus="approved", passes=True, reviewCount=1, notes="ok"), {"commit": "approve b"}, {"cost": 0.25}, {"say": "ok <promise>COMPLETE</promise>"}],
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> RalphProject:
    from ralph.testing.project import make_project

    root = tmp_path_factory.mktemp("report")
    project = make_project(root)
    project.write_stories([
        story("US-001", "Cart total"),
        story("US-002", "Receipt email", priority=2, dependsOn=["US-001"]),
        story("US-003", "Refunds", priority=3),
    ])
    script = root / "script.json"
    script.write_text(json.dumps({"iterations": SCRIPT, "default": [{"say": "nothing to do"}]}))
    result = project.run(
        "run", "--runner", "direct", "--agent", "replay", "-n", "8", "--timeout", "1.5",
        env={"RALPH_REPLAY_SCRIPT": str(script)},
    )
    assert result.returncode == 1, result.stderr  # US-003 is left: iterations exhausted
    return project


def _row(text: str, story_id: str) -> list[str]:
    """The cells of a story's row (columns are separated by two or more spaces)."""
    line = next(line for line in text.splitlines() if line.startswith(story_id + " "))
    return re.split(r"\s{2,}", line.strip())


def test_terminal_report_per_story(finished: RalphProject) -> None:
    result = finished.run("report")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "8 iterations" in text and "cost $2.6875" in text and "max iterations (8) reached" in text
    # story, title..., state, iters, impl, reviews, fixes, reviewCount, gate fails, violations, time, cost
    assert _row(text, "US-001") == ["US-001", "Cart total", "approved", "4", "1", "2", "1", "2", "0", "0", _row(text, "US-001")[10], "$0.9375"]
    # the timed-out iteration is the loop's failed "iteration" gate; the self-approval two violations
    two = _row(text, "US-002")
    assert two[:10] == ["US-002", "Receipt email", "approved", "4", "3", "1", "0", "1", "1", "2"]
    assert two[-1] == "$1.7500"
    assert _row(text, "US-003") == ["US-003", "Refunds", "open", "0", "0", "0", "0", "0", "0", "0", "0s", "$0.0000"]
    assert "reviewCount of 2 completed stories: 1: 1, 2: 1 (cap 5)" in text


def test_report_reads_the_event_log_of_a_killed_run(finished: RalphProject, tmp_path: Path) -> None:
    """No summary.json (the run was killed): iterations come from events.jsonl, states from the task list."""
    run = finished.run_dirs()[-1]
    copy = tmp_path / "killed"
    shutil.copytree(run, copy)
    (copy / "summary.json").unlink()
    lines = [json.loads(line) for line in (copy / "events.jsonl").read_text().splitlines()]
    cut = next(i for i, e in enumerate(lines) if e["kind"] == "iteration_started" and e["iteration"] == 3)
    (copy / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines[: cut + 1]) + '{"kind": "iteration_fin')
    result = finished.run("report", "--run", str(copy))
    assert result.returncode == 0, result.stderr
    assert "3 iterations" in result.stdout and "no summary: the run was killed" in result.stdout
    assert _row(result.stdout, "US-001")[2:6] == ["approved", "3", "1", "1"]


def test_gate_failures_and_timeouts_from_events(tmp_path: Path) -> None:
    run = tmp_path / "20260101-000000-1"
    run.mkdir()
    events = [
        {"kind": "iteration_started", "iteration": 1, "mode": "implement", "story": "US-001", "elapsed": 0.5},
        {"kind": "gate", "iteration": 1, "story": "US-001", "gate": "tests", "passed": False},
        {"kind": "gate", "iteration": 1, "story": "US-001", "gate": "lint", "passed": True},
        {"kind": "gate_failed", "iteration": 1, "story": "US-001", "gate": "tests"},
        {"kind": "iteration_finished", "iteration": 1, "seconds": 30, "cost": 0.5, "timed_out": False, "exit_code": 0},
        {"kind": "iteration_started", "iteration": 2, "mode": "implement", "story": "US-001", "elapsed": 31},
        {"kind": "iteration_finished", "iteration": 2, "seconds": 60, "cost": 0.25, "timed_out": True, "exit_code": -9},
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    report = build_project_report([run], [{"id": "US-001", "title": "t", "passes": False, "reviewCount": 0}])
    (row,) = report.stories
    assert (row.iterations, row.gate_failures, row.seconds, row.cost) == (2, 1, 90, 0.75)
    first, second = report.iterations
    assert (first.start, first.gate_failures, first.failed) == (0.5, ["tests"], True)
    assert (second.start, second.timed_out, second.failed) == (31, True, True)
    assert "US-001  t      open   2      2     0        0      0            1" in render_text(report)


@pytest.mark.parametrize(
    ("counts", "auto", "expected"),
    [
        ([1, 1, 1, 2], [], ["mostly 1s (3 of 4 approved at the first review): the review cycle costs little"]),
        ([3, 4, 1], [], ["many 3-4s (2 of 3): the reviews are catching real issues"]),
        ([1, 5, 2], [], ["1 cap hit (US-1): auto-approved at the cap, may need manual attention"]),
        ([1, 2, 2], ["US-0"], ["1 cap hit (US-0): auto-approved at the cap, may need manual attention"]),
    ],
)
def test_review_analytics(counts: list[int], auto: list[str], expected: list[str]) -> None:
    stories = [{"id": f"US-{n}", "passes": True, "reviewCount": c, "autoApproved": f"US-{n}" in auto} for n, c in enumerate(counts)]
    stories.append({"id": "US-9", "passes": False, "reviewCount": 4})  # open stories do not count
    analytics = review_analytics(stories, cap=5)
    assert analytics.verdicts == expected
    assert analytics.completed == len(counts)
    assert sum(analytics.distribution.values()) == len(counts)


def test_report_without_runs_uses_the_task_list(ralph_project: RalphProject) -> None:
    ralph_project.write_stories([
        story("US-001", passes=True, reviewStatus="approved", reviewCount=5, notes="n",
              reviewFeedback="[AUTO-APPROVED AT CAP] naming"),
        story("US-002", priority=2),
    ])
    result = ralph_project.run("report")
    assert result.returncode == 0, result.stderr
    assert "no run recorded for this project" in result.stdout
    assert _row(result.stdout, "US-001")[2] == "approved (at cap)"
    assert "1 cap hit (US-001)" in result.stdout


def test_html_is_self_contained(finished: RalphProject, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = finished.run("report", "--html", str(out))
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    for external in ("<script", "<link", "src=", "href=", "@import", "url("):
        assert external not in page
    assert page.count('<g class="iteration"') == 8
    assert page.count('data-mode="review-fix"') == 1 and page.count('data-mode="review"') == 3
    assert page.count('stroke="#dc2626" stroke-width="3">') == 2  # the undone iteration and the timeout
    assert "&lt;" not in page.split("<body>")[0]  # escaping happens only in the body


# -- the page in a real browser -----------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB/RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = previous[x]
            c = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line[i] for i in range(stride) if i % bpp < 3) if bpp == 4 else bytes(line))
        previous = line
    return width, height, rows


def _count_colour(rows: list[bytes], rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    count = 0
    for row in rows:
        for x in range(0, len(row), 3):
            if all(abs(row[x + i] - rgb[i]) <= tolerance for i in range(3)):
                count += 1
    return count


def test_html_report_renders_in_headless_chromium(finished: RalphProject, tmp_path: Path) -> None:
    from ralph.testing.requirements import require

    browser = _chromium()
    require(browser is not None, "a headless Chromium is needed (apt-get install -y chromium)")
    assert browser is not None
    page = tmp_path / "report.html"
    result = finished.run("report", "--html", str(page))
    assert result.returncode == 0, result.stderr
    shot = tmp_path / "report.png"
    run = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
         "--window-size=1280,1000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    data = shot.read_bytes()
    assert len(data) > 30_000, f"screenshot is only {len(data)} bytes: a blank page?"
    width, height, rows = _decode_png(data)
    assert (width, height) == (1280, 1000)
    # the timeline's bars, in each mode's colour, and the red outline of failed iterations
    pixels = {mode: _count_colour(rows, rgb) for mode, rgb in {
        "implement": (0x25, 0x63, 0xEB), "review": (0xD9, 0x77, 0x06), "review-fix": (0x7C, 0x3A, 0xED),
        "failed": (0xDC, 0x26, 0x26), "histogram": (0x05, 0x96, 0x69),
    }.items()}
    assert all(count > 300 for count in pixels.values()), pixels
    assert pixels["implement"] > pixels["review-fix"]  # 4 implement bars, 1 review-fix bar
    white = _count_colour(rows, (255, 255, 255), tolerance=0)
    assert white < width * height * 0.95, "the page is (almost) blank"


# -- where the cost and time went, and the forecast --------------------------------------------------


def test_status_and_report_say_where_the_money_went_and_forecast_the_stories_left(ralph_project, tmp_path) -> None:
    """A replay run with known costs: a first implementation, a retry, a send-back after a failed gate, three
    review rounds; two stories are left, forecast from the one done."""
    ralph_project.write_stories([story("US-001"), story("US-002", priority=2), story("US-003", priority=3)],
                                verifyCommands=["test ! -e broken"])

    def step(cost: float, *actions: dict[str, Any]) -> list[dict[str, Any]]:
        return [*actions, {"cost": cost}, {"say": "done"}]

    def fields(**values: Any) -> dict[str, Any]:
        return {"set": {"story": "US-001", "fields": values}}

    script = {
        1: step(0.2, {"write": {"path": "a.txt", "content": "a"}}, {"commit": "wip"}),
        2: step(0.1, {"write": {"path": "broken", "content": "x"}}, fields(reviewStatus="needs_review"), {"commit": "b"}),
        3: step(0.3, {"run": "rm broken"}, fields(reviewStatus="needs_review"), {"commit": "fix"}),
        4: step(0.1, fields(reviewStatus="changes_requested", reviewCount=1, reviewFeedback="name it better"),
                {"commit": "review"}),
        5: step(0.05, {"write": {"path": "a.txt", "content": "better"}}, fields(reviewStatus="needs_review", reviewFeedback=""),
                {"commit": "review fix"}),
        6: step(0.1, fields(reviewStatus="approved", passes=True, reviewCount=2, notes="ok"), {"commit": "approve"}),
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"iterations": {str(k): v for k, v in script.items()}}))
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "-n", "6",
                               env={"RALPH_REPLAY_SCRIPT": str(path)})
    assert result.returncode == 1, result.stderr
    modes = [(e["mode"], e["story"]) for e in ralph_project.events("iteration_started")]
    assert modes == [("implement", "US-001")] * 3 + [("review", "US-001"), ("review-fix", "US-001"), ("review", "US-001")]

    status = ralph_project.run("status")
    assert status.returncode == 0, status.stderr
    for shown in (status.stdout, ralph_project.run("report").stdout):
        lines = {line.strip().split("  ")[0]: line for line in shown.splitlines() if line.startswith("  ")}
        assert "$0.2000" in lines["first implementation"] and lines["first implementation"].rstrip().endswith("1")
        assert "$0.1000" in lines["retries"] and lines["retries"].rstrip().endswith("1")
        assert "$0.3000" in lines["send-backs"] and lines["send-backs"].rstrip().endswith("1")
        assert "$0.2500" in lines["review rounds"] and lines["review rounds"].rstrip().endswith("3")
        assert "forecast for the 2 stories left (from the 1 done here: $0.8500 and" in shown
        assert "about $1.7000 and" in shown
    data = json.loads(ralph_project.run("status", "--json").stdout)
    assert data["spending"]["forecast"]["remaining"] == ["US-002", "US-003"]
    assert data["spending"]["forecast"]["cost"] == pytest.approx(1.7)
    assert data["spending"]["kinds"]["send-backs"]["cost"] == pytest.approx(0.3)

    html_file = tmp_path / "report.html"
    assert ralph_project.run("report", "--html", str(html_file)).returncode == 0
    page = html_file.read_text(encoding="utf-8")
    assert '<section class="spending">' in page and "<td>send-backs</td><td>$0.3000</td>" in page
    assert "about $1.7000 and" in page
