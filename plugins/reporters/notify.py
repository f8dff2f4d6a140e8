"""Notifications through Apprise (ntfy, Slack, Discord, e-mail, webhooks ...): ``[tool.ralph.notify] urls``.

A person leaves a loop running and is told when it needs them or ends: the agent asked a question
(the story waits), a story was stopped, the run waits for the usage limit, the run ended (complete,
budget, usage limit, error, interrupted ...).  What each says: :mod:`.notify_messages`.

The reporter never slows or breaks the loop: the hook only puts a message on a queue, and a thread of
its own sends it.  A failing endpoint (refused, an HTTP error, a URL Apprise rejects at send time) or
a slow one (a send longer than ``timeout``) is a warning on stderr, never a stop.  At the end of the
run the reporter waits at most ``timeout`` seconds for what is still queued, then says what was not
delivered.  Apprise is imported on the first send (``pip install 'ralph-trustloop[notify]'``).
"""

from __future__ import annotations

import atexit
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ralph.api import Check, ConfigError, LoopEvent, PreflightContext, Settings, hookimpl
from ralph.api.text import safe_data

from .notify_messages import Message, RunView, message_for

if TYPE_CHECKING:
    from .notify_config import NotifyConfig

RALPH_API = "2"

QUEUE_LIMIT = 100
"""Messages waiting to be sent; more are dropped with a warning (an endpoint that cannot keep up)."""


def warn(text: str) -> None:
    """One warning line on stderr (never the URL's secret parts)."""
    sys.stderr.write(f"ralph | warning: {text}\n")
    sys.stderr.flush()


def shown(url: str) -> str:
    """``url`` as a warning may show it: the service and host, without credentials, tokens or the query."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    looks_like_a_host = host == "localhost" or "." in host or host.startswith("[")
    return f"{scheme}://{host}/..." if looks_like_a_host else f"{scheme}://..."


def env_urls(environ: Mapping[str, str]) -> list[str]:
    """The URLs of ``RALPH_NOTIFY_URLS`` (spaces or commas between them)."""
    from .notify_config import URLS_ENV

    return [part for part in re.split(r"[\s,]+", environ.get(URLS_ENV, "")) if part]


class Notifier:
    """Sends the run's messages from a thread of its own, one URL after another."""

    def __init__(self, urls: list[str], kinds: list[str], timeout: float) -> None:
        self.urls = urls
        self.kinds = set(kinds)
        self.timeout = timeout
        self.run = RunView()
        self.queue: queue.Queue[Message | None] = queue.Queue()
        self.sent = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._work, name="ralph-notify", daemon=True)
        self._thread.start()

    # -- the loop's thread: never blocks ------------------------------------------------------

    def handle(self, event: LoopEvent) -> None:
        """Queue the notification ``event`` calls for; at ``run_finished``, wait (bounded) for the queue."""
        if event.kind == "run_started":
            self.run = RunView(str(event.data.get("project") or ""), str(event.data.get("run_dir") or ""))
            return
        message = message_for(event.kind, safe_data(event.data), self.run)
        if message is not None and message.kind in self.kinds:
            self.put(message)
        if self.run.ended:
            self.drain()

    def put(self, message: Message) -> None:
        """Queue ``message`` (dropped, with a warning, when the queue is full)."""
        if self.queue.qsize() >= QUEUE_LIMIT:
            warn(f"notification {message.title!r} dropped: {QUEUE_LIMIT} are waiting to be sent (a slow endpoint?)")
            return
        self.queue.put(message)

    def drain(self) -> None:
        """Wait at most ``timeout`` seconds for the queued messages to be sent; say what was not."""
        deadline = time.monotonic() + self.timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        left = self.queue.unfinished_tasks
        if left:
            warn(f"{left} notification(s) not delivered within {self.timeout:g}s (notify timeout): the endpoint is "
                 "slow or does not answer; the run's end is not held up for it")

    # -- the sending thread -------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            message = self.queue.get()
            try:
                if message is None:
                    return
                for url in self.urls:
                    self._send(url, message)
            finally:
                self.queue.task_done()

    def stop(self) -> None:
        """Let the sending thread end once the queue is empty (a later run in this process has its own)."""
        self.queue.put(None)

    def _send(self, url: str, message: Message) -> None:
        """One message to one URL; any failure is a warning."""
        started = time.monotonic()
        try:
            ok, why = send(url, message)
        except Exception as exc:  # noqa: BLE001 - a notification never stops the loop
            ok, why = False, f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - started
        if ok:
            self.sent += 1
        else:
            self.failed += 1
            warn(f"notification to {shown(url)} failed: {why or 'the service did not accept it'} "
                 "(the run goes on)")
        if seconds > self.timeout:
            warn(f"notification to {shown(url)} took {seconds:.1f}s, longer than the notify timeout "
                 f"({self.timeout:g}s)")


def send(url: str, message: Message) -> tuple[bool, str]:
    """Send ``message`` to ``url`` with Apprise, as plain text, in this thread; (delivered, why not).

    The service's own plugin object sends (``Apprise.instantiate``): ``Apprise.notify`` would hand the
    send to a process-wide pool whose threads the interpreter joins at exit, so a hung endpoint would
    hold up the end of ``ralph run``.
    """
    import apprise

    levels = {"info": apprise.NotifyType.INFO, "success": apprise.NotifyType.SUCCESS,
              "warning": apprise.NotifyType.WARNING, "failure": apprise.NotifyType.FAILURE}
    service = apprise.Apprise.instantiate(url)
    if service is None:
        return False, "Apprise does not take this URL"
    with apprise.LogCapture(level=apprise.logging.WARNING, fmt="%(message)s") as log:
        ok = service.notify(body=message.body, title=message.title, notify_type=levels.get(message.level),
                            body_format=apprise.NotifyFormat.TEXT)
    lines = [line.strip() for line in log.getvalue().splitlines() if line.strip()]
    return bool(ok), (lines[-1][:300] if lines else "")


# -- the hooks ----------------------------------------------------------------------------------

_notifier: Notifier | None = None


@hookimpl
def ralph_config_sections() -> dict[str, type]:
    """``[tool.ralph.notify]``: urls, events, timeout."""
    from .notify_config import NotifyConfig

    return {"notify": NotifyConfig}


def _config(settings: Settings) -> NotifyConfig:
    from ralph.api import section_or_default

    from .notify_config import NotifyConfig

    section: NotifyConfig = section_or_default(settings, "notify", NotifyConfig)
    return section


def run_urls(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """The run's URLs: the config's, then ``RALPH_NOTIFY_URLS``'s (each checked; ConfigError naming the bad one)."""
    from .notify_config import URLS_ENV, apprise_problem

    urls = list(_config(settings).urls)
    for index, url in enumerate(env_urls(os.environ if environ is None else environ)):
        problem = apprise_problem(url)
        if problem is not None:
            raise ConfigError(f"environment variable {URLS_ENV}: URL {index + 1} ({shown(url)}) {problem}")
        urls.append(url)
    return urls


@hookimpl
def ralph_configure(settings: Settings) -> None:
    """Start the sender for this run when there is a URL to send to."""
    global _notifier
    if _notifier is not None:
        _notifier.stop()
    urls = run_urls(settings)
    config = _config(settings)
    _notifier = Notifier(urls, list(config.events), config.timeout) if urls and config.events else None


@hookimpl
def ralph_loop_event(event: LoopEvent) -> None:
    """Queue the notification of a run's event (events read back by ``ralph status --follow`` have no run
    directory and are not notified again)."""
    if _notifier is not None and event.run_dir is not None:
        _notifier.handle(event)


@hookimpl
def ralph_preflight(context: PreflightContext) -> list[Check]:
    """Where notifications go (``ralph doctor`` shows it), or a failed check for a bad ``RALPH_NOTIFY_URLS``."""
    try:
        urls = run_urls(context.settings)
    except ConfigError as exc:
        return [Check(False, str(exc), "fix or unset it")]
    if not urls:
        return []
    config = _config(context.settings)
    return [Check(True, f"notifications ({', '.join(config.events) or 'none'}) go to "
                        f"{', '.join(shown(url) for url in urls)}")]


def _at_exit() -> None:
    """A run that ended without ``run_finished`` (an error the loop raised): say so, bounded."""
    notifier = _notifier
    if notifier is None or not notifier.run.run_dir:
        return
    if not notifier.run.ended and "run_ended" in notifier.kinds:
        notifier.put(Message("run_ended", f"ralph: run stopped without a summary ({notifier.run.name})",
                             f"The loop ended before it could write its summary (see the console).\n"
                             f"run: {notifier.run.run_dir}", "failure"))
        notifier.run.ended = True
    notifier.drain()


atexit.register(_at_exit)
