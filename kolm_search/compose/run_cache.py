"""``RunCache``: the finished runs of retrieving stages over sets of queries on disk, one file
per (stage fingerprint, queries digest), so that a second experiment over the same folder
reads each pipeline's run whole instead of walking its stages (whose outputs
:class:`~kolm_search.compose.cache.StageCache` keeps, for the runs that changed).

A file is an Arrow IPC file (uncompressed: it is read and checked in about a millisecond per
100,000 entries, where a parquet file of the same run takes several) of the run DataFrame
``qid, doc_id, rank, score`` (strings with 32-bit offsets and ranks as int32 when they fit),
with, in the schema's key-value metadata ``kolm_search``, the stage fingerprint, the queries
digest, the row count and a CRC-32 of each column's buffers. A file is used only when all of
it checks (it parses, the keys are the ones asked for, the columns and their types are a
run's, the checksums match); otherwise a ``RuntimeWarning`` names it and the run is computed
again and the file replaced. A column equal to the same column of the last run read (the qids
and ranks that the rerankers of one first stage share) is checked and converted once and
shared, copy-on-write, by the DataFrames. A run is stored only when it reads back as the very
DataFrame it is (same dtypes and values; e.g. not an empty run of object columns). Writes go
to a temporary file renamed into place (all or nothing).

The key promises what the stage cache's does: equal stage fingerprints (class, parameters,
index digest and revision) give equal outputs for equal inputs, and the digest covers what the
preparation of the queries reads and how the run is cut
(:func:`~kolm_search.compose.queries.queries_digest`).
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from kolm_search.compose.cache import CacheFolder
from kolm_search.errors import KolmValueError
from kolm_search.io._atomic import replacing

__all__ = ["RunCache"]

_FORMAT = "kolm-search/run"
_VERSION = 1
_KEY = b"kolm_search"
_STRINGS = (pa.string(), pa.large_string())
#: The types of a run's columns on disk (strings with 32-bit offsets and ranks as int32 when they fit: less to
#: read and check) and in the Arrow table of the DataFrame (``pa.Table.from_pandas``).
_TYPES = {"qid": (*_STRINGS, pa.int64()), "doc_id": _STRINGS, "rank": (pa.int32(), pa.int64()), "score": (pa.float64(),)}


def _checksum(column: pa.ChunkedArray) -> int:
    """CRC-32 of every buffer of a column, in order."""
    crc = 0
    for chunk in column.chunks:
        for buf in chunk.buffers():
            if buf is not None:
                crc = zlib.crc32(buf, crc)
    return crc


def _ipc_bytes(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _ipc(data: pa.Buffer) -> pa.Table:
    return pa.ipc.open_file(data).read_all()


def _narrow(name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` in its smaller type on disk when its values fit (string offsets, int32 ranks)."""
    small = pa.string() if column.type == pa.large_string() else pa.int32() if name == "rank" else None
    try:
        return column if small is None else column.cast(small)
    except pa.ArrowInvalid:  # too long for 32-bit offsets, a rank past 2**31 - 1
        return column


def _column(column: pa.ChunkedArray) -> pd.Series:
    """A run's column as pandas holds it: strings as an arrow-backed array (immutable, not
    copied), numbers copied into a writable array."""
    if column.type in _STRINGS:
        return pd.Series(column.to_pandas().array, copy=False)
    return pd.Series(np.array(column.to_numpy(), np.float64 if column.type == pa.float64() else np.int64), copy=False)


def _frame(columns: dict[str, pd.Series]) -> pd.DataFrame:
    return pd.DataFrame(columns, copy=False)


class RunCache(CacheFolder):
    """A folder of finished runs (see the module doc and
    :class:`~kolm_search.compose.cache.CacheFolder`; the input fingerprint is the queries')."""

    suffix = ".arrow"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        #: per column, the last one read (on disk, its checksum, as pandas holds it): the runs of one
        #: first stage's rerankers share their qids and ranks, checked and converted once
        self._last: dict[str, tuple[pa.ChunkedArray, int, pd.Series]] = {}

    def get(self, stage_fp: str, queries_fp: str) -> pd.DataFrame | None:
        """The stored run, or None when there is none or it is damaged (warned)."""
        path = self.file_for(stage_fp, queries_fp)
        if not path.exists():
            return None
        try:
            run = self._read(path, stage_fp, queries_fp)
        except Exception as exc:  # any failure to read or check means: do not use it
            self.damaged += 1
            warnings.warn(f"run cache file {path} is damaged ({type(exc).__name__}: {exc}); computing the run again",
                          RuntimeWarning, stacklevel=3)
            return None
        self.reads += 1
        return run

    def _read(self, path: Path, stage_fp: str, queries_fp: str) -> pd.DataFrame:
        with pa.OSFile(str(path)) as src:  # read whole (a memory map would break if the file were truncated later)
            data = src.read_buffer()
        table = _ipc(data)
        meta_raw = (table.schema.metadata or {}).get(_KEY)
        if meta_raw is None:
            raise KolmValueError("no kolm_search metadata")
        meta = json.loads(meta_raw)
        expected = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "queries": queries_fp,
                    "rows": table.num_rows}
        for key, value in expected.items():
            if meta.get(key) != value:
                raise KolmValueError(f"metadata {key!r} is {meta.get(key)!r}, expected {value!r}")
        if table.column_names != list(_TYPES):
            raise KolmValueError(f"columns {table.column_names}, expected {list(_TYPES)}")
        for name, allowed in _TYPES.items():
            column = table.column(name)
            if column.type not in allowed or column.null_count:
                raise KolmValueError(f"column {name!r} is {column.type} with nulls or not one of {list(allowed)}")
        crcs = meta.get("crc32")
        if not isinstance(crcs, dict):
            raise KolmValueError(f"metadata 'crc32' is {crcs!r}")
        columns = {}
        for name in _TYPES:
            column, last = table.column(name), self._last.get(name)
            if last is not None and last[1] == crcs.get(name) and last[0].type == column.type \
                    and column.equals(last[0]):  # the same entries as the last run's (verified): shared
                columns[name] = last[2]
                continue
            if _checksum(column) != crcs.get(name):
                raise KolmValueError(f"the checksum of column {name!r} does not match the one recorded")
            columns[name] = _column(column)
            if column.type != pa.float64():  # (float equality would not tell -0.0 from 0.0)
                self._last[name] = (column, crcs[name], columns[name])
        return _frame(columns)

    def put(self, stage_fp: str, queries_fp: str, run: pd.DataFrame) -> bool:
        """Store ``run`` (atomically replacing any file of the pair) when it reads back as itself;
        True when it was stored."""
        try:
            table = pa.Table.from_pandas(run, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError):
            return False
        if table.column_names != list(_TYPES) or any(table.column(n).type not in t for n, t in _TYPES.items()) \
                or not isinstance(run.index, pd.RangeIndex) or run.index.start != 0 or run.index.step != 1:
            return False
        table = pa.table({name: _narrow(name, table.column(name)) for name in _TYPES})
        back = _frame({name: _column(table.column(name)) for name in _TYPES})
        if not (back.dtypes.equals(run.dtypes) and back.equals(run)):
            return False
        meta = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "queries": queries_fp,
                "rows": table.num_rows,  # the buffers as a reader sees them:
                "crc32": {name: _checksum(column) for name, column in zip(_TYPES, _ipc(_ipc_bytes(table)).columns)}}
        table = table.replace_schema_metadata({_KEY: json.dumps(meta).encode()})
        with replacing(self.file_for(stage_fp, queries_fp)) as tmp:
            tmp.write_bytes(memoryview(_ipc_bytes(table)))  # the Arrow buffer, not a copy of it
        self.writes += 1
        return True

    def __repr__(self) -> str:
        return f"RunCache({str(self.path)!r})"
