"""Fusion of run DataFrames (:func:`fuse`) and of candidate frames (:func:`fuse_frame`).

Methods, each a weighted sum of per-entry contributions computed by the fusion kernel
(:mod:`kolm_search._kernels.fusion`) for every query of the batch in one call:

- ``"rrf"``: ``w_l / (k + rank + 1)`` with zero-based ranks (Cormack et al., SIGIR 2009);
- ``"combsum"``: ``w_l * norm(score)``; ``"combmnz"``: the CombSUM sum times the number of
  lists holding the document (Fox & Shaw, TREC-2 1994); ``norm`` as in
  :mod:`kolm_search.fusion.normalize`.

Inside a query, a document repeated in one list counts once, at its best rank; fused lists
are ordered by descending score, ties by first appearance (list order, then rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search import ids
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.frame import CandidateFrame
from kolm_search.fusion.normalize import Norm, normalize
from kolm_search.fusion.rrf import check_k, check_weights
from kolm_search.runs import RUN_COLUMNS, as_run, numeric_column

__all__ = ["FUSION_METHODS", "fuse", "fuse_frame"]

FUSION_METHODS = ("rrf", "combsum", "combmnz")
Method = Literal["rrf", "combsum", "combmnz"]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def _check_method(method: str, norm: Norm) -> None:
    if method not in FUSION_METHODS:
        raise KolmValueError(f"method must be one of {FUSION_METHODS}, got {method!r}")
    if method == "rrf" and norm is not None:
        raise KolmValueError("norm applies to score fusion (combsum/combmnz), not to rrf")
    normalize(np.zeros(0), np.zeros(0, np.int64), norm)  # rejects an unknown norm


def _check_limit(limit: Any) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0):
        raise KolmValueError(f"limit must be a non-negative integer, got {limit!r}")


def _contributions(method: str, k: float, w: F64, lists: I64, rank: npt.NDArray[Any], score: F64 | None,
                   block: I64, norm: Norm, counted: npt.NDArray[np.bool_] | None = None) -> F64:
    """Each entry's contribution: ``w / (k + rank + 1)`` for RRF, ``w * norm(score)`` else.

    ``block`` numbers the (query, list) blocks; ``counted`` marks the entries that enter the
    normalisation statistics (repeats of a document inside a block do not).
    """
    if method == "rrf":
        return w[lists] / np.add(rank, check_k(k) + 1.0, dtype=np.float64)
    assert score is not None
    if not np.all(np.isfinite(score)):
        raise KolmValueError("scores must be finite for score fusion")
    if norm is not None and counted is not None and not counted.all():
        normed = np.zeros(len(score))
        normed[counted] = normalize(score[counted], block[counted], norm)
    else:
        normed = normalize(score, block, norm)
    return w[lists] * normed


def _kernel() -> Any:
    from kolm_search._kernels import load

    return load("fusion").fuse_groups


def fuse_frame(frame: CandidateFrame, *, method: Method = "rrf", k: float = 60, weights: Sequence[float] | None = None,
               norm: Norm = None, limit: int | None = None, n_lists: int | None = None, n_docs: int | None = None,
               n_threads: int | None = None) -> CandidateFrame:
    """Fuse the lists of every query of ``frame`` into one ranked list per query.

    Parameters
    ----------
    frame : CandidateFrame
        Entries sorted by (query, list_id, rank); ``list_id`` None means one list. RRF uses
        the frame's ``rank``; score methods its ``score``.
    method, k, weights, norm
        See the module docstring; ``weights`` has one entry per list id.
    limit : int, optional
        Keep the best ``limit`` per query.
    n_lists, n_docs : int, optional
        Number of list ids and document-code bound (inferred when omitted).
    n_threads : int, optional
        Threads for this call.

    Returns
    -------
    CandidateFrame
        One list per query (no ``list_id``), float64 fused scores.
    """
    _check_method(method, norm)
    _check_limit(limit)
    lists = np.zeros(len(frame), np.int64) if frame.list_id is None else frame.list_id.astype(np.int64)
    nl = int(n_lists if n_lists is not None else (lists.max() + 1 if len(lists) else 1))
    w = check_weights(weights, nl)
    ptr = frame.ptr
    nd = int(n_docs if n_docs is not None else (frame.doc.max() + 1 if len(frame) else 1))
    block = frame.query.astype(np.int64) * nl + lists
    contrib = _contributions(method, k, w, lists, frame.rank, frame.score.astype(np.float64), block, norm)
    out_ptr, docs, scores = _kernel()(ptr, lists, frame.doc, contrib, nd, mnz=method == "combmnz", limit=limit,
                                      n_threads=n_threads)
    return CandidateFrame.from_ptr(out_ptr, docs, scores)


def _named(runs: Sequence[Any] | Mapping[str, Any], weights: Any) -> tuple[list[pd.DataFrame], list[str], Any]:
    """The runs checked, their names, and the weights as a list (by name for a dict of runs)."""
    if isinstance(runs, Mapping):
        names = [str(n) for n in runs]
        frames = [as_run(r, what=f"run {n!r}") for n, r in zip(names, runs.values(), strict=True)]
        if isinstance(weights, Mapping):
            unknown = set(map(str, weights)) - set(names)
            if unknown:
                raise KolmValueError(f"weights name unknown runs {sorted(unknown)}")
            by_name = {str(n): v for n, v in weights.items()}
            weights = [float(by_name.get(n, 1.0)) for n in names]
    else:
        if isinstance(runs, (str, bytes, pd.DataFrame)):
            raise KolmTypeError("fuse takes a list or a dict of runs, not one run")
        names = [str(i) for i in range(len(runs))]
        frames = [as_run(r, what=f"run {n!r}") for n, r in zip(names, runs, strict=True)]
        if isinstance(weights, Mapping):
            raise KolmTypeError("weights by name need runs given as a dict")
    if not frames:
        raise KolmValueError("fuse needs at least one run")
    return frames, names, weights


def _entry_order(q_codes: list[I64], keys: list[F64]) -> tuple[I64, I64]:
    """Order of the runs' rows by (query, run, key ascending), ties in input order, and each
    ordered row's block number ``query * n_runs + run``.

    Runs usually list each query's rows together, best first: the order is then made from
    the (query, run) segments of rows alone, sorted as segments, and only when a segment is
    out of key order are all rows sorted.
    """
    n_lists = len(q_codes)
    seg_block, seg_start, seg_len = [], [], []
    offset = 0
    for li, q in enumerate(q_codes):
        starts = np.flatnonzero(np.diff(q, prepend=-1))
        seg_block.append(q[starts] * n_lists + li)
        seg_start.append(starts + offset)
        seg_len.append(np.diff(np.append(starts, len(q))))
        offset += len(q)
    blocks, begin, length = (np.concatenate(x).astype(np.int64) for x in (seg_block, seg_start, seg_len))
    by_segment = np.lexsort((begin, blocks))  # few: one per (query, run) in the usual layout
    blocks, begin, length = blocks[by_segment], begin[by_segment], length[by_segment]
    first = np.concatenate([[0], np.cumsum(length)[:-1]])
    order = np.repeat(begin - first, length) + np.arange(offset)
    block = np.repeat(blocks, length)
    key = np.concatenate(keys)
    ordered = key[order]
    if np.any((ordered[1:] < ordered[:-1]) & (block[1:] == block[:-1])):
        order = np.lexsort((key, np.concatenate(q_codes) * n_lists
                            + np.repeat(np.arange(n_lists), [len(q) for q in q_codes])))
        block = np.sort(block)  # the same blocks, now in the rows' order
    return order, block


def fuse(runs: Sequence[Any] | Mapping[str, Any], method: Method = "rrf", k: float = 60,
         weights: Sequence[float] | Mapping[str, float] | None = None, norm: Norm = None, limit: int | None = None,
         *, n_threads: int | None = None) -> pd.DataFrame:
    """Fuse runs (DataFrames ``qid, doc_id, score[, rank]``) into one run.

    Parameters
    ----------
    runs : list of runs, or dict name -> run
        DataFrames, ``BatchResult``s or nested dicts. When some run has no ``rank`` column,
        every run is ordered by ``score`` (descending; ties keep input order).
    method : {"rrf", "combsum", "combmnz"}
    k : float, default 60
        RRF constant.
    weights : list or dict of float, optional
        One weight per run (by position, or by name for a dict of runs).
    norm : {"min-max", "z-score", None}
        Score normalisation for combsum/combmnz.
    limit : int, optional
        Keep the best ``limit`` documents per query.
    n_threads : int, optional
        Threads for this call (default: the usable cores).

    Returns
    -------
    DataFrame
        ``qid, doc_id, rank, score`` sorted by qid then rank (zero-based); ids keep their
        dtype (categorical ids in, categorical out).
    """
    _check_method(method, norm)
    _check_limit(limit)
    frames, names, weight_list = _named(runs, weights)
    n_lists = len(frames)
    w = check_weights(weight_list, n_lists)
    whats = [f"run {n!r}" for n in names]
    scores = [numeric_column(f, "score", what) for f, what in zip(frames, whats, strict=True)]
    has_rank = all("rank" in f.columns for f in frames)
    keys = [numeric_column(f, "rank", what) for f, what in zip(frames, whats, strict=True)] if has_rank \
        else [-s for s in scores]
    q_codes, q_uniques = ids.encode([f["qid"] for f in frames], names=[f"{w_} qid" for w_ in whats], sort=True)
    d_codes, n_codes, d_uniques = ids.codes_within_groups([f["doc_id"] for f in frames], q_codes,
                                               names=[f"{w_} doc_id" for w_ in whats], n_threads=n_threads)
    n_q = len(q_uniques)
    order, block = _entry_order(q_codes, keys)
    lists, docs = block % n_lists, np.concatenate(d_codes)[order]
    starts = np.flatnonzero(np.diff(block, prepend=-1))
    position = np.arange(len(block)) - np.repeat(starts, np.diff(np.append(starts, len(block))))
    ptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(block // n_lists, minlength=n_q), out=ptr[1:])
    counted = None
    score = None
    if method != "rrf":
        score = np.concatenate(scores)[order]
        if norm is not None:  # a document repeated inside a block enters the statistics once
            counted = ~pd.Series(block * max(n_codes, 1) + docs).duplicated().to_numpy()
    contrib = _contributions(method, k, w, lists, position, score, block, norm, counted)
    out_ptr, out_docs, out_scores = _kernel()(ptr, lists, docs, contrib, n_codes, mnz=method == "combmnz",
                                              limit=limit, n_threads=n_threads)
    counts = np.diff(out_ptr)
    rank = np.arange(len(out_docs), dtype=np.int64) - np.repeat(out_ptr[:-1], counts)
    categorical = [all(isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames) for c in ("qid", "doc_id")]
    if d_uniques is not None:
        doc_ids = ids.decode(d_uniques, out_docs, categorical=categorical[1])
    else:  # codes tell documents apart within a query only: read each id from a row that has it
        row_of = np.empty(n_codes, np.int64)
        row_of[np.concatenate(d_codes)] = np.arange(sum(len(f) for f in frames))
        joined = pd.concat([f["doc_id"] for f in frames], ignore_index=True) if len(frames) > 1 else frames[0]["doc_id"]
        doc_ids = ids.as_column(joined.take(row_of[out_docs]).array)
    return pd.DataFrame({
        "qid": ids.decode(q_uniques, np.repeat(np.arange(n_q), counts), categorical=categorical[0]),
        "doc_id": doc_ids,
        "rank": rank,
        "score": out_scores,
    }, columns=list(RUN_COLUMNS), copy=False)
