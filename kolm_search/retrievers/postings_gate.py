"""A quick load's check of the postings, run term by term when a search first reads them.

A quick load (``verify="quick"``, :mod:`._saved`) checks at load what costs time in the
vocabulary's size (pointers, sizes, headers, the saved maxima's shapes), and leaves the
postings of each term (its document rows in range and ascending, its weights finite and
non-negative: :mod:`kolm_search._kernels.postings_check`) to the first search that reads
them: a load of an index of any size reads none of its postings, and a search reads the
postings of its terms once more, from pages it maps anyway. The check writes the term's
pruning bounds (:mod:`.bounds`: smallest and largest weight, each block's largest weight and
last document) and compares them with the saved maxima, so a search never reads a bound or a
posting that was not checked.

:class:`PostingsGate` is that check's state for one loaded index: :meth:`PostingsGate.terms`
checks the terms a search is about to read, :meth:`PostingsGate.all` every term still
unchecked (block by block on threads, :func:`._blocks.check_postings`: what a merge, a save, a
feedback model or any reader of the whole arrays needs first). A term that fails stays
unchecked, so every search that reads it raises the same :class:`KolmValueError`, naming the
file and the position; the other terms answer as a full load's would. The gate is
thread-safe (one check at a time; a term is marked checked only after its bounds are written).
An index's public arrays (``t_docs``, ``t_w``, the bounds:
:class:`~kolm_search.retrievers.bm25_scoring.BM25Scoring`'s properties) run
:meth:`PostingsGate.all` when read, so that only the search path, which checks its own terms
first, reads them unchecked.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search.retrievers._blocks import check_postings, posting_error
from kolm_search.retrievers.bounds import checked_bounds

__all__ = ["PostingsGate"]


class PostingsGate:
    """The unchecked postings of a quickly loaded BM25 index (see the module).

    Parameters
    ----------
    paths, t_ptr, t_docs, t_w, n_docs
        As :func:`._blocks.check_postings` takes them; ``t_docs``, ``t_w`` memory-mapped (only
        the pages of the terms checked are read).
    maxima : dict
        Saved maxima to compare: name (``"term_max"``, ``"block_max"``) -> (path, array);
        their sizes are checked here.
    n_threads : int, optional
        Threads of :meth:`all`.

    Attributes
    ----------
    bounds : dict
        ``t_min, t_max`` float32 (V,), ``b_max`` float32, ``b_last`` int32 (n_blocks,):
        written term by term as terms are checked; an entry of an unchecked term is not a bound.
    """

    def __init__(self, paths: dict[str, Path], t_ptr: npt.NDArray[np.int64], t_docs: np.ndarray, t_w: np.ndarray,
                 n_docs: int, maxima: dict[str, tuple[Path, np.ndarray]], n_threads: int | None = None) -> None:
        self._paths, self._t_ptr, self._t_docs, self._t_w = paths, t_ptr, t_docs, t_w
        self._n_docs, self._maxima, self._n_threads = int(n_docs), maxima, n_threads
        self._b_ptr = load("blocks").block_pointers(t_ptr)
        n_terms, n_blocks = len(t_ptr) - 1, int(self._b_ptr[-1])
        self.bounds: dict[str, np.ndarray] = {
            "t_min": np.full(n_terms, np.inf, np.float32), "t_max": np.zeros(n_terms, np.float32),
            "b_max": np.zeros(n_blocks, np.float32), "b_last": np.zeros(n_blocks, np.int32)}
        self._checked = np.zeros(n_terms, bool)
        self._left = n_terms  # terms not yet checked
        self._done = n_terms == 0
        self._lock = threading.Lock()
        checked_bounds(maxima, self.bounds, t_ptr, terms=np.zeros(0, np.int64), b_ptr=self._b_ptr)  # sizes only

    @property
    def done(self) -> bool:
        """Every term checked."""
        return self._done

    def terms(self, ids: npt.ArrayLike) -> None:
        """Check the terms of ``ids`` (int, in ``[0, V)``, repeats allowed) not yet checked.

        Raises
        ------
        KolmValueError
            The first bad posting of the first bad term (by id), or a saved maximum that differs.
        """
        if self._done:
            return
        ids = np.asarray(ids, np.int64)
        todo = np.unique(ids[~self._checked[ids]])  # (once warm, a gather: the ids sorted only while some are new)
        if not len(todo):
            return
        with self._lock:
            todo = todo[~self._checked[todo]]
            if not len(todo):
                return
            kind, pos = load("postings_check").first_bad_term(
                self._t_ptr, self._b_ptr, self._t_docs, self._t_w, todo, self._n_docs, self.bounds["t_min"],
                self.bounds["t_max"], self.bounds["b_max"], self.bounds["b_last"])
            if kind:
                raise posting_error(kind, pos, self._paths, self._t_docs, self._t_w, self._n_docs)
            checked_bounds(self._maxima, self.bounds, self._t_ptr, terms=todo, b_ptr=self._b_ptr)
            self._checked[todo] = True
            self._left -= len(todo)
            self._done = self._left == 0

    def all(self) -> None:
        """Check every term not yet checked (raises as :meth:`terms`)."""
        if self._done:
            return
        with self._lock:
            if self._done:
                return
            # the mapped memory itself, which the searches read (np.asarray: a view, not the map, which
            # check_postings would read from its file by name: a save over the folder since the load
            # removes that name, or gives it other contents); its callers read every page next anyway
            got = check_postings(self._paths, self._t_ptr, np.asarray(self._t_docs), np.asarray(self._t_w),
                                 self._n_docs, self._n_threads)
            checked_bounds(self._maxima, got, self._t_ptr)
            for name, values in got.items():  # in place: equal where already checked
                self.bounds[name][...] = values
            self._checked[...] = True
            self._left, self._done = 0, True

    def __getstate__(self) -> dict[str, Any]:
        """The state without its lock; the checked flags as they are now, taken under the lock:
        the bounds are written out after this returns (a pickler may let a search check more
        terms in between), and the bounds of a term already checked never change."""
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
            state["_checked"] = self._checked.copy()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
