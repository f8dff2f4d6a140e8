"""Calling hooks through pluggy: which plugin raised, the collected answers, hook-call tracing.

Every hook ralph calls goes through the plugin manager's hook callers (``pm.hook.ralph_*``,
or a subset of them), so ``@hookimpl(wrapper=True)`` / ``tryfirst`` / ``trylast`` behave as
pluggy documents and ``RALPH_TRACE_PLUGINS`` sees every call.  What pluggy does not tell is
*which* implementation raised; :func:`raised_by` reads it from the exception's traceback.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

import pluggy

TRACE_ENV = "RALPH_TRACE_PLUGINS"
"""``1`` prints every hook call (arguments, implementations, answer) on stderr; a comma-separated
list of hook names (``ralph_validate,pre_tool_use``) only those."""

_REPR_LIMIT = 240


def raised_by(error: BaseException, impls: Sequence[pluggy.HookImpl]) -> pluggy.HookImpl | None:
    """The implementation among ``impls`` whose code raised ``error`` (None: none of their code is in
    its traceback, e.g. pluggy itself refused a wrapper's answer).

    The innermost matching frame wins: an exception a wrapper re-raises belongs to the plugin that
    raised it first; one the wrapper raises itself (its own, or a new one) to the wrapper.
    """
    codes: dict[Any, list[pluggy.HookImpl]] = {}
    for impl in impls:
        for code in _codes(impl.function):
            codes.setdefault(code, []).append(impl)
    found = None
    trace = error.__traceback__
    while trace is not None:
        candidates = codes.get(trace.tb_frame.f_code)
        if candidates:
            found = _pick(candidates, trace.tb_frame.f_locals)
        trace = trace.tb_next
    return found


def _codes(function: Any) -> list[Any]:
    """The code objects that run when ``function`` is called: its own, those of what it wraps
    (``functools.wraps``, ``partial``) and a callable object's ``__call__``."""
    codes = []
    seen = 0
    while function is not None and seen < 10:
        seen += 1
        code = getattr(function, "__code__", None)
        if code is None and not isinstance(function, type):
            call = vars(type(function)).get("__call__")  # a callable object's method
            code = getattr(call, "__code__", None)
        if code is not None:
            codes.append(code)
        function = getattr(function, "__wrapped__", None) or getattr(function, "func", None)
    return codes


def _pick(candidates: list[pluggy.HookImpl], local: Mapping[str, Any]) -> pluggy.HookImpl:
    """One of several implementations sharing code (two instances of one plugin class): the one
    whose instance is the frame's ``self``."""
    if len(candidates) > 1 and "self" in local:
        for impl in candidates:
            if getattr(impl.function, "__self__", None) is local["self"] or impl.plugin is local["self"]:
                return impl
    return candidates[0]


def flatten(results: Iterable[Any]) -> list[Any]:
    """The items of a collecting hook's answers: each implementation answers a list (or None);
    a wrapper may hand back the lists or the items themselves."""
    items: list[Any] = []
    for result in results or []:
        if result is None:
            continue
        if isinstance(result, (list, tuple)):
            items.extend(item for item in result if item is not None)
        else:
            items.append(result)
    return items


def traced_hooks(environ: Mapping[str, str]) -> set[str] | None:
    """The hooks ``RALPH_TRACE_PLUGINS`` asks to trace: an empty set for all, None for none."""
    value = environ.get(TRACE_ENV, "").strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return None
    if value.lower() in ("1", "true", "yes", "on", "all"):
        return set()
    return {name if name.startswith("ralph_") else f"ralph_{name}" for name in (n.strip() for n in value.split(",")) if name}


def trace_calls(pm: pluggy.PluginManager, hooks: set[str], out: TextIO | None = None) -> Callable[[], None]:
    """Print every call of ``hooks`` (all when empty) on ``out`` (stderr): the arguments, the
    implementations in call order, then the answer or the exception and the time it took.
    Returns the function that stops tracing.

    Arguments and answers are shown with ``repr``, cut to a line and with control characters
    escaped: they can carry text the agent wrote.
    """
    clock = threading.local()  # hooks are called from the loop's thread and the hook server's

    def write(line: str) -> None:
        stream = out if out is not None else sys.stderr
        stream.write(f"ralph: trace: {line}\n")

    def before(hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]) -> None:
        clock.started = [*getattr(clock, "started", []), time.perf_counter()]
        if hooks and hook_name not in hooks:
            return
        arguments = ", ".join(f"{key}={_short(value)}" for key, value in kwargs.items())
        called = ", ".join(_describe(impl) for impl in reversed(hook_impls)) or "no implementation"
        write(f"{hook_name}({arguments}) -> {called}")

    def after(outcome: pluggy.Result[Any], hook_name: str, hook_impls: Sequence[pluggy.HookImpl],
              kwargs: Mapping[str, object]) -> None:
        started = getattr(clock, "started", [])
        took = (time.perf_counter() - started.pop()) * 1000 if started else 0.0
        if hooks and hook_name not in hooks:
            return
        if outcome.exception is not None:
            error = outcome.exception
            write(f"{hook_name} raised {type(error).__name__}: {_short(str(error), quote=False)} ({took:.1f} ms)")
        else:
            write(f"{hook_name} answered {_short(outcome.get_result())} ({took:.1f} ms)")

    return pm.add_hookcall_monitoring(before, after)


def _describe(impl: pluggy.HookImpl) -> str:
    flags = [flag for flag in ("wrapper", "hookwrapper", "tryfirst", "trylast") if getattr(impl, flag, False)]
    return impl.plugin_name + (f" ({', '.join(flags)})" if flags else "")


def _short(value: object, quote: bool = True) -> str:
    """``repr(value)`` (or the text itself) on one line, control characters escaped, cut to a length."""
    try:
        text = repr(value) if quote else str(value)
    except Exception as exc:  # noqa: BLE001 - a repr that raises must not break the call it traces
        text = f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    text = "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."
