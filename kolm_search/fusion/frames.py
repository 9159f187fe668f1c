"""Fusion of run DataFrames (:func:`fuse`) and of candidate frames (:func:`fuse_frame`).

Any method of :mod:`kolm_search.fusion.methods` (ranx's 25 names, plus ``"combsum"`` and
``"combmnz"``) after any normalisation of :mod:`kolm_search.fusion.normalize`, every query
of the batch at once. Inside a query, a document repeated in one list counts once, at its
best rank; fused lists are ordered by descending score, ties by first appearance (list
order, then rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._params import mapping, non_negative_int
from kolm_search.engine import ids
from kolm_search.engine.candidate_frame import CandidateFrame
from kolm_search.engine.runs import RUN_COLUMNS, as_run, numeric_column
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.fusion.entries import Entries, first_in_block
from kolm_search.fusion.methods import METHODS, canonical_method, check_params, fuse_entries
from kolm_search.fusion.normalize import Norm, canonical_norm

__all__ = ["PreparedRuns", "fuse", "fuse_frame", "prepare_runs", "resolve"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def _check_limit(limit: Any) -> None:
    non_negative_int("limit", limit, none=True)


def resolve(method: str, norm: Norm, params: Mapping[str, Any] | None, n_lists: int, *, k: float | None = None,
            weights: Any = None, names: Sequence[str] | None = None,
            extra: tuple[str, ...] = ()) -> tuple[str, str | None, dict[str, Any]]:
    """The canonical method and norm names and the checked parameters of a fusion call.

    ``k`` and ``weights`` given outside ``params`` join them (``k`` only where the method
    takes it); weights by run name need ``names``.
    """
    name, norm_name = canonical_method(method), canonical_norm(norm)
    if params is not None:
        mapping("params", params)
    merged = dict(params or {})
    if weights is not None:
        if "weights" in merged:
            raise KolmValueError("weights given twice (argument and params)")
        merged["weights"] = weights
    if isinstance(merged.get("weights"), Mapping):
        if names is None:
            raise KolmTypeError("weights by name need runs given as a dict")
        by_name = {str(n): v for n, v in merged["weights"].items()}
        unknown = set(by_name) - set(names)
        if unknown:
            raise KolmValueError(f"weights name unknown runs {sorted(unknown)}")
        merged["weights"] = [float(by_name.get(n, 1.0)) for n in names]
    if k is not None and "k" in METHODS[name].params:
        if "k" in merged:
            raise KolmValueError("k given twice (argument and params)")
        merged["k"] = k
    if "weights" in merged and merged["weights"] is None:
        del merged["weights"]
    return name, norm_name, check_params(name, merged, n_lists, extra=extra)


def fuse_frame(frame: CandidateFrame, *, method: str = "rrf", k: float | None = None, weights: Sequence[float] | None = None,
               norm: Norm = None, limit: int | None = None, n_lists: int | None = None, n_docs: int | None = None,
               n_threads: int | None = None, params: Mapping[str, Any] | None = None) -> CandidateFrame:
    """Fuse the lists of every query of ``frame`` into one ranked list per query.

    Parameters
    ----------
    frame : CandidateFrame
        Entries sorted by (query, list_id, rank); ``list_id`` None means one list. Lists are
        read in that order; scores feed the score-based methods and normalisations.
    method, k, weights, norm, params
        As for :func:`fuse`; ``weights`` has one entry per list id.
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
    _check_limit(limit)
    lists = np.zeros(len(frame), np.int64) if frame.list_id is None else frame.list_id.astype(np.int64)
    nl = int(n_lists if n_lists is not None else (lists.max() + 1 if len(lists) else 1))
    if len(lists) and (int(lists.min()) < 0 or int(lists.max()) >= nl):
        raise KolmValueError(f"list ids must lie in [0, n_lists={nl}), got [{int(lists.min())}, {int(lists.max())}]")
    name, norm_name, checked = resolve(method, norm, params, nl, k=k, weights=weights)
    nd = int(n_docs if n_docs is not None else (frame.doc.max() + 1 if len(frame) else 1))
    entries = Entries.build(frame.ptr, lists, frame.doc.astype(np.int64), frame.score.astype(np.float64), nl, nd,
                            rank=frame.rank.astype(np.int64))
    out_ptr, docs, scores = fuse_entries(entries, name, norm_name, checked, limit, n_threads)
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


@dataclass(frozen=True, eq=False)
class PreparedRuns:
    """Runs read once into :class:`Entries` (ids coded), to fuse them many times.

    ``rows`` gives each entry's row in the runs' rows laid end to end; ``frames`` and
    ``names`` are the runs as given (checked) and their names.
    """

    entries: Entries
    frames: list[pd.DataFrame]
    names: list[str]
    rows: I64
    q_uniques: pd.Index
    d_uniques: pd.Index
    categorical: tuple[bool, bool]

    def fuse(self, method: str, norm: Norm, params: Mapping[str, Any], limit: int | None = None,
             n_threads: int | None = None) -> pd.DataFrame:
        """The fused run (``qid, doc_id, rank, score``) of ``method`` (canonical name) after
        ``norm``, ``params`` as :func:`resolve` returns them."""
        out_ptr, out_docs, out_scores = fuse_entries(self.entries, method, norm, params, limit, n_threads)
        return self.to_run(out_ptr, out_docs, out_scores)

    def to_run(self, out_ptr: I64, out_docs: I64, out_scores: F64) -> pd.DataFrame:
        """Fused lists (CSR by query, document codes) as a run DataFrame."""
        counts = np.diff(out_ptr)
        n_q = len(self.q_uniques)
        rank = np.arange(len(out_docs), dtype=np.int64) - np.repeat(out_ptr[:-1], counts)
        doc_ids = ids.decode(self.d_uniques, out_docs, categorical=self.categorical[1])
        return pd.DataFrame({
            "qid": ids.decode(self.q_uniques, np.repeat(np.arange(n_q), counts), categorical=self.categorical[0]),
            "doc_id": doc_ids,
            "rank": rank,
            "score": out_scores,
        }, columns=list(RUN_COLUMNS), copy=False)


def prepare_runs(runs: Sequence[Any] | Mapping[str, Any], *, n_threads: int | None = None,
                 weights: Any = None) -> tuple[PreparedRuns, Any]:
    """Read runs (see :func:`fuse`) into :class:`PreparedRuns`; returns it and ``weights``
    as a list (by name for a dict of runs)."""
    frames, names, weight_list = _named(runs, weights)
    n_lists = len(frames)
    whats = [f"run {n!r}" for n in names]
    scores = [numeric_column(f, "score", what) for f, what in zip(frames, whats, strict=True)]
    has_rank = all("rank" in f.columns for f in frames)
    keys = [numeric_column(f, "rank", what) for f, what in zip(frames, whats, strict=True)] if has_rank \
        else [-s for s in scores]
    q_codes, q_uniques = ids.encode([f["qid"] for f in frames], names=[f"{w_} qid" for w_ in whats], sort=True)
    d_codes, n_codes, d_uniques = ids.codes_within_groups([f["doc_id"] for f in frames], q_codes,
                                                          names=[f"{w_} doc_id" for w_ in whats], n_threads=n_threads)
    assert d_uniques is not None  # with_ids (the default) always gives them
    n_q = len(q_uniques)
    order, block = _entry_order(q_codes, keys)
    ptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(block // n_lists, minlength=n_q), out=ptr[1:])
    lists, docs = block % n_lists, np.concatenate(d_codes)[order]
    first = first_in_block(ptr, lists, docs, n_lists)
    entries = Entries.build(ptr, lists, docs, np.concatenate(scores)[order], n_lists, max(n_codes, 1), first=first)
    rows = order[first]
    categorical = tuple(all(isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames) for c in ("qid", "doc_id"))
    prepared = PreparedRuns(entries, frames, names, rows, q_uniques, d_uniques,
                            (categorical[0], categorical[1]))
    return prepared, weight_list


def fuse(runs: Sequence[Any] | Mapping[str, Any], method: str = "rrf", k: float | None = None,
         weights: Sequence[float] | Mapping[str, float] | None = None, norm: Norm = None, limit: int | None = None,
         *, params: Mapping[str, Any] | None = None, n_threads: int | None = None) -> pd.DataFrame:
    """Fuse runs (DataFrames ``qid, doc_id, score[, rank]``) into one run.

    Parameters
    ----------
    runs : list of runs, or dict name -> run
        DataFrames, ``BatchResult``s or nested dicts. When some run has no ``rank`` column,
        every run is ordered by ``score`` (descending; ties keep input order). A query
        missing from a run is an empty list there.
    method : str, default "rrf"
        A name of :data:`~kolm_search.fusion.FUSION_METHODS`: ranx's (``"sum"``, ``"mnz"``,
        ``"rrf"``, ``"bordafuse"``, ``"condorcet"``, ``"probfuse"``, ...; see the README's
        table) or ``"combsum"``/``"combmnz"``.
    k : float, optional
        RRF constant (or ``params["k"]``; 60 when neither is given).
    weights : list or dict of float, optional
        One weight per run (by position, or by name for a dict of runs); all ones by default.
        They multiply each run's values (weighted MNZ: make up the run count; Condorcet:
        weigh the votes); min, max and med take none.
    norm : str, optional
        A name of :data:`~kolm_search.fusion.NORMALIZATIONS` (or an alias: ``"min_max"``,
        ``"z-score"``, ...); None (the default, unlike ranx's ``"min-max"``) keeps the scores.
    limit : int, optional
        Keep the best ``limit`` documents per query.
    params : dict, optional
        The method's parameters as ranx names them: ``k``, ``gamma``, ``phi``, ``sigma``,
        ``weights``, ``w``, and the trained tables ``probs``, ``log_odds``, ``map_scores``
        (see ``fit_fusion``).
    n_threads : int, optional
        Threads for this call (default: the usable cores).

    Returns
    -------
    DataFrame
        ``qid, doc_id, rank, score`` sorted by qid then rank (zero-based); ids keep their
        dtype (categorical ids in, categorical out).
    """
    _check_limit(limit)
    canonical_method(method)
    canonical_norm(norm)
    prepared, weight_list = prepare_runs(runs, n_threads=n_threads, weights=weights)
    name, norm_name, checked = resolve(method, norm, params, len(prepared.frames), k=k, weights=weight_list,
                                       names=prepared.names)
    return prepared.fuse(name, norm_name, checked, limit, n_threads)
