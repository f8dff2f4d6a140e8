"""Which requests the meter forwards: the model calls it can book, and the few free ones the CLIs need.

The meter stands between the agent's CLI and the model API, and the agent can send it requests of its
own (it can read the session's URL from its CLI's environment).  So the meter forwards only what it can
account for: a call whose tokens it reads from the response (Anthropic Messages, OpenAI Responses and
Chat Completions), and calls that cost nothing (counting tokens, listing models).  Every other path or
method — Message Batches, Files, a Responses call run in the background and fetched later, anything new
the API grows — is refused with a 403 naming the meter, and never reaches the API.

The paths are what the CLI appends to the base URL it was given (the session's URL), so they do not
depend on the upstream's own path (a gateway's ``https://gw.example/anthropic``).  What the real CLIs
call: Claude Code ``POST /v1/messages`` (``?beta=true``) and ``POST /v1/messages/count_tokens``; Codex
``POST /responses`` and ``GET /models`` (its base URL ends in ``/v1``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["Route", "billed_path", "refusal", "route_for"]


@dataclass(frozen=True)
class Route:
    """One kind of request the meter forwards."""

    name: str
    methods: frozenset[str]
    billed: bool
    """The response carries the tokens the call cost (the meter books them)."""


MESSAGES = Route("messages", frozenset({"POST"}), billed=True)
RESPONSES = Route("responses", frozenset({"POST"}), billed=True)
CHAT = Route("chat completions", frozenset({"POST"}), billed=True)
COUNT_TOKENS = Route("count tokens", frozenset({"POST"}), billed=False)
MODELS = Route("models", frozenset({"GET", "HEAD"}), billed=False)

_ROUTES: tuple[tuple[re.Pattern[str], Route], ...] = (
    (re.compile(r"v1/messages"), MESSAGES),
    (re.compile(r"v1/messages/count_tokens"), COUNT_TOKENS),
    (re.compile(r"(v1/)?responses"), RESPONSES),
    (re.compile(r"(v1/)?chat/completions"), CHAT),
    (re.compile(r"(v1/)?models(/[A-Za-z0-9._:@-]+)?"), MODELS),
)


def route_for(path: str) -> Route | None:
    """The route of ``path`` (relative to the session's URL, no query), or None: the meter does not forward it."""
    path = path.removeprefix("/")  # exactly: a trailing slash is another path to the API
    for pattern, route in _ROUTES:
        if pattern.fullmatch(path):
            return route
    return None


def billed_path(path: str) -> bool:
    """A request to this path is a model call that costs tokens (not ``count_tokens``, not ``/models``)."""
    route = route_for(path.split("?", 1)[0])
    return route is not None and route.billed


def refusal(method: str, path: str, body: bytes | None = None) -> str | None:
    """Why the meter does not forward this request (None: it does).

    ``path`` is relative to the session's URL, without the query; ``body`` None: not read yet (the
    path and method alone are judged).  A Responses call with ``"background": true`` is refused too:
    its answer (and its usage) would be fetched later from ``/responses/<id>``, which the meter does
    not forward.
    """
    route = route_for(path)
    shown = f"{method.upper()} /{path.removeprefix('/')}"[:200]
    if route is None:
        return (f"ralph's model meter forwards only the model calls it can book (messages, responses, chat "
                f"completions), counting tokens and listing models; not {shown}")
    if method.upper() not in route.methods:
        return f"ralph's model meter does not forward {shown} ({route.name}: {', '.join(sorted(route.methods))} only)"
    if body is not None and route is RESPONSES and _background(body):
        return ("ralph's model meter does not forward a Responses call run in the background (\"background\": true): "
                "its usage would arrive where the meter cannot book it")
    return None


def _background(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("background") not in (None, False)
