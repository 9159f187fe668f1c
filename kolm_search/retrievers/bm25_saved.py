"""Reading a saved BM25 index: its manifest and files, checked as the load's ``verify`` says.

:func:`read_bm25` returns what :meth:`BM25Retriever.load <kolm_search.retrievers.bm25.BM25Retriever.load>`
builds the retriever from. Checked in full (``files.full``, :mod:`._saved`), every file's
digest and every value: the arrays' invariants (:mod:`._validate`), the term frequencies
(counts >= 1 summing to each document's length) and the weights recomputed from them bit for
bit, the pruning bounds computed from the postings (:func:`.bounds.index_bounds`) and the
saved term and block maxima compared with them, the document table read whole. Checked
quickly, what costs time in the vocabulary's size at load (pointers, sizes, headers, the saved
maxima's sizes), and each term's postings when a search first reads them
(:class:`.postings_gate.PostingsGate`: document rows in range and ascending within a term,
finite non-negative weights, and from the same pass the term's pruning bounds, the saved term
and block maxima compared with them); the term frequencies are checked as in full, by
:func:`check_term_frequencies`, when an update, a feedback model or a save first reads them
(:class:`DeferredCheck`); the documents file's batches when first read. Formats before 6 (no
block maxima) and before 4 (no term maxima) load with the bounds computed from the postings
(at load in full, term by term quickly): they prune at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmValueError
from kolm_search.retrievers import _validate as check
from kolm_search.retrievers._saved import SavedFiles, check_manifest
from kolm_search.retrievers.bounds import checked_bounds, index_bounds
from kolm_search.retrievers.postings_gate import PostingsGate

__all__ = ["ARRAYS", "DeferredCheck", "FILES_SINCE", "FORMAT", "SavedBM25", "VERSION",
           "check_term_frequencies", "read_bm25", "run_deferred"]

FORMAT = "kolm-search/bm25"
VERSION = 6  # 6: block maxima; 5: a documents file (Arrow IPC, memory-mapped); 4: term maxima;
# 3: a file map (kolm_search.retrievers._persist); 2: tf and "stats"; 1-5 still load
FILES_SINCE = 3
ARRAYS: dict[str, tuple[Any, type[np.generic]]] = {  # saved arrays: kind, dtype written
    "t_ptr": ("int", np.int64), "t_docs": ("int", np.int32), "t_w": ("float", np.float32),
    "nonocc": ("float", np.float32), "doc_len": ("int", np.int64)}


@dataclass(frozen=True)
class DeferredCheck:
    """A quick load's check of the term frequencies, run when they are first read: the folder,
    the arrays' file names, and the weighting they must reproduce (picklable)."""

    root: Path
    names: dict[str, str]
    method: str
    k1: float
    b: float
    delta: float


@dataclass
class SavedBM25:
    """A saved index's checked parts: ``config`` (``_configure``'s keyword arguments),
    ``arrays`` (``t_ptr, t_docs, t_w, nonocc, doc_len``, perhaps ``tf``), ``bounds`` (what
    pruning reads, by name: :data:`.bounds.BOUNDS`; the saved maxima checked against them),
    ``vocab``, ``table``, ``own_stats`` and, after a quick load, the deferred ``tf`` check and
    the postings' check (``postings``: the bounds fill in as it checks terms)."""

    config: dict[str, Any]
    arrays: dict[str, np.ndarray]
    bounds: dict[str, np.ndarray]
    vocab: list[str]
    table: Any
    own_stats: bool | None
    deferred: DeferredCheck | None
    postings: PostingsGate | None = None


def read_bm25(files: SavedFiles, body: dict[str, Any], methods: Any, *, mmap: bool,
              n_threads: int | None) -> SavedBM25:
    """The index of one manifest ``body`` (or a composite's child), checked (see the module)."""
    where = files.where
    body = check_manifest(where, body, FORMAT, (1, 2, 3, 4, 5, VERSION), ("n_docs", *files.manifest_keys),
                          optional=("stats",))
    cfg = check.bm25_config(where, body["config"], methods)
    n_docs = check.integer(where, "n_docs", body["n_docs"])
    stats = check.bm25_stats(where, body)
    maxima = (*(("term_max",) if body["version"] >= 4 else ()), *(("block_max",) if body["version"] >= 6 else ()))
    saved = (*ARRAYS, *(("tf",) if stats == "own" else ()), *maxima)
    files.expect(("documents", "vocab", *saved))
    vocab = check.vocabulary(files.path("vocab", "json"), files.json("vocab"))
    arrays = {name: files.array(name, kind, 1, mmap=mmap) for name, (kind, _) in ARRAYS.items()}
    names = {name: files.name(name, "npy") for name in saved}
    full = files.full or not mmap  # arrays read into memory: checking them in place costs nothing more
    arrays = check.bm25_arrays(files.root, arrays, len(vocab), n_docs, cfg["method"], names, postings=full)
    saved_maxima = {name: (files.root / names[name], files.array(name, "float", 1, mmap=mmap)) for name in maxima}
    gate = None
    if full:
        bounds = index_bounds(arrays["t_ptr"], arrays["t_docs"], arrays["t_w"], n_threads=n_threads)
        checked_bounds(saved_maxima, bounds, arrays["t_ptr"])
    else:  # each term's postings checked when a search first reads them
        gate = PostingsGate({n: files.root / names[n] for n in ("t_docs", "t_w")}, arrays["t_ptr"], arrays["t_docs"],
                            arrays["t_w"], n_docs, saved_maxima, n_threads)
        bounds = gate.bounds
    deferred = None
    if stats == "own":
        tf = files.array("tf", "int", 1, mmap=mmap)
        if full:
            arrays["tf"] = check_term_frequencies(files.root, names, arrays, tf, method=cfg["method"], k1=cfg["k1"],
                                                  b=cfg["b"], delta=cfg["delta"], n_threads=n_threads)
        else:
            check.lengths(files.root / names["tf"], tf, len(arrays["t_docs"]),
                          "one term frequency per posting: t_docs has as many")
            arrays["tf"] = tf
            deferred = DeferredCheck(files.root, names, cfg["method"], cfg["k1"], cfg["b"], cfg["delta"])
    table = files.table("documents", n_docs, mmap=mmap)
    return SavedBM25(cfg, arrays, bounds, vocab, table, {"own": True, "external": False}.get(stats), deferred, gate)


def check_term_frequencies(root: Path, names: dict[str, str], arrays: dict[str, np.ndarray], tf: np.ndarray, *,
                           method: str, k1: float, b: float, delta: float,
                           n_threads: int | None = None) -> npt.NDArray[np.int32]:
    """``tf`` checked (counts >= 1 summing to each document's length) and the weights it gives,
    with the index's own statistics, equal bit for bit to ``t_w`` and ``nonocc`` of ``arrays``."""
    tf = check.bm25_tf(root / names["tf"], tf, arrays["t_docs"], arrays["doc_len"], names["doc_len"])
    check.bm25_weights(root, names, arrays, tf, method=method, k1=k1, b=b, delta=delta, n_threads=n_threads)
    return tf


def run_deferred(deferred: DeferredCheck, arrays: dict[str, np.ndarray], tf: np.ndarray,
                 n_threads: int | None) -> npt.NDArray[np.int32]:
    """:func:`check_term_frequencies` as a quick load deferred it."""
    if tf is None:
        raise KolmValueError("no term frequencies to check")
    return check_term_frequencies(deferred.root, deferred.names, arrays, tf, method=deferred.method, k1=deferred.k1,
                                  b=deferred.b, delta=deferred.delta, n_threads=n_threads)
