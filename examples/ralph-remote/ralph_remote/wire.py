"""The connection between the runner and the agent host: JSON lines over a pair of pipes.

Both ends use it the same way: ``request(op, **fields)`` sends a message with an id and returns a
:class:`Pending` reply; ``notify(op, **fields)`` sends one that needs no reply (the agent's output
lines); messages from the other end go to ``handle(message)``.  A request is answered on a thread of
its own (a hook call waits for the loop, which may ask the agent host for the work so far: the reader
stays free for that reply); notifications are handled on the reader thread, in order.  Bytes travel
as base64 (:func:`pack`, :func:`unpack`).  When the other end goes away every pending reply fails
with :class:`Lost` and ``on_close`` is called.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from typing import IO, Any, Callable


class Lost(Exception):
    """The other end of the connection is gone."""


def pack(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unpack(text: str) -> bytes:
    return base64.b64decode(text)


class Pending:
    """A reply that will arrive (or not: the connection was lost)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._reply: dict[str, Any] | None = None

    def wait(self, timeout: float | None = None) -> bool:
        """True once the reply (or the loss) is there."""
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """The reply; :class:`Lost` when the connection ended (or ``timeout`` passed) first."""
        if not self._done.wait(timeout) or self._reply is None:
            raise Lost("no reply from the other end")
        if "error" in self._reply:
            raise Lost(f"the other end failed: {self._reply['error']}")
        return self._reply

    def _settle(self, reply: dict[str, Any] | None) -> None:
        self._reply = reply
        self._done.set()


class Wire:
    """One end of the connection (see the module docstring)."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes], handle: Callable[[dict[str, Any]], dict[str, Any] | None],
                 on_close: Callable[[], None] = lambda: None) -> None:
        self._writer, self._handle, self._on_close = writer, handle, on_close
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._read, args=(reader,), name="ralph-remote-wire", daemon=True).start()

    def request(self, op: str, **fields: Any) -> Pending:
        pending, number = Pending(), next(self._ids)
        with self._lock:
            self._pending[number] = pending
        if not self._send({"op": op, "id": number, **fields}):
            pending._settle(None)
        return pending

    def call(self, op: str, wait: float | None = None, **fields: Any) -> dict[str, Any]:
        """``request(op, **fields).result(wait)``: the reply, waiting at most ``wait`` seconds."""
        return self.request(op, **fields).result(wait)

    def notify(self, op: str, **fields: Any) -> None:
        self._send({"op": op, **fields})

    def close(self) -> None:
        try:
            self._writer.close()
        except OSError:
            pass

    def _send(self, message: dict[str, Any]) -> bool:
        data = json.dumps(message).encode("utf-8") + b"\n"
        with self._lock:
            try:
                self._writer.write(data)
                self._writer.flush()
                return True
            except (OSError, ValueError):  # a broken pipe, or closed by us
                return False

    def _read(self, reader: IO[bytes]) -> None:
        try:
            for line in reader:
                message = json.loads(line)
                if "re" in message:  # a reply to one of our requests
                    with self._lock:
                        pending = self._pending.pop(message["re"], None)
                    if pending is not None:
                        pending._settle(message)
                elif "id" in message:
                    threading.Thread(target=self._answer, args=(message,), daemon=True).start()
                else:
                    self._handle(message)
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()
            with self._lock:
                lost, self._pending = list(self._pending.values()), {}
            for pending in lost:
                pending._settle(None)
            self._on_close()

    def _answer(self, message: dict[str, Any]) -> None:
        try:
            reply = self._handle(message) or {}
        except Exception as exc:  # said to the other end, which raises Lost with it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        self._send({"re": message["id"], **reply})
