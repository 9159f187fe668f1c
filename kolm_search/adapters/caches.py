"""``CacheStore`` adapters: an in-memory LRU with TTL, and SQLite (JSON values, no pickle)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from kolm_search._aio import log
from kolm_search.errors import KolmValueError

__all__ = ["InMemoryCache", "SqliteCache"]


class InMemoryCache:
    """LRU-bounded in-memory cache with per-entry TTL.

    Parameters
    ----------
    max_entries : int, default 1024
        Least recently used entries are evicted beyond this.
    ttl_seconds : float, optional
        Default TTL when ``set`` gives none (``None``: no expiry).
    clock : callable, optional
        Returns seconds (monotonic); injectable for tests.

    Safe under concurrent async use (operations are atomic) and across threads (a lock).
    """

    def __init__(self, max_entries: int = 1024, ttl_seconds: float | None = None, *, clock: Any = time.monotonic) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise KolmValueError(f"max_entries must be a positive int, got {max_entries!r}")
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._data: OrderedDict[str, tuple[float | None, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            expires, value = item
            if expires is not None and self._clock() >= expires:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
        ttl = self.ttl_seconds if ttl_seconds is None else ttl_seconds
        expires = None if ttl is None else self._clock() + float(ttl)
        with self._lock:
            self._data[key] = (expires, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class SqliteCache:
    """Persistent cache in a SQLite file: JSON values, TTL, survives restarts.

    A connection per operation keeps it safe under concurrent writers (threads or
    processes); a row that does not decode is treated as a miss, logged, and deleted.

    Parameters
    ----------
    path : str or Path
    ttl_seconds : float, optional
        Default TTL when ``set`` gives none.
    logger : Logger, optional
    """

    def __init__(self, path: str | Path, ttl_seconds: float | None = None, *, logger: Any = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ttl_seconds = ttl_seconds
        self.logger = logger or logging.getLogger("kolm_search.cache")
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def get(self, key: str) -> Any | None:
        db = self._connect()
        try:
            row = db.execute("SELECT value, expires FROM cache WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            value, expires = row
            if expires is not None and time.time() >= expires:
                db.execute("DELETE FROM cache WHERE key = ?", (key,))
                return None
            try:
                return json.loads(value)
            except (TypeError, ValueError) as exc:
                log(self.logger, "warning", f"corrupt cache row {key!r} ignored and removed", exc)
                db.execute("DELETE FROM cache WHERE key = ?", (key,))
                return None
        finally:
            db.close()

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
        ttl = self.ttl_seconds if ttl_seconds is None else ttl_seconds
        body = json.dumps(value, ensure_ascii=False, allow_nan=False)
        db = self._connect()
        try:
            db.execute("INSERT OR REPLACE INTO cache (key, value, expires) VALUES (?, ?, ?)",
                       (key, body, None if ttl is None else time.time() + float(ttl)))
        finally:
            db.close()

    def __repr__(self) -> str:
        return f"SqliteCache({str(self.path)!r})"
