"""Questions the agent asks a person, and the person's answers: the book, and ``answer()``.

The agent asks with ``ralph ask "QUESTION"`` (over the loop's hook channel, with the run's token);
the loop records the question with its context (story, iteration, mode, the agent's last tool calls),
parks the story ("waiting for a person") and goes on with the others.  A person answers with
``ralph answer US-002 "ANSWER"`` (or ``ralph serve``'s form, which calls :func:`answer`), while the run
goes on or after it ended.  The story's next iteration has the answer in its prompt.

The book is ``questions.json`` in the project's state directory (outside the project).  Who may write
an answer (docs/operating.md, "What holds"):

- While a run holds the project, :func:`answer` hands the answer to that loop over its person socket
  (an abstract Unix socket named after the project; :func:`person_address`), and the loop takes it
  only from a process the kernel says is the person's (``ralph/peercred.py``: not in an agent's pid
  namespace, not started by the loop).  The loop keeps the book in memory for the run and writes it
  itself: what anything else writes to the file during the run is put back after each iteration.
- With no run, :func:`answer` writes the file itself, holding the project's lock (no run starts
  meanwhile); the next run reads it once, when it starts.

Stdlib only (``ralph status`` and ``ralph answer`` import it).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ralph.errors import LockedError, RalphError, UsageError

__all__ = [
    "ANSWER_LIMIT",
    "Answered",
    "Question",
    "QUESTION_LIMIT",
    "QuestionBook",
    "answer",
    "book_path",
    "load_book",
    "open_questions",
    "person_address",
]

BOOK_NAME = "questions.json"
QUESTION_LIMIT = 4000
"""Characters of a question the loop keeps (a longer one is cut, saying so)."""
ANSWER_LIMIT = 20000
"""Characters of an answer the loop takes (a longer one is refused: say it shorter, or point to a file)."""
CONNECT_TIMEOUT = 10.0


@dataclass
class Question:
    """One question of the agent, and the person's answer once there is one.

    ``question`` and ``context`` are agent text (data wherever they are shown); ``answer`` is the
    person's.
    """

    id: str
    """``<run>/<iteration>.<n>``: unique per project."""
    story: str
    iteration: int
    mode: str
    question: str
    asked_at: str
    run: str = ""
    """The run directory's name."""
    context: dict[str, Any] = field(default_factory=dict)
    """What the loop saw: ``title`` (the story's), ``tools`` (the agent's last tool calls, one line each)."""
    answer: str | None = None
    answered_at: str | None = None
    answered_by: str | None = None
    """How the answer came: ``ralph answer``, ``ralph serve`` ..."""

    @property
    def is_open(self) -> bool:
        """No answer yet."""
        return self.answer is None

    @classmethod
    def from_dict(cls, data: Any) -> Question | None:
        """A question read back from the book, or None when the entry is not one."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                id=str(data["id"]), story=str(data["story"]), iteration=int(data.get("iteration") or 0),
                mode=str(data.get("mode") or ""), question=str(data.get("question") or ""),
                asked_at=str(data.get("asked_at") or ""), run=str(data.get("run") or ""),
                context=data["context"] if isinstance(data.get("context"), dict) else {},
                answer=None if data.get("answer") is None else str(data["answer"]),
                answered_at=None if data.get("answered_at") is None else str(data["answered_at"]),
                answered_by=None if data.get("answered_by") is None else str(data["answered_by"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass
class QuestionBook:
    """Every question of one project, oldest first."""

    questions: list[Question] = field(default_factory=list)

    def open_for(self, story_id: str) -> list[Question]:
        """``story_id``'s questions without an answer."""
        return [q for q in self.questions if q.story == story_id and q.is_open]

    def answered_for(self, story_id: str) -> list[Question]:
        """``story_id``'s answered questions, oldest first."""
        return [q for q in self.questions if q.story == story_id and not q.is_open]

    def open(self) -> list[Question]:
        """Every question without an answer."""
        return [q for q in self.questions if q.is_open]

    def record_answer(self, story_id: str, text: str, by: str) -> list[Question]:
        """Set ``text`` as the answer of every open question of ``story_id``; the questions answered."""
        now = _now()
        answered = self.open_for(story_id)
        for question in answered:
            question.answer, question.answered_at, question.answered_by = text, now, by
        return answered

    def render(self) -> str:
        """The book as the file holds it."""
        return json.dumps({"version": 1, "questions": [asdict(q) for q in self.questions]}, indent=2,
                          ensure_ascii=False) + "\n"

    @classmethod
    def parse(cls, text: str) -> QuestionBook:
        """A book from the file's text (entries that are not questions are dropped; bad JSON: empty)."""
        try:
            data = json.loads(text)
        except ValueError:
            return cls()
        entries = data.get("questions") if isinstance(data, dict) else None
        found = [Question.from_dict(entry) for entry in entries] if isinstance(entries, list) else []
        return cls([q for q in found if q is not None])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def book_path(project_dir: Path, state_dir: str | None = None) -> Path:
    """``questions.json`` in the project's state directory."""
    from ralph.loop.rundir import project_state_dir

    return project_state_dir(project_dir, state_dir) / BOOK_NAME


def load_book(project_dir: Path, state_dir: str | None = None) -> QuestionBook:
    """The project's question book as the file holds it now (empty when there is none)."""
    from ralph import safeio
    from ralph.loop.rundir import state_root

    path = book_path(project_dir, state_dir)
    try:
        text = safeio.read_text(path, state_root(state_dir))
    except (OSError, UnicodeDecodeError):
        return QuestionBook()
    return QuestionBook.parse(text)


def save_book(book: QuestionBook, project_dir: Path, state_dir: str | None = None) -> Path:
    """Write the book atomically (no symlink followed below the state root); its path."""
    from ralph import safeio
    from ralph.loop.rundir import state_root

    path = book_path(project_dir, state_dir)
    root = state_root(state_dir)
    root.mkdir(parents=True, exist_ok=True)
    safeio.write_text(path, root, book.render(), parents=True, replace_dir=True)
    return path


def open_questions(project_dir: Path, state_dir: str | None = None) -> list[Question]:
    """The project's questions waiting for an answer (for ``ralph status``, ``ralph serve``)."""
    return load_book(project_dir, state_dir).open()


def person_address(project_dir: Path, state_dir: str | None = None) -> str:
    """The abstract Unix socket name of the loop's person channel for ``project_dir`` (Linux).

    Abstract names live in the network namespace, not in the filesystem: nothing in the project or
    the state directory can redirect it, and a container (its own network namespace) cannot reach it.
    """
    import hashlib

    from ralph.loop.rundir import project_state_dir

    digest = hashlib.sha256(str(project_state_dir(project_dir, state_dir).resolve()).encode()).hexdigest()[:40]
    return f"\0ralph-person-{digest}"


@dataclass
class Answered:
    """What :func:`answer` did."""

    story: str
    questions: list[str]
    """The ids of the questions answered."""
    live: bool
    """True: the running loop took the answer; False: written to the book for the next run."""
    message: str
    """One line for the person."""


def answer(project_dir: Path, story_id: str, text: str, *, state_dir: str | None = None,
           by: str = "ralph answer") -> Answered:
    """Record the person's ``text`` as the answer to ``story_id``'s open question(s).

    While a run holds the project, the running loop takes it (it checks that the caller is a person's
    process, not an agent's); otherwise the book is written under the project's lock.  Raises
    :class:`~ralph.errors.UsageError` (no open question, empty or too long answer) or
    :class:`~ralph.errors.RalphError` (the running loop refused it, or could not be reached) with one
    line saying why and what to do.  ``by`` names the way the answer came (``ralph serve``).
    """
    text = text.strip()
    if not text:
        raise UsageError("the answer is empty: say what the agent should do (ralph answer STORY \"ANSWER\")")
    if len(text) > ANSWER_LIMIT:
        raise UsageError(f"the answer has {len(text)} characters, more than {ANSWER_LIMIT}: shorten it, or write it "
                         "into a file in the project and answer with its path")
    project_dir = project_dir.resolve()
    address = person_address(project_dir, state_dir)
    for _attempt in range(50):
        reply = _ask_loop(address, {"answer": {"story": story_id, "text": text, "by": by}})
        if reply is not None:
            if reply.get("ok"):
                return Answered(story_id, [str(i) for i in reply.get("questions") or []], True, str(reply.get("message") or ""))
            error = str(reply.get("refused") or reply.get("error") or "no reason given")
            if reply.get("usage"):
                raise UsageError(error)
            raise RalphError(f"the running loop did not take the answer: {error}")
        try:
            return _answer_offline(project_dir, story_id, text, state_dir, by)
        except LockedError:
            time.sleep(0.1)  # a run is starting (its channel not up yet) or ending: ask again
    raise RalphError("a `ralph run` holds this project but does not take answers (started on a system without "
                     "abstract Unix sockets, or it is stuck): answer again once it has ended")


def _answer_offline(project_dir: Path, story_id: str, text: str, state_dir: str | None, by: str) -> Answered:
    """No loop answers on the person channel: write the book, holding the project's lock."""
    from ralph.gitutil import git_dir
    from ralph.loop.lock import ProjectLock

    lock = ProjectLock(git_dir(project_dir))
    lock.acquire()  # LockedError: a run holds it (the caller asks that run again)
    try:
        book = load_book(project_dir, state_dir)
        if not book.open_for(story_id):
            raise UsageError(no_question(book, story_id))
        answered = book.record_answer(story_id, text, by)
        save_book(book, project_dir, state_dir)
    finally:
        lock.release()
    return Answered(story_id, [q.id for q in answered], False,
                    f"answer recorded for {story_id}; the next `ralph run` goes on with it")


def no_question(book: QuestionBook, story_id: str) -> str:
    """Why there is nothing to answer for ``story_id`` (which stories do wait, if any)."""
    waiting = sorted({q.story for q in book.open()})
    others = f"; waiting for an answer: {', '.join(waiting)}" if waiting else "; no question waits for an answer"
    if book.answered_for(story_id):
        return f"{story_id}'s questions are answered already{others}"
    return f"{story_id} has no question waiting for an answer{others}"


def _ask_loop(address: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """Send ``request`` to the loop on its person channel; its reply, or None when no loop listens there.

    The loop at the other end must be a process of this user in this pid namespace (an agent's
    process squatting the name is refused, never given the answer).
    """
    from ralph.peercred import peer_of, refusal

    if not hasattr(socket, "AF_UNIX") or not address.startswith("\0") or not os.path.exists("/proc/self/ns"):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT)
        try:
            conn.connect(address)
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        peer = peer_of(conn)
        try:
            why = refusal(peer)
        finally:
            if peer is not None:
                peer.close()
        if why is not None:
            raise RalphError(f"the process listening on this project's answer channel is not a ralph loop of yours ({why}); "
                             "nothing was sent")
        conn.sendall(json.dumps(request).encode("utf-8") + b"\n")
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise RalphError(f"the running loop's answer channel failed: {exc}") from None
    finally:
        conn.close()
    try:
        reply = json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        raise RalphError("the running loop's answer channel gave no answer (did the run just end? answer again)") from None
    return reply if isinstance(reply, dict) else {"error": "the loop's reply is not a JSON object"}
