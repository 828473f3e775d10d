"""Checks a sweep would repeat for every element, done once per distinct input.

The elements of ``dlcomm train -m model=mlp,vgg16 seed=range(0,300)`` differ in one or two values;
composing each with Hydra, building each one's model and optimizer and opening the store for each
took minutes before the sweep's one bad value was refused. Inside :func:`remembering` (the scope
of checking one sweep), :func:`once` keeps the outcome of a check, a result or its refusal, under
the inputs it reads (the model's, the data set's, the optimizer's configuration, ...), and
:func:`dlcomm.compose.compose` keeps Hydra's composition of the overrides that choose files. Outside
that scope nothing is kept: a single run checks everything afresh (the files may change between
runs of one process).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Optional, TypeVar

from dlcomm.errors import UserError

T = TypeVar("T")
_MEMO: ContextVar[Optional[dict]] = ContextVar("dlcomm_checked", default=None)


class _Refused:
    def __init__(self, error: UserError) -> None:
        self.error = error


@contextmanager
def remembering() -> Iterator[None]:
    """A scope whose checks are remembered (nested scopes share the outer one's)."""
    token = _MEMO.set({}) if _MEMO.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _MEMO.reset(token)


def memo() -> Optional[dict]:
    """The scope's store, or None outside :func:`remembering`."""
    return _MEMO.get()


def once(what: str, inputs: Any, check: Callable[[], T]) -> T:
    """``check()``, or within a scope what it returned or raised (a :class:`UserError`) the first time
    for the same ``what`` and ``inputs`` (compared by ``repr``: the typed configuration's dataclasses
    show every field)."""
    kept = _MEMO.get()
    if kept is None:
        return check()
    key = (what, repr(inputs))
    if key in kept:
        found = kept[key]
        if isinstance(found, _Refused):
            raise found.error
        return found
    try:
        result = check()
    except UserError as error:
        kept[key] = _Refused(error)
        raise
    kept[key] = result
    return result
