"""``ScoreCache``: re-ranking scores on disk, shared by jobs, experiments and notebooks.

An entry is keyed by the reranker's fingerprint (:class:`~kolm_search.contract.ports.Fingerprinted`),
the query text and the documents it scores, each by id and a digest of its content (id, text,
title, source, tags, metadata: everything a reranker is given but the incoming score), and
holds float32 scores:

- a pointwise reranker (:class:`~kolm_search.contract.ports.ScoresPairs`) stores one score per
  (query, document) pair (:meth:`ScoreCache.pair_keys`);
- a listwise one (:class:`~kolm_search.contract.ports.RanksWindows`) stores each window's ranking as
  one score per document of the window (:meth:`ScoreCache.window_key`: the window's documents
  in their order), since a ranking depends on the whole window.

So the same pair scored by another job, another ``Experiment`` or another notebook is read, not
computed: the wrapper that consults the cache is :class:`~kolm_search.adapters.CachedReranker`.
Pairs a model could not score (an LLM's unparseable answer, a timeout) are never stored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._params import boolean
from kolm_search.adapters._sqlite import OnCorrupt
from kolm_search.adapters._vectorstore import VectorStore
from kolm_search.adapters.score_keys import document_digest, pair_keys, window_key
from kolm_search.adapters.scoring import CachedReranker
from kolm_search.errors import PipelineStage

__all__ = ["ScoreCache", "document_digest"]


class ScoreCache:
    """Re-ranking scores in a SQLite file (float32, never pickled, every row checked).

    Parameters
    ----------
    path : str or Path
        The SQLite file (created, with its folder, when missing).
    on_corrupt : {"rebuild", "raise"}, default "rebuild"
        A file that is not this store is moved aside (``<name>.corrupt-<time>``) and rebuilt
        with a warning, or refused by name.
    timeout : float, default 60
        Seconds to wait for another connection's lock (processes writing one file serialise
        their transactions; none is lost).
    read_only : bool, default False
        Read entries, never write new ones.

    Attributes
    ----------
    hits, misses : int
        Entries found and not found since this object was made (counted by :meth:`get`).

    Example
    -------
    >>> cache = ScoreCache("cache/scores.sqlite")                           # doctest: +SKIP
    >>> rerank_run(run, ds, CrossEncoderReranker(path), score_cache=cache)   # doctest: +SKIP
    """

    def __init__(self, path: str | Path, *, on_corrupt: OnCorrupt = "rebuild", timeout: float = 60.0,
                 read_only: bool = False, logger: Any = None) -> None:
        self.path = Path(path)
        self.read_only = boolean("read_only", read_only)
        self.logger = logger or logging.getLogger("kolm_search.cache")
        self._store = VectorStore(self.path, name="scores", what="score cache", stage=PipelineStage.RERANKER,
                                  on_corrupt=on_corrupt, timeout=timeout, logger=self.logger)
        self.hits = 0
        self.misses = 0

    #: The key of each (query, document) pair (:func:`~kolm_search.adapters.score_keys.pair_keys`).
    pair_keys = staticmethod(pair_keys)
    #: The key of a window (:func:`~kolm_search.adapters.score_keys.window_key`).
    window_key = staticmethod(window_key)

    def get(self, keys: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The stored scores of ``keys`` (absent and damaged entries left out)."""
        found = self._store.get(keys)
        distinct = len(set(keys))
        self.hits += len(found)
        self.misses += distinct - len(found)
        return found

    def put(self, entries: Mapping[str, npt.NDArray[np.floating[Any]]]) -> None:
        """Store ``entries`` (key -> scores) in one transaction (nothing under ``read_only``)."""
        if not self.read_only:
            self._store.put(entries)

    def in_front_of(self, reranker: Any, fingerprint: str | None = None) -> CachedReranker:
        """``reranker`` behind this cache (a :class:`~kolm_search.adapters.CachedReranker`;
        ``fingerprint`` when the reranker declares none): what ``score_cache=`` of
        ``search_batch``, ``rerank_run`` and ``Experiment`` does."""
        return CachedReranker(reranker, self, fingerprint=fingerprint)

    def __len__(self) -> int:
        return len(self._store)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["hits"] = state["misses"] = 0  # a copy on another process counts its own
        return state

    def __repr__(self) -> str:
        return f"ScoreCache({str(self.path)!r})"
