"""What a re-ranking score is stored under, and what a store of them does.

The keys (:func:`pair_keys`, :func:`window_key`) hold the reranker's fingerprint, the query text
and each document by id and :func:`document_digest` (everything a reranker is given but the
incoming score). :class:`ScoreStore` is what the rerankers behind a cache call;
:class:`~kolm_search.adapters.ScoreCache` is the SQLite one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kolm_search.types import SearchDocument

__all__ = ["ScoreStore", "document_digest", "pair_keys", "window_key"]


def document_digest(doc: SearchDocument) -> str:
    """A digest of everything a reranker sees of ``doc`` but its score (hex, 32 digits)."""
    fields = [doc.id, doc.content, doc.title, doc.source, doc.tags, doc.metadata]
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def pair_keys(fingerprint: str, pairs: Sequence[tuple[str, SearchDocument]]) -> list[str]:
    """The key of each (query, document) pair scored by the reranker ``fingerprint``."""
    return [_key("pair", fingerprint, query, doc.id, document_digest(doc)) for query, doc in pairs]


def window_key(fingerprint: str, query: str, docs: Sequence[SearchDocument]) -> str:
    """The key of a window: its documents, in their order, ranked for ``query``."""
    return _key("window", fingerprint, query, *(f"{d.id}\x01{document_digest(d)}" for d in docs))


@runtime_checkable
class ScoreStore(Protocol):
    """Scores by key: ``get(keys)`` the stored ones (float32 arrays; absent keys left out),
    ``put(entries)`` stores more."""

    def get(self, keys: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]: ...

    def put(self, entries: Mapping[str, npt.NDArray[np.floating[Any]]]) -> None: ...
