"""Agent text is data: what the loop echoes that the agent could have written, made safe to show.

The agent writes the task list (titles, notes, feedback, even key names), the progress log,
the code whose output the gates quote, and its own model text.  Wherever the loop echoes such
text it goes through this module (Trust boundary rule 6):

- :func:`strip_controls` for a terminal or a file: ANSI escape sequences (CSI, OSC, DCS, SOS,
  PM, APC, and their 8-bit forms), the other C0 and C1 control characters and the bidi
  overrides and isolates are removed; plain newlines and tabs stay.
- :func:`one_line` where the loop lays out lines itself (a progress-log note, a commit subject,
  a console status line): the same, and line breaks become `` ⏎ ``.
- :func:`quote` for an agent-written value inside the loop's own words (a prompt's
  loop-authoritative section, a violation message): a JSON string, so a newline cannot start a
  bullet of the loop's and a quote cannot end the value.
- :func:`name` for a key, id or path the agent chose: bare when plain, else quoted.
- :func:`fenced` for multi-line agent text in a prompt: a code fence longer than any run of
  backticks inside, so the text cannot close it.
- :func:`safe_data` for an event payload (every string in it stripped) before a reporter shows it.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ESCAPE_SEQUENCE = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?                # CSI ... final byte
    | (?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|(?=\n)|\Z)  # OSC, DCS, SOS, PM, APC ... ST
    | \x1b [\x20-\x2f]* [\x30-\x7e]?                                      # any other escape (charset, ESC c ...)
    """,
    re.VERBOSE | re.DOTALL,
)
"""A terminal escape sequence, well formed or cut off (an unterminated string ends at the line's end)."""

_CONTROLS = [*range(0x00, 0x09), *range(0x0E, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
             *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""C0 controls but tab and the line breaks, DEL, C1 controls, bidi marks, embeddings, overrides and isolates."""
_LINE_BREAKS = [0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x2028, 0x2029]
"""What terminals or editors take for a line break: each becomes one newline (``\\r\\n`` one too)."""
_TABLE = {**dict.fromkeys(_CONTROLS), **dict.fromkeys(_LINE_BREAKS, "\n")}
_INTRODUCERS = frozenset("\x1b\x9b\x9d\x90\x98\x9e\x9f")
"""Characters that start an escape sequence."""

LINE_MARK = " ⏎ "
"""What :func:`one_line` shows in place of a line break."""


def strip_controls(text: object) -> str:
    """``text`` (any object: its ``str``) without escape sequences and control characters; newlines and tabs kept."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():  # the common case: nothing to strip (newlines and tabs are not printable)
        return value
    if not _INTRODUCERS.isdisjoint(value):
        value = _ESCAPE_SEQUENCE.sub("", value.replace("\r\n", "\n"))
    return value.replace("\r\n", "\n").translate(_TABLE)


def one_line(text: object) -> str:
    """:func:`strip_controls`, with every line break shown as `` ⏎ `` (for a line the loop lays out)."""
    value = strip_controls(text)
    if "\n" not in value:
        return value
    return LINE_MARK.join(part.strip() for part in value.strip("\n").split("\n"))


def quote(text: object, limit: int | None = None) -> str:
    """An agent-written value as a one-line JSON string (``"..."``), stripped; ``limit`` cuts it (with ``...``)."""
    value = strip_controls(text)
    if limit is not None and len(value) > limit:
        value = value[:limit] + "..."
    return json.dumps(value, ensure_ascii=False)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,199}")


def name(text: object) -> str:
    """An agent-written name (a key, an id, a path) as it reads best: bare when it is a plain name
    (letters, digits, ``_.-:/``), else quoted (:func:`quote`)."""
    value = text if isinstance(text, str) else str(text)
    return value if _PLAIN_NAME.fullmatch(value) else quote(value, 200)


def fence_for(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def fenced(text: object, info: str = "text") -> str:
    """Multi-line agent text as a fenced block (stripped; the fence cannot be closed from inside)."""
    value = strip_controls(text).rstrip("\n")
    fence = fence_for(value)
    return f"{fence}{info}\n{value}\n{fence}"


def safe_data(value: Any) -> Any:
    """``value`` with every string in it (dict keys too, lists, tuples) passed through :func:`strip_controls`."""
    if isinstance(value, str):
        return strip_controls(value)
    if isinstance(value, dict):
        return {safe_data(k) if isinstance(k, str) else k: safe_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(safe_data(item) for item in value)
    return value


def indent_continuation(text: str, prefix: str = "  ") -> str:
    """``text`` with every line after the first indented by ``prefix`` (so none starts a list item or heading)."""
    first, _, rest = text.partition("\n")
    if not rest:
        return first
    return first + "\n" + "\n".join(prefix + line if line else "" for line in rest.split("\n"))
