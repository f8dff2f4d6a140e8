"""A parse of the task file, reused for the very same text: a copy that shares nothing mutable with it.

An iteration that leaves the task file's bytes as the loop last read them (the agent changed only code, or
nothing) would parse the same text again: copying a parse of 10,000 stories costs about 0.6 of parsing
them (pydantic's JSON parser builds the same objects and validates each value on the way).
:class:`ParseCache` keeps one parse and the whole text it was made of;
a read whose text is equal to it, character for character (never a size, an mtime or a hash the agent
could aim at), gets :func:`fresh_copy` of it: new models, new lists and dicts, the same immutable
scalars, indistinguishable from a new parse.  The kept parse itself is never handed out, so nothing a
caller changes reaches it.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

_T = TypeVar("_T")

_ATOMS = frozenset({str, int, bool, type(None)})
"""Immutable values a copy shares with its original, whose equality is their value's.  A float is shared too
unless it is NaN (then nothing is copied: a NaN equals only itself, so a shared one would make two parses
compare equal where two separate parses never do)."""

_new = object.__new__
_set = object.__setattr__


class Uncopyable(Exception):
    """The value holds something :func:`fresh_copy` does not copy (a private attribute, a tuple, a set ...)."""


def fresh_copy(value: _T) -> _T:
    """``value`` (a parse: pydantic models, lists, dicts and JSON scalars) copied so that no model, list or dict
    is shared; raises :class:`Uncopyable` for anything else (the caller then parses instead)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list:
        return [  # type: ignore[return-value]
            item if type(item) in _ATOMS else _model_copy(item) if isinstance(item, BaseModel) else fresh_copy(item)
            for item in value  # type: ignore[attr-defined]
        ]
    if kind is dict:
        return {key: item if type(item) in _ATOMS else fresh_copy(item) for key, item in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is float:
        if value != value:
            raise Uncopyable("NaN")
        return value
    if isinstance(value, BaseModel):
        return _model_copy(value)  # type: ignore[return-value]
    raise Uncopyable(kind.__name__)


def _model_copy(model: BaseModel) -> BaseModel:
    """A new ``type(model)`` with copies of its fields, extra keys and the set of fields set (no validation: the
    values were validated when ``model`` was made and nothing changed them)."""
    cls = type(model)
    size, floats, atom_lists, deep = _PLANS.get(cls) or _plan(cls)
    if getattr(model, "__pydantic_private__", None) is not None:
        raise Uncopyable("private attributes")
    fields = model.__dict__.copy()
    if len(fields) != size:  # not the fields a validated model holds
        raise Uncopyable("unexpected attributes")
    for key in floats:
        item = fields[key]
        if type(item) is float and item != item:
            raise Uncopyable("NaN")
    for key in atom_lists:
        item = fields[key]
        fields[key] = item[:] if type(item) is list else fresh_copy(item)
    for key in deep:
        fields[key] = fresh_copy(fields[key])
    extra = model.__pydantic_extra__
    if extra:
        extra = fresh_copy(extra)
    elif extra is not None:
        extra = {}
    copy = _new(cls)
    _set(copy, "__dict__", fields)
    _set(copy, "__pydantic_extra__", extra)
    _set(copy, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    _set(copy, "__pydantic_private__", None)
    return copy


class _Plan(NamedTuple):
    """How to copy one model class's fields, from their declared types (every value was validated against them)."""

    size: int
    """How many fields the class has (a validated model holds each in its ``__dict__``)."""
    floats: tuple[str, ...]
    """Fields whose value is shared but may be a float (checked for NaN)."""
    atom_lists: tuple[str, ...]
    """Fields whose value is a list of strings, integers, booleans or None (copied with ``[:]``)."""
    deep: tuple[str, ...]
    """Every other field that is not a string, integer, boolean or None: copied by :func:`fresh_copy`."""


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type[BaseModel]) -> _Plan:
    """The class's plan, made on first use from its fields' declared types."""
    plan = _PLANS.get(cls)
    if plan is None:
        floats, atom_lists, deep = [], [], []
        for name, info in cls.model_fields.items():
            leaves = _leaves(info.annotation)
            if leaves is not None and leaves <= _ATOMS:
                continue
            if leaves is not None and leaves <= _ATOMS | {float}:
                floats.append(name)
            elif get_origin(info.annotation) is list and (_leaves(get_args(info.annotation)[0]) or {object}) <= _ATOMS:
                atom_lists.append(name)
            else:
                deep.append(name)
        plan = _PLANS[cls] = _Plan(len(cls.model_fields), tuple(floats), tuple(atom_lists), tuple(deep))
    return plan


def _leaves(annotation: Any) -> set[type] | None:
    """The scalar types a value of ``annotation`` can have (``str | None``: str and NoneType), or None when it can be
    anything else (a list, a model, ``Any``)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _leaves(get_args(annotation)[0])
    if origin is Literal:
        return {type(value) for value in get_args(annotation)}
    if origin is Union or origin is types.UnionType:
        found: set[type] = set()
        for member in get_args(annotation):
            leaves = _leaves(member)
            if leaves is None:
                return None
            found |= leaves
        return found
    if annotation is None:
        return {type(None)}
    if isinstance(annotation, type) and annotation in _ATOMS | {float}:
        return {annotation}
    return None


class ParseCache:
    """The last parse of a text that was read twice in a row, kept untouched; equal text gets a fresh copy.

    A text is kept only from its second remembered read on: a task file that changes at every iteration (the agent
    edits it) then costs one comparison per read, never a copy it does not use."""

    def __init__(self) -> None:
        self._seen: str | None = None
        """The text of the last remembered read that was parsed."""
        self._kept: tuple[str, Any] | None = None
        """(text, its parse), the parse never handed out."""

    def get(self, text: str) -> Any | None:
        """A fresh copy of the parse of exactly ``text`` (the whole of it compared), or None."""
        kept = self._kept  # one read: a hook thread may replace it
        if kept is None or kept[0] != text:
            return None
        return fresh_copy(kept[1])

    def put(self, text: str, parsed: _T, remember: bool = True) -> _T:
        """``parsed`` was just made of ``text``: returned to the caller; a copy is kept when ``text`` was also the
        last text remembered (or nothing is kept: the parse holds something :func:`fresh_copy` cannot copy).
        ``remember`` False: a read that says nothing about the next one (a Stop hook's, mid-iteration)."""
        if not remember:
            return parsed
        if self._seen != text:
            self._seen = text
            return parsed
        try:
            self._kept = (text, fresh_copy(parsed))
        except Uncopyable:
            self._kept = None
        return parsed
