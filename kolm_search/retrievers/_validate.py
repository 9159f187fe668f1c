"""Checks of a saved index's contents, so that no kernel reads out of bounds whatever the files say.

Manifest values are checked by key (type, range, known choices; no unknown key), arrays by
the invariants the search kernels rely on (vectorised numpy, a few passes over each array):

- ``t_ptr`` int (V + 1,): starts at 0, never decreases, ends at ``len(t_docs)``;
- ``t_docs`` int (nnz,): document rows in ``[0, n_docs)``, strictly ascending within a term;
- ``t_w`` float (nnz,), ``nonocc`` float (V,): finite and non-negative, as every BM25 variant
  stores them (``nonocc`` zero unless BM25L/BM25+);
- ``doc_len`` int (n_docs,): non-negative;
- ``tf`` int (nnz,) of an index with its own statistics: counts >= 1 summing to each
  document's length, from which ``t_w`` and ``nonocc`` are recomputed bit for bit (an
  ``add`` re-weights from the counts: they must be those the served weights came from);
- ``embeddings`` float (n_docs, dim): finite; unit (or zero) rows for the cosine metric.

Every problem is a :class:`KolmValueError` naming the file and the key or array position.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._params import positive_int, real
from kolm_search.engine.text import Tokenizer
from kolm_search.engine.tokenizers import restore_tokenizer
from kolm_search.errors import KolmValueError, ParameterError
from kolm_search.retrievers.bm25_weights import first_unlike

__all__ = ["bm25_arrays", "bm25_config", "bm25_stats", "bm25_tf", "bm25_weights", "check_keys", "dense_config",
           "dense_embeddings", "dense_embeddings_in_blocks", "integer", "lengths", "number", "vocabulary"]

MAX_DOCS = int(np.iinfo(np.int32).max)
_BM25_KEYS = ("method", "k1", "b", "delta", "tokenizer", "fields", "fusion_k")
_TOKENIZER_KEYS = ("lowercase", "pattern", "stopwords", "stemmer")
_DENSE_KEYS = ("metric", "fields", "fusion_k")


def _bad(path: Path, key: str, what: str, value: Any) -> KolmValueError:
    shown = repr(value)
    return KolmValueError(f"{path}: key {key!r} must be {what}, got {shown[:80]}{'...' if len(shown) > 80 else ''}")


def check_keys(path: Path, prefix: str, obj: Any, known: Collection[str],
               optional: Collection[str] = ()) -> dict[str, Any]:
    """``obj`` as a dict holding the keys ``known``, perhaps ``optional``, no other (named
    ``prefix.key`` in errors)."""
    if not isinstance(obj, dict):
        raise _bad(path, prefix, "an object", obj)
    for key in known:
        if key not in obj:
            raise KolmValueError(f"{path}: key {prefix + '.' + key!r} is missing")
    unknown = sorted(str(k) for k in set(obj) - set(known) - set(optional))
    if unknown:
        raise KolmValueError(f"{path}: unknown key {prefix + '.' + unknown[0]!r}")
    return obj


def number(path: Path, key: str, value: Any, lo: float = 0.0, hi: float = math.inf) -> float:
    """A finite JSON number (int or float, not bool) in ``[lo, hi]`` as float."""
    try:
        x: float = real(key, value if isinstance(value, (int, float)) else None, low=lo, high=hi)
    except ParameterError:
        raise _bad(path, key, f"a finite number in [{lo:g}, {hi:g}]", value) from None
    return x


def top_k(k: Any) -> int:
    """``k`` of a top-k call: a positive integer (``KolmValueError`` naming the value)."""
    result: int = positive_int("k", k)
    return result


def integer(path: Path, key: str, value: Any, lo: int = 0, hi: int = MAX_DOCS) -> int:
    """A JSON integer in ``[lo, hi]``."""
    if type(value) is not int or not lo <= value <= hi:
        raise _bad(path, key, f"an integer in [{lo}, {hi}]", value)
    return value


def _choice(path: Path, key: str, value: Any, options: Collection[Any]) -> Any:
    if not isinstance(value, str) or value not in options:
        raise _bad(path, key, f"one of {sorted(options)}", value)
    return value


def _fields(path: Path, key: str, value: Any) -> list[str]:
    """Names of the fields indexed: strings (metadata after load; nothing reads them then)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(path, key, "a list of field names", value)
    return value


def _tokenizer(path: Path, value: Any) -> Any:
    """A plain Tokenizer's configuration, or ``{"registered": name, "config": ...}``
    (:func:`kolm_search.engine.text.register_tokenizer`)."""
    if isinstance(value, dict) and "registered" in value:
        cfg = check_keys(path, "config.tokenizer", value, ("registered", "config"))
        if not isinstance(cfg["registered"], str):
            raise _bad(path, "config.tokenizer.registered", "a registered tokenizer name", cfg["registered"])
        try:
            return restore_tokenizer(cfg)
        except KolmValueError as exc:
            raise KolmValueError(f"{path}: key 'config.tokenizer': {exc}") from exc
    cfg = check_keys(path, "config.tokenizer", value, _TOKENIZER_KEYS, optional=("language",))  # language: since 0.2
    if not isinstance(cfg.get("language", ""), str):
        raise _bad(path, "config.tokenizer.language", "a language name", cfg["language"])
    if not isinstance(cfg["lowercase"], bool):
        raise _bad(path, "config.tokenizer.lowercase", "true or false", cfg["lowercase"])
    if not isinstance(cfg["pattern"], str):
        raise _bad(path, "config.tokenizer.pattern", "a regular expression string", cfg["pattern"])
    stop = cfg["stopwords"]
    if not (stop is None or isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(w, str) for w in stop))):
        raise _bad(path, "config.tokenizer.stopwords", "null, 'english' or a list of strings", stop)
    if not (cfg["stemmer"] is None or isinstance(cfg["stemmer"], str)):
        raise _bad(path, "config.tokenizer.stemmer", "null or a Snowball language name", cfg["stemmer"])
    try:
        return Tokenizer.from_config(cfg)
    except KolmValueError as exc:
        raise KolmValueError(f"{path}: key 'config.tokenizer': {exc}") from exc


def bm25_config(path: Path, value: Any, methods: Collection[str]) -> dict[str, Any]:
    """The BM25 manifest's ``config`` as keyword arguments of ``BM25Retriever`` (tokenizer built)."""
    cfg = check_keys(path, "config", value, _BM25_KEYS)
    return {"method": _choice(path, "config.method", cfg["method"], methods),
            "k1": number(path, "config.k1", cfg["k1"]), "b": number(path, "config.b", cfg["b"], 0.0, 1.0),
            "delta": number(path, "config.delta", cfg["delta"]), "tokenizer": _tokenizer(path, cfg["tokenizer"]),
            "fields": _fields(path, "config.fields", cfg["fields"]),
            "fusion_k": number(path, "config.fusion_k", cfg["fusion_k"])}


def dense_config(path: Path, value: Any) -> dict[str, Any]:
    """The dense manifest's ``config``: ``metric``, ``fields``, ``fusion_k``."""
    cfg = check_keys(path, "config", value, _DENSE_KEYS)
    return {"metric": _choice(path, "config.metric", cfg["metric"], ("cosine", "ip")),
            "fields": _fields(path, "config.fields", cfg["fields"]),
            "fusion_k": number(path, "config.fusion_k", cfg["fusion_k"])}


def vocabulary(path: Path, value: Any) -> list[str]:
    """``vocab.json``: a list of distinct strings."""
    if not isinstance(value, list):
        raise KolmValueError(f"{path}: must hold a JSON list of terms, got {type(value).__name__}")
    for i, term in enumerate(value):
        if not isinstance(term, str):
            raise KolmValueError(f"{path}: entry {i} must be a string, got {term!r}")
    if len(set(value)) != len(value):
        seen: set[str] = set()
        for term in value:
            if term in seen:
                raise KolmValueError(f"{path}: term {term!r} appears twice")
            seen.add(term)
    return value


# -- arrays --------------------------------------------------------------------------------
def lengths(path: Path, arr: np.ndarray, n: int, why: str) -> None:
    """``arr`` (the file ``path``) has ``n`` entries (rows); ``why`` says where ``n`` comes from."""
    if arr.shape[0] != n:
        raise KolmValueError(f"{path}: has {arr.shape[0]} entries, expected {n} ({why})")


def _first(bad: npt.NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(bad)[0])


def _finite(path: Path, arr: np.ndarray, *, non_negative: bool = False) -> npt.NDArray[np.float32]:
    """``arr`` as float32, all finite (NaN and infinities, including overflow of the cast, refused)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(np.float32, copy=False)
    if out.size and not (np.isfinite(out.min()) and np.isfinite(out.max())):  # NaN propagates through min
        pos = np.unravel_index(_first(~np.isfinite(out).ravel()), out.shape)
        where = ", ".join(str(int(p)) for p in pos)
        raise KolmValueError(f"{path}: value at position {where} is {arr[pos].item()!r}; values must be finite")
    if non_negative and out.size and out.min() < 0:
        neg = _first(out.ravel() < 0)
        raise KolmValueError(f"{path}: value at position {neg} is {out.ravel()[neg].item()!r}; values must be >= 0")
    return out


def _in_range(path: Path, arr: np.ndarray, n: int, what: str) -> None:
    """Every value of the integer array ``arr`` lies in ``[0, n)``."""
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n):
        pos = _first((arr < 0) | (arr >= n))
        raise KolmValueError(f"{path}: {what} {int(arr[pos])} at position {pos} lies outside [0, {n})")


def pointers(path: Path, ptr: np.ndarray, n_entries: int) -> npt.NDArray[np.int64]:
    """A CSR pointer array: starts at 0, never decreases, ends at ``n_entries``."""
    if ptr.shape[0] == 0 or int(ptr[0]) != 0:
        raise KolmValueError(f"{path}: pointers must start at 0, got {ptr[:1].tolist()}")
    low, top = int(ptr.min()), int(ptr.max())
    if low < 0 or top > n_entries:
        pos = int(np.argmin(ptr)) if low < 0 else int(np.argmax(ptr))
        raise KolmValueError(f"{path}: pointer {int(ptr[pos])} at position {pos} lies outside "
                             f"[0, {n_entries}] (the postings' length)")
    steps = np.diff(ptr.astype(np.int64, copy=False))  # values in [0, n_entries]: no overflow
    if steps.size and steps.min() < 0:
        pos = _first(steps < 0) + 1
        raise KolmValueError(f"{path}: pointers decrease at position {pos} "
                             f"({int(ptr[pos])} after {int(ptr[pos - 1])})")
    if int(ptr[-1]) != n_entries:
        raise KolmValueError(f"{path}: pointers end at {int(ptr[-1])}, expected {n_entries} (the postings' length)")
    return ptr.astype(np.int64, copy=False)


def bm25_arrays(root: Path, arrays: dict[str, np.ndarray], n_vocab: int, n_docs: int, method: str,
                names: dict[str, str] | None = None, *, postings: bool = True) -> dict[str, np.ndarray]:
    """The BM25 index arrays, checked and in the kernels' dtypes (no copy when already so);
    ``names`` maps each array to its file name (default ``<array>.npy``). ``postings=False``
    leaves the values of ``t_docs`` and ``t_w`` to the caller (a quick load checks each term's
    when a search first reads it, :mod:`kolm_search.retrievers.postings_gate`); their lengths
    are checked, and the rows of a ``t_docs`` wider than int32 before the cast that would wrap them."""
    p = {name: root / (names or {}).get(name, f"{name}.npy") for name in arrays}
    lengths(p["t_ptr"], arrays["t_ptr"], n_vocab + 1, "one more than the terms of the vocabulary")
    nnz = arrays["t_docs"].shape[0]
    lengths(p["t_w"], arrays["t_w"], nnz, "one weight per posting: t_docs has as many")
    lengths(p["nonocc"], arrays["nonocc"], n_vocab, "one per term of the vocabulary")
    lengths(p["doc_len"], arrays["doc_len"], n_docs, "one per document, manifest.json key 'n_docs'")
    t_ptr = pointers(p["t_ptr"], arrays["t_ptr"], nnz)
    t_docs = arrays["t_docs"]
    if postings or not np.can_cast(t_docs.dtype, np.int32, "safe"):  # a narrowing cast would wrap rows into range
        _in_range(p["t_docs"], t_docs, n_docs, "document row")  # (the cast reads every row anyway)
    t_docs = t_docs.astype(np.int32, copy=False)
    if postings and nnz > 1:  # documents strictly ascending within each term's postings
        ok = np.diff(t_docs) > 0
        starts = t_ptr[1:-1]
        ok[starts[(starts > 0) & (starts < nnz)] - 1] = True
        if not ok.all():
            pos = _first(~ok) + 1
            raise KolmValueError(f"{p['t_docs']}: document rows not ascending within a term at position {pos}")
    nonocc = _finite(p["nonocc"], arrays["nonocc"], non_negative=True)
    if method not in ("bm25l", "bm25+") and nonocc.size and (nonocc.min() != 0 or nonocc.max() != 0):
        raise KolmValueError(f"{p['nonocc']}: must be all zero for method {method!r}")
    doc_len = arrays["doc_len"]
    if doc_len.size and int(doc_len.min()) < 0:
        raise KolmValueError(f"{p['doc_len']}: negative document length at position {_first(doc_len < 0)}")
    too_long = np.iinfo(np.int64).max
    if doc_len.size and doc_len.dtype.kind == "u" and int(doc_len.max()) > too_long:  # would wrap in int64
        at = _first(doc_len > too_long)
        raise KolmValueError(f"{p['doc_len']}: document length {int(doc_len[at])} at position {at} is past int64")
    t_w = _finite(p["t_w"], arrays["t_w"], non_negative=True) if postings else arrays["t_w"].astype(np.float32, copy=False)
    return {"t_ptr": t_ptr, "t_docs": t_docs, "t_w": t_w, "nonocc": nonocc, "doc_len": doc_len.astype(np.int64, copy=False)}


def bm25_stats(path: Path, manifest: dict[str, Any]) -> str:
    """Key ``stats`` of a BM25 manifest: ``"own"`` (tf.npy saved), ``"external"`` (a shard) or
    ``"unknown"``; required from version 2, ``"unknown"`` for version 1."""
    if manifest["version"] == 1:
        if "stats" in manifest:
            raise KolmValueError(f"{path}: unknown key 'stats' (version 1)")
        return "unknown"
    if "stats" not in manifest:
        raise KolmValueError(f"{path}: key 'stats' is missing")
    return str(_choice(path, "stats", manifest["stats"], ("own", "external", "unknown")))


def bm25_tf(path: Path, tf: np.ndarray, t_docs: npt.NDArray[np.int32], doc_len: npt.NDArray[np.int64],
            doc_len_name: str = "doc_len.npy") -> npt.NDArray[np.int32]:
    """``tf.npy``: one count >= 1 per posting, summing to each document's length."""
    lengths(path, tf, t_docs.shape[0], "one term frequency per posting: t_docs has as many")
    if tf.size and (int(tf.min()) < 1 or int(tf.max()) > np.iinfo(np.int32).max):
        pos = _first((tf < 1) | (tf > np.iinfo(np.int32).max))
        raise KolmValueError(f"{path}: term frequency {int(tf[pos])} at position {pos} lies outside [1, 2**31)")
    sums = np.bincount(t_docs, weights=tf, minlength=doc_len.shape[0]) if tf.size else np.zeros(doc_len.shape[0])
    bad = sums != doc_len
    if bad.any():
        d = _first(bad)
        raise KolmValueError(f"{path}: term frequencies of document row {d} sum to {int(sums[d])}, "
                             f"but {doc_len_name} gives it {int(doc_len[d])} tokens")
    return tf.astype(np.int32, copy=False)


def bm25_weights(root: Path, names: dict[str, str], arrays: dict[str, np.ndarray], tf: npt.NDArray[np.int32], *,
                 method: str, k1: float, b: float, delta: float, n_threads: int | None = None) -> None:
    """``t_w`` and ``nonocc`` equal, bit for bit, the weights of ``tf`` and ``doc_len`` with the
    index's own statistics (what a build or a merge computes). ``names`` maps each array to its
    file name (for the message)."""
    bad = first_unlike(arrays["t_ptr"], arrays["t_docs"], tf, arrays["doc_len"], arrays["t_w"], arrays["nonocc"],
                       method=method, k1=k1, b=b, delta=delta, n_threads=n_threads)
    if bad is None:
        return
    name, pos, stored, want = bad
    if name == "nonocc":
        raise KolmValueError(f"{root / names['nonocc']}: value at position {pos} is {stored!r}, but the document "
                             f"frequencies give {want!r} ({method}, k1={k1:g}, delta={delta:g})")
    raise KolmValueError(f"{root / names['t_w']}: weight at position {pos} is {stored!r}, but {names['tf']}, "
                         f"{names['doc_len']} and the collection statistics give {want!r} ({method}, k1={k1:g}, "
                         f"b={b:g}); the weights and the counts come from different indexes")


def dense_embeddings(path: Path, emb: np.ndarray, n_docs: int, dim: int, metric: str) -> npt.NDArray[np.float32]:
    """Document embeddings float32 (n_docs, dim), finite; unit or zero rows for ``"cosine"``."""
    if emb.shape != (n_docs, dim):
        raise KolmValueError(f"{path}: has shape {emb.shape}, expected ({n_docs}, {dim}) "
                             f"(manifest.json keys 'n_docs', 'dim')")
    if metric != "cosine":
        return _finite(path, emb)
    with np.errstate(over="ignore", invalid="ignore"):
        out = emb.astype(np.float32, copy=False)
        sq = np.einsum("ij,ij->i", out, out)  # one pass; NaN, infinities and overflow all fail below
    ok = (np.abs(sq - 1.0) <= 1e-3) | (sq == 0)
    if not ok.all():
        row = _first(~ok)
        values = np.asarray(emb[row], dtype=np.float64)
        if not np.isfinite(values).all():
            col = _first(~np.isfinite(values))
            raise KolmValueError(f"{path}: value at position {row}, {col} is {values[col].item()!r}; "
                                 f"values must be finite")
        raise KolmValueError(f"{path}: row {row} has norm {math.sqrt(float(sq[row])):.6g}; "
                             f"a cosine index holds unit (or zero) rows")
    return out


def dense_embeddings_in_blocks(path: Path, emb: np.ndarray, n_docs: int, dim: int, metric: str,
                               n_threads: int | None = None) -> npt.NDArray[np.float32]:
    """:func:`dense_embeddings`, its values read block by block from the file of memory-mapped
    ``emb`` (:func:`kolm_search.retrievers._blocks.check_rows`: no mapped page stays resident);
    positions in errors count from the first row."""
    from kolm_search.retrievers._blocks import check_rows

    if emb.shape != (n_docs, dim):
        raise KolmValueError(f"{path}: has shape {emb.shape}, expected ({n_docs}, {dim}) "
                             f"(manifest.json keys 'n_docs', 'dim')")

    def check(block: np.ndarray, first: int) -> None:
        try:
            dense_embeddings(path, block, len(block), dim, metric)
        except KolmValueError as exc:  # positions of the block, counted from the first row
            message = re.sub(r"(position|row) (\d+)", lambda m: f"{m[1]} {int(m[2]) + first}", str(exc), count=1)
            raise KolmValueError(message) from exc

    check_rows(emb, check, n_threads)
    return emb.astype(np.float32, copy=False)
