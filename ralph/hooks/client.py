"""The agent-side hook entry point Claude Code runs for every hook event.

Standard library only and runnable as a plain file (``python3 -S -P
hooks/client.py``), so it starts fast and works inside a sandbox image that
has python3 but not ralph's dependencies.

- During ``ralph run`` (``RALPH_HOOK_SOCKET`` set) it forwards the event to the
  running loop over a Unix socket; the loop answers with its trusted snapshot
  and all loaded plugins.
- Without a loop it asks ralph's per-user hook helper (``ralph.hooks.daemon``),
  which keeps plugins loaded between calls; when none answers it imports
  ralph, runs the same checks in-process, and starts the helper for the next
  calls (``RALPH_HOOK_DAEMON=0`` turns the helper off).  Whatever keeps the
  helper from answering (its directory not private and not ours to make so
  again, a process of another user at its socket, a refusal, an error, a
  request the helper declines because answering it would start a program)
  makes the client answer in-process: never an allow it did not check.

``client.py ask "QUESTION"`` (what ``ralph ask`` runs, in a sandbox too) sends the agent's question to
the running loop over the same socket, with the same token, and prints the loop's reply
(:func:`ask`).

It prints valid JSON and exits 0 (in a loop, input that is not a JSON object exits 2, the status
Claude Code blocks every event on, with the reason on stderr).  Outside a loop any failure allows
the action (fail-open): a broken hook must never wedge a person's session.
During a loop (``RALPH_HOOK_SOCKET`` or ``RALPH_HOOK_LOOP=1`` set) it fails
closed: when the loop cannot be reached, refuses the request or reports an
error, PreToolUse denies and Stop blocks, saying the loop is gone (the socket
lives in a directory the agent cannot write in a sandbox; deleting it in
direct mode only locks the agent out).  Every request carries the run's token
(``RALPH_HOOK_TOKEN``), sent only after the kernel said the process answering is the loop
(:func:`peer_refusal`, from ``--loop=`` on the command line), and a nonce the answer must echo.  What the client cannot answer itself (Python does not
start, the client is killed or hangs) the loop's wrapper turns into a block:
``ralph.hooks.wiring.fail_closed_command``; in a loop the client stops itself
(``SIGALRM``) before Claude Code's hook timeout, which would count as "allow".

In a loop it runs for every tool call, so its start is kept small: it
imports no module beyond what Python itself loads except ``_socket`` and
``_json`` (the C parts under :mod:`socket` and :mod:`json`; importing those
two, with ``re``, ``enum`` and ``selectors`` behind them, cost more than the
rest of the call), and reads the environment from ``posix`` (:mod:`os` is
another millisecond).  Where ``_json`` is missing or differs, it uses :mod:`json`.
When nothing but the client ran (no ralph package loaded: no exit handlers to run) it
ends with ``posix._exit`` once its output is flushed, skipping the interpreter's
teardown (its last garbage collection and freeing every module: ~1.4 ms, a sixth
of the call's CPU).
"""

import sys

SOCKET_ENV = "RALPH_HOOK_SOCKET"
TOKEN_ENV = "RALPH_HOOK_TOKEN"
LOOP_ENV = "RALPH_HOOK_LOOP"
HELPER_ENV = "RALPH_HOOK_DAEMON"
TIMEOUT_SECONDS = 55.0
# In a loop the whole call ends by then (Claude Code gives the hook 60 s and lets the tool run after it).
DEADLINE_SECONDS = 57
# Environment the answering side needs to see from the agent's side.
FORWARDED_ENV = (
    "CLAUDE_CONTEXT_WINDOW",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_PLUGIN_ROOT",
    "HOME",
    "TMPDIR",
    "RALPH_DISABLE_PLUGINS",
    "RALPH_DISABLE_PLUGIN_AUTOLOAD",
    "RALPH_HOOK_DIALECT",
)
# Environment that changes what a helper would answer: one helper per combination.
HELPER_KEY_ENV = ("PYTHONPATH", "RALPH_DISABLE_PLUGINS", "RALPH_DISABLE_PLUGIN_AUTOLOAD", "RALPH_STATE_DIR",
                  "XDG_STATE_HOME", "HOME")
_JSON_SPACE = " \t\n\r"


class _ScanContext:
    """What ``_json.make_scanner`` reads from a decoder: :class:`json.JSONDecoder`'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _codec() -> tuple:
    """``(dumps, loads)`` behaving as :func:`json.dumps` / :func:`json.loads` with their defaults:
    ``_json``'s scanner and encoder (what :mod:`json` itself runs) built as :mod:`json` builds them,
    or :mod:`json` where that fails or gives another text than it would."""
    try:
        import _json

        scan = _json.make_scanner(_ScanContext)  # type: ignore[arg-type]  # reads only the attributes
        encode = _json.make_encoder({}, _unserializable, _json.encode_basestring_ascii, None, ": ", ", ",
                                    False, False, True)
        probe = '{"a": [1, 2.5, true, null, "\\u00e9\\n"], "b": {}}'
        if "".join(encode(scan(probe, 0)[0], 0)) != probe:
            raise TypeError("_json differs")
    except (ImportError, AttributeError, TypeError, ValueError, StopIteration):
        import json

        return json.dumps, json.loads

    def dumps(value: object) -> str:
        return "".join(encode(value, 0))

    def loads(text: str) -> object:
        body = text.strip(_JSON_SPACE)
        try:
            value, end = scan(body, 0)
        except StopIteration:
            raise ValueError("Expecting value") from None
        except SystemError:  # the C scanner's error path needs json.decoder, not imported here: json says why
            import json

            return json.loads(body)
        if end != len(body):
            raise ValueError("Extra data")
        return value

    return dumps, loads


dumps, loads = _codec()


class NotTheLoop(OSError):
    """The process answering on the hook socket is not the one the loop named (:func:`peer_refusal`)."""


def ask_loop(path: str, request: dict, loop: "str | None" = None, user: "int | None" = None) -> dict:
    """Send one request line to the loop's hook server and read its one-line answer.

    With ``loop`` (what ``--loop=`` named: :func:`peer_refusal`), the process that answers is checked
    first, and nothing (the token least of all) is sent to another one: :class:`NotTheLoop`.  With
    ``user`` (the hook helper's), the process that answers must run as that uid: :class:`NotTheLoop`."""
    import _socket

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(TIMEOUT_SECONDS)
        conn.connect(path)
        if loop is not None:
            refusal = peer_refusal(conn, loop)
            if refusal is not None:
                raise NotTheLoop(refusal)
        if user is not None:
            raw = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # type: ignore[attr-defined]
            uid = int.from_bytes(raw[4:8], sys.byteorder, signed=True)
            if uid != user:
                raise NotTheLoop(f"the process answering on {path} runs as uid {uid}, not as this user")
        conn.sendall(dumps(request).encode("utf-8") + b"\n")
        conn.shutdown(_socket.SHUT_WR)
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        conn.close()
    answer = loads(b"".join(chunks).decode("utf-8"))
    if not isinstance(answer, dict):
        raise ValueError(f"the answer is not a JSON object: {answer!r:.80}")
    return answer


LOOP_OPTION = "--loop="
"""The client's first argument in a loop: ``--loop=PID:PIDNS:PIDFS``, the process that answers on the hook
socket (the loop, or the runner's relay) as the kernel names it (``ralph.hooks.wiring.hook_peer``)."""


def _pid_namespace() -> str:
    """The inode of this process's pid namespace, or "" where it cannot be read."""
    try:
        import posix

        return str(posix.stat("/proc/self/ns/pid").st_ino)
    except (ImportError, OSError):
        return ""


def peer_refusal(conn: object, loop: str) -> str | None:
    """Why the process at the other end of the connected socket ``conn`` is not ``loop``
    (``PID:PIDNS:PIDFS``, parts may be empty), or None: the kernel's word, which no process can forge.

    - ``PIDFS`` given and the kernel hands out the peer's pidfd (``SO_PEERPIDFD``, Linux 6.5+): its
      pidfs inode (unique per process while the machine runs, Linux 6.9+) must be ``PIDFS``.
    - otherwise, when this process is in the loop's pid namespace (``PIDNS``: no namespace could be
      made), the peer's pid (``SO_PEERCRED``) must be ``PID``;
    - otherwise this process is in a pid namespace of its own (the agent's, a sandbox's), where every
      process the agent starts is visible: the peer must be one it cannot see (pid 0), as the loop is.
    """
    import _socket

    pid_text, _, rest = loop.partition(":")
    namespace, _, pidfs = rest.partition(":")
    if pidfs:
        try:
            pidfd = int.from_bytes(conn.getsockopt(_socket.SOL_SOCKET, 77, 4), sys.byteorder, signed=True)  # type: ignore[attr-defined]  # SO_PEERPIDFD
        except OSError:
            pidfd = -1
        if pidfd >= 0:
            import posix

            try:
                inode = posix.fstat(pidfd).st_ino
            finally:
                posix.close(pidfd)
            if str(inode) == pidfs:
                return None
            return (f"the process answering on the hook socket is not the ralph loop (its pidfs inode is {inode}, the "
                    f"loop's {pidfs}): a process took the socket's place")
    try:
        raw = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # type: ignore[attr-defined]
    except (AttributeError, OSError) as exc:
        return f"the kernel does not say which process answers on the hook socket ({type(exc).__name__}: {exc})"
    pid = int.from_bytes(raw[:4], sys.byteorder, signed=True)
    if pid_text and _pid_namespace() == namespace:
        if str(pid) == pid_text:
            return None
        return (f"the process answering on the hook socket (pid {pid}) is not the ralph loop (pid {pid_text}): a "
                "process took the socket's place")
    if pid == 0:
        return None
    return (f"the process answering on the hook socket (pid {pid}) runs where this session can see it, so it is "
            "not the ralph loop (which runs outside this session's pid namespace): a process took the socket's place")


def in_process(payload: dict, environ: dict) -> dict:
    """No loop running: load ralph (and site-packages, if started with -S) and run the checks here."""
    if sys.flags.no_site:  # started with -S for speed: now we need site-packages
        import site

        site.main()
    from ralph.hooks.answers import handle_without_loop

    return handle_without_loop(payload, environ)


def helper_socket(environ: dict) -> str:
    """The per-user helper's socket: a private directory, one socket per interpreter and environment.

    A directory of ours that is not private (someone opened it) is made private again; one that is not a
    directory of ours raises :class:`PermissionError` (the caller then answers in-process)."""
    import os
    import stat
    import zlib

    key = "\0".join([sys.executable, *(environ.get(name, "") for name in HELPER_KEY_ENV)])
    base = environ.get("XDG_RUNTIME_DIR") or "/tmp"
    directory = os.path.join(base, f"ralph-hooks-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{directory} is not a directory of this user")
    if info.st_mode & 0o077:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)
            info = os.fstat(fd)
        finally:
            os.close(fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{directory} is not private to this user")
    return os.path.join(directory, f"{zlib.crc32(key.encode()):08x}.sock")


def start_helper(path: str, environ: dict) -> None:
    """Start the hook helper in the background (it needs site-packages: no -S)."""
    import subprocess

    subprocess.Popen(
        [sys.executable, "-P", "-m", "ralph.hooks.daemon", path],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=environ,
    )


def respond(raw: str, environ: dict, loop: str = "") -> dict:
    """The hook's output for the event ``raw``; ``loop``: what ``--loop=`` named ("": only a process this
    one cannot see may answer for the loop: :func:`peer_refusal`)."""
    payload = loads(raw or "{}")
    if not isinstance(payload, dict):
        raise ValueError(f"the hook input is not a JSON object: {raw!r:.80}")
    request: dict = {"payload": payload, "env": {key: environ[key] for key in FORWARDED_ENV if key in environ}}
    socket_path = environ.get(SOCKET_ENV)
    if not socket_path and in_loop(environ):
        return closed(payload, f"the ralph loop's hook socket is not set ({SOCKET_ENV})")
    if socket_path:
        import posix

        request["token"] = environ.get(TOKEN_ENV, "")
        request["nonce"] = nonce = posix.urandom(16).hex()  # the loop's answer echoes it: no answer to another call
        try:
            answer = ask_loop(socket_path, request, loop)
        except NotTheLoop as exc:
            return closed(payload, f"{exc}; denied, the run's token was not sent")
        except (OSError, ValueError) as exc:
            return closed(payload, f"the ralph loop that started this session is gone: cannot reach "
                                   f"{socket_path} ({type(exc).__name__}: {exc})")
        if answer.get("refused"):
            return closed(payload, f"the ralph loop refused this hook call: {answer['refused']}")
        if answer.get("error"):
            sys.stderr.write(f"ralph hook: the loop reported an error: {answer['error']}\n")
            return closed(payload, f"the ralph loop could not check this: {answer['error']}")
        if answer.get("nonce") != nonce:
            return closed(payload, "the answer on the hook socket does not belong to this hook call (it does not "
                                   "echo the call's nonce)")
        return answer.get("output") or {}
    if environ.get(HELPER_ENV, "1") == "0":
        return in_process(payload, environ)
    return ask_helper(payload, request, environ)


def ask_helper(payload: dict, request: dict, environ: dict) -> dict:
    """Outside a loop: the per-user hook helper's answer, or this process's own (:func:`in_process`) whenever
    the helper does not give one it checked."""
    import os

    try:
        path = helper_socket(environ)
    except OSError as exc:
        sys.stderr.write(f"ralph hook: no hook helper ({type(exc).__name__}: {exc}); answered in-process\n")
        return in_process(payload, environ)
    try:
        answer = ask_loop(path, request, user=os.getuid())
    except NotTheLoop as exc:
        sys.stderr.write(f"ralph hook: {exc}; answered in-process\n")
        return in_process(payload, environ)
    except (OSError, ValueError):  # no helper yet (or a dead one): answer here, and start one for the next calls
        output = in_process(payload, environ)
        start_helper(path, environ)
        return output
    why = answer.get("refused") or answer.get("declined") or answer.get("error")
    if why or not isinstance(answer.get("output"), dict):
        if answer.get("error"):
            sys.stderr.write(f"ralph hook: the hook helper reported an error: {answer['error']}\n")
        return in_process(payload, environ)  # the helper's answer is no answer: this process checks
    return answer["output"]


def in_loop(environ: dict) -> bool:
    """Whether this call belongs to a running loop (and so fails closed)."""
    return bool(environ.get(SOCKET_ENV)) or environ.get(LOOP_ENV) == "1"


def deadline(seconds: int) -> None:
    """End this process with ``SIGALRM`` after ``seconds``, whatever it is doing (a non-zero exit: a block)."""
    import _signal

    _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)
    _signal.alarm(seconds)


def closed(payload: dict, reason: str) -> dict:
    """Fail-closed output during a loop: PreToolUse denies, Stop blocks, other events add nothing."""
    sys.stderr.write(f"ralph hook: {reason}\n")
    name = payload.get("hook_event_name") if isinstance(payload, dict) else None
    text = f"{reason}. Nothing more can be done in this session; stop and let the loop (or the person) recover."
    if name == "PreToolUse":
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                       "permissionDecisionReason": text}}
    if name == "Stop":
        return {"decision": "block", "reason": text}
    return {}


def environment() -> dict:
    """This process's environment, decoded as :data:`os.environ` decodes it."""
    try:
        import posix
    except ImportError:  # not a POSIX system
        import os

        return dict(os.environ)
    encoding = sys.getfilesystemencoding()
    return {key.decode(encoding, "surrogateescape"): value.decode(encoding, "surrogateescape")
            for key, value in posix.environ.items()}


ASK_USAGE = 'usage: ralph ask "QUESTION" (inside a ralph loop iteration: the loop parks the story until a person answers)'


def ask(question: str, environ: dict) -> tuple:
    """Send the agent's ``question`` to the running loop; ``(exit code, the line to print)``.

    0: recorded (the loop parks the story); 1: the loop refused it (saying why); 2: not in a loop, or
    the loop cannot be reached.
    """
    socket_path = environ.get(SOCKET_ENV)
    if not socket_path:
        return 2, ("ralph ask: not inside a ralph loop iteration (RALPH_HOOK_SOCKET is not set); there is no "
                   "loop to park the story: ask the person yourself")
    request = {"token": environ.get(TOKEN_ENV, ""), "ask": {"question": question}}
    try:
        answer = ask_loop(socket_path, request)
    except (OSError, ValueError) as exc:
        return 2, f"ralph ask: the ralph loop cannot be reached at {socket_path} ({type(exc).__name__}: {exc})"
    if answer.get("refused"):
        return 2, f"ralph ask: the ralph loop refused the request: {answer['refused']}"
    if answer.get("error"):
        return 2, f"ralph ask: the ralph loop reported an error: {answer['error']}"
    output = answer.get("output")
    if not isinstance(output, dict):
        return 2, "ralph ask: the ralph loop gave no answer"
    return (0 if output.get("ok") else 1), str(output.get("message") or "")


def ask_main(argv: list) -> int:
    """``client.py ask QUESTION...``: the words are joined with spaces (as ``echo`` would)."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(ASK_USAGE + "\n")
        return 0 if argv else 2
    code, line = ask(" ".join(argv), environment())
    (sys.stdout if code == 0 else sys.stderr).write(line + "\n")
    return code


def main() -> int:
    argv = sys.argv[1:]
    loop = argv.pop(0)[len(LOOP_OPTION):] if argv and argv[0].startswith(LOOP_OPTION) else ""
    if argv and argv[0] == "ask":
        return ask_main(argv[1:])
    environ = environment()
    if in_loop(environ):
        deadline(DEADLINE_SECONDS)
    raw = sys.stdin.read()
    try:
        output = respond(raw, environ, loop)
    except Exception as exc:
        if in_loop(environ):  # fail closed
            try:
                payload = loads(raw or "{}")
            except Exception:  # noqa: BLE001 - whatever the input is, the answer is a block
                payload = None
            if not isinstance(payload, dict):  # no event to answer in its own terms: exit 2 blocks every event
                sys.stderr.write(f"ralph hook: the hook input is not a JSON object ({type(exc).__name__}: {exc}); "
                                 "blocked: the ralph loop checks nothing it cannot read\n")
                return 2
            output = closed(payload, f"the ralph hook failed ({type(exc).__name__}: {exc})")
        else:  # fail-open outside a loop
            sys.stderr.write(f"ralph hook: {type(exc).__name__}: {exc} (action allowed)\n")
            output = {}
    sys.stdout.write(dumps(output))
    sys.stdout.flush()
    return 0


def end(code: int) -> int:
    """Exit with ``code`` at once when only the client ran (its output flushed first: a failed flush raises,
    and Python's own exit reports it); otherwise return ``code`` for a normal exit."""
    if "ralph" in sys.modules:  # ralph and its plugins were loaded (outside a loop): let their exit handlers run
        return code
    sys.stdout.flush()
    if sys.stderr is not None:  # started without a stderr: nothing to flush there
        sys.stderr.flush()
    try:
        import posix
    except ImportError:  # not a POSIX system
        return code
    posix._exit(code)
    return code  # not reached


if __name__ == "__main__":
    raise SystemExit(end(main()))
