"""What the notify reporter costs the loop: the hook's time on the loop's thread, and a notification's delivery.

* per event: ``ralph_loop_event`` of the ``notify`` reporter for events it sends (a question, a stopped
  story) and for events it ignores, with the endpoint answering and with an endpoint that never answers:
  the hook only queues, so both must cost the loop the same few microseconds;
* per notification: the time from the hook to a local ``json://`` endpoint receiving it (Apprise's
  send in the reporter's own thread).

    python benchmarks/notify.py [--events 2000] [--sends 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import header  # noqa: E402

from ralph.contracts import LoopEvent  # noqa: E402


def endpoint(hang: threading.Event | None, received: list[float]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            received.append(time.perf_counter())
            if hang is not None:
                hang.wait(600)
                return
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def per_event(events: int, hanging: bool) -> tuple[float, float]:
    from ralph_plugins.reporters import notify

    hang = threading.Event() if hanging else None
    received: list[float] = []
    server = endpoint(hang, received)
    url = f"json://127.0.0.1:{server.server_address[1]}/n?rto=600"
    notify._notifier = notify.Notifier([url], ["question", "story_stopped"], timeout=5)
    run_dir = Path("/tmp")
    notify.ralph_loop_event(LoopEvent("run_started", {"project": "/tmp/p", "run_dir": "/tmp/r"}, run_dir))
    sent = LoopEvent("question_asked", {"story": "US-001", "question": "Which one?", "iteration": 1}, run_dir)
    ignored = LoopEvent("agent_event", {"iteration": 1, "type": "text", "text": "working"}, run_dir)
    notify.QUEUE_LIMIT = events + 10
    times: dict[str, list[float]] = {"sent": [], "ignored": []}
    for index in range(events):
        event, kind = (sent, "sent") if index % 50 == 0 else (ignored, "ignored")
        started = time.perf_counter()
        notify.ralph_loop_event(event)
        times[kind].append(time.perf_counter() - started)
    notify._notifier.urls = []  # what is still queued is not sent to an endpoint that is about to go
    notify._notifier.stop()
    notify._notifier = None
    if hang is not None:
        hang.set()
    server.shutdown()
    return statistics.median(times["sent"]), statistics.median(times["ignored"])


def per_send(sends: int) -> list[float]:
    from ralph_plugins.reporters import notify

    received: list[float] = []
    server = endpoint(None, received)
    notifier = notify.Notifier([f"json://127.0.0.1:{server.server_address[1]}/n"], ["question"], timeout=5)
    delays = []
    for _ in range(sends):
        before = len(received)
        started = time.perf_counter()
        notifier.put(notify.Message("question", "ralph: US-001 asks a person", "Which one?", "warning"))
        while len(received) == before:
            time.sleep(0.0005)
        delays.append(received[-1] - started)
        notifier.drain()
    notifier.stop()
    server.shutdown()
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--sends", type=int, default=20)
    args = parser.parse_args()
    header("notify: the reporter's cost to the loop")
    for hanging in (False, True):
        sent, ignored = per_event(args.events, hanging)
        what = "an endpoint that never answers" if hanging else "an endpoint that answers"
        print(f"hook on the loop's thread, {what}: {sent * 1e6:.1f} µs per notified event (median), "
              f"{ignored * 1e6:.1f} µs per ignored one")
    delays = per_send(args.sends)
    print(f"hook to a local json:// endpoint receiving it: median {statistics.median(delays) * 1000:.1f} ms "
          f"(min {min(delays) * 1000:.1f}), in the reporter's thread")


if __name__ == "__main__":
    main()
