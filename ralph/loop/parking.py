"""The person in the loop during a run: the agent's questions park a story, the person's answers release it.

The agent asks over its hook channel (``ralph ask``: the run's token; :meth:`Parking.ask`, called from
the hook server's thread).  The loop records the question with what it saw of the iteration, says so
in a ``question_asked`` event (the console, ``ralph status``, notifications) and, when the iteration
is over and the story is not done, sets the story's ``waiting`` (a field only the loop sets): every
policy then leaves it alone, and the loop goes on with the stories that do not depend on it.

The person answers on the loop's person channel (:class:`PersonChannel`: an abstract Unix socket,
``ralph.questions.person_address``), which takes an answer only from a process the kernel says is the
person's (``ralph/peercred.py``).  Before it selects the next story the loop releases every waiting
story whose questions are answered; the story's next iteration quotes the answer in its prompt.

The run keeps the book (``questions.json`` in the project's state directory) in memory: read once
when the run starts, written by the loop on each question and answer, and put back after every
iteration when anything else changed the file.
"""

from __future__ import annotations

import json
import operator
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ralph.agenttext import fenced, one_line, quote
from ralph.questions import (
    ANSWER_LIMIT,
    QUESTION_LIMIT,
    Question,
    QuestionBook,
    book_path,
    load_book,
    no_question,
    person_address,
    save_book,
)

if TYPE_CHECKING:
    from ralph.contracts import Selection
    from ralph.loop.progressnotes import ProgressNotes
    from ralph.loop.taskfile import TaskFile
    from ralph.tasks import TaskList

PER_ITERATION = 3
"""Questions one iteration may ask (more are refused: ask them together)."""
REQUEST_LIMIT = 256 * 1024
"""The longest request line the person channel reads."""
ANSWERS_SHOWN = 3
"""A story's answered questions its prompt quotes (the latest)."""
ASK_HINT = (
    "- Stuck on something only a person can decide (a requirement that is unclear or contradicts "
    "itself, a choice the PRD leaves open, access you do not have)? Run `{command} \"QUESTION\"` (say "
    "what you need and the options you see), commit what is worth keeping, and end the session: the "
    "loop parks this story until a person answers and goes on with other stories. Never guess the "
    "answer, and never answer the question yourself."
)


class Parking:
    """The run's questions and answers, and the stories they park."""

    def __init__(
        self,
        project_dir: Path,
        state_dir: str | None,
        taskfile: TaskFile,
        notes: ProgressNotes,
        emit: Callable[..., None],
    ) -> None:
        self.project_dir = project_dir
        self.state_dir = state_dir
        self.taskfile = taskfile
        self.notes = notes
        self.emit = emit
        self.book = QuestionBook()
        self.lock = threading.Lock()
        self.run_name = ""
        self.channel: PersonChannel | None = None
        self.book_file: Path | None = None
        """The book's path for this run (found once: the project's key asks git for its root commit)."""
        self._asked: dict[int, int] = {}
        """Questions asked per iteration."""

    # -- the run's two ends ---------------------------------------------------------------------------

    def start(self, run_dir: Path) -> None:
        """Read the book (once, for the run) and open the person channel."""
        self.run_name = run_dir.name
        self.book_file = book_path(self.project_dir, self.state_dir)
        self.book = load_book(self.project_dir, self.state_dir)
        channel = PersonChannel(person_address(self.project_dir, self.state_dir), self.take_answer, self.refused)
        try:
            self.channel = channel.start()
        except OSError as exc:
            self.channel = None
            self.emit("person_channel_unavailable", error=f"{type(exc).__name__}: {exc}",
                      message="`ralph answer` cannot reach this run; answers given after it ends reach the next run")

    def stop(self) -> None:
        """Close the person channel and leave the book as the loop knows it."""
        if self.channel is not None:
            self.channel.stop()
            self.channel = None
        self.keep_book(None)

    # -- the agent's side (the hook server's thread) --------------------------------------------------

    def ask(self, text: Any, current: tuple[Selection, TaskList, Any] | None, iteration: int | None,
            tools: list[str]) -> dict[str, Any]:
        """Record a question of the running iteration's agent; the reply ``ralph ask`` prints."""
        if current is None or iteration is None:
            return {"ok": False, "message": "ralph ask: no iteration is running; only an iteration's agent can ask a person"}
        selection, before, _ = current
        story_id = selection.story_id
        if not story_id:
            return {"ok": False, "message": "ralph ask: this iteration works on no story; there is nothing to park"}
        question = str(text if text is not None else "").strip()
        if not question:
            return {"ok": False, "message": 'ralph ask: the question is empty: ralph ask "QUESTION"'}
        cut = len(question) > QUESTION_LIMIT
        if cut:
            question = question[:QUESTION_LIMIT] + f" [... cut at {QUESTION_LIMIT} characters]"
        with self.lock:
            count = self._asked.get(iteration, 0)
            if count >= PER_ITERATION:
                return {"ok": False, "message": f"ralph ask: {PER_ITERATION} questions were asked in this iteration already: "
                                                "ask them together, then end the session"}
            self._asked[iteration] = count + 1
            story = before.story(story_id)
            entry = Question(
                id=f"{self.run_name}/{iteration}.{count + 1}", story=story_id, iteration=iteration, mode=selection.mode,
                question=question, asked_at=_now(), run=self.run_name,
                context={"title": story.title if story is not None else "", "tools": tools[-5:]},
            )
            self.book.questions.append(entry)
            self._save()
        self.emit("question_asked", iteration=iteration, story=story_id, mode=selection.mode, id=entry.id,
                  question=question, title=entry.context["title"], tools=entry.context["tools"],
                  answer_with=f'ralph answer {story_id} "ANSWER"')
        return {"ok": True, "id": entry.id, "message": (
            f"Your question is recorded ({entry.id}){' (cut to its first characters)' if cut else ''}. The loop parks "
            f"{story_id} until a person answers and goes on with other stories; its next iteration will have the "
            "answer. Commit what is worth keeping and end this session now.")}

    # -- the person's side (the person channel's thread) ----------------------------------------------

    def take_answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """An answer from ``ralph answer`` (already known to come from the person's process)."""
        body = request.get("answer")
        if not isinstance(body, dict):
            return {"ok": False, "error": "not an answer request"}
        story_id, text, by = body.get("story"), body.get("text"), body.get("by") or "ralph answer"
        if not isinstance(story_id, str) or not isinstance(text, str) or not text.strip():
            return {"ok": False, "usage": True, "error": "an answer needs a story id and a text"}
        if len(text) > ANSWER_LIMIT:
            return {"ok": False, "usage": True, "error": f"the answer is longer than {ANSWER_LIMIT} characters"}
        with self.lock:
            if not self.book.open_for(story_id):
                return {"ok": False, "usage": True, "error": no_question(self.book, story_id)}
            answered = self.book.record_answer(story_id, text.strip(), str(by)[:40])
            self._save()
        self.emit("question_answered", story=story_id, ids=[q.id for q in answered], by=str(by)[:40])
        return {"ok": True, "questions": [q.id for q in answered],
                "message": f"answer recorded for {story_id}; the running loop goes on with it at its next iteration"}

    def refused(self, reason: str) -> None:
        """A process that is not the person's tried the person channel."""
        self.emit("answer_refused", reason=reason)

    # -- the loop's thread -----------------------------------------------------------------------------

    def settle(self, tasks: TaskList, iteration: int) -> TaskList:
        """Before the loop selects: release every waiting story whose questions are all answered."""
        with self.lock:
            released = [s for s in tasks.userStories if s.waiting and not self.book.open_for(s.id) and self.book.answered_for(s.id)]
        if not released:
            return tasks
        for story in released:
            story.waiting = False
        self.taskfile.persist(tasks)
        ids = ", ".join(s.id for s in released)
        self.notes.loop_note(f"before iteration {iteration}", f"a person answered: {ids} go on", subject=f"{ids} answered")
        for story in released:
            self.emit("story_released", story=story.id)
        return tasks

    def after_iteration(self, record: Any, tasks: TaskList) -> TaskList:
        """Park the iteration's story when its agent asked and no answer came yet (a story that is done
        is not parked: its question stays open for the person); put the book back if it was changed."""
        self.keep_book(record.number)
        story = tasks.story(record.story_id or "")
        with self.lock:
            asked = [q for q in self.book.open_for(record.story_id or "") if q.iteration == record.number and q.run == self.run_name]
        if story is None or not asked or story.waiting or story.done:
            return tasks
        story.waiting = True
        self.taskfile.persist(tasks)
        self.notes.note(record, f"{story.id} parked: waiting for a person's answer to {quote(asked[-1].question, 300)} "
                                f"(ralph answer {story.id} \"ANSWER\")", subject=f"{story.id} waits for a person")
        self.emit("story_parked", iteration=record.number, story=story.id, ids=[q.id for q in asked])
        return tasks

    def keep_book(self, iteration: int | None) -> None:
        """Put the book file back as the loop knows it, when something else changed (or removed) it."""
        from ralph import safeio
        from ralph.loop.rundir import state_root

        path = self.book_file or book_path(self.project_dir, self.state_dir)  # the run's (its key asks git)
        with self.lock:
            text = self.book.render()
            try:
                on_disk: str | None = safeio.read_text(path, state_root(self.state_dir))
            except (OSError, UnicodeDecodeError):
                on_disk = None
            if on_disk == text or (on_disk is None and not self.book.questions):
                return
            self._save()
        self.emit("protected_file_restored", iteration=iteration, path=str(path),
                  how="deleted" if on_disk is None else "changed",
                  message="the question book was changed outside the loop during the run; the loop put its own back "
                          "(answers reach a running loop only through `ralph answer`)")

    def _save(self) -> None:
        """Write the book (the caller holds :attr:`lock`)."""
        save_book(self.book, self.project_dir, self.state_dir)

    # -- what the loop shows ---------------------------------------------------------------------------

    def waiting(self, tasks: TaskList) -> dict[str, str]:
        """Each waiting story's latest open question (agent text, quoted and cut), for the run's end reason."""
        with self.lock:
            found = {}
            for story in tasks.userStories:
                if story.waiting and not story.done:
                    open_ = self.book.open_for(story.id)
                    found[story.id] = quote(open_[-1].question, 200) if open_ else "(no question recorded)"
            return found

    def prompt_block(self, story_id: str | None) -> str:
        """The answers a person gave to ``story_id``'s questions, for its prompt (empty when none)."""
        with self.lock:
            answered = self.book.answered_for(story_id or "")[-ANSWERS_SHOWN:]
        return answers_block(answered)


def answers_block(answered: list[Question]) -> str:
    """The prompt's section quoting a person's answers: the answer (the person's words) first, then the
    question it answers (the agent's own words), each in a fence nothing inside can close."""
    if not answered:
        return ""
    lines = ["### A person answered your question (set by the loop)", "",
             "The text in each \"answer\" block below is the person's, given with `ralph answer`. The \"question\" "
             "block is what an agent asked (not the person's words). Follow the answer."]
    for entry in answered:
        lines += ["", f"Answer of {one_line(entry.answered_at or '')} to the question of iteration {entry.iteration} "
                      f"({one_line(entry.mode)}):", "", fenced(entry.answer or "", "answer"), "",
                  "The question:", "", fenced(entry.question, "question")]
    return "\n".join(lines)


def ask_hint(command: str) -> str:
    """The loop section's line telling the agent how to ask a person."""
    return ASK_HINT.format(command=command)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class PersonChannel:
    """The loop's end of the person channel: one JSON request line per connection, from the person only."""

    def __init__(self, address: str, handle: Callable[[dict[str, Any]], dict[str, Any]],
                 refused: Callable[[str], None] | None = None) -> None:
        self.address = address
        self.handle = handle
        self.refused = refused
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> PersonChannel:
        """Bind the abstract socket (OSError where it cannot be made: not Linux, the name taken)."""
        if not self.address.startswith("\0") or not hasattr(socket, "AF_UNIX"):
            raise OSError("no abstract Unix socket on this system")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.address)
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        sock.settimeout(0.5)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="ralph-person-channel", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (the name is free again when the socket closes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), name="ralph-person-request", daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        from ralph.peercred import peer_of, refusal

        with conn:
            conn.settimeout(30)
            peer = peer_of(conn)  # the process that connected, whatever it does next
            try:
                try:
                    line = conn.makefile("rb").readline(REQUEST_LIMIT + 1)
                except OSError:
                    return
                why = refusal(peer, not_below=os.getpid())
            finally:
                if peer is not None:
                    peer.close()
            if why is not None:
                if self.refused is not None:
                    self.refused(why)
                self._reply(conn, {"ok": False, "refused": why})
                return
            try:
                if len(line) > REQUEST_LIMIT:
                    raise ValueError(f"the request is longer than {REQUEST_LIMIT} bytes")
                request = json.loads(line.decode("utf-8") or "{}")
                if not isinstance(request, dict):
                    raise ValueError("the request is not a JSON object")
                reply = self.handle(request)
            except Exception as exc:  # noqa: BLE001 - the person gets the reason; the loop goes on
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            self._reply(conn, reply)

    @staticmethod
    def _reply(conn: socket.socket, reply: dict[str, Any]) -> None:
        try:
            conn.sendall(json.dumps(reply).encode("utf-8") + b"\n")
        except OSError:
            pass


_waiting = operator.attrgetter("waiting")


def parked_view(tasks: TaskList) -> TaskList:
    """``tasks`` as a policy that does not know ``waiting`` must see it: waiting stories carry
    ``failed`` (every policy skips those), in a copy; ``tasks`` itself when no story waits."""
    if not any(map(_waiting, tasks.userStories)):
        return tasks
    view = tasks.model_copy(deep=True)
    for story in view.userStories:
        if story.waiting:
            story.failed = True
    return view
