"""Tell when an agent's usage limit resets, from its own message.

Claude Code reports limits in several shapes: ``Claude AI usage limit
reached|1732527600`` (epoch seconds), ``5-hour limit reached ∙ resets 3pm``,
``resets at 10:30``, or an ISO timestamp.  Unknown shapes give None and the
loop uses its configured fallback wait.
"""

from __future__ import annotations

import datetime as dt
import re

_EPOCH = re.compile(r"\|\s*(\d{10})\b")
_ISO = re.compile(r"\b(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)")
_CLOCK = re.compile(r"resets?\s+(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*(am|pm)?", re.IGNORECASE)


def reset_time(text: str, now: dt.datetime | None = None) -> dt.datetime | None:
    """The moment the limit resets (timezone-aware), or None when the text does not say."""
    now = now or dt.datetime.now().astimezone()
    if match := _EPOCH.search(text):
        return dt.datetime.fromtimestamp(int(match.group(1)), tz=dt.timezone.utc)
    if match := _ISO.search(text):
        stamp = match.group(1).replace("Z", "+00:00")
        try:
            moment = dt.datetime.fromisoformat(stamp)
        except ValueError:
            moment = None
        if moment is not None:
            return moment if moment.tzinfo else moment.replace(tzinfo=now.tzinfo)
    if match := _CLOCK.search(text):
        hour, minute, meridiem = int(match.group(1)), int(match.group(2) or 0), (match.group(3) or "").lower()
        if meridiem == "pm" and hour < 12:
            hour += 12
        if meridiem == "am" and hour == 12:
            hour = 0
        if hour > 23 or minute > 59:
            return None
        moment = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return moment if moment > now else moment + dt.timedelta(days=1)
    return None
