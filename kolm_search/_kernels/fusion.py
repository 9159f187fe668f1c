"""Fusion kernel: a scatter-add of contributions over document codes, query by query, and
each query's fused list ordered best first.

Input layout (CSR by query): query ``g`` owns entries ``ptr[g]:ptr[g+1]``; inside a query the
entries of each list are contiguous, lists in increasing id, each best first. Every entry
carries its list id, its document code and its contribution (``w / (k + rank + 1)`` for RRF,
``w * score`` for CombSUM, ...: see :mod:`kolm_search.fusion.methods`).

Per query: a document counts once per list (its first entry there, i.e. its best rank); its
fused score is the sum ``S`` of its contributions, scaled by the lists holding it: with
``H = sum of presence[l]`` over those lists (their number when ``presence`` is all ones),
``S * H ** power`` (CombMNZ: power 1; CombANZ: -1; CombGMNZ: gamma) or ``S * log(H + offset)``
(log-ISR), or ``S`` alone. The list is ordered by descending score, ties by first appearance
(list order, then rank), and cut at ``limit``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import f64, i64, ro, rw, u8
from kolm_search.errors import KolmValueError

__all__ = ["first_in_block", "first_in_block_numpy", "fuse_groups", "fuse_groups_numpy"]

_PARALLEL_ENTRIES = 50_000  # smaller batches run on the calling thread
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

SCALE_NONE, SCALE_POWER, SCALE_LOG = 0, 1, 2
_SIGNATURE = types.void(ro(i64), ro(i64), ro(i64), ro(f64), ro(f64), i64, f64, i64, rw(i64), rw(f64), rw(i64),
                        rw(f64), rw(f64), rw(i64), rw(i64), rw(f64), i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _fuse_chunk(ptr, lists, docs, contrib, presence, scale, param, limit, out_docs, out_scores, counts, acc, held,
                mark, touched, keys, g0, g1):  # pragma: no cover - compiled
    """Fuse queries ``g0 <= g < g1``; query g's list goes to ``out[ptr[g]:ptr[g]+counts[g]]``.
    Scratch: ``acc``, ``held`` (presence of the lists of the query holding the document) and
    ``mark`` (``g * n_lists + list`` of the document's last entry, -1 on entry) per document
    code; ``touched`` and ``keys`` as long as the widest query."""
    n_lists = presence.shape[0]
    for g in range(g0, g1):
        first = g * n_lists
        nt = 0
        for p in range(ptr[g], ptr[g + 1]):
            d = docs[p]
            stamp = first + lists[p]
            if mark[d] < first:  # first entry of d in this query
                acc[d] = contrib[p]
                held[d] = presence[lists[p]]
                touched[nt] = d
                nt += 1
            elif mark[d] != stamp:  # first entry of d in this list
                acc[d] += contrib[p]
                held[d] += presence[lists[p]]
            else:  # a repeat inside one list counts once
                continue
            mark[d] = stamp
        for i in range(nt):
            d = touched[i]
            s = acc[d]
            if scale == SCALE_POWER:
                s = s * held[d] if param == 1.0 else s * held[d] ** param
            elif scale == SCALE_LOG:
                s = s * np.log(held[d] + param)
            keys[i] = -s
        order = np.argsort(keys[:nt], kind="mergesort")  # stable: ties keep first appearance
        m = nt if limit < 0 or limit > nt else limit
        base = ptr[g]
        for i in range(m):
            j = order[i]
            out_docs[base + i] = touched[j]
            out_scores[base + i] = -keys[j]
        counts[g] = m


@njit(types.void(ro(i64), ro(i64), rw(i64), rw(u8)), cache=True, nogil=True)
def _first_in_block(block, docs, mark, out):  # pragma: no cover - compiled
    """``out[i] = 1`` where entry i is its document's first in its block (blocks contiguous);
    ``mark`` (-1 on entry) holds each document's last block."""
    for i in range(docs.shape[0]):
        d = docs[i]
        if mark[d] == block[i]:
            out[i] = 0
        else:
            mark[d] = block[i]
            out[i] = 1


def first_in_block(block: npt.ArrayLike, docs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """bool (n,): whether each entry is the first of its document inside its block.

    ``block`` int64 (n,) numbers the blocks (equal numbers contiguous); ``docs`` int64 (n,)
    non-negative document codes.
    """
    b = np.ascontiguousarray(block, dtype=np.int64)
    d = np.ascontiguousarray(docs, dtype=np.int64)
    if d.shape != b.shape or d.ndim != 1:
        raise KolmValueError(f"block and docs must be 1-D of one length, got {b.shape}, {d.shape}")
    if len(d) == 0:
        return np.ones(0, bool)
    if d.min() < 0:
        raise KolmValueError(f"document codes must be non-negative, got {d.min()}")
    if int(d.max()) >= max(4 * len(d), 1 << 16):  # a sparse code range: renumber the codes in use
        d = np.ascontiguousarray(np.unique(d, return_inverse=True)[1].reshape(-1), dtype=np.int64)
    out = np.empty(len(d), np.uint8)
    _first_in_block(b, d, np.full(int(d.max()) + 1, -1, np.int64), out)
    return out.view(bool)


def first_in_block_numpy(block: npt.ArrayLike, docs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Twin of :func:`first_in_block` (the test oracle): pandas' ``duplicated``."""
    import pandas as pd

    frame = pd.DataFrame({"b": np.asarray(block, np.int64), "d": np.asarray(docs, np.int64)})
    return ~frame.duplicated().to_numpy()


def _limit(limit: int | None) -> int:
    """``limit`` as the kernels take it (-1: no limit), checked."""
    lim = -1 if limit is None else int(limit)
    if limit is not None and lim < 0:
        raise KolmValueError(f"limit must be a non-negative integer, got {limit!r}")
    return lim


def _renumbered(dc: I64, n_docs: int) -> tuple[I64, int, I64 | None]:
    """Document codes, their range, and the codes in use when a sparse range was renumbered."""
    n_codes = max(n_docs, 1)
    if n_codes > max(4 * dc.shape[0], 1 << 16):  # a sparse code range: renumber the codes in use
        uniques, inverse = np.unique(dc, return_inverse=True)
        return np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64), max(len(uniques), 1), uniques
    return dc, n_codes, None


def _checked(ptr: npt.ArrayLike, lists: npt.ArrayLike, docs: npt.ArrayLike, contrib: npt.ArrayLike,
             n_docs: int) -> tuple[I64, I64, I64, F64]:
    p = np.ascontiguousarray(ptr, dtype=np.int64)
    li = np.ascontiguousarray(lists, dtype=np.int64)
    dc = np.ascontiguousarray(docs, dtype=np.int64)
    ct = np.ascontiguousarray(contrib, dtype=np.float64)
    n = dc.shape[0]
    if p.ndim != 1 or p.size < 1 or p[0] != 0 or p[-1] != n or np.any(p[1:] < p[:-1]):
        raise KolmValueError("ptr must start at 0, end at len(docs) and never decrease")
    if dc.ndim != 1 or li.shape != (n,) or ct.shape != (n,):
        raise KolmValueError(f"lists, docs and contrib must be 1-D of one length, got {li.shape}, {dc.shape}, {ct.shape}")
    if n:
        if dc.min() < 0 or dc.max() >= n_docs:
            raise KolmValueError(f"document codes must lie in [0, {n_docs}), got [{dc.min()}, {dc.max()}]")
        if li.min() < 0:
            raise KolmValueError(f"list ids must be non-negative, got {li.min()}")
        inner = np.ones(n - 1, bool)
        inner[p[1:-1][(p[1:-1] > 0) & (p[1:-1] < n)] - 1] = False  # pairs that straddle two queries
        if np.any((li[1:] < li[:-1]) & inner):
            raise KolmValueError("inside a query, entries must be grouped by list in increasing list id")
        if not np.all(np.isfinite(ct)):
            raise KolmValueError("contributions must be finite")
    return p, li, dc, ct


def _scaling(mnz: bool, power: float | None, log_offset: float | None, presence: npt.ArrayLike | None,
             n_lists: int) -> tuple[F64, int, float]:
    """The presence weights (n_lists,), the scaling mode and its parameter, checked."""
    if sum(x is not None and x is not False for x in (mnz or None, power, log_offset)) > 1:
        raise KolmValueError("choose one of mnz, power and log_offset")
    pres = np.ones(n_lists) if presence is None else np.ascontiguousarray(presence, dtype=np.float64)
    if pres.ndim != 1 or pres.shape[0] < n_lists or not np.all(np.isfinite(pres)) or np.any(pres < 0):
        raise KolmValueError(f"presence must hold a finite weight >= 0 for each of the {n_lists} lists")
    if mnz:
        return pres, SCALE_POWER, 1.0
    if power is not None:
        if not np.isfinite(power) or (power < 0 and np.any(pres[:n_lists] <= 0)):
            raise KolmValueError(f"power must be finite (negative only with positive presence), got {power!r}")
        return pres, SCALE_POWER, float(power)
    if log_offset is not None:
        if not np.isfinite(log_offset) or log_offset < 0 or np.any(pres[:n_lists] + log_offset <= 0):
            raise KolmValueError(f"log_offset must be finite and >= 0 with positive presence, got {log_offset!r}")
        return pres, SCALE_LOG, float(log_offset)
    return pres, SCALE_NONE, 0.0


def fuse_groups(ptr: npt.ArrayLike, lists: npt.ArrayLike, docs: npt.ArrayLike, contrib: npt.ArrayLike,
                n_docs: int, *, mnz: bool = False, power: float | None = None, log_offset: float | None = None,
                presence: npt.ArrayLike | None = None, limit: int | None = None,
                n_threads: int | None = None) -> tuple[I64, I64, F64]:
    """Fuse the lists of every query in one call (see the module docstring).

    Parameters
    ----------
    ptr : int64 (n_groups + 1,)
        Query ``g`` owns entries ``ptr[g]:ptr[g+1]``.
    lists, docs : int64 (n,)
        List id (contiguous and increasing inside a query) and document code of each entry.
    contrib : float64 (n,)
        Each entry's contribution (finite).
    n_docs : int
        Document codes lie in ``[0, n_docs)``.
    mnz : bool
        Multiply each fused sum by the number of lists holding the document (CombMNZ);
        the same as ``power=1``.
    power : float, optional
        Multiply each fused sum by ``H ** power`` (``H``: the presence of the lists holding
        the document, their number by default).
    log_offset : float, optional
        Multiply each fused sum by ``log(H + log_offset)``.
    presence : float64 (n_lists,), optional
        Each list's share of ``H`` (all ones by default; weighted MNZ passes the run weights).
    limit : int, optional
        Keep at most ``limit`` documents per query.
    n_threads : int, optional
        Threads for this call (default: the usable cores).

    Returns
    -------
    out_ptr : int64 (n_groups + 1,)
    out_docs : int64 (m,)
    out_scores : float64 (m,)
        Query g's fused list is ``out_docs[out_ptr[g]:out_ptr[g+1]]``, best first.
    """
    p, li, dc, ct = _checked(ptr, lists, docs, contrib, int(n_docs))
    lim = _limit(limit)
    n, n_groups = dc.shape[0], p.shape[0] - 1
    pres, scale, param = _scaling(mnz, power, log_offset, presence, int(li.max()) + 1 if n else 1)
    dc, n_codes, uniques = _renumbered(dc, int(n_docs))
    out_docs = np.empty(n, np.int64)
    out_scores = np.empty(n, np.float64)
    counts = np.zeros(n_groups, np.int64)
    width = int(np.diff(p).max(initial=0)) + 1

    def chunk(g0: int, g1: int) -> None:
        _fuse_chunk(p, li, dc, ct, pres, scale, param, lim, out_docs, out_scores, counts, np.zeros(n_codes),
                    np.zeros(n_codes), np.full(n_codes, -1, np.int64), np.empty(width, np.int64),
                    np.empty(width), g0, g1)

    threads = resolve_threads(n_threads) if n >= _PARALLEL_ENTRIES else 1
    run_chunks(chunk, chunk_bounds(p, threads))
    out_ptr = np.zeros(n_groups + 1, np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    total = int(out_ptr[-1])
    if total < n:  # each query's list sits at the start of its input range: close the gaps
        keep = np.repeat(p[:-1] - out_ptr[:-1], counts) + np.arange(total)
        out_docs, out_scores = out_docs[keep], out_scores[keep]
    if uniques is not None:
        out_docs = uniques[out_docs]
    return out_ptr, out_docs, out_scores


def fuse_groups_numpy(ptr: npt.ArrayLike, lists: npt.ArrayLike, docs: npt.ArrayLike, contrib: npt.ArrayLike,
                      *, mnz: bool = False, power: float | None = None, log_offset: float | None = None,
                      presence: npt.ArrayLike | None = None, limit: int | None = None) -> tuple[I64, I64, F64]:
    """Plain-Python twin of :func:`fuse_groups` (the test oracle)."""
    p, li, dc, ct = (np.asarray(a) for a in (ptr, lists, docs, contrib))
    pres = np.ones(int(li.max()) + 1 if len(li) else 1) if presence is None else np.asarray(presence, float)
    out_ptr: list[int] = [0]
    out_docs: list[int] = []
    out_scores: list[float] = []
    for g in range(len(p) - 1):
        acc: dict[int, float] = {}
        held: dict[int, list[int]] = {}
        for i in range(int(p[g]), int(p[g + 1])):
            d, lst = int(dc[i]), int(li[i])
            if lst in held.get(d, []):
                continue
            acc[d] = acc.get(d, 0.0) + float(ct[i])
            held.setdefault(d, []).append(lst)
        items: list[Any] = []
        for d, s in acc.items():
            h = 0.0
            for lst in held[d]:
                h += float(pres[lst])
            if mnz or power == 1.0:
                s = s * h
            elif power is not None:
                s = s * h ** power
            elif log_offset is not None:
                s = s * math.log(h + log_offset)
            items.append((d, s))
        items.sort(key=lambda kv: -kv[1])  # stable: ties in first-appearance order
        items = items[: limit if limit is not None else len(items)]
        out_docs.extend(d for d, _ in items)
        out_scores.extend(s for _, s in items)
        out_ptr.append(len(out_docs))
    return np.asarray(out_ptr, np.int64), np.asarray(out_docs, np.int64), np.asarray(out_scores, np.float64)
