"""The agent-side hook channel, for runners whose agent cannot reach the loop's socket.

``HookRelay`` is a private Unix socket next to the agent that hands each hook request to
a forwarder (which carries it to the loop and returns the reply); ``ask_loop(path, request)``
is what the hook client does with one request; ``hook_client_path()`` is the stdlib-only
client script the agent's hooks run (ship it where the agent runs).
"""

from __future__ import annotations

from ralph.hooks.client import ask_loop
from ralph.hooks.relay import Forwarder, HookRelay
from ralph.hooks.wiring import hook_client_path, hook_packages

__all__ = ["Forwarder", "HookRelay", "ask_loop", "hook_client_path", "hook_packages"]
