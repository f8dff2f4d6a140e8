"""The bwrap sandbox's first process when the sandbox has a way out: standard library only.

Run as a file (``python3 -I -S inside.py``) inside a sandbox whose network namespace has only a
loopback interface::

    inside.py --forward 43127=/run/ralph-bwrap/net/tcp-43127.sock [--forward ...] -- COMMAND...

For each ``--forward PORT=SOCKET`` it listens on ``127.0.0.1:PORT`` inside the sandbox and carries
every connection to the Unix socket ``SOCKET``, which the runner's relay outside the sandbox
serves (the loop's model meter, the allowlist proxy); then it runs ``COMMAND`` and exits with its
exit code.  Nothing here decides what may pass: the relay outside does.  If this process is
killed, the sandbox's pid 1 sees its first child gone and the kernel ends every process of the
sandbox with it.

It imports only ``_socket``, ``_thread``, ``os`` and ``sys`` (``socket``, ``threading`` and
``subprocess`` would triple the start-up every agent process pays).
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

CHUNK = 1 << 16


def _pump(source: _socket.socket, target: _socket.socket, done: _thread.LockType | None) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if done is not None:
        done.release()


def _carry(client: _socket.socket, path: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = _thread.allocate_lock()
    back.acquire()
    _thread.start_new_thread(_pump, (upstream, client, back))
    _pump(client, upstream, None)
    back.acquire()  # the way back is done too
    client.close()
    upstream.close()


def _serve(listener: _socket.socket, path: str) -> None:
    while True:
        try:
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # (the C socket: socket.accept wraps it)
        except OSError:
            return
        client = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
        _thread.start_new_thread(_carry, (client, path))


def _listen(port: int) -> _socket.socket:
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    return listener


def main(argv: list[str]) -> int:
    """Start the forwarders of ``argv``, run its command, return the command's exit code."""
    if "--" not in argv:
        sys.stderr.write("usage: inside.py [--forward PORT=SOCKET]... -- COMMAND...\n")
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    forwards = []
    while options:
        flag = options.pop(0)
        if flag != "--forward" or not options:
            sys.stderr.write(f"inside.py: unknown option {flag!r}\n")
            return 2
        number, _, target = options.pop(0).partition("=")
        forwards.append((int(number), target))
    listeners = []
    for port, path in forwards:
        listener = _listen(port)
        listeners.append(listener)
        _thread.start_new_thread(_serve, (listener, path))
    if not command:
        return 0
    pid = os.fork()
    if pid == 0:
        for listener in listeners:  # the command does not hold the forwarders' sockets
            listener.close()
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            sys.stderr.write(f"ralph sandbox: cannot start {command[0]}: {exc}\n")
        os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
