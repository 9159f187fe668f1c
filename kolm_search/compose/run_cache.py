"""``RunCache``: the finished runs of retrieving stages over sets of queries on disk, one file
per (stage fingerprint, queries digest), so that a second experiment over the same folder
reads each pipeline's run whole instead of walking its stages (whose outputs
:class:`~kolm_search.compose.cache.StageCache` keeps, for the runs that changed).

A file is an Arrow IPC file (uncompressed: it is read and checked in well under a millisecond
per 100,000 entries) of the run's entries as codes, :class:`~kolm_search.compose.queries.CodedRun`
flattened in the run DataFrame's order (queries in input order): ``doc`` (the document code,
int32 when the table has fewer than 2**31 rows, else int64), ``rank`` (int32 when it fits,
else int64) and ``score`` (float64), with, in the schema's key-value metadata ``kolm_search``,
the stage fingerprint, the queries digest, the row count, the numbers of queries and
documents, the number of entries of each query (``counts``, int32 little-endian in base64)
and a CRC-32 of each column's values and of the counts. The ids
are looked up (the DataFrame made) only when a run is asked for: the fingerprint covers the
index (its digest and revision), so the codes name the same documents, and the digest covers
the queries, so the rows name the same queries.

A file is used only when all of it checks (it parses, the keys and sizes are the ones asked
for, the columns and their types are a coded run's, the checksums match, the counts add up,
every code is in range); otherwise a ``RuntimeWarning`` names it and the run is computed again and the file
replaced. A file of another version of this format is not read (nor warned about) and is
replaced. A column equal to the same column of the last run read (the counts and ranks that
the rerankers of one first stage share) is checked once and shared. A run of several search modes
is stored only when its flattened form makes the very DataFrame it does. Writes go to a
temporary file renamed into place (all or nothing).

The key promises what the stage cache's does: equal stage fingerprints (class, parameters,
index digest and revision) give equal outputs for equal inputs, and the digest covers what the
preparation of the queries reads and how the run is cut
(:func:`~kolm_search.compose.queries.queries_digest`).
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kolm_search.compose.cache import CacheFolder
from kolm_search.compose.queries import CodedRun, PreparedQueries
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.io._atomic import replacing

__all__ = ["RunCache"]

_FORMAT = "kolm-search/run"
_VERSION = 2
_KEY = b"kolm_search"
_I32_MAX = np.iinfo(np.int32).max
#: The types a coded run's columns may have on disk.
_TYPES = {"doc": (pa.int32(), pa.int64()), "rank": (pa.int32(), pa.int64()), "score": (pa.float64(),)}


def _checksum(values: np.ndarray) -> int:
    """CRC-32 of an array's values (its bytes, in order)."""
    return zlib.crc32(np.ascontiguousarray(values).data)


def _ipc_bytes(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _small(values: np.ndarray, fits: bool) -> np.ndarray:
    """``values`` as int32 when ``fits``, else int64."""
    return np.asarray(values, np.int32 if fits else np.int64)


class RunCache(CacheFolder):
    """A folder of finished runs (see the module doc and
    :class:`~kolm_search.compose.cache.CacheFolder`; the input fingerprint is the queries')."""

    suffix = ".arrow"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        #: per column, the last one read (on disk, its checksum, its values): the runs of one first
        #: stage's rerankers share their ranks, checked once; and the last counts read with the query
        #: rows they give
        self._last: dict[str, tuple[pa.ChunkedArray, int, np.ndarray]] = {}
        self._last_rows: tuple[bytes, np.ndarray] | None = None

    def get(self, stage_fp: str, queries_fp: str, prepared: PreparedQueries | Callable[[], PreparedQueries],
            table: DocumentTable, n_queries: int) -> CodedRun | None:
        """The stored run of ``n_queries`` queries (``prepared``, or what prepares them, as
        :class:`~kolm_search.compose.queries.CodedRun` takes them) over documents whose ids are
        rows of ``table``, or None when there is none, it is of another
        version, or it is damaged (warned)."""
        path = self.file_for(stage_fp, queries_fp)
        return self.read_checked(path, lambda: self._read(path, stage_fp, queries_fp, prepared, table, n_queries),
                                 "run", "computing the run again")

    def _read(self, path: Path, stage_fp: str, queries_fp: str, prepared: PreparedQueries | Callable[[], PreparedQueries],
              documents: DocumentTable, n_queries: int) -> CodedRun | None:
        """The run in ``path``, checked; None for a file of another version of this format (not
        read, replaced: not damaged); any other failure raises."""
        with pa.OSFile(str(path)) as src:  # read whole (a memory map would break if the file were truncated later)
            data = src.read_buffer()
        table = pa.ipc.open_file(data).read_all()
        meta_raw = (table.schema.metadata or {}).get(_KEY)
        if meta_raw is None:
            raise KolmValueError("no kolm_search metadata")
        meta = json.loads(meta_raw)
        if meta.get("format") == _FORMAT and meta.get("version") != _VERSION and isinstance(meta.get("version"), int):
            return None  # another version's file: not read, replaced (not damaged)
        n_docs = len(documents)
        expected = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "queries": queries_fp,
                    "rows": table.num_rows, "n_queries": n_queries, "n_docs": n_docs}
        for key, value in expected.items():
            if meta.get(key) != value:
                raise KolmValueError(f"metadata {key!r} is {meta.get(key)!r}, expected {value!r}")
        if table.column_names != list(_TYPES):
            raise KolmValueError(f"columns {table.column_names}, expected {list(_TYPES)}")
        crcs = meta.get("crc32")
        if not isinstance(crcs, dict):
            raise KolmValueError(f"metadata 'crc32' is {crcs!r}")
        arrays = {"row": self._rows(meta.get("counts"), crcs.get("counts"), n_queries, table.num_rows)}
        for name, allowed in _TYPES.items():
            column, last = table.column(name), self._last.get(name)
            if column.type not in allowed or column.null_count:
                raise KolmValueError(f"column {name!r} is {column.type} with nulls or not one of {list(allowed)}")
            if last is not None and last[1] == crcs.get(name) and last[0].type == column.type \
                    and column.equals(last[0]):  # the same entries as the last run's (verified): shared
                arrays[name] = last[2]
                continue
            values = column.combine_chunks().to_numpy(zero_copy_only=True) if column.num_chunks != 1 \
                else column.chunk(0).to_numpy(zero_copy_only=True)
            if _checksum(values) != crcs.get(name):
                raise KolmValueError(f"the checksum of column {name!r} does not match the one recorded")
            if name == "doc" and len(values):
                low, high = int(values.min()), int(values.max())
                if low < 0 or high >= n_docs:
                    raise KolmValueError(f"column 'doc' holds {low if low < 0 else high}, outside [0, {n_docs})")
            arrays[name] = values
            if name != "score":  # (float equality would not tell -0.0 from 0.0)
                self._last[name] = (column, crcs[name], values)
        return CodedRun(prepared, documents, [(None, arrays["row"], arrays["doc"], arrays["rank"], arrays["score"])])

    def _rows(self, counts_text: Any, crc: Any, n_queries: int, n_rows: int) -> np.ndarray:
        """The query row of every entry from the recorded counts (checked: their checksum, one
        count per query, none negative, adding up to the rows)."""
        if not isinstance(counts_text, str):
            raise KolmValueError(f"metadata 'counts' is {counts_text!r}")
        raw = base64.b64decode(counts_text.encode("ascii"), validate=True)
        if len(raw) != 4 * n_queries:
            raise KolmValueError(f"the counts are of {len(raw) / 4} queries, expected {n_queries}")
        if self._last_rows is not None and self._last_rows[0] == raw and len(self._last_rows[1]) == n_rows:
            return self._last_rows[1]  # the counts of the last run read (checked then)
        if zlib.crc32(raw) != crc:
            raise KolmValueError("the checksum of the counts does not match the one recorded")
        counts = np.frombuffer(raw, "<i4")
        if (len(counts) and int(counts.min()) < 0) or int(counts.sum(dtype=np.int64)) != n_rows:
            raise KolmValueError(f"the counts add up to {int(counts.sum(dtype=np.int64))} entries, not {n_rows}, "
                                 "or one is negative")
        rows = np.repeat(np.arange(n_queries, dtype=np.int64), counts)
        self._last_rows = (raw, rows)
        return rows

    def put(self, stage_fp: str, queries_fp: str, run: CodedRun) -> bool:
        """Store ``run`` (atomically replacing any file of the pair); True when it was stored (a
        run of several search modes only when its flattened form makes the same DataFrame)."""
        q, doc, rank, score = run.flat()
        n_queries = len(run.prepared.qids)
        if n_queries > _I32_MAX:
            return False
        flat = CodedRun(run.prepared, run.table, [(None, q, doc, rank, score)])
        if len(run.parts) > 1:
            built, back = run.frame(), flat.frame()
            if not (back.dtypes.equals(built.dtypes) and back.equals(built)):
                return False
        if len(q) and (int(q[0]) < 0 or int(q[-1]) >= n_queries or bool(np.any(q[1:] < q[:-1]))):
            return False  # (a run's queries are in input order)
        counts = np.bincount(q, minlength=n_queries).astype("<i4").tobytes()
        arrays = {"doc": _small(doc, run.n_docs <= _I32_MAX),
                  "rank": _small(rank, not len(rank) or int(rank.max()) <= _I32_MAX), "score": score}
        meta = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "queries": queries_fp,
                "rows": len(q), "n_queries": n_queries, "n_docs": run.n_docs,
                "counts": base64.b64encode(counts).decode("ascii"),
                "crc32": {"counts": zlib.crc32(counts), **{name: _checksum(values) for name, values in arrays.items()}}}
        table = pa.table(arrays).replace_schema_metadata({_KEY: json.dumps(meta).encode()})
        path = self.writable(self.file_for(stage_fp, queries_fp))
        if path is None:
            return False
        with replacing(path) as tmp:
            tmp.write_bytes(memoryview(_ipc_bytes(table)))  # the Arrow buffer, not a copy of it
        self.writes += 1
        return True

    def __repr__(self) -> str:
        return f"RunCache({str(self.path)!r})"
