"""For sandbox runners: the programs a gate command runs, and one script that looks them all up
inside the sandbox before iteration 1 (a gate that cannot start there fails every iteration).

- :class:`ProgramNeed`: a program (and, for ``python -m``, its module) one gate command runs, with
  the ``PATH`` the command sets and the directory it runs in, where known.
- :func:`gate_calls`: each simple command the gate commands run (``ralph.api.shell.analyze``), with notes
  for what cannot be checked before it runs;
  :data:`BUILTINS` (nothing to look up) and :func:`python_module` (``MODULE`` of ``python3 -W x -m MODULE``):
  for turning ``ralph.api.shell.analyze`` results into needs.
- :data:`LOOKUP_SCRIPT`, run there as ``python3 -I -S -c LOOKUP_SCRIPT PAYLOAD`` with
  ``PAYLOAD = lookup_payload(needs, gates_path)``; :func:`lookup_answer` reads its output: per need
  ``found`` (the path there, or None) and ``module`` (whether that interpreter finds it).
"""

from __future__ import annotations

from ralph.gateprograms import (
    BUILTINS,
    LOOKUP_SCRIPT,
    ProgramNeed,
    gate_calls,
    lookup_answer,
    lookup_payload,
    python_module,
)

__all__ = ["BUILTINS", "LOOKUP_SCRIPT", "ProgramNeed", "gate_calls", "lookup_answer", "lookup_payload",
           "python_module"]
