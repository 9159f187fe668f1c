"""``CacheStore`` adapters: an in-memory LRU with TTL, and SQLite (JSON values, no pickle)."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import cachetools

from kolm_search._logging import log
from kolm_search._params import positive_int, real
from kolm_search.adapters._sqlite import OnCorrupt, SqliteTable
from kolm_search.errors import PIPELINE_STAGES

__all__ = ["InMemoryCache", "SqliteCache"]


def _ttl(value: Any) -> float | None:
    """A TTL in seconds (None: no expiry); NaN, bools and non-numbers are refused (a NaN expiry
    would never compare as reached)."""
    ttl: float | None = real("ttl_seconds", value, none=True, finite=False)
    return ttl


class InMemoryCache:
    """LRU-bounded in-memory cache with per-entry TTL (``cachetools.TLRUCache`` under a lock).

    Parameters
    ----------
    max_entries : int, default 1024
        Least recently used entries are evicted beyond this.
    ttl_seconds : float, optional
        Default TTL when ``set`` gives none (``None``: no expiry).
    clock : callable, optional
        Returns seconds (monotonic); injectable for tests.

    Safe under concurrent async use (operations are atomic) and across threads (a lock). A
    :class:`~kolm_search.contract.ports.NonBlockingCache`: the pipeline calls it inline.
    """

    def __init__(self, max_entries: int = 1024, ttl_seconds: float | None = None, *, clock: Any = time.monotonic) -> None:
        self.max_entries = positive_int("max_entries", max_entries)
        self.ttl_seconds = _ttl(ttl_seconds)
        self._data: cachetools.TLRUCache[str, tuple[Any, float | None]] = cachetools.TLRUCache(
            self.max_entries, ttu=_expiry, timer=clock)
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            item = self._data.get(key)  # a hit becomes the most recently used
            if item is None:
                try:
                    del self._data[key]  # an expired entry goes now (TLRUCache raises KeyError after)
                except KeyError:
                    pass
                return None
            return item[0]

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
        ttl = self.ttl_seconds if ttl_seconds is None else _ttl(ttl_seconds)
        with self._lock:
            self._data[key] = (value, ttl)

    # memory only, one lock held for a dict update: a NonBlockingCache (called inline, no thread)
    get_nowait = get
    set_nowait = set

    def __len__(self) -> int:
        """Entries held, as before cachetools: an expired one counts until a read of its key or
        a write drops it (``TLRUCache``'s own ``len`` drops every expired entry first)."""
        with self._lock:
            return cachetools.Cache.__len__(self._data)


def _expiry(key: str, item: tuple[Any, float | None], now: float) -> float:
    """When an entry expires: ``now`` plus its TTL (never without one)."""
    return math.inf if item[1] is None else now + item[1]


class SqliteCache:
    """Persistent cache in a SQLite file: JSON values, TTL, survives restarts.

    A connection per operation keeps it safe under concurrent writers (threads or
    processes). Values are JSON text (never pickled); a row that does not decode, or whose
    expiry is not a number, is treated as a miss, logged, and deleted. A file that is not this
    cache's SQLite table (corrupt, truncated, another database) is moved aside to
    ``<name>.corrupt-<timestamp>`` with a warning and rebuilt empty, or raises
    :class:`~kolm_search.errors.KolmValueError` naming it under ``on_corrupt="raise"``; a file
    deleted while in use is recreated. A lock held by another writer for more than
    ``timeout`` seconds raises :class:`~kolm_search.errors.SearchError` (``cache.get`` or
    ``cache.set``) naming the file.

    Parameters
    ----------
    path : str or Path
    ttl_seconds : float, optional
        Default TTL when ``set`` gives none.
    logger : Logger, optional
    on_corrupt : {"rebuild", "raise"}, default "rebuild"
    timeout : float, default 30
        Seconds to wait for another connection's lock.
    """

    def __init__(self, path: str | Path, ttl_seconds: float | None = None, *, logger: Any = None,
                 on_corrupt: OnCorrupt = "rebuild", timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.ttl_seconds = _ttl(ttl_seconds)
        self.logger = logger or logging.getLogger("kolm_search.cache")
        self._table = SqliteTable(
            self.path, name="cache", columns=[("key", "TEXT"), ("value", "TEXT"), ("expires", "REAL")],
            create="CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL)",
            what="cache file", on_corrupt=on_corrupt, timeout=timeout, logger=self.logger,
            stage=PIPELINE_STAGES.CACHE_SET)

    def get(self, key: str) -> Any | None:
        def read(db: sqlite3.Connection) -> Any | None:
            row = db.execute("SELECT value, expires FROM cache WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            value, expires = row
            try:
                if expires is not None and not isinstance(expires, (int, float)):
                    raise TypeError(f"expiry {expires!r} is not a number")
                if expires is not None and time.time() >= expires:
                    db.execute("DELETE FROM cache WHERE key = ?", (key,))
                    return None
                return json.loads(value)
            except (TypeError, ValueError, RecursionError) as exc:
                log(self.logger, "warning", f"corrupt row {key!r} of {self} ignored and removed", exc)
                db.execute("DELETE FROM cache WHERE key = ?", (key,))
                return None

        return self._table.run(read, stage=PIPELINE_STAGES.CACHE_GET)

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
        ttl = self.ttl_seconds if ttl_seconds is None else _ttl(ttl_seconds)
        body = json.dumps(value, allow_nan=False)  # ASCII: a lone surrogate is escaped, not unencodable
        row = (key, body, None if ttl is None else time.time() + ttl)
        self._table.run(lambda db: db.execute("INSERT OR REPLACE INTO cache (key, value, expires) VALUES (?, ?, ?)",
                                              row), stage=PIPELINE_STAGES.CACHE_SET)

    def __repr__(self) -> str:
        return f"SqliteCache({str(self.path)!r})"
