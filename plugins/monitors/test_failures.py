"""Test-failure detection after Bash calls (seed 001, PostToolUse), and feedback to the next prompt.

Framework-specific summary lines are recognised (Jest, Vitest, pytest, Go,
Mocha, RSpec, Bats, npm, yarn).  Strong lines count after any command; weaker
ones (``FAIL x.test.js``, ``FAILED x.py``, ``not ok 3``) only when the command
looks like a test run.  Every pattern must start a line, so ``grep`` output such
as ``file.go:--- FAIL:`` does not trigger.

A failure is appended to ``<state_dir>/test-failures.log`` (a header and the
last 100 output lines); a passing test run adds a one-line marker, so the loop
can tell whether the last failure was fixed.  No rollback: the loop owns git.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ralph.api import HookEvent, hookimpl
from ralph.api.text import fenced

LOG_NAME = "test-failures.log"
MAX_LOG_BYTES = 100 * 1024
MAX_LINES = 100
MAX_LINE_CHARS = 500
FAILURE_HEADER = "### ralph test failure | "
PASS_HEADER = "### ralph tests passed | "
AGENT_MESSAGE = "Tests failed ({framework}): {summary}. Fix the failures before committing; details kept in the loop's log."

# -- lazily compiled patterns (nothing is compiled until the first Bash call) --------------------

_compiled: dict[str, Any] | None = None

_TEST_PROGRAMS = frozenset(
    {"pytest", "py.test", "jest", "vitest", "mocha", "rspec", "bats", "tox", "nox", "nosetests", "ava", "phpunit"}
)
_WRAPPERS = frozenset(
    {"sudo", "time", "env", "nice", "nohup", "command", "exec", "xvfb-run", "npx", "pnpx", "bunx", "stdbuf", "dotenv"}
)
_RUNNER_WRAPPERS = {"uv": "run", "poetry": "run", "pipenv": "run", "pdm": "run", "hatch": "run", "rye": "run",
                    "bundle": "exec", "pnpm": "exec", "yarn": "exec"}
_PACKAGE_MANAGERS = frozenset({"npm", "pnpm", "yarn", "bun", "deno"})
_PYTHON_MODULES = frozenset({"pytest", "unittest", "tox", "nox", "nose", "nose2"})


def _patterns() -> dict[str, Any]:
    global _compiled
    if _compiled is None:
        m = re.MULTILINE
        _compiled = {
            "ansi": re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]"),
            "separators": re.compile(r"&&|\|\||[;|&\n()`]"),
            "assignment": re.compile(r"^[A-Za-z_][A-Za-z0-9_]*="),
            "python": re.compile(r"^(?:python[0-9.]*|pypy[0-9.]*|coverage)$"),
            # strong: count after any command
            "jest": re.compile(r"^[ \t]*Tests:[ \t]+(\d+) failed", m),
            "jest_suites": re.compile(r"^[ \t]*Test Suites:[ \t]+(\d+) failed", m),
            "pytest": re.compile(r"^[ \t]*(?:=+[ \t]+)?(\d+) failed\b.*\bin [0-9.]+ ?s\b", m),
            # pytest's summary line without its duration (-q, -p no:terminal ...): nothing else on the line
            "pytest_counts": re.compile(
                r"^[ \t]*(?:=+[ \t]+)?(\d+) failed(?:, \d+ (?:passed|skipped|deselected|xfailed|xpassed|errors?|"
                r"warnings?|rerun))*[ \t]*=*[ \t]*$", m),
            "go": re.compile(r"^[ \t]*--- FAIL: (\S+)", m),
            "rspec": re.compile(r"^[ \t]*(\d+) examples?, (\d+) failures?", m),
            "mocha": re.compile(r"^[ \t]*(\d+) failing\b", m),
            "npm": re.compile(r"^npm ERR! Test failed", m),
            # weak: only when the command looks like a test run
            "vitest_tests": re.compile(r"^[ \t]*Tests[ \t]+(\d+) failed", m),
            "vitest_files": re.compile(r"^[ \t]*Test Files[ \t]+(\d+) failed", m),
            "fail_file": re.compile(r"^[ \t]*FAIL {1,4}(\S+)", m),
            "unittest": re.compile(r"^FAILED \((?:failures|errors)=.*$", m),
            "pytest_failed": re.compile(r"^FAILED (\S+)", m),
            "pytest_failures": re.compile(r"^=+ FAILURES =+[ \t]*$", m),
            "go_package": re.compile(r"^FAIL\t(\S+)", m),
            "bats": re.compile(r"^not ok (\d+)\b", m),
            "bats_summary": re.compile(r"^[ \t]*(\d+) tests?, (\d+) failures?", m),
            "npm_lifecycle": re.compile(r"^npm (?:ERR!|error) Lifecycle script `?test", m),
            "yarn": re.compile(r"^error Command failed with exit code (\d+)", m),
        }
    return _compiled


def strip_ansi(text: str) -> str:
    return _patterns()["ansi"].sub("", text)


# -- is this a test run? ----------------------------------------------------------------------


def _segment_is_test(tokens: list[str]) -> bool:
    pats = _patterns()
    i = 0
    while i < len(tokens):  # skip VAR=value, wrappers and their options
        token = tokens[i]
        prog = os.path.basename(token)
        if pats["assignment"].match(token):
            i += 1
        elif prog in _WRAPPERS or prog == "timeout":
            i += 1
            while i < len(tokens) and tokens[i].startswith("-"):
                i += 1
            if prog == "timeout" and i < len(tokens):
                i += 1  # the duration
        elif prog in _RUNNER_WRAPPERS and i + 1 < len(tokens) and tokens[i + 1] == _RUNNER_WRAPPERS[prog]:
            i += 2
            while i < len(tokens) and tokens[i].startswith("-"):
                i += 1
        else:
            break
    if i >= len(tokens):
        return False
    prog, args = os.path.basename(tokens[i]), tokens[i + 1 :]
    if prog in _TEST_PROGRAMS:
        return True
    if pats["python"].match(prog):
        if "-m" in args:
            after = args.index("-m") + 1
            return after < len(args) and args[after] in _PYTHON_MODULES
        return len(args) >= 2 and os.path.basename(args[0]) == "manage.py" and args[1] == "test"
    if prog in ("sh", "bash", "zsh") and "-c" in args:
        return is_test_command(" ".join(args[args.index("-c") + 1 :]))
    words = [a for a in args if not a.startswith("-")]
    first = words[0] if words else ""
    if prog in _PACKAGE_MANAGERS:
        if first in ("test", "t", "tst") or first in _TEST_PROGRAMS:
            return True
        return first in ("run", "run-script") and len(words) > 1 and words[1].startswith("test")
    if prog in ("go", "cargo"):
        return first == "test"
    if prog in ("make", "gmake", "just", "rake"):
        return any(w.startswith(("test", "check", "spec")) for w in words)
    return False


def is_test_command(command: str) -> bool:
    """Does the shell ``command`` run a test suite (pytest, npm test, go test, make test ...)?"""
    if not command:
        return False
    for segment in _patterns()["separators"].split(command):
        tokens = [t.strip("'\"") for t in segment.split()]
        if tokens and _segment_is_test([t for t in tokens if t]):
            return True
    return False


# -- detection --------------------------------------------------------------------------------


def _names(found: list[str], noun: str) -> str:
    if len(found) == 1:
        return f"{found[0]} failed"
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    return f"{len(found)} {noun} failed: {shown}"


def detect(command: str, output: str) -> tuple[str, str] | None:
    """``(framework, summary)`` when ``output`` shows failing tests, else None.

    ``output`` should already be free of colour codes (``strip_ansi``).
    """
    pats = _patterns()
    gated = is_test_command(command or "")

    match = pats["jest"].search(output)
    if match:
        return "jest", f"{match.group(1)} failed"
    match = pats["pytest"].search(output)
    if match:
        return "pytest", f"{match.group(1)} failed"
    for match in pats["pytest_counts"].finditer(output):
        if int(match.group(1)) > 0:
            return "pytest", f"{match.group(1)} failed"
    for match in pats["jest_suites"].finditer(output):
        if int(match.group(1)) > 0:
            return "jest", f"{match.group(1)} test suite{'s' if match.group(1) != '1' else ''} failed"
    found = pats["go"].findall(output)
    if found:
        return "go", _names(found, "tests")
    for match in pats["rspec"].finditer(output):
        if int(match.group(2)) > 0:
            return "rspec", match.group(0).strip()
    match = pats["mocha"].search(output)
    if match:
        return "mocha", f"{match.group(1)} failing"

    if gated:
        match = pats["vitest_tests"].search(output)
        if match:
            return "vitest", f"{match.group(1)} failed"
        match = pats["vitest_files"].search(output)
        if match:
            return "vitest", f"{match.group(1)} test files failed"
        found = pats["fail_file"].findall(output)
        if found:
            vitest = "vitest" in command or "Test Files" in output
            files = list(dict.fromkeys(found))
            summary = f"FAIL {files[0]}" if len(files) == 1 else _names(files, "test files")
            return ("vitest" if vitest else "jest"), summary
        match = pats["unittest"].search(output)
        if match:
            return "unittest", match.group(0).strip()
        found = pats["pytest_failed"].findall(output)
        if found:
            return "pytest", f"{len(found)} failed"
        if pats["pytest_failures"].search(output):
            return "pytest", "FAILURES reported"
        found = pats["go_package"].findall(output)
        if found:
            return "go", "FAIL " + ", ".join(dict.fromkeys(found))
        found = pats["bats"].findall(output)
        if found:
            return "bats", f"{len(found)} failed"
        for match in pats["bats_summary"].finditer(output):
            if int(match.group(2)) > 0:
                return "bats", match.group(0).strip()

    if pats["npm"].search(output):
        return "npm", "npm ERR! Test failed"
    if gated:
        if pats["npm_lifecycle"].search(output):
            return "npm", "test script failed"
        match = pats["yarn"].search(output)
        if match:
            return "yarn", f"error Command failed with exit code {match.group(1)}"
    return None


# -- the log ------------------------------------------------------------------------------------


def _now_iso() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MAX_LINE_CHARS]


def _append(state_dir: Path, text: str) -> None:
    """Append ``text`` to the log, first renaming it to ``.1`` if it would pass 100 KB."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOG_NAME
    data = text.encode("utf-8")
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size and size + len(data) > MAX_LOG_BYTES:
        os.replace(path, state_dir / (LOG_NAME + ".1"))
    with open(path, "ab") as handle:
        handle.write(data)


def record_failure(state_dir: Path, framework: str, summary: str, command: str, output: str) -> None:
    lines = [line[:MAX_LINE_CHARS] for line in output.rstrip().splitlines()[-MAX_LINES:]]
    header = f"{FAILURE_HEADER}{_now_iso()} | {framework} | {_one_line(summary)} | $ {_one_line(command)}"
    _append(state_dir, "\n".join([header, *lines]) + "\n\n")


def record_pass(state_dir: Path, command: str) -> None:
    _append(state_dir, f"{PASS_HEADER}{_now_iso()} | $ {_one_line(command)}\n")


def _epoch(value: float | str) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    from datetime import datetime, timezone

    try:
        parsed = datetime.fromisoformat(str(value).strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def latest_failure(state_dir: Path | str, since: float | str | None = None) -> str | None:
    """The last failure block (header and output) in ``state_dir``'s log, if it still stands.

    None when there is no log, when a passing test run was logged after the last
    failure, or when that failure is older than ``since`` (epoch seconds or a UTC
    ISO time).
    """
    try:
        text = (Path(state_dir) / LOG_NAME).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    start = text.rfind("\n" + FAILURE_HEADER) + 1
    if start == 0 and not text.startswith(FAILURE_HEADER):
        return None
    block = text[start:]
    if "\n" + PASS_HEADER in block or block.startswith(PASS_HEADER):
        return None
    block = block.rstrip()
    if since is not None:
        limit = _epoch(since)
        header = block.split("\n", 1)[0]
        parts = header.split(" | ")
        when = _epoch(parts[1]) if len(parts) > 1 else None
        if limit is not None and (when is None or when < limit):
            return None
    return block


# -- hooks --------------------------------------------------------------------------------------


def _output_of(response: Any) -> tuple[str, bool]:
    """(text, finished normally) from a Bash ``tool_response`` (dict or plain string)."""
    if isinstance(response, str):
        return response, True
    if isinstance(response, dict):
        parts = [response.get(key) for key in ("stdout", "stderr", "output", "content")]
        text = "\n".join(part for part in parts if isinstance(part, str) and part)
        broken = bool(response.get("interrupted") or response.get("is_error") or response.get("isError"))
        return text, not broken
    return "", False


@hookimpl
def ralph_post_tool_use(event: HookEvent) -> list[str] | None:
    if event.tool_name != "Bash":
        return None
    command = event.tool_input.get("command")
    command = command if isinstance(command, str) else ""
    output, finished = _output_of(event.payload.get("tool_response"))
    output = strip_ansi(output)
    found = detect(command, output)
    try:
        if found is not None:
            record_failure(event.state_dir, found[0], found[1], command, output)
        elif finished and is_test_command(command):
            record_pass(event.state_dir, command)
    except OSError:
        pass  # the message still reaches the agent; a full disk must not break the hook
    if found is None:
        return None
    framework, summary = found
    return [AGENT_MESSAGE.format(framework=framework, summary=summary.rstrip("."))]


@hookimpl
def ralph_prompt_context(run_dir: Path, iteration: int, since: float) -> list[str]:
    block = latest_failure(run_dir, since=since)
    if block is None:
        return []
    return [
        "Tests failed during the previous iteration and no passing run followed. "
        f"The last failure (as the test runner printed it):\n\n{fenced(block, '')}"
    ]
