"""One SQLite table in one file, kept usable: a corrupt file moved aside and rebuilt, a deleted
file recreated, every lock wait bounded.

Both persistent stores (:class:`~kolm_search.adapters.SqliteCache` and
:class:`~kolm_search.adapters.CachedEmbedder`) hold data that can be computed again, so a file
that is not the expected SQLite table (random bytes, a truncated file, another program's
database, an older schema) is by default renamed ``<name>.corrupt-<timestamp>`` with a warning
naming both paths, and an empty table takes its place; ``on_corrupt="raise"`` raises
:class:`~kolm_search.errors.KolmValueError` naming the file instead. Nothing is deleted.

A connection is opened per operation (safe across threads and processes); SQLite's busy
timeout bounds every wait for another writer, and a wait past it is a
:class:`~kolm_search.errors.SearchError` of the caller's stage naming the file, never a bare
``database is locked``; any other SQLite failure (a folder where the file should be, a full
disk) is a :class:`~kolm_search.errors.KolmValueError` naming the file.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from kolm_search._logging import log
from kolm_search._params import one_of, real
from kolm_search.errors import KolmValueError, SearchError

__all__ = ["OnCorrupt", "SqliteTable"]

OnCorrupt = Literal["rebuild", "raise"]
T = TypeVar("T")
_SIDE_FILES = ("-journal", "-wal", "-shm")


class SqliteTable:
    """A file holding one table ``name`` with exactly ``columns`` (``[(name, declared type)]``).

    Parameters
    ----------
    path : Path
    name : str
        The table.
    columns : list of (str, str)
        Column names and declared types, in order; ``create`` must make exactly these.
    create : str
        The ``CREATE TABLE IF NOT EXISTS`` statement.
    what : str
        What the file is, for messages (``"response cache"``).
    on_corrupt : {"rebuild", "raise"}
    timeout : float
        Seconds to wait for another connection's lock before failing.
    logger : Logger port
    stage : str
        The pipeline stage a lock timeout names while opening (``cache.set``, ``embedder``).
    """

    def __init__(self, path: Path, *, name: str, columns: list[tuple[str, str]], create: str, what: str,
                 on_corrupt: OnCorrupt, timeout: float, logger: Any, stage: str) -> None:
        one_of("on_corrupt", on_corrupt, ("rebuild", "raise"))
        timeout = real("timeout (seconds)", timeout, low=0.0, high=1e6, closed="neither")
        self.path, self.name, self.columns, self.create = path, name, columns, create
        self.what, self.on_corrupt, self.timeout, self.logger = what, on_corrupt, timeout, logger
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run(lambda db: None, stage=stage, check=True)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)

    def _problem(self, db: sqlite3.Connection) -> str | None:
        """Why the open file is not our table (None when it is); creates the table in a file
        that has no table at all (a new or emptied file)."""
        info = db.execute(f"PRAGMA table_info({self.name})").fetchall()
        if not info:
            others = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if others and self.name not in others:
                return f"it holds tables {others[:5]} but no {self.name!r}"
            # a new file, or another connection created the table after our first read: CREATE
            # ... IF NOT EXISTS takes the write lock (a no-op if it is there now), then read again
            db.execute(self.create)
            info = db.execute(f"PRAGMA table_info({self.name})").fetchall()
        found = [(str(r[1]), str(r[2]).upper()) for r in info]
        if found != [(n, t.upper()) for n, t in self.columns]:
            return f"table {self.name!r} has columns {found}, expected {self.columns}"
        return None

    def run(self, operation: Callable[[sqlite3.Connection], T], *, stage: str, check: bool = False) -> T:
        """``operation(connection)`` on a fresh connection to a file that holds the table.

        A file deleted meanwhile is recreated and the operation retried once; a corrupt file is
        moved aside and rebuilt (then retried once), or raised under ``on_corrupt="raise"``; a
        lock held past ``timeout`` raises :class:`SearchError` of ``stage``; any other SQLite
        failure raises :class:`KolmValueError` naming the file. ``check`` checks the table's
        columns first (else only after a failure).
        """
        for attempt in range(3):
            db: sqlite3.Connection | None = None
            seen = self._identity()
            try:
                db = self._connect()
                problem = self._problem(db) if attempt or check else None
                if problem is None:
                    return operation(db)
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if "locked" in text or "busy" in text:
                    raise SearchError(stage, f"{self.what} {str(self.path)!r} stayed locked by another connection "
                                             f"for more than {self.timeout:g} s", cause=exc) from exc
                if "no such table" in text and attempt < 2:  # the file was deleted or emptied: recreate
                    continue
                if "unable to open" in text and attempt < 2 and not self.path.parent.is_dir():  # folder deleted
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    continue
                if "no such column" not in text and "has no column" not in text:
                    raise KolmValueError(f"{self.what} {str(self.path)!r} cannot be used: {text}") from exc
                problem = f"wrong schema ({text})"
            except sqlite3.DatabaseError as exc:  # not a database, malformed image, ...
                problem = f"{type(exc).__name__}: {exc}"
            finally:
                if db is not None:
                    db.close()
            if attempt == 2:
                break
            self._set_aside(problem, seen)
        raise KolmValueError(f"{self.what} {str(self.path)!r} stays unusable after being rebuilt")

    def _identity(self) -> tuple[int, int] | None:
        """The file's (device, inode), None when absent: a rebuilt file is another inode."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _set_aside(self, problem: str, seen: tuple[int, int] | None) -> None:
        if self.on_corrupt == "raise":
            raise KolmValueError(f"{self.what} {str(self.path)!r} is not a usable SQLite {self.name!r} table "
                                 f"({problem}); move or delete it, or pass on_corrupt='rebuild'")
        if seen is None or self._identity() != seen:  # another process set it aside meanwhile: keep its new file
            return
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", *_SIDE_FILES):  # a stale journal must not be replayed into the new file
            try:
                os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            except FileNotFoundError:
                pass
        log(self.logger, "warning", f"{self.what} {str(self.path)!r} was not usable ({problem}); "
                                    f"moved to {str(aside)!r} and rebuilt empty")
