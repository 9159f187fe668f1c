"""Float32 vectors by key in one SQLite table, every row checked: the store under the embedding
cache (:class:`~kolm_search.adapters.CachedEmbedder`) and the score cache
(:class:`~kolm_search.adapters.ScoreCache`).

A row holds the vector as raw little-endian float32 bytes (never pickled), its length and a
keyed BLAKE2b digest of both. A row that fails a check (size, digest, finite values) is
reported with a warning and treated as absent, so its caller computes it again; the file
itself is kept usable by :class:`~kolm_search.adapters._sqlite.SqliteTable` (a corrupt file is
moved aside and rebuilt, every lock wait bounded). Writes are one transaction each
(``BEGIN IMMEDIATE``), so processes writing one file concurrently lose nothing.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._logging import log
from kolm_search.adapters._sqlite import OnCorrupt, SqliteTable

__all__ = ["VectorStore"]

_CHUNK = 500  # keys per SELECT (SQLite's default limit on bound parameters is far above)


class VectorStore:
    """Vectors by key in table ``name`` of the SQLite file ``path``.

    Parameters
    ----------
    path : Path
    name : str
        The table (``"emb"``, ``"scores"``).
    what : str
        What the file is, for messages.
    stage : str
        The pipeline stage a lock timeout names.
    on_corrupt, timeout, logger
        As :class:`~kolm_search.adapters._sqlite.SqliteTable`.
    """

    def __init__(self, path: Path, *, name: str, what: str, stage: str, on_corrupt: OnCorrupt, timeout: float,
                 logger: Any) -> None:
        self.path, self.name, self.what, self.stage, self.logger = path, name, what, stage, logger
        self.table = SqliteTable(
            path, name=name, columns=[("key", "TEXT"), ("dim", "INTEGER"), ("vec", "BLOB"), ("digest", "BLOB")],
            create=f"CREATE TABLE IF NOT EXISTS {name} (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, "
                   f"vec BLOB NOT NULL, digest BLOB NOT NULL)",
            what=what, on_corrupt=on_corrupt, timeout=timeout, logger=logger, stage=stage)

    @staticmethod
    def _digest(key: str, dim: int, blob: bytes) -> bytes:
        digest = hashlib.blake2b(f"{key}:{dim}:".encode(), digest_size=16)
        digest.update(blob)
        return digest.digest()

    def _vector(self, key: str, dim: Any, blob: Any, digest: Any) -> npt.NDArray[np.float32] | None:
        """The stored vector float32 (dim,), or None (with a warning) when the row fails a check."""
        ok = (isinstance(dim, int) and dim > 0 and isinstance(blob, bytes) and len(blob) == 4 * dim
              and isinstance(digest, bytes) and digest == self._digest(key, dim, blob))
        vec = np.frombuffer(blob, dtype="<f4").astype(np.float32) if ok else None
        if vec is None or not np.all(np.isfinite(vec)):
            log(self.logger, "warning", f"corrupt entry {key[:12]}… of the {self.what} {str(self.path)!r} "
                                        "ignored (it is computed again)")
            return None
        return vec

    def get(self, keys: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """The stored vectors of ``keys`` that pass their checks (absent keys are left out)."""
        keys = list(dict.fromkeys(keys))

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start:start + _CHUNK]
                rows.extend(db.execute(f"SELECT key, dim, vec, digest FROM {self.name} WHERE key IN "
                                       f"({','.join('?' * len(chunk))})", chunk))
            return rows

        found = {}
        if keys:
            for key, dim, blob, digest in self.table.run(read, stage=self.stage):
                vec = self._vector(key, dim, blob, digest)
                if vec is not None:
                    found[key] = vec
        return found

    def put(self, entries: Mapping[str, npt.NDArray[np.floating[Any]]]) -> None:
        """Store ``entries`` (key -> 1-D vector) in one transaction, replacing rows of those keys."""
        records = []
        for key, vec in entries.items():
            arr = np.ascontiguousarray(vec, dtype="<f4").ravel()
            blob = arr.tobytes()
            records.append((key, int(arr.size), blob, self._digest(key, int(arr.size), blob)))
        if not records:
            return

        def write(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(f"INSERT OR REPLACE INTO {self.name} (key, dim, vec, digest) VALUES (?, ?, ?, ?)",
                               records)
                db.execute("COMMIT")
            except BaseException:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:  # SQLite rolled back already: keep the original error
                    pass
                raise

        self.table.run(write, stage=self.stage)

    def __len__(self) -> int:
        return int(self.table.run(lambda db: db.execute(f"SELECT COUNT(*) FROM {self.name}").fetchone()[0],
                                  stage=self.stage))
