"""Saving and loading a dense retriever's faiss index, beside its embeddings.

The faiss index goes in the retriever's save (:func:`kolm_search.retrievers._persist.save_index`,
all or nothing under the manifest's generation) as two files: ``ann.<generation>.npy`` (uint8,
``faiss.serialize_index``) and ``ann_live.<generation>.npy`` (uint8 (n_slots,), 1 for a live
slot), and the manifest's key ``ann``::

    {"index": "hnsw", "given": {...}, "factory": "HNSW32,Flat", "params": {...},
     "faiss_version": "1.15.1", "structure": {"class": "IndexHNSWFlat", "dim": 384, "metric": 0,
                                              "ntotal": 100000, "hnsw_m0": 64}}

A load checks, before faiss reads a byte: the key's fields and types; the faiss version (a
serialised index of another faiss version is refused: rebuild it); the live mask (0/1, as
many live slots as the manifest's ``n_docs``). Then after ``faiss.deserialize_index``: the
index's :func:`~kolm_search.retrievers.ann_spec.describe` equals ``structure``, its vector count
the live mask's length, its dimension the embeddings', and the parameters rebuild the factory
string and the structure of an empty index of it. A mismatch is a ``KolmValueError`` naming
the file and the field. (The files' sha256 is checked against the manifest first, as for
every saved file; deserialising trusts faiss's reader with bytes that passed it.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kolm_search.errors import KolmValueError
from kolm_search.retrievers._saved import SavedFiles
from kolm_search.retrievers._validate import check_keys
from kolm_search.retrievers.ann import AnnIndex, set_search_parameters
from kolm_search.retrievers.ann_spec import AnnSpec, describe, faiss_module, resolve

__all__ = ["ann_arrays", "ann_meta", "load_ann"]

_KEYS = ("index", "given", "factory", "params", "faiss_version", "structure")


def ann_meta(spec: AnnSpec, ann: AnnIndex | None) -> dict[str, Any]:
    """The manifest's key ``ann`` (``factory``, ``params`` and ``structure`` empty while no index is built)."""
    use = spec if ann is None else ann.spec
    return {"index": use.index, "given": dict(use.given), "factory": use.factory, "params": dict(use.params or {}),
            "faiss_version": faiss_module().__version__, "structure": {} if ann is None else describe(ann.index)}


def ann_arrays(ann: AnnIndex | None) -> dict[str, np.ndarray]:
    """The files ``ann`` and ``ann_live`` (none while no index is built)."""
    if ann is None:
        return {}
    return {"ann": faiss_module().serialize_index(ann.index), "ann_live": ann.live.astype(np.uint8)}


def _ints(where: Path, key: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or not all(type(v) is int and v > 0 for v in value.values()):
        raise KolmValueError(f"{where}: key {key!r} must be an object of positive integers, got {str(value)[:80]}")
    return value


def load_ann(files: SavedFiles, value: Any, n_docs: int, dim: int) -> tuple[AnnSpec, AnnIndex | None]:
    """The spec and faiss index of the manifest's key ``ann`` (``value``) and its files, checked
    (module docstring); ``n_docs`` and ``dim`` are the manifest's."""
    where = files.where
    body = check_keys(where, "ann", value, _KEYS)
    faiss = faiss_module()
    if not isinstance(body["index"], str) or not isinstance(body["factory"], str):
        raise KolmValueError(f"{where}: keys 'ann.index' and 'ann.factory' must be strings")
    try:
        spec = AnnSpec.of(body["index"], _ints(where, "ann.given", body["given"]))
    except (KolmValueError, TypeError, ValueError) as exc:
        raise KolmValueError(f"{where}: key 'ann': {exc}") from exc
    params = _ints(where, "ann.params", body["params"])
    if body["faiss_version"] != faiss.__version__:
        raise KolmValueError(f"{where}: key 'ann.faiss_version': the faiss index was saved by faiss "
                             f"{body['faiss_version']!r}, this is faiss {faiss.__version__}; rebuild the index "
                             f"(DenseRetriever(..., index={spec.index!r})) or install that faiss")
    structure = body["structure"]
    if not isinstance(structure, dict):
        raise KolmValueError(f"{where}: key 'ann.structure' must be an object")
    if not files.has("ann"):
        if n_docs:
            raise KolmValueError(f"{where}: key 'files.ann' is missing ({n_docs} documents need their faiss index)")
        return spec, None
    if n_docs and not params:
        raise KolmValueError(f"{where}: key 'ann.params' is empty")
    if spec.kind == "factory" and body["factory"] != spec.index:
        raise KolmValueError(f"{where}: key 'ann.factory' is {body['factory']!r}, not key 'ann.index' {spec.index!r}")
    if spec.kind != "factory":  # the named kinds' factory strings follow from their parameters
        factory, full = resolve(spec.index, params, params.get("train_size", 1), dim)
        if factory != body["factory"] or full != params:
            raise KolmValueError(f"{where}: key 'ann.factory' is {body['factory']!r}; its parameters "
                                 f"{params} make {factory!r}")
    live_path = files.path("ann_live", "npy")
    live = files.array("ann_live", "int", 1, mmap=False)
    if live.dtype != np.uint8 or (len(live) and int(live.max()) > 1) or int(live.sum()) != n_docs:
        raise KolmValueError(f"{live_path}: must be uint8 0/1 with {n_docs} live slots (manifest key 'n_docs'), "
                             f"got {live.dtype} with {int(live.sum()) if live.dtype.kind in 'iu' else '?'}")
    ann_path = files.path("ann", "npy")
    blob = files.array("ann", "int", 1, mmap=False)
    if blob.dtype != np.uint8:
        raise KolmValueError(f"{ann_path}: must be uint8 (a serialised faiss index), got {blob.dtype}")
    try:
        index = faiss.deserialize_index(blob)
    except RuntimeError as exc:
        raise KolmValueError(f"{ann_path}: not a faiss index faiss {faiss.__version__} reads: {exc}") from exc
    got = describe(index)
    expected = {**structure}
    for key, want, what in (("ntotal", len(live), f"{ann_path.name}'s slots ({live_path.name})"),
                            ("dim", dim, "manifest key 'dim'"),
                            ("metric", int(faiss.METRIC_INNER_PRODUCT), "inner product")):
        if got.get(key) != want:
            raise KolmValueError(f"{ann_path}: the faiss index has {key} {got.get(key)!r}, expected {want!r} ({what})")
    if got != expected:
        diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
        raise KolmValueError(f"{ann_path}: the faiss index's {diff[0]} is {got.get(diff[0])!r}; manifest key "
                             f"'ann.structure.{diff[0]}' says {expected.get(diff[0])!r}")
    try:
        empty = describe(faiss.index_factory(dim, body["factory"], faiss.METRIC_INNER_PRODUCT))
    except RuntimeError as exc:
        raise KolmValueError(f"{where}: key 'ann.factory' {body['factory']!r} is not a faiss factory string") from exc
    if {**empty, "ntotal": got["ntotal"]} != got:
        raise KolmValueError(f"{ann_path}: the faiss index is not one of factory {body['factory']!r} "
                             f"(manifest key 'ann.factory')")
    set_search_parameters(index, params)
    return spec, AnnIndex(AnnSpec(spec.index, spec.given, body["factory"], params), index, live.astype(bool))
