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
  calls (``RALPH_HOOK_DAEMON=0`` turns the helper off).

It always prints valid JSON and exits 0.  Outside a loop any failure allows
the action (fail-open): a broken hook must never wedge a person's session.
During a loop (``RALPH_HOOK_SOCKET`` set) it fails closed: when the loop
cannot be reached, refuses the request or reports an error, PreToolUse
denies and Stop blocks, saying the loop is gone (the socket lives in a
directory the agent cannot write in a sandbox; deleting it in direct mode
only locks the agent out).  Every request carries the run's token
(``RALPH_HOOK_TOKEN``).

In a loop it runs for every tool call, so its start is kept small: it
imports no module beyond what Python itself loads except ``_socket`` and
``_json`` (the C parts under :mod:`socket` and :mod:`json`; importing those
two, with ``re``, ``enum`` and ``selectors`` behind them, cost more than the
rest of the call), and reads the environment from ``posix`` (:mod:`os` is
another millisecond).  Where ``_json`` is missing or differs, it uses :mod:`json`.
"""

import sys

SOCKET_ENV = "RALPH_HOOK_SOCKET"
TOKEN_ENV = "RALPH_HOOK_TOKEN"
HELPER_ENV = "RALPH_HOOK_DAEMON"
TIMEOUT_SECONDS = 55.0
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
        if end != len(body):
            raise ValueError("Extra data")
        return value

    return dumps, loads


dumps, loads = _codec()


def ask_loop(path: str, request: dict) -> dict:
    """Send one request line to the loop's hook server and read its one-line answer."""
    import _socket

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(TIMEOUT_SECONDS)
        conn.connect(path)
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


def in_process(payload: dict, environ: dict) -> dict:
    """No loop running: load ralph (and site-packages, if started with -S) and run the checks here."""
    if sys.flags.no_site:  # started with -S for speed: now we need site-packages
        import site

        site.main()
    from ralph.hooks.answers import handle_without_loop

    return handle_without_loop(payload, environ)


def helper_socket(environ: dict) -> str:
    """The per-user helper's socket: a private directory, one socket per interpreter and environment."""
    import os
    import zlib

    key = "\0".join([sys.executable, *(environ.get(name, "") for name in HELPER_KEY_ENV)])
    base = environ.get("XDG_RUNTIME_DIR") or "/tmp"
    directory = os.path.join(base, f"ralph-hooks-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.stat(directory)
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


def respond(raw: str, environ: dict) -> dict:
    payload = loads(raw or "{}")
    request = {"payload": payload, "env": {key: environ[key] for key in FORWARDED_ENV if key in environ}}
    socket_path = environ.get(SOCKET_ENV)
    if socket_path:
        request["token"] = environ.get(TOKEN_ENV, "")
        try:
            answer = ask_loop(socket_path, request)
        except (OSError, ValueError) as exc:
            return closed(payload, f"the ralph loop that started this session is gone: cannot reach "
                                   f"{socket_path} ({type(exc).__name__}: {exc})")
        if answer.get("refused"):
            return closed(payload, f"the ralph loop refused this hook call: {answer['refused']}")
        if answer.get("error"):
            sys.stderr.write(f"ralph hook: the loop reported an error: {answer['error']}\n")
            return closed(payload, f"the ralph loop could not check this: {answer['error']}")
        return answer.get("output") or {}
    if environ.get(HELPER_ENV, "1") == "0":
        return in_process(payload, environ)
    path = helper_socket(environ)
    try:
        answer = ask_loop(path, request)
    except OSError:  # no helper yet (or a dead one): answer here, and start one for the next calls
        output = in_process(payload, environ)
        start_helper(path, environ)
        return output
    if answer.get("error"):
        sys.stderr.write(f"ralph hook: the hook helper reported an error: {answer['error']}\n")
    return answer.get("output") or {}


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


def main() -> int:
    raw = sys.stdin.read()
    environ = environment()
    try:
        output = respond(raw, environ)
    except Exception as exc:
        if environ.get(SOCKET_ENV):  # in a loop: fail closed
            try:
                payload = loads(raw or "{}")
            except ValueError:
                payload = {"hook_event_name": "PreToolUse"}
            output = closed(payload, f"the ralph hook failed ({type(exc).__name__}: {exc})")
        else:  # fail-open outside a loop
            sys.stderr.write(f"ralph hook: {type(exc).__name__}: {exc} (action allowed)\n")
            output = {}
    sys.stdout.write(dumps(output))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
