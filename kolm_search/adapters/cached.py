"""``CachedEmbedder``: embeddings persisted on disk, keyed by model identity and text hash."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._bridge import inline, off_loop, run_sync
from kolm_search._logging import log
from kolm_search.adapters._sqlite import OnCorrupt
from kolm_search.adapters._vectorstore import VectorStore
from kolm_search.contract.port_calls import embed_all, fingerprint_of
from kolm_search.contract.ports import Fingerprinted, implements
from kolm_search.errors import PIPELINE_STAGES

__all__ = ["CachedEmbedder"]


class CachedEmbedder:
    """Wraps an embedder so re-running an experiment re-embeds nothing.

    Vectors are stored in a SQLite file as raw float32 bytes (never pickled) with their
    dimension and a keyed BLAKE2b digest, keyed by ``sha256(model_id, text)``; SQLite makes
    concurrent writers (threads, processes) safe. An entry that fails its checks (size,
    digest, finite values, the dimension of the other vectors) is recomputed with a warning,
    never returned. A file that is not this store (corrupt, truncated, another database, an
    older layout) is moved aside to ``<name>.corrupt-<timestamp>`` with a warning and rebuilt,
    or raises :class:`~kolm_search.errors.KolmValueError` naming it under
    ``on_corrupt="raise"``; a file deleted while in use is recreated; a lock held by another
    writer past ``timeout`` raises :class:`~kolm_search.errors.SearchError` (``embedder``).

    Parameters
    ----------
    inner : Embedder
    path : str or Path
        The SQLite file.
    model_id : str, optional
        Identity of the model (default: ``inner.fingerprint()`` when the embedder declares one,
        :class:`~kolm_search.contract.ports.Fingerprinted`: the built-in embedders do, from their weights
        and settings; else ``repr(inner)``); a different model never reads another's vectors.
    on_corrupt : {"rebuild", "raise"}, default "rebuild"
    timeout : float, default 60
        Seconds to wait for another connection's lock.
    """

    def __init__(self, inner: Any, path: str | Path, *, model_id: str | None = None, logger: Any = None,
                 on_corrupt: OnCorrupt = "rebuild", timeout: float = 60.0) -> None:
        self.inner = inner
        self.path = Path(path)
        self.model_id = model_id or (fingerprint_of(inner, what="embedder") if implements(inner, Fingerprinted)
                                     else repr(inner))
        self.logger = logger or logging.getLogger("kolm_search.cache")
        self.hits = 0
        self.misses = 0
        self._store = VectorStore(self.path, name="emb", what="embedding cache", stage=PIPELINE_STAGES.EMBEDDER,
                                  on_corrupt=on_corrupt, timeout=timeout, logger=self.logger)

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model_id}\x00{text}".encode("utf-8", "surrogatepass")).hexdigest()

    def _read(self, keys: list[str]) -> dict[str, npt.NDArray[np.float32]]:
        return self._store.get(keys)

    def _write(self, rows: list[tuple[str, npt.NDArray[np.float32]]]) -> None:
        self._store.put(dict(rows))

    def _compute(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return run_sync(embed_all(self.inner, texts, call=inline))

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts`` (float32 (n, d)), computing only the missing ones."""
        texts = list(texts)
        keys = [self._key(t) for t in texts]
        found = self._read(list(dict.fromkeys(keys)))
        first_of: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in found:
                first_of.setdefault(k, i)
        if first_of:
            idx = list(first_of.values())
            fresh = self._compute([texts[i] for i in idx])
            self._write([(keys[i], vec) for i, vec in zip(idx, fresh, strict=True)])
            found.update((keys[i], vec) for i, vec in zip(idx, fresh, strict=True))
        if len({v.shape for v in found.values()}) > 1:  # stored by another version of the model
            log(self.logger, "warning", f"cached embeddings in {str(self.path)!r} differ in dimension; recomputed")
            fresh = self._compute(list(dict.fromkeys(texts)))
            found = dict(zip([self._key(t) for t in dict.fromkeys(texts)], fresh, strict=True))
            self._write(list(found.items()))
            first_of = dict.fromkeys(keys, 0)
        misses = sum(1 for k in keys if k in first_of)
        self.hits += len(keys) - misses
        self.misses += misses
        return np.stack([found[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)

    async def embed_many_async(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`embed_many` without blocking the event loop (the file and a sync model are read
        on a worker thread)."""
        result: npt.NDArray[np.float32] = await off_loop(self.embed_many, texts)
        return result

    #: The blocking :meth:`embed_many` under the explicit name.
    embed_many_sync = embed_many

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_many([text])[0]

    def fingerprint(self) -> str:
        """The wrapped embedder's (the cache changes no vector); a :class:`KolmTypeError` when
        it declares none (:func:`kolm_search.contract.port_calls.fingerprint_of`)."""
        return fingerprint_of(self.inner, what="embedder")

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.model_id!r}, {str(self.path)!r})"
