"""The agent-side hook channel, for runners whose agent cannot reach the loop's socket.

``HookRelay`` is a private Unix socket next to the agent that hands each hook request to
a forwarder (which carries it to the loop and returns the reply); ``ask_loop(path, request)``
is what the hook client does with one request; ``hook_client_path()`` is the stdlib-only
client script the agent's hooks run (ship it where the agent runs); ``claude_settings(channel)``
renders an :class:`~ralph.contracts.AgentChannel` as Claude Code's ``--settings`` file (ralph's hooks
and the pins that keep a project from switching them off); ``hook_command_for(channel)`` is the shell
command another CLI runs for ralph's hooks (the client, wrapped so that any failure blocks);
``PINNED_ENV`` names the loader variables a channel's ``loader_env`` pins; ``hook_peer()`` names the
process that serves a hook socket (a relay's own, for its channel's ``hook_peer``: the hook client takes
answers from that process only).
"""

from __future__ import annotations

from ralph.hooks.client import ask_loop
from ralph.hooks.relay import Forwarder, HookRelay
from ralph.hooks.wiring import PINNED_ENV, claude_settings, hook_client_path, hook_command_for, hook_packages, hook_peer

__all__ = ["PINNED_ENV", "Forwarder", "HookRelay", "ask_loop", "claude_settings", "hook_client_path", "hook_command_for",
           "hook_packages", "hook_peer"]
