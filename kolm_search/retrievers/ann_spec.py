"""What an approximate dense index is: its faiss factory string and parameters, resolved for a
corpus, and how a faiss index is described (to check a saved one against its manifest).

``DenseRetriever(index=...)`` takes ``"exact"`` (no faiss index), one of the named kinds below,
or any faiss factory string (``"IVF256,SQ8"``, ``"HNSW16,Flat"``, ...). Named kinds and their
parameters (``None``: chosen from the corpus when the index is built):

=========  ==============================  ====================================================
kind       faiss index                     parameters (defaults)
=========  ==============================  ====================================================
hnsw       ``HNSW{m},Flat``                ``m`` 32, ``ef_construction`` 100, ``ef_search`` 256
ivf        ``IVF{nlist},Flat``             ``nlist`` ~ 4 sqrt(n), ``nprobe`` nlist / 128 (>= 16)
ivfpq      ``IVF{nlist},PQ{pq_m}x{bits}``  ``nlist``, ``nprobe`` as ivf; ``pq_m`` d / 8 (a
                                           divisor of d), ``rerank`` 16
=========  ==============================  ====================================================

Every kind also takes ``train_size`` (vectors sampled to train, default ``max(40 nlist,
16384)``, at most n) and ``rerank`` (faiss returns ``rerank * k`` candidates, re-scored exactly
from the stored embeddings; default 1, 16 for ivfpq whose codes are lossy). A factory string
takes ``nprobe``, ``ef_search``, ``ef_construction``, ``rerank`` and ``train_size``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kolm_search._extras import require
from kolm_search._params import positive_int
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["AnnSpec", "KINDS", "describe", "faiss_module", "resolve"]

KINDS = ("hnsw", "ivf", "ivfpq")
_ALLOWED: dict[str, tuple[str, ...]] = {
    "hnsw": ("m", "ef_construction", "ef_search", "rerank", "train_size"),
    "ivf": ("nlist", "nprobe", "rerank", "train_size"),
    "ivfpq": ("nlist", "nprobe", "pq_m", "rerank", "train_size"),
    "factory": ("nprobe", "ef_search", "ef_construction", "rerank", "train_size"),
}
_MIN_TRAIN = 16384  # PQ's 256 centroids per sub-quantizer want ~39 points each


def faiss_module() -> Any:
    """faiss, or an ``ImportError`` naming the extra ``ann``."""
    return require("faiss", "ann")


@dataclass(frozen=True)
class AnnSpec:
    """An approximate index as asked for and as built.

    Attributes
    ----------
    index : str
        What ``DenseRetriever(index=...)`` was given: a kind of :data:`KINDS` or a factory string.
    given : dict of str -> int
        The parameters given (checked; those not given are chosen by :func:`resolve`).
    factory : str
        The faiss factory string built ("" until resolved for a corpus).
    params : dict of str -> int
        Every parameter, resolved (empty until resolved).
    """

    index: str
    given: dict[str, int]
    factory: str = ""
    params: Mapping[str, int] | None = None

    @classmethod
    def of(cls, index: str, params: Mapping[str, Any]) -> AnnSpec:
        """Checked ``index`` and search parameters (``KolmValueError`` naming a bad one)."""
        if not isinstance(index, str) or not index.strip():
            raise KolmTypeError(f"index must be 'exact', one of {KINDS} or a faiss factory string, got {index!r}")
        kind = index if index in KINDS else "factory"
        unknown = sorted(set(params) - set(_ALLOWED[kind]))
        if unknown:
            raise KolmValueError(f"index={index!r} takes the parameters {', '.join(_ALLOWED[kind])}; "
                                 f"got {unknown[0]!r}")
        given = {name: positive_int(name, value) for name, value in params.items()}
        return cls(index, given)

    @property
    def kind(self) -> str:
        return self.index if self.index in KINDS else "factory"

    def resolved(self, n: int, d: int) -> AnnSpec:
        """This spec's factory string and every parameter for ``n`` vectors of dimension ``d``."""
        factory, params = resolve(self.index, self.given, n, d)
        return AnnSpec(self.index, dict(self.given), factory, params)


def _largest_divisor(d: int, at_most: int) -> int:
    return max(q for q in range(1, max(1, at_most) + 1) if d % q == 0)


def resolve(index: str, given: Mapping[str, int], n: int, d: int) -> tuple[str, dict[str, int]]:
    """The factory string and every parameter of ``index`` for ``n`` vectors of dimension ``d``."""
    p = dict(given)
    kind = index if index in KINDS else "factory"
    if kind == "hnsw":
        p.setdefault("m", 32)
        p.setdefault("ef_construction", 100)
        p.setdefault("ef_search", 256)
        factory = f"HNSW{p['m']},Flat"
    elif kind in ("ivf", "ivfpq"):
        p.setdefault("nlist", max(1, min(round(4 * math.sqrt(n)), n // 40)))
        p.setdefault("nprobe", min(p["nlist"], max(16, p["nlist"] // 128)))
        factory = f"IVF{p['nlist']},Flat"
        if kind == "ivfpq":
            p.setdefault("pq_m", _largest_divisor(d, d // 8))
            if d % p["pq_m"]:
                raise KolmValueError(f"index='ivfpq': pq_m={p['pq_m']} must divide the dimension {d}")
            bits = max(1, min(8, int(math.log2(max(2, min(n, p.get("train_size", n)) // 39)))))
            factory = f"IVF{p['nlist']},PQ{p['pq_m']}x{bits}"
            p.setdefault("rerank", 16)  # 4 reaches recall@100 0.96 at 100k but 0.81 at 1M (bench_ann.py)
    else:
        factory = index
    p.setdefault("rerank", 1)
    nlist = p.get("nlist", 0)
    p.setdefault("train_size", max(40 * nlist, _MIN_TRAIN))
    p["train_size"] = min(p["train_size"], n)
    return factory, p


def describe(index: Any) -> dict[str, Any]:
    """What a faiss index is, as JSON values: its class, dimension, metric, vector count and
    structure (``nlist`` of an IVF index, ``pq_m``/``pq_bits`` of a PQ one, ``hnsw_m0`` (neighbours on level 0) of
    HNSW), the values a saved index's manifest must match."""
    faiss = faiss_module()
    top = faiss.downcast_index(index)
    out: dict[str, Any] = {"class": type(top).__name__, "dim": int(index.d), "metric": int(index.metric_type),
                           "ntotal": int(index.ntotal)}
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        out["nlist"] = int(ivf.nlist)
        ivf = faiss.downcast_index(ivf)
        if isinstance(ivf, faiss.IndexIVFPQ):
            out["pq_m"], out["pq_bits"] = int(ivf.pq.M), int(ivf.pq.nbits)
    if isinstance(top, faiss.IndexHNSW):
        out["hnsw_m0"] = int(faiss.vector_to_array(top.hnsw.cum_nneighbor_per_level)[1])
    return out
