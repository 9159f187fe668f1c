"""Fusion of candidate frames and of run DataFrames: RRF, weighted RRF, CombSUM, CombMNZ.

:func:`fuse_frame` fuses the lists (``list_id``) of every query of a frame in one kernel
call; :func:`fuse` is the DataFrame front end (ranx/TREC-style runs). Both run one kernel:
RRF through :func:`kolm_search.fusion.fuse_rrf_arrays` (contributions computed in the kernel
from the ranks), score fusion through :func:`kolm_search.fusion.fuse_arrays` with one
contribution per entry:

- ``"rrf"``: ``w_l / (k + rank + 1)`` (zero-based ranks; Cormack et al., SIGIR 2009);
- ``"combsum"``: ``w_l * norm(score)``; ``"combmnz"``: the CombSUM sum times the number of
  lists holding the document (Fox & Shaw, TREC-2 1994).

Normalisation (score methods only), per query and list: ``"min-max"`` maps to [0, 1]
(a list whose scores are all equal maps to 1), ``"z-score"`` to zero mean and unit
population deviation (a constant list maps to 0), ``None`` keeps raw scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmTypeError, KolmValueError
from kolm_search.frame import CandidateFrame
from kolm_search.fusion import check_k, check_weights, fuse_arrays, fuse_rrf_arrays

__all__ = ["FUSION_METHODS", "fuse", "fuse_frame"]

FUSION_METHODS = ("rrf", "combsum", "combmnz")
Method = Literal["rrf", "combsum", "combmnz"]
I64 = npt.NDArray[np.int64]
Norm = Literal["min-max", "z-score"] | None


def _segments(key: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Starts of runs of equal ``key`` and each entry's segment number."""
    if key.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], change]).astype(np.int64)
    seg = np.repeat(np.arange(starts.size), np.diff(np.append(starts, key.size)))
    return starts, seg


def _normalise(score: npt.NDArray[np.float64], key: npt.NDArray[np.int64], norm: Norm) -> npt.NDArray[np.float64]:
    if norm is None:
        return score
    starts, seg = _segments(key)
    if norm == "min-max":
        lo = np.minimum.reduceat(score, starts)[seg]
        hi = np.maximum.reduceat(score, starts)[seg]
        span = hi - lo
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(span > 0, (score - lo) / np.where(span > 0, span, 1.0), 1.0)
    if norm == "z-score":
        counts = np.bincount(seg).astype(np.float64)
        mean = (np.bincount(seg, weights=score) / counts)[seg]
        var = (np.bincount(seg, weights=(score - mean) ** 2) / counts)[seg]
        std = np.sqrt(var)
        return np.where(std > 0, (score - mean) / np.where(std > 0, std, 1.0), 0.0)
    raise KolmValueError(f"norm must be 'min-max', 'z-score' or None, got {norm!r}")


def _check_method(method: str, norm: Norm) -> None:
    if method not in FUSION_METHODS:
        raise KolmValueError(f"method must be one of {FUSION_METHODS}, got {method!r}")
    if method == "rrf" and norm is not None:
        raise KolmValueError("norm applies to score fusion (combsum/combmnz), not to rrf")


def _contributions(method: Method, k: float, w: npt.NDArray[np.float64], lid: npt.NDArray[np.int64],
                   rank: npt.NDArray[Any], score: npt.NDArray[Any], segment: npt.NDArray[np.int64], norm: Norm,
                   counted: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.float64]:
    """Each entry's contribution: ``w / (k + rank + 1)`` for RRF, ``w * norm(score)`` otherwise.

    ``segment`` numbers each (query, list) run of entries (contiguous); ``counted`` marks the
    entries that enter the normalisation statistics (a repeated document counts once).
    """
    if method == "rrf":
        denom = np.add(rank, check_k(k) + 1.0, dtype=np.float64)
        num = w[0] if len(w) and np.all(w == w[0]) else w[lid]  # one weight: no per-entry gather
        return np.divide(num, denom, out=denom)
    s = score.astype(np.float64)
    if not np.all(np.isfinite(s)):
        raise KolmValueError("scores must be finite for score fusion")
    if norm is not None and counted is not None and not counted.all():
        normed = np.zeros(len(s))
        normed[counted] = _normalise(s[counted], segment[counted], norm)
        s = normed
    else:
        s = _normalise(s, segment, norm)
    return w[lid] * s


def fuse_frame(
    frame: CandidateFrame,
    *,
    method: Method = "rrf",
    k: float = 60,
    weights: Sequence[float] | None = None,
    norm: Norm = None,
    limit: int | None = None,
    n_lists: int | None = None,
    n_docs: int | None = None,
    n_threads: int | None = None,
) -> CandidateFrame:
    """Fuse the lists of every query of ``frame`` into one ranked list per query.

    Parameters
    ----------
    frame : CandidateFrame
        Entries sorted by (query, list_id, rank); ``list_id`` None means one list.
    method, k, weights, norm
        See the module docstring; ``weights`` has one entry per list id.
    limit : int, optional
        Keep the best ``limit`` per query.
    n_lists, n_docs : int, optional
        Number of list ids and document-code bound (inferred when omitted).

    Returns
    -------
    CandidateFrame
        One list per query (no ``list_id``), float64 fused scores, ties by first appearance.
    """
    _check_method(method, norm)
    lid = np.zeros(len(frame), np.int64) if frame.list_id is None else frame.list_id.astype(np.int64)
    nl = int(n_lists if n_lists is not None else (lid.max() + 1 if len(lid) else 1))
    w = check_weights(weights, nl)
    ptr = frame.ptr
    nd = int(n_docs if n_docs is not None else (frame.doc.max() + 1 if len(frame) else 1))
    if method == "rrf":
        out_ptr, docs, scores = fuse_rrf_arrays(ptr, lid, frame.doc, frame.rank, nd, k=k, weights=w, limit=limit,
                                                n_threads=n_threads)
    else:
        contrib = _contributions(method, k, w, lid, frame.rank, frame.score, frame.query.astype(np.int64) * nl + lid,
                                 norm)
        out_ptr, docs, scores = fuse_arrays(ptr, lid, frame.doc, contrib, nd, mnz=(method == "combmnz"),
                                            limit=limit, n_threads=n_threads)
    return CandidateFrame.from_ptr(out_ptr, docs, scores)


def _run_frame(run: Any, name: str) -> tuple[pd.DataFrame, npt.NDArray[np.float64]]:
    """The run (not copied) and its scores as float64, checked."""
    if not isinstance(run, pd.DataFrame):
        run = getattr(run, "run", run)  # a BatchResult
    if not isinstance(run, pd.DataFrame):
        raise KolmTypeError(f"run {name!r} must be a DataFrame with qid, doc_id, score; got {type(run).__name__}")
    missing = [c for c in ("qid", "doc_id", "score") if c not in run.columns]
    if missing:
        raise FrameValidationError(f"run {name!r} lacks column(s) {missing}; has {list(run.columns)}")
    col = run["score"]
    if isinstance(col.dtype, np.dtype) and col.dtype == np.float64:  # a view, no copy
        score = col.to_numpy()
    else:
        score = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    if np.isnan(score).any():
        row = int(np.flatnonzero(np.isnan(score))[0])
        raise FrameValidationError(f"run {name!r} has a non-numeric or missing score at row {row}: {run['score'].iloc[row]!r}")
    return run, score


def fuse(
    runs: Sequence[pd.DataFrame] | Mapping[str, pd.DataFrame],
    method: Method = "rrf",
    k: float = 60,
    weights: Sequence[float] | Mapping[str, float] | None = None,
    norm: Norm = None,
    limit: int | None = None,
    *,
    n_threads: int | None = None,
) -> pd.DataFrame:
    """Fuse runs (DataFrames ``qid, doc_id, score[, rank]``) into one run.

    Parameters
    ----------
    runs : list of DataFrame, or dict name -> DataFrame
        When ``rank`` is absent it is derived from ``score`` (descending; ties keep input
        order). A document repeated in one run for one query counts once, at its best rank.
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
        Numba threads for this call.

    Returns
    -------
    DataFrame
        ``qid, doc_id, rank, score`` sorted by qid then rank (zero-based); ties by first
        appearance (run order, then rank).
    """
    if isinstance(runs, Mapping):
        names = list(runs)
        checked = [_run_frame(runs[n], str(n)) for n in names]
        if isinstance(weights, Mapping):
            unknown = set(weights) - set(names)
            if unknown:
                raise KolmValueError(f"weights name unknown runs {sorted(unknown)}")
            weights = [float(weights.get(n, 1.0)) for n in names]
    else:
        names = [str(i) for i in range(len(runs))]
        checked = [_run_frame(r, str(i)) for i, r in enumerate(runs)]
        if isinstance(weights, Mapping):
            raise KolmTypeError("weights by name need runs given as a dict")
    if not checked:
        raise KolmValueError("fuse needs at least one run")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0):
        raise KolmValueError(f"limit must be a non-negative integer, got {limit!r}")
    return _fuse_runs(checked, method=method, k=k, weights=weights, norm=norm, limit=limit, n_threads=n_threads,
                      names=[str(n) for n in names])


def _concat_column(frames: list[pd.DataFrame], column: str) -> Any:
    parts = [f[column] for f in frames]
    return parts[0].reset_index(drop=True) if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _doc_column(frames: list[pd.DataFrame]) -> tuple[Any, tuple[Any, I64, npt.NDArray[np.uint8]] | None]:
    """All runs' doc ids: one Arrow string array and its buffers, or a pandas column and None.

    Runs are converted one by one and joined as Arrow arrays (joining object columns in
    pandas first would copy millions of Python references for nothing).
    """
    import pyarrow as pa

    from kolm_search.interning import _arrow_strings, string_buffers

    parts: list[Any] = []
    for f in frames:
        arr = _arrow_strings(f["doc_id"])
        if arr is None or arr.null_count:
            parts = []
            break
        parts.append(arr.cast(pa.large_string()) if not pa.types.is_large_string(arr.type) else arr)
    if not parts:
        return _concat_column(frames, "doc_id"), None
    joined = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    return joined, string_buffers(joined)


def _run_starts(col: pd.Series, name: str, chunks: int) -> npt.NDArray[np.int64]:
    """Rows of ``col`` that start a run of equal query ids (row 0 first)."""
    from kolm_search._kernels.strings import string_run_starts
    from kolm_search.interning import object_pointers, str_layout, string_buffers

    n = len(col)
    if n == 0:
        return np.zeros(0, np.int64)
    if col.dtype == object:  # Python objects: neighbours compare without converting the column
        values = np.ascontiguousarray(col.to_numpy())
        layout = str_layout()
        if layout is not None:  # compact strs compared in place, on all threads
            from kolm_search._kernels.pyobjects import object_run_starts

            starts, ok = object_run_starts(object_pointers(values), layout, chunks)
            if ok:
                return np.asarray(starts, np.int64)
        return _object_change_starts(values)
    try:
        buffers = string_buffers(col)
    except FrameValidationError as exc:
        raise FrameValidationError(f"run {name!r} qid: {exc}") from exc
    if buffers is not None:
        return np.asarray(string_run_starts(buffers[1], buffers[2], chunks), np.int64)
    values = col.to_numpy()
    if values.dtype.kind not in "iub":  # floats (NaN != NaN), categoricals, others: by codes
        values = pd.factorize(col, use_na_sentinel=True)[0]
    return _change_starts(values)


def _object_change_starts(values: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """:func:`_change_starts` for an object array, comparing object identities first.

    Neighbouring rows that hold the same Python object are equal without a comparison; only
    rows whose object differs from the one before are compared by value. Query ids usually
    repeat one object per query (``[qid] * k`` and ``np.repeat`` copy references), so ~n
    comparisons of ~20 ns become a vectorised pass over the pointers and a few thousand
    comparisons; when most neighbours are distinct objects (``astype(object)`` of a string
    column makes one per row) every row is compared as before. The pointers are read, never
    followed, while ``values`` holds its references.
    """
    from kolm_search.interning import object_pointers

    values = np.ascontiguousarray(values)
    n = len(values)
    if n < 2:
        return np.zeros(min(n, 1), np.int64)
    ptrs = object_pointers(values)
    head = ptrs[: 1 << 16]
    if 4 * np.count_nonzero(head[1:] != head[:-1]) > len(head):  # one object per row: compare all
        return _change_starts(values)
    cand = np.flatnonzero(ptrs[1:] != ptrs[:-1]) + 1  # rows holding another object than the row before
    if 4 * len(cand) > n:  # mostly distinct objects: gathering them would cost more than comparing all
        return _change_starts(values)
    differs = values[cand] != values[cand - 1]
    return np.concatenate([[0], cand[np.asarray(differs, dtype=bool)]]).astype(np.int64)


def _change_starts(values: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Row 0 and every row whose value differs from the row before (``values`` non-empty)."""
    return np.concatenate([[0], np.flatnonzero(values[1:] != values[:-1]) + 1]).astype(np.int64)


def _query_blocks(frames: list[pd.DataFrame], names: list[str], chunks: int) -> tuple[pd.Index, I64, I64, I64, I64, I64]:
    """Group every run's rows by query without touching each row's id more than once.

    Returns ``(q_uniques, ptr, bptr, b_row, b_len, b_lid)``: the sorted query ids, each query's
    row range in the grouped order, and the blocks (runs of one query in one run) by query.
    """
    heads, rows, lens, lids = [], [], [], []
    row0 = 0
    for li, (f, name) in enumerate(zip(frames, names, strict=True)):
        col = f["qid"]
        starts = _run_starts(col, name, chunks)
        heads.append(col.iloc[starts].reset_index(drop=True))
        rows.append(starts + row0)
        lens.append(np.diff(np.append(starts, len(col))))
        lids.append(np.full(len(starts), li, np.int64))
        row0 += len(col)
    from kolm_search.interning import factorize

    b_q, q_uniques = factorize(heads[0] if len(heads) == 1 else pd.concat(heads, ignore_index=True), sort=True, name="qid")
    b_row, b_len, b_lid = np.concatenate(rows), np.concatenate(lens).astype(np.int64), np.concatenate(lids)
    n_q = len(q_uniques)
    by_q = np.argsort(b_q, kind="stable")  # blocks by query; by run, then row, inside a query
    bptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(b_q, minlength=n_q), out=bptr[1:])
    ptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(b_q, weights=b_len, minlength=n_q).astype(np.int64), out=ptr[1:])
    return q_uniques, ptr, bptr, b_row[by_q], b_len[by_q], b_lid[by_q]


def _fuse_runs(checked: list[tuple[pd.DataFrame, npt.NDArray[np.float64]]], *, method: Method, k: float, weights: Sequence[float] | None,
               norm: Norm, limit: int | None, n_threads: int | None, names: list[str] | None = None) -> pd.DataFrame:
    """Group rows by query, match documents inside each query, fuse in one kernel call."""
    _check_method(method, norm)
    from kolm_search._kernels import numba_threads
    from kolm_search._kernels.fusion import output_rows
    from kolm_search._kernels.grouping import block_segments, intern_groups
    from kolm_search.interning import factorize, repeat_strings, string_buffers, take_strings

    frames = [f for f, _ in checked]
    names = names if names is not None else [str(i) for i in range(len(frames))]
    n_lists = len(frames)
    has_rank = all("rank" in f.columns for f in frames)
    n_rows = sum(len(f) for f in frames)
    # RRF with ranks never reads the scores (they were checked in _run_frame)
    score = np.concatenate([sc for _, sc in checked]) if method != "rrf" or not has_rank else np.zeros(0)
    key = np.concatenate([pd.to_numeric(f["rank"]).to_numpy(np.float64) for f in frames]) if has_rank else score
    with numba_threads(n_threads) as threads:
        chunks = 4 * threads
        q_uniques, ptr, bptr, b_row, b_len, b_lid = _query_blocks(frames, names, chunks)
        n_q = len(q_uniques)
        order, lid_o, position, ok = block_segments(bptr, b_row, b_len, b_lid, ptr, key, descending=not has_rank)
        if not ok:  # not best-first inside some (query, run): sort those rows, keep ties in input order
            lid = np.repeat(np.arange(n_lists, dtype=np.int64), [len(f) for f in frames])
            q_codes = np.empty(n_rows, np.int64)
            q_codes[order] = np.repeat(np.arange(n_q, dtype=np.int64), np.diff(ptr))
            rows = np.lexsort((np.arange(n_rows), key if has_rank else -key, lid, q_codes))  # one row a block
            order, lid_o, position, _ = block_segments(ptr, rows, np.ones(len(rows), np.int64), lid[rows], ptr, key,
                                                       descending=not has_rank)
        docs_all, buffers = _doc_column(frames)
        g_chunks = 1 if n_q < 64 else min(n_q, chunks)
        if buffers is not None:
            local, rep, _ = intern_groups(order, ptr, buffers[1], buffers[2], g_chunks)
        else:
            d_codes, d_uniques = factorize(docs_all, name="doc_id")
            local, rep = d_codes[order], None
    n_local = int(local.max()) + 1 if len(local) else 1
    w = check_weights(weights, n_lists)
    counted = None
    segment = np.repeat(np.arange(n_q, dtype=np.int64) * n_lists, np.diff(ptr)) + lid_o if method != "rrf" else lid_o
    if method != "rrf" and norm is not None:  # a repeated document counts once in the statistics
        _, first = np.unique(segment * n_local + local, return_index=True)
        counted = np.zeros(len(order), bool)
        counted[first] = True
    if method == "rrf":  # contributions computed in the kernel from the ranks
        out_ptr, out_local, out_scores = fuse_rrf_arrays(ptr, lid_o, local, position, n_local, k=k, weights=w,
                                                         limit=limit, n_threads=n_threads)
    else:
        contrib = _contributions(method, k, w, lid_o, position, score[order], segment, norm, counted)
        out_ptr, out_local, out_scores = fuse_arrays(ptr, lid_o, local, contrib, n_local,
                                                     mnz=(method == "combmnz"), limit=limit, n_threads=n_threads)
    with numba_threads(n_threads) as threads:
        # the codes are not needed once they are rows: write the rows over them
        doc_rows, rank = output_rows(ptr, out_ptr, out_local, rep, 4 * threads, overwrite=True)
        if buffers is not None and doc_rows is not None:
            doc_col: Any = take_strings(buffers[0], doc_rows, 4 * threads)
        else:
            doc_col = d_uniques.take(out_local)
        del doc_rows, out_local
        q_counts = np.diff(out_ptr)
        q_buffers = string_buffers(q_uniques)
        qid_col: Any = q_uniques.repeat(q_counts) if q_buffers is None else repeat_strings(q_buffers[0], q_counts,
                                                                                            4 * threads)
    return pd.DataFrame({"qid": qid_col, "doc_id": doc_col, "rank": rank, "score": out_scores}, copy=False)
