"""BM25 weighting: the variants' formulas, the weights of postings, per-query constants.

Variants (Kamphuis et al., "Which BM25 do you mean?", ECIR 2020), with ``N`` documents,
document frequency ``df``, term frequency ``tf``, length ``L`` and mean length ``A``,
``n = 1 - b + b L / A``:

=========  ===================================  ==========================================
method     idf                                  term weight
=========  ===================================  ==========================================
robertson  ``log(max(1, (N-df+.5)/(df+.5)))``   ``tf / (k1 n + tf)``
lucene     ``log(1 + (N-df+.5)/(df+.5))``       ``tf / (k1 n + tf)``
atire      ``log(N / df)``                      ``(k1+1) tf / (tf + k1 n)``
bm25l      ``log((N+1) / (df+.5))``             ``(k1+1)(c+delta) / (k1+c+delta)``, ``c = tf/n``
bm25+      ``log((N+1) / df)``                  ``(k1+1) tf / (k1 n + tf) + delta``
=========  ===================================  ==========================================

A query's score sums ``idf * weight`` over its tokens, repeats included. For BM25L and
BM25+ a document without the token still earns ``idf * weight(tf=0, L=A)``; as in bm25s, that
constant is stored once per term and added back per query. Arithmetic follows bm25s
(float32 idf and stored weights, float32 accumulation), so scores agree with it to float32
rounding for the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import resolve_threads, run_chunks
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.postings import CollectionStats, Postings

__all__ = ["BM25_METHODS", "Method", "first_unlike", "idf", "query_offsets", "reduce_offsets", "term_constants",
           "tf_part", "weigh_postings", "weigh_slice"]

BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
Method = Literal["lucene", "robertson", "atire", "bm25l", "bm25+"]
_SLICE = 1 << 20  # postings per thread at least (smaller indexes are weighted in one go)


def idf(method: str, df: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
    """The variant's idf of document frequencies ``df`` (float64 (V,)) among ``n`` documents."""
    if method == "robertson":
        return np.log(np.maximum((n - df + 0.5) / (df + 0.5), 1.0))
    if method == "lucene":
        return np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    if method == "atire":
        return np.log(n / df)
    if method == "bm25l":
        return np.log((n + 1.0) / (df + 0.5))
    return np.log((n + 1.0) / df)  # bm25+


def tf_part(method: str, tf: npt.NDArray[np.float64], norm: npt.NDArray[np.float64] | float,
            k1: float, delta: float) -> npt.NDArray[np.float64]:
    """The variant's term weight of term frequencies ``tf`` at length norms ``norm`` (float64)."""
    if method in ("robertson", "lucene"):
        return tf / (k1 * norm + tf)
    if method == "atire":
        return tf * (k1 + 1.0) / (tf + k1 * norm)
    if method == "bm25l":
        c = tf / norm
        return (k1 + 1.0) * (c + delta) / (k1 + c + delta)
    return (k1 + 1.0) * tf / (k1 * norm + tf) + delta  # bm25+


def weigh_postings(postings: Postings, df: npt.NDArray[np.float64], n_coll: int, avgdl: float, *, method: str,
                   k1: float, b: float, delta: float, n_threads: int | None = None,
                   ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Stored weights of every posting and each term's non-occurrence constant.

    Parameters
    ----------
    postings : Postings
        Counted postings (``nnz`` of them, ``V`` terms).
    df : float64 (V,)
        Document frequency of each term in the collection (the shard's own, or collection-wide).
    n_coll : int
        Documents in the collection.
    avgdl : float
        Mean document length in the collection.
    n_threads : int, optional
        Threads computing slices of at least 2**20 postings (default: the usable cores).

    Returns
    -------
    t_w : float32 (nnz,)
        ``idf * weight``, float64 arithmetic rounded once; BM25L/BM25+ minus the term's
        non-occurrence constant, never below 0. Bit-identical for any ``n_threads``.
    nonocc : float32 (V,)
        ``idf * weight(tf=0, L=A)`` for BM25L/BM25+, zeros otherwise.

    Raises
    ------
    KolmValueError
        A weight that is not finite, naming its token and document frequency.
    """
    idf32, nonocc = term_constants(method, df, n_coll, k1, delta)
    p_term = postings.p_term
    nnz = p_term.shape[0]
    t_w = np.empty(nnz, np.float32)
    span = max(-(-nnz // resolve_threads(n_threads)), _SLICE)  # numpy releases the GIL on each slice
    run_chunks(weigh_slice(method, k1, b, delta), np.append(np.arange(0, nnz, span), nnz), idf32, nonocc, p_term,
               postings.p_doc, postings.tf, postings.lengths, avgdl or 1.0, t_w)
    for arr, term_of in ((nonocc, None), (t_w, p_term)):
        bad = np.flatnonzero(~np.isfinite(arr))
        if len(bad):
            t = int(bad[0] if term_of is None else term_of[bad[0]])
            raise KolmValueError(f"BM25 ({method}) weight of token {postings.vocab[t]!r} is not finite "
                                 f"(document frequency {df[t]:g} of {n_coll} documents)")
    return t_w, nonocc


def term_constants(method: str, df: npt.NDArray[np.float64], n_coll: int, k1: float, delta: float,
                   ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Each term's float32 idf and non-occurrence constant (zeros unless BM25L/BM25+), (V,) each."""
    with np.errstate(divide="ignore", invalid="ignore"):  # non-finite weights are refused by the callers
        idf64 = idf(method, df, n_coll)
        if method in ("bm25l", "bm25+"):
            nonocc = (idf64 * tf_part(method, np.zeros(1), 1.0, k1, delta)).astype(np.float32)
        else:
            nonocc = np.zeros(len(df), np.float32)
    return idf64.astype(np.float32), nonocc


def first_unlike(t_ptr: npt.NDArray[np.int64], p_doc: npt.NDArray[np.int32], tf: npt.NDArray[np.int32],
                 lengths: npt.NDArray[np.int64], t_w: npt.NDArray[np.float32], nonocc: npt.NDArray[np.float32], *,
                 method: str, k1: float, b: float, delta: float, n_threads: int | None = None,
                 ) -> tuple[str, int, float, float] | None:
    """Where stored weights differ from those of the counts, with the index's own statistics.

    Recomputes, as :func:`weigh_postings` does and bit for bit, each term's constant and each
    posting's weight from ``t_ptr`` (V + 1,), ``p_doc``/``tf`` (nnz,) and ``lengths`` (n_docs,),
    in slices of 2**20 postings (memory bounded; on ``n_threads`` threads), and compares them
    with ``t_w`` (nnz,) and ``nonocc`` (V,).

    Returns
    -------
    None, or ("nonocc" or "t_w", position, stored, recomputed) of the first difference.
    """
    n = int(lengths.shape[0])
    df = np.diff(np.asarray(t_ptr)).astype(np.float64)
    avgdl = float(int(np.asarray(lengths).sum())) / n if n else 0.0
    idf32, want = term_constants(method, df, n, k1, delta)
    nonocc = np.asarray(nonocc)
    if not np.array_equal(want, nonocc):
        pos = int(np.flatnonzero(want != nonocc)[0])
        return "nonocc", pos, float(nonocc[pos]), float(want[pos])
    nnz = int(p_doc.shape[0])
    weigh = weigh_slice(method, k1, b, delta)
    found: list[tuple[str, int, float, float]] = []

    def compare(start: int, stop: int) -> None:
        for s in range(start, stop, _SLICE):
            e = min(s + _SLICE, stop)
            t0 = int(np.searchsorted(t_ptr, s, side="right")) - 1
            t1 = int(np.searchsorted(t_ptr, e, side="left"))
            bounds = np.clip(np.asarray(t_ptr[t0:t1 + 1]), s, e)
            terms = np.repeat(np.arange(t0, t0 + len(bounds) - 1, dtype=np.int64), np.diff(bounds))
            out = np.empty(e - s, np.float32)
            weigh(idf32, want, terms, p_doc[s:e], tf[s:e], lengths, avgdl or 1.0, out, 0, e - s)
            stored = np.asarray(t_w[s:e])
            if not np.array_equal(out, stored):
                pos = int(np.flatnonzero(out != stored)[0])
                found.append(("t_w", s + pos, float(stored[pos]), float(out[pos])))
                return

    span = max(-(-nnz // resolve_threads(n_threads)), _SLICE)
    run_chunks(compare, np.append(np.arange(0, nnz, span), nnz))
    return min(found, key=lambda f: f[1]) if found else None


def weigh_slice(method: str, k1: float, b: float, delta: float) -> Callable[..., None]:
    """``f(idf32, nonocc, p_term, p_doc, tf, lengths, avgdl, out, start, stop)`` writing the
    weights of postings ``[start, stop)`` into ``out`` (a :func:`run_chunks` kernel)."""

    def weigh(idf32: npt.NDArray[np.float32], nonocc: npt.NDArray[np.float32], p_term: npt.NDArray[np.int64],
              p_doc: npt.NDArray[np.int32], tf: npt.NDArray[np.int32], lengths: npt.NDArray[np.int64],
              avgdl: float, out: npt.NDArray[np.float32], start: int, stop: int) -> None:
        terms = p_term[start:stop]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            norm = 1.0 - b + b * lengths[p_doc[start:stop]].astype(np.float64) / avgdl
            w = idf32[terms].astype(np.float64) * tf_part(method, tf[start:stop].astype(np.float64), norm, k1, delta)
            if method in ("bm25l", "bm25+"):
                w -= nonocc[terms].astype(np.float64)
        np.maximum(w, 0.0, out=w)  # BM25L/BM25+ differences: no float rounding below 0
        out[start:stop] = w

    return weigh


def reduce_offsets(values: npt.NDArray[np.float32], q_ptr: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """Per-query sums of the non-occurrence constants of its (known) tokens, in float32.

    ``values`` float32 (nnz,), ``q_ptr`` int64 (m + 1,); a query without a known token (at any
    position, the last included) sums to 0.
    """
    padded = np.append(np.asarray(values, np.float32), np.float32(0))  # every start < len(padded)
    sums = np.add.reduceat(padded, q_ptr[:-1]) if len(q_ptr) > 1 else np.zeros(0, np.float32)
    return np.where(np.diff(q_ptr) > 0, sums, 0).astype(np.float32)


def query_offsets(stats: CollectionStats, texts: Sequence[str], tokenizer: Callable[[str], Sequence[str]], method: str, k1: float,
                  delta: float) -> npt.NDArray[np.float32]:
    """The BM25L/BM25+ per-query constants over the whole collection (zeros otherwise).

    A shard's own constants would use its local document frequencies; a sharded search
    passes these to every shard instead.
    """
    if method not in ("bm25l", "bm25+"):
        return np.zeros(len(texts), np.float32)
    ptr, vals = [0], []
    base = float(tf_part(method, np.zeros(1), 1.0, k1, delta)[0])
    for text in texts:
        for tok in tokenizer(text):
            if tok in stats.df:
                vals.append(np.float32(idf(method, np.array([float(stats.df[tok])]), stats.n_docs)[0] * base))
        ptr.append(len(vals))
    return reduce_offsets(np.asarray(vals, np.float32), np.asarray(ptr, np.int64))
