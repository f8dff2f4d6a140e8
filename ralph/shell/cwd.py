"""Where the shell is along one line: the one place that knows whether the guard still follows the directory.

A relative path is read against the ``cd`` steps the walk followed (``State.cd``).  Where the walk cannot be
sure which steps ran -- a ``cd`` that may fail before ``;``, ``a || cd b``, a branch of ``if`` or ``case``, a loop
body, a ``cd`` to a glob or to a directory only known at run time -- the place is *lost*: ``State.cd`` ends in
:data:`~ralph.shell.CD_DATA` and ``cd_unknown`` is set, so every later relative path is one the guards cannot
place (:func:`ralph.shell.unplaced`) and a write there is denied as a write anywhere.  Nothing here guesses the
simple case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ralph.shell import CD_DATA

Where = tuple[tuple[str, ...], bool, Any, Any]
"""(``cd`` steps, ``cd_unknown``, ``oldcd``, ``dirstack``): everything ``cd``, ``pushd`` and ``popd`` change."""

CANNOT_FAIL = "cannot fail"
"""``State.cd_fail`` after a ``cd`` into a directory that exists: it does not fail, so ``cd x || y`` never runs y."""


def where(st: Any) -> Where:
    """The state's directory, as a value to compare and restore."""
    return (tuple(st.cd), st.cd_unknown, st.oldcd, st.dirstack)


def put(st: Any, place: Where) -> None:
    """Make ``place`` the state's directory."""
    st.cd, st.cd_unknown, st.oldcd, st.dirstack = list(place[0]), place[1], place[2], place[3]


def lost(place: Where) -> Where:
    """``place`` with the directory no longer known (the stack and ``cd -`` with it)."""
    steps = place[0] if CD_DATA in place[0] else (*place[0], CD_DATA)
    return (steps, True, None, ())


def join(a: Where | None, b: Where | None) -> Where | None:
    """Where the shell is when it may be at ``a`` or at ``b`` (None: that way cannot happen)."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    if a[:2] == b[:2]:  # the same directory, a different way back (`cd -`, the stack): those are lost
        return (a[0], a[1], None, ())
    return lost(a)


def lose(w: Any, st: Any, why: str) -> None:
    """The walk no longer knows where the shell is (``why`` is said in the guards' reasons)."""
    if why not in w.result.cwd_lost:
        w.result.cwd_lost.append(why)
    put(st, lost(where(st)))


def settle(w: Any, st: Any, before: Where, alternatives: Sequence[Where | None], why: str) -> None:
    """After a construct whose branches may have ended in different places: one place, or lost."""
    place: Where | None = None
    for alt in alternatives:
        place = alt if place is None else join(place, alt)
    if place is None:
        place = before
    if place[1] and not before[1] and CD_DATA in place[0] and why not in w.result.cwd_lost:
        w.result.cwd_lost.append(why)
    put(st, place)


def after_statement(w: Any, st: Any) -> None:
    """A statement ended (``;``, newline): a ``cd`` in it that may have failed leaves the shell in either place."""
    fail = st.cd_fail
    st.cd_fail = None
    if fail is None or fail == CANNOT_FAIL:
        return
    here = where(st)
    if fail != here:
        settle(w, st, fail, [here, fail], "a `cd` into a directory that does not exist now may fail, and the commands "
                                         "after `;` then run where the shell was (write `cd DIR && ...`)")


_SAFE_REDIRECT = re.compile(r"[012]?(?:>|>>|>\||<|&>|&>>)")
_SAFE_DUP = re.compile(r"[012]?(?:>&|<&)")


def redirects_may_fail(pairs: Sequence[tuple[str, str]]) -> bool:
    """Whether a redirection among ``pairs`` may fail to be made: bash then runs nothing of the command (a ``cd``
    stays where it was).  Only ``/dev/null`` and duplicating the standard streams (``2>&1``) are sure to work."""
    for op, target in pairs:
        if target == "/dev/null" and _SAFE_REDIRECT.fullmatch(op):
            continue
        if target in ("0", "1", "2") and _SAFE_DUP.fullmatch(op):
            continue
        return True
    return False
