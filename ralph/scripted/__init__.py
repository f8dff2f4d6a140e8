"""Scripted models and stories: what ``ralph demo`` acts out, and what ``ralph.testing`` gives tests.

Stdlib only (no pytest): the local stand-ins for the model APIs the real agent CLIs talk to
(:mod:`ralph.scripted.model_server` for Claude Code, :mod:`ralph.scripted.responses_server` for
Codex, on :mod:`ralph.scripted.scripted_server`), the builders of a scripted agent's steps
(:mod:`ralph.scripted.scripting`) and of a story (:mod:`ralph.scripted.stories`).  Tests and plugin
authors import them as ``ralph.testing.model_server`` ... (docs/plugins.md).
"""
