"""``CachedEmbedder``: embeddings persisted on disk, keyed by model identity and text hash."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._aio import embed_batch, log, run_blocking

__all__ = ["CachedEmbedder"]


class CachedEmbedder:
    """Wraps an embedder so re-running an experiment re-embeds nothing.

    Vectors are stored in a SQLite file as raw float32 bytes (never pickled), keyed by
    ``sha256(model_id, text)``; SQLite makes concurrent writers (threads, processes) safe.
    An entry of the wrong size is recomputed with a warning.

    Parameters
    ----------
    inner : Embedder
    path : str or Path
        The SQLite file.
    model_id : str, optional
        Identity of the model (default: ``inner.model_id``, else ``repr(inner)``); a different
        model never reads another's vectors.
    """

    def __init__(self, inner: Any, path: str | Path, *, model_id: str | None = None, logger: Any = None) -> None:
        self.inner = inner
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.model_id = model_id or str(getattr(inner, "model_id", repr(inner)))
        self.logger = logger or logging.getLogger("kolm_search.cache")
        self.hits = 0
        self.misses = 0
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, vec BLOB NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60, isolation_level=None)

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model_id}\x00{text}".encode()).hexdigest()

    async def _compute(self, texts: list[str]) -> npt.NDArray[np.float32]:
        result: npt.NDArray[np.float32] = await embed_batch(self.inner, texts)
        return result

    async def embed_many_async(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of ``texts`` (float32 (n, d)), computing only the missing ones."""
        texts = list(texts)
        keys = [self._key(t) for t in texts]
        found: dict[str, npt.NDArray[np.float32]] = {}
        db = self._connect()
        try:
            for start in range(0, len(keys), 500):
                chunk = list(dict.fromkeys(keys[start:start + 500]))
                rows = db.execute(f"SELECT key, dim, vec FROM emb WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                for key, dim, blob in rows:
                    ok_size = isinstance(blob, bytes) and len(blob) == 4 * int(dim) and dim > 0
                    vec = np.frombuffer(blob, dtype=np.float32) if ok_size else np.zeros(0, np.float32)
                    if not ok_size or not np.all(np.isfinite(vec)):
                        log(self.logger, "warning", f"corrupt cached embedding {key[:12]}… recomputed")
                        continue
                    found[key] = vec
            todo = [i for i, k in enumerate(keys) if k not in found]
            first_of: dict[str, int] = {}
            for i in todo:
                first_of.setdefault(keys[i], i)
            if first_of:
                idx = list(first_of.values())
                fresh = await self._compute([texts[i] for i in idx])
                db.execute("BEGIN")
                for i, vec in zip(idx, fresh, strict=True):
                    db.execute("INSERT OR REPLACE INTO emb (key, dim, vec) VALUES (?, ?, ?)",
                               (keys[i], int(vec.size), np.ascontiguousarray(vec, dtype=np.float32).tobytes()))
                    found[keys[i]] = vec
                db.execute("COMMIT")
            self.hits += len(texts) - len(todo)
            self.misses += len(todo)
        finally:
            db.close()
        return np.stack([found[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return run_blocking(self.embed_many_async(texts))

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_many([text])[0]

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.model_id!r}, {str(self.path)!r})"
