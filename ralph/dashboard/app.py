"""The dashboard's web app: Starlette routes, Jinja2 pages, server-sent events.

Pages (every address needs the token: :mod:`ralph.dashboard.access`):

- ``/``: every run under the state root (``/stream``: the table again whenever a run changed);
- ``/run/<run>``: one run (header, questions, stories with their gates, gate runs with their output,
  the latest events); ``/run/<run>/events``: its live stream (each new event as a row, each
  changed section re-rendered), resumable from ``Last-Event-ID`` (a byte offset in the log);
- ``/run/<run>/report``: ``ralph report --html`` of the run; ``/run/<run>/gate/<file>``: a gate's
  whole output as plain text; ``POST /run/<run>/answer``: the answer form.

Every page is rendered by Jinja2 with autoescaping, the streamed sections too (the browser puts the
server's escaped HTML in place; no agent text is ever handed to the page's script as markup), and the
page's script comes from a file (the policy allows no inline script).  ``<run>`` is a run found by
scanning (:func:`ralph.dashboard.runs.scan`), named ``<project key>~runs~<run>``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from ralph.dashboard.access import REPORT_POLICY, TokenGate, form_key
from ralph.dashboard.fold import RunFold, short
from ralph.dashboard.runs import CHUNK_BYTES, EventTail, RunEntry, RunIndex, gate_log, is_latest, read_book, read_capped, read_json, run_state

if TYPE_CHECKING:
    from jinja2 import Environment
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["Dashboard", "slug_of"]

POLL_SECONDS = 0.25
"""How often a live stream looks at its run's log."""
INDEX_POLL_SECONDS = 1.0
BOOK_POLL_SECONDS = 1.0
"""How often a run's live page reads its project's question book (an answer given with ``ralph answer``)."""
MAX_FORM_BYTES = 64 * 1024
MAX_GATE_LOG_BYTES = 4 * 1024 * 1024
ROWS_PER_MESSAGE = 300
Answerer = Callable[[Path, str, str], str]
"""``(project directory, story id, answer) -> what was done``: records a person's answer (raises RalphError)."""


def slug_of(run_id: str) -> str:
    """A run's id as one URL segment (``key/runs/name`` -> ``key~runs~name``)."""
    return run_id.replace("/", "~")


class Dashboard:
    """The app's state: the state root's index, the token, the templates; :meth:`app` builds the ASGI app."""

    def __init__(self, root: Path, token: str, hosts: set[str] | None, answerer: Answerer | None = None) -> None:
        self.root = root
        self.token = token
        self.hosts = hosts
        self.index = RunIndex(root)
        self.answerer = answerer
        self.env = _environment()

    # -- helpers the templates use ------------------------------------------------------------

    def url(self, path: str, **params: Any) -> str:
        """``path`` with the token (and ``params``) in its query."""
        query = {"token": self.token, **{k: v for k, v in params.items() if v is not None}}
        return f"{path}?{urlencode(query)}"

    def run_url(self, entry: RunEntry, suffix: str = "", **params: Any) -> str:
        """The address of a run's page (``suffix``: ``/events``, ``/report`` ...)."""
        return self.url(f"/run/{slug_of(entry.ref.id)}{suffix}", **params)

    def render(self, name: str, **values: Any) -> str:
        """Template ``name`` rendered (autoescaped) with ``values`` and the helpers."""
        return self.env.get_template(name).render(
            d=self, form_key=form_key(self.token), **values,
        )

    # -- the app ---------------------------------------------------------------------------------

    def app(self) -> Any:
        """The ASGI app: routes behind the token gate."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        routes = [
            Route("/", self.index_page),
            Route("/stream", self.index_stream),
            Route("/static/{name}", self.static),
            Route("/run/{slug}", self.run_page),
            Route("/run/{slug}/events", self.run_stream),
            Route("/run/{slug}/report", self.report),
            Route("/run/{slug}/gate/{name}", self.gate_output),
            Route("/run/{slug}/answer", self.answer, methods=["POST"]),
        ]
        return TokenGate(Starlette(routes=routes), self.token, self.hosts)

    async def _entries(self) -> list[RunEntry]:
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(self.index.refresh)

    async def _entry(self, request: Request) -> RunEntry:
        """The run the address names (404 for anything the scan did not find)."""
        from starlette.exceptions import HTTPException

        run_id = str(request.path_params["slug"]).replace("~", "/")
        entry = self.index.get(run_id)
        if entry is None:
            await self._entries()
            entry = self.index.get(run_id)
        if entry is None:
            raise HTTPException(404, "no such run under this state directory")
        return entry

    # -- pages -----------------------------------------------------------------------------------

    async def index_page(self, request: Request) -> Response:
        from starlette.responses import HTMLResponse

        entries = await self._entries()
        return HTMLResponse(self.render("index.html", entries=entries, root=str(self.root), stream=self.url("/stream")))

    async def index_stream(self, request: Request) -> Response:
        from sse_starlette import EventSourceResponse, ServerSentEvent

        async def events() -> AsyncIterator[ServerSentEvent]:
            import anyio

            shown: list[Any] | None = None
            while True:
                entries = await self._entries()
                rows = [(e.ref.id, e.row()) for e in entries]
                if rows != shown:
                    shown = rows
                    html = self.render("runs.html", entries=entries)
                    yield ServerSentEvent(json.dumps({"id": "runs", "html": html}), event="section")
                await anyio.sleep(INDEX_POLL_SECONDS)

        return EventSourceResponse(events(), ping=15)

    async def static(self, request: Request) -> Response:
        from starlette.exceptions import HTTPException
        from starlette.responses import Response

        from ralph.templates import template_text

        name = request.path_params["name"]
        types = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"}
        if name not in types:
            raise HTTPException(404)
        return Response(template_text(f"dashboard/{name}"), media_type=types[name])

    def _fold(self, entry: RunEntry) -> tuple[RunFold, EventTail]:
        """The run folded from its whole log (and its summary), with the tail at the log's end."""
        fold = RunFold()
        tail = EventTail(entry.ref.path / "events.jsonl")
        for offset, event in tail.read_all():
            fold.feed(event, offset)
        if fold.ended is None:
            summary = read_json(entry.ref.path / "summary.json")
            if summary is not None:
                fold.finish(summary)
        self._book(entry, fold)
        return fold, tail

    def _book(self, entry: RunEntry, fold: RunFold) -> bool:
        """Give ``fold`` the project's open questions (a fleet's loop: none here); whether they changed."""
        return fold.set_book([] if entry.ref.fleet else read_book(self.root, entry.ref.project))

    def _state(self, entry: RunEntry, fold: RunFold) -> tuple[str, str]:
        return run_state(RunEntry(entry.ref, fold), self.index.liveness, is_latest(entry.ref))

    async def run_page(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        entry = await self._entry(request)
        fold, tail = await run_in_threadpool(self._fold, entry)
        state, tone = await run_in_threadpool(self._state, entry, fold)
        notice = request.query_params.get("notice")
        return HTMLResponse(self.render(
            "run.html", entry=entry, fold=fold, state=state, tone=tone, notice=short(notice, 400) if notice else None,
            stream=self.run_url(entry, "/events", after=str(tail.offset)),
        ))

    async def run_stream(self, request: Request) -> Response:
        from sse_starlette import EventSourceResponse, ServerSentEvent
        from starlette.concurrency import run_in_threadpool

        entry = await self._entry(request)
        after_text = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        after = int(after_text) if after_text.isdigit() else 0

        def catch_up() -> tuple[RunFold, EventTail]:
            fold, tail = RunFold(), EventTail(entry.ref.path / "events.jsonl")
            while tail.offset < after:
                batch = tail.read(min(CHUNK_BYTES, after - tail.offset))
                if not batch:
                    break
                for offset, event in batch:
                    fold.feed(event, offset)
            self._book(entry, fold)
            return fold, tail

        fold, tail = await run_in_threadpool(catch_up)

        async def events() -> AsyncIterator[ServerSentEvent]:
            import anyio

            state: tuple[str, str] | None = None
            changed = {"header", "questions", "stories", "gates"}
            checked = asked = 0.0
            while True:
                batch = await run_in_threadpool(tail.read)
                for offset, event in batch:
                    changed |= fold.feed(event, offset)
                if time.monotonic() - asked > BOOK_POLL_SECONDS or any(e.get("kind", "").startswith(("question_", "story_"))
                                                                        for _, e in batch):
                    asked = time.monotonic()
                    if await run_in_threadpool(self._book, entry, fold):
                        changed |= {"questions", "stories", "header"}
                if fold.ended is None and not batch and time.monotonic() - checked > 2:
                    checked = time.monotonic()
                    summary = await run_in_threadpool(read_json, entry.ref.path / "summary.json")
                    if summary is not None:  # ended without run_finished in the log (an older ralph)
                        fold.finish(summary)
                        changed |= {"header", "stories"}
                    changed.add("state")
                if state is None or "header" in changed or "state" in changed:
                    now = await run_in_threadpool(self._state, entry, fold)
                    if now != state:
                        state = now
                        changed.add("header")
                assert state is not None
                if batch:  # each event made one row: the batch's are the last ones
                    rows = list(fold.recent)[-min(len(batch), ROWS_PER_MESSAGE):]
                    html = self.render("rows.html", rows=list(reversed(rows)))
                    yield ServerSentEvent(json.dumps({"html": html}), event="rows", id=str(tail.offset))
                for section in ("header", "questions", "stories", "gates"):
                    if section in changed:
                        html = self.render(f"{section}.html", entry=entry, fold=fold, state=state[0], tone=state[1])
                        yield ServerSentEvent(json.dumps({"id": section, "html": html}), event="section")
                changed = set()
                if fold.ended is not None and not batch:
                    yield ServerSentEvent(json.dumps({"state": state[0]}), event="end")
                    return
                if not batch:
                    await anyio.sleep(POLL_SECONDS)

        return EventSourceResponse(events(), ping=15)

    async def report(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import HTMLResponse

        from ralph.lifecycle.report import build_project_report, render_html

        entry = await self._entry(request)
        fold, _ = await run_in_threadpool(self._fold, entry)
        cap = fold.meta.get("review_cap")
        title = f"ralph report: {entry.project_name}"
        report = await run_in_threadpool(
            build_project_report, [entry.ref.path], fold.stories, cap if isinstance(cap, int) and cap > 0 else 5, title,
        )
        return HTMLResponse(render_html(report), headers={"content-security-policy": REPORT_POLICY})

    async def gate_output(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.exceptions import HTTPException
        from starlette.responses import PlainTextResponse

        entry = await self._entry(request)
        path = gate_log(entry.ref, request.path_params["name"])
        if path is None:
            raise HTTPException(404, "not a gate's output file")
        try:
            data = await run_in_threadpool(read_capped, path, MAX_GATE_LOG_BYTES + 1)
        except OSError:
            raise HTTPException(404, "no such gate output in this run") from None
        text = data[:MAX_GATE_LOG_BYTES].decode("utf-8", "replace")
        if len(data) > MAX_GATE_LOG_BYTES:
            text += f"\n[... cut at {MAX_GATE_LOG_BYTES} bytes: the whole file is {path}]\n"
        return PlainTextResponse(text, headers={"content-security-policy": "sandbox; default-src 'none'"})

    async def answer(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import PlainTextResponse, RedirectResponse

        from ralph.dashboard.access import token_matches
        from ralph.errors import RalphError

        entry = await self._entry(request)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return PlainTextResponse("ralph serve: the answer is too long\n", status_code=413)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return PlainTextResponse("ralph serve: send the answer form\n", status_code=415)
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if not token_matches(form.get("key"), form_key(self.token)):
            return PlainTextResponse("ralph serve: refused: the form's key is missing or wrong\n", status_code=403)
        story, text = form.get("story", "").strip(), form.get("answer", "").strip()
        if not story or not text:
            return PlainTextResponse("ralph serve: the form needs a story and an answer\n", status_code=400)
        if self.answerer is None or not entry.project_dir:
            return PlainTextResponse("ralph serve: this run's project is unknown: answer with `ralph answer`\n", status_code=409)
        try:
            done = await run_in_threadpool(self.answerer, Path(entry.project_dir), story, text)
        except RalphError as exc:
            done = f"not recorded: {exc}"
        return RedirectResponse(self.run_url(entry, notice=done), status_code=303)


def _environment() -> Environment:
    """Jinja2 over the shipped ``dashboard/`` templates, autoescaping everything."""
    from jinja2 import Environment, FunctionLoader, StrictUndefined

    from ralph.templates import template_text

    def load(name: str) -> str:
        return template_text(f"dashboard/{name}")

    env = Environment(loader=FunctionLoader(load), autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True)
    env.filters["tokens"] = lambda n: f"{int(n or 0):,}"
    env.filters["money"] = lambda n: f"${float(n or 0):.4f}"
    env.filters["short"] = short
    return env
