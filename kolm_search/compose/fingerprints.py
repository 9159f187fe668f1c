"""Digests that key shared and cached stage outputs: of a stage's parameter values, of a
document table (what an index was built over), of a query batch and of a candidate frame.

A stage's fingerprint (:meth:`kolm_search.compose.Stage.fingerprint`) is its class, its
parameters (each through :func:`value_fingerprint`) and, for an index, :func:`table_digest`
and its revision: equal fingerprints promise equal outputs for equal inputs. An input's
fingerprint is :func:`input_digest` of the batch and the candidates it is given.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from kolm_search.contract.ports import Fingerprinted, implements
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError

__all__ = ["batch_digest", "fingerprints_once", "frame_digest", "input_digest", "node_digest", "table_digest",
           "value_fingerprint"]

#: inside :func:`fingerprints_once`: each object's fingerprint by identity (the object kept, so its id is not reused)
_ONCE: ContextVar[dict[int, tuple[Any, str]] | None] = ContextVar("kolm_search_fingerprints_once", default=None)


@contextmanager
def fingerprints_once() -> Iterator[None]:
    """A block in which :func:`value_fingerprint` asks each object (a stage, a tokenizer ...)
    for its ``fingerprint()`` once: for fingerprinting several pipelines that share stages
    (five ``bm25 % 100 >> r_i`` fingerprint ``bm25 % 100`` once), while none of them changes.
    Nested blocks are the outer one."""
    if _ONCE.get() is not None:
        yield
        return
    token = _ONCE.set({})
    try:
        yield
    finally:
        _ONCE.reset(token)

def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:32]


def table_digest(table: DocumentTable) -> str:
    """A digest of a table's ids and title and content texts (:meth:`DocumentTable.digest`: made
    once per table object; an incremental index rebinds a new table at every change)."""
    return table.digest()


def value_fingerprint(value: Any, *, what: str = "parameter") -> str:
    """A parameter value as a string that changes with it: numbers, strings, None and bools
    by ``repr``; lists, tuples and dicts item by item; a :class:`~kolm_search.contract.ports.Fingerprinted`
    object (a stage, an embedder, a tokenizer ...) by its ``fingerprint()``.

    Raises
    ------
    KolmTypeError
        Any other object (nothing is guessed from its class or attributes).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, (np.integer, np.floating)):
        return repr(value.item())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_fingerprint(v, what=what) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {value_fingerprint(v, what=what)}" for k, v in value.items()) + "}"
    if isinstance(value, np.ndarray):
        return f"array{value.shape}:{_sha(np.ascontiguousarray(value).tobytes())}"
    if implements(value, Fingerprinted):
        once = _ONCE.get()
        known = None if once is None else once.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        found = value.fingerprint()
        if isinstance(found, str) and found:
            if once is not None:
                once[id(value)] = (value, found)
            return found
    raise KolmTypeError(f"{what} {type(value).__name__} declares no fingerprint() (kolm_search.contract.ports.Fingerprinted), "
                        "so outputs that depend on it cannot be shared or cached")


def frame_digest(frame: CandidateFrame | None) -> str:
    """A digest of a frame's entries (``"none"`` for no frame)."""
    if frame is None:
        return "none"
    parts = [np.ascontiguousarray(a).tobytes() for a in (frame.query, frame.doc, frame.rank)]
    parts.append(np.ascontiguousarray(frame.score, dtype=np.float64).tobytes())
    if frame.features is not None:
        parts.append(np.ascontiguousarray(frame.features, dtype=np.float64).tobytes())
    return _sha(str(frame.n_queries).encode(), *parts)


def batch_digest(batch: QueryBatch) -> str:
    """A digest of a batch: its texts, owners, limit, mode, filters and embeddings."""
    texts = "\x1f".join(batch.texts).encode("utf-8", "surrogatepass")
    filters = json.dumps(batch.filters, sort_keys=True, default=str).encode()
    head = f"{batch.n_queries}|{batch.limit}|{batch.mode}".encode()
    emb = b"" if batch.embeddings is None else np.ascontiguousarray(batch.embeddings, np.float32).tobytes()
    return _sha(head, texts, batch.owner.tobytes(), filters, emb)


def input_digest(batch: QueryBatch, candidates: CandidateFrame | None, *, frame_fp: str | None = None,
                 batch_fp: str | None = None) -> str:
    """A digest of what a stage is given: the batch (texts, owners, limit, mode, filters,
    embeddings; ``batch_fp`` when the caller holds :func:`batch_digest` of it) and the
    candidates (``frame_fp`` when the caller knows a key of their entries, e.g. the key of the
    node that made them, else :func:`frame_digest`)."""
    return _sha((batch_fp or batch_digest(batch)).encode(), (frame_fp or frame_digest(candidates)).encode())


def node_digest(stage_fp: str, input_fp: str) -> str:
    """The key of a node's output: its stage and input fingerprints (equal keys, equal outputs)."""
    return "node:" + _sha(stage_fp.encode("utf-8", "surrogatepass"), input_fp.encode())


def describe(name: str, params: Sequence[tuple[str, Any]], *, what: str) -> str:
    """``name(k=fingerprint, ...)`` of a stage's parameters (:func:`value_fingerprint`)."""
    return f"{name}(" + ", ".join(f"{k}={value_fingerprint(v, what=f'{what} {k!r}')}" for k, v in params) + ")"
