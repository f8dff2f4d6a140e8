"""``ralph serve``: a live dashboard of every loop under ralph's state directory.

The data side (:mod:`~ralph.dashboard.runs`, :mod:`~ralph.dashboard.fold`) reads run directories
with the standard library only; the web side (:mod:`~ralph.dashboard.app`,
:mod:`~ralph.dashboard.server`) imports Starlette, uvicorn, sse-starlette and Jinja2 (the ``serve``
extra) only when ``ralph serve`` starts, so no other command pays for them.  docs/operating.md
says how to use it, docs/security.md what its token guards.
"""
