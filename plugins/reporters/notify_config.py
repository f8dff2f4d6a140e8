"""The ``[tool.ralph.notify]`` config section (kept apart: it imports pydantic, and Apprise to check a URL)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from ralph.api import ConfigSection

NotifyKind = Literal["question", "story_stopped", "waiting", "run_ended"]
KINDS: tuple[NotifyKind, ...] = ("question", "story_stopped", "waiting", "run_ended")
"""What can be notified: the agent asked a person; a story was stopped (tier-3 hard stop, its cost cap,
its context exhausted twice); the run waits for the usage limit to reset; the run ended, however."""

URLS_ENV = "RALPH_NOTIFY_URLS"
"""More Apprise URLs, separated by spaces or commas: for URLs holding a token you keep out of the project."""

APPRISE_MISSING = "needs Apprise, which is not installed: pip install 'ralph-trustloop[notify]'"


def apprise_problem(url: str) -> str | None:
    """Why Apprise cannot send to ``url`` (None: it can).  Never repeats the URL: it may hold a token."""
    try:
        import apprise
    except ImportError:
        return APPRISE_MISSING
    if not url.strip():
        return "is empty"
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if not scheme:
        return "is not an Apprise URL (SERVICE://...; e.g. ntfy://topic, json://host/path, mailto://user:pass@host)"
    if apprise.Apprise.instantiate(url.strip()) is None:
        return (f"is not a URL Apprise can send to (service {scheme}://: unknown, or its parts are wrong; see the "
                "services in Apprise's documentation)")
    return None


def _checked(url: str) -> str:
    problem = apprise_problem(url)
    if problem is not None:
        raise ValueError(problem)
    return url.strip()


NotifyUrl = Annotated[str, AfterValidator(_checked)]


class NotifyConfig(ConfigSection):
    """Where and what the ``notify`` reporter sends (docs/operating.md, "Notifications")."""

    urls: list[NotifyUrl] = Field(
        default_factory=list,
        description=f"Apprise URLs notifications go to (ntfy://, slack://, discord://, mailto://, json:// ...); "
                    f"{URLS_ENV} adds more",
    )
    events: list[NotifyKind] = Field(
        default_factory=lambda: list(KINDS),
        description="what is notified: question (the agent asked a person), story_stopped, waiting (for the "
                    "usage limit), run_ended",
    )
    timeout: float = Field(
        10.0, gt=0,
        description="seconds a notification may take before it is reported as slow; the run never waits for one, "
                    "except at its end (at most this long)",
    )
