"""The spec reviewer's structured verdict: the prompt's answer format and its parser.

The reviewer ends its answer with one JSON object::

    {"verdict": "met" | "not_met",
     "unmet": [{"criterion": "...", "where": "file:line or missing", "why": "..."}],
     "extra": ["what was built but not asked for"]}

Anything else (no object, bad JSON, an unknown verdict, "met" with unmet items)
is a malformed verdict, which the gate counts as *not met* with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANSWER_FORMAT", "Verdict", "parse_verdict"]

ANSWER_FORMAT = """End your answer with exactly one JSON object in a ```json block, and nothing after it:
{"verdict": "met" or "not_met",
 "unmet": [{"criterion": "<the acceptance criterion, verbatim>", "where": "<file:line, or missing>", "why": "<one sentence>"}],
 "extra": ["<anything implemented that the story did not ask for>"]}
"verdict" is "met" only when EVERY acceptance criterion is met by the diff; then "unmet" is []."""

_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


@dataclass
class Verdict:
    """What the loop read from the reviewer's answer."""

    met: bool
    unmet: list[dict[str, str]] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    malformed: str | None = None
    """Why the answer could not be read (then ``met`` is False)."""
    raw: str = ""
    """The JSON object as the reviewer wrote it (verbatim), or the end of its answer."""

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": "met" if self.met else "not_met", "unmet": self.unmet, "extra": self.extra,
                "malformed": self.malformed}

    def render(self, reviewer: str) -> str:
        """The gate output the next iteration sees (verbatim reviewer JSON included)."""
        if self.malformed:
            head = f"Spec reviewer ({reviewer}): NOT MET — malformed verdict: {self.malformed}"
            return head + (f"\nThe reviewer's answer ended with:\n{self.raw}" if self.raw else "")
        lines = [f"Spec reviewer ({reviewer}): {'MET' if self.met else 'NOT MET'}"]
        for item in self.unmet:
            lines.append(f"- Missing: {item.get('criterion', '')} (where: {item.get('where', '-')}) — {item.get('why', '')}")
        for extra in self.extra:
            lines.append(f"- Extra: {extra}")
        lines.append(f"Verdict (verbatim): {self.raw}")
        return "\n".join(lines)


def _candidates(answer: str) -> list[str]:
    found = [m.group(1) for m in _FENCED.finditer(answer)]
    if found:
        return found[::-1]
    # no fenced block: the last top-level {...} that parses
    starts = [i for i, ch in enumerate(answer) if ch == "{"]
    out = []
    for start in reversed(starts):
        try:
            obj, end = json.JSONDecoder().raw_decode(answer[start:])
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(answer[start : start + end])
    return out


def parse_verdict(answer: str) -> Verdict:
    """Read the verdict from the reviewer's whole answer; malformed answers are not met."""
    if not answer.strip():
        return Verdict(False, malformed="the reviewer gave no answer (no verdict)")
    tail = answer.strip()[-600:]
    for text in _candidates(answer):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            return Verdict(False, malformed=f"the verdict is not valid JSON ({exc.msg})", raw=text[:2000])
        if not isinstance(obj, dict) or "verdict" not in obj:
            continue
        value = str(obj.get("verdict", "")).strip().lower().replace(" ", "_").replace("-", "_")
        if value not in ("met", "not_met"):
            return Verdict(False, malformed=f'"verdict" is {obj.get("verdict")!r}; expected "met" or "not_met"', raw=text)
        unmet_raw = obj.get("unmet", [])
        if not isinstance(unmet_raw, list):
            return Verdict(False, malformed='"unmet" is not a list', raw=text)
        unmet = []
        for item in unmet_raw:
            if isinstance(item, dict):
                unmet.append({k: str(item.get(k, "")) for k in ("criterion", "where", "why")})
            else:
                unmet.append({"criterion": str(item), "where": "", "why": ""})
        extra = [str(x) for x in obj.get("extra", []) or []] if isinstance(obj.get("extra", []), list) else []
        if value == "met" and unmet:
            return Verdict(False, unmet, extra, malformed='"verdict" is "met" but "unmet" lists criteria', raw=text)
        return Verdict(value == "met", unmet, extra, raw=text)
    return Verdict(False, malformed='no JSON object with a "verdict" key in the answer', raw=tail)
