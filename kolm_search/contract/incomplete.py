"""Whether an answer lacks part of its input: a best-effort fusion whose child failed calls
:func:`mark_incomplete`, and whoever keeps answers (the stage runner's caches, an experiment's
run and table caches, a search pipeline's response cache) makes them inside
:func:`watching_incomplete` and keeps no incomplete one past the call, so that a later call
(the child back) answers again. Its own layer so that the contract, which keeps responses,
and the stage runner, which keeps stage outputs, read the one flag."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["mark_incomplete", "watching_incomplete"]

_PARTIAL: ContextVar[list[bool] | None] = ContextVar("kolm_search_compose_partial", default=None)


def mark_incomplete() -> None:
    """Tell the runner that the output being made lacks part of its input (a best-effort fusion
    whose child failed): it, and every output made from it, is kept for the block only, never
    written to disk, so that a later run (the child back) computes it again."""
    flag = _PARTIAL.get()
    if flag is not None:
        flag[0] = True


@contextmanager
def watching_incomplete() -> Iterator[list[bool]]:
    """A flag, ``[False]``, set to ``[True]`` when an output made inside the block is incomplete
    (:func:`mark_incomplete`). The block's caller passes it on (:func:`mark_incomplete`) when
    it is itself inside a watching block."""
    flag = [False]
    token = _PARTIAL.set(flag)
    try:
        yield flag
    finally:
        _PARTIAL.reset(token)
