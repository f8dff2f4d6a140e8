"""The agent-side hook entry point Claude Code runs for every hook event.

Standard library only and runnable as a plain file (``python3 -S -P
hook_client.py``), so it starts fast and works inside a sandbox image that
has python3 but not ralph's dependencies.

- During ``ralph run`` (``RALPH_HOOK_SOCKET`` set) it forwards the event to the
  running loop over a Unix socket; the loop answers with its trusted snapshot
  and all loaded plugins.
- Without a loop it imports ralph and runs the same checks in-process.

It always prints valid JSON and exits 0.  Any failure allows the action
(fail-open): a broken hook must never wedge the agent; the loop validates on
its own after the iteration anyway.
"""

from __future__ import annotations

import json
import os
import socket
import sys

SOCKET_ENV = "RALPH_HOOK_SOCKET"
TIMEOUT_SECONDS = 55.0
# Environment the loop may need to see from the agent's side.
FORWARDED_ENV = ("CLAUDE_CONTEXT_WINDOW", "CLAUDE_PROJECT_DIR", "CLAUDE_PLUGIN_ROOT")


def ask_loop(path: str, request: dict) -> dict:
    """Send one request line to the loop's hook server and read its one-line answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(TIMEOUT_SECONDS)
        conn.connect(path)
        conn.sendall(json.dumps(request).encode("utf-8") + b"\n")
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return json.loads(b"".join(chunks).decode("utf-8"))


def in_process(payload: dict, environ: dict) -> dict:
    """No loop running: load ralph (and site-packages, if started with -S) and run the checks here."""
    if sys.flags.no_site:  # started with -S for speed: now we need site-packages
        import site

        site.main()
    from ralph.hook import handle_without_loop

    return handle_without_loop(payload, environ)


def respond(raw: str, environ: dict) -> dict:
    payload = json.loads(raw or "{}")
    socket_path = environ.get(SOCKET_ENV)
    if socket_path:
        env = {key: environ[key] for key in FORWARDED_ENV if key in environ}
        answer = ask_loop(socket_path, {"payload": payload, "env": env})
        if answer.get("error"):
            sys.stderr.write(f"ralph hook: the loop reported an error: {answer['error']}\n")
        return answer.get("output") or {}
    return in_process(payload, environ)


def main() -> int:
    try:
        output = respond(sys.stdin.read(), dict(os.environ))
    except Exception as exc:  # fail-open
        sys.stderr.write(f"ralph hook: {type(exc).__name__}: {exc} (action allowed)\n")
        output = {}
    sys.stdout.write(json.dumps(output))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
