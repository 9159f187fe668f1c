"""``TableCache``: an experiment's measure table (:func:`~kolm_search.evaluation.compare`'s
:class:`~kolm_search.evaluation.report.ComparisonTable`, with its per-query values and
precision-recall curves) on disk, so that a second :meth:`Experiment.run()
<kolm_search.evaluation.Experiment.run>` over the same ``cache_dir`` reads the table instead of
reading the runs and measuring them again.

An entry is keyed by the runs it measures (each pipeline's name and fingerprint, a digest of the
dataset's queries with the limit and the self-hit dropping: what keys the runs in
:class:`~kolm_search.compose.run_cache.RunCache`, and a digest of the qrels,
:func:`qrels_digest`, the judged queries following from the queries and the qrels) and by the
measuring: the metrics, baselines, test, correction, interval, alpha, resamples, seed, relevance
level, and this format's version. Any change of these is another entry (computed, then stored);
an experiment stores a table only under the key its runs were made under (not one measured from
runs made before its queries, qrels or a pipeline changed).

A file is an Arrow IPC file: ``qid`` (string) and one float64 column per (metric, run) of the
per-query values (``per_query``, every metric's table has the same queries and runs), and, in
the schema's key-value metadata ``kolm_search``, the key, the names, the metric keys, the row
count, a CRC-32 of each value column and a JSON text (with its own CRC-32) holding the table's
columns (their dtypes and values), the curves and ``attrs``. Floats go through JSON by Python's
shortest round-trip repr, so they come back bit for bit; an entry is stored only when it reads
back as an equal table (dtypes included), otherwise not at all. A file is used only when all of
it checks (it parses, its key and names are the ones asked for, the columns and checksums match,
the table has its columns and dtypes); otherwise a ``RuntimeWarning`` names it and the table is
measured again and the file replaced. Writes go to a temporary file renamed into place (all or
nothing). Nothing is unpickled.

A process keeps the tables it decoded last (128 MB of files at most, :func:`clear_decoded`
forgets them): a file read again whose bytes are the very ones decoded, asked for the same
runs and measures, is not decoded again; each read is still a table of its own.
"""

from __future__ import annotations

import hashlib
import json
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cachetools
import numpy as np
import pandas as pd
import pyarrow as pa

from kolm_search.compose.cache import CacheFolder
from kolm_search.engine.arrow_strings import buffers
from kolm_search.engine.column_digest import update_with_column
from kolm_search.engine.read_only import read_only_view
from kolm_search.errors import KolmValueError
from kolm_search.evaluation.report import ComparisonTable
from kolm_search.evaluation.table_frames import checked_columns, decode_frame, encode_frame, frame_of
from kolm_search.io._atomic import replacing

__all__ = ["TableCache", "clear_decoded", "qrels_digest", "settings_digest"]

_FORMAT = "kolm-search/measure-table"
_VERSION = 3  # 2: the qid column's checksum over its Arrow offsets and bytes; 3: the curves' runs by position
_KEY = b"kolm_search"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _dtype_text(dtype: Any) -> str:
    """A column's dtype for a digest: a categorical by the dtype of its categories (its values
    are digested decoded; ``str`` of a categorical dtype would print every category)."""
    if isinstance(dtype, pd.CategoricalDtype):
        return f"category[{dtype.categories.dtype}]"
    return str(dtype)


def qrels_digest(qrels: pd.DataFrame) -> str | None:
    """A digest of a qrels DataFrame (its columns' names by ``repr``, their dtypes and every value:
    by :func:`~kolm_search.engine.column_digest.update_with_column`, else, for a column it
    refuses, by ``pandas.util.hash_pandas_object``), or None when it cannot be made alike each
    time (not a DataFrame, an object column holding anything but strings, where ``1`` and ``"1"``
    would hash alike)."""
    if not isinstance(qrels, pd.DataFrame):
        return None
    fast = _arrow_qrels_digest(qrels)
    if fast is not None:
        return fast
    for _, column in qrels.items():  # (not qrels[name]: a name given to two columns is a frame)
        if column.dtype == object and pd.api.types.infer_dtype(column, skipna=False) not in ("string", "empty"):
            return None
    try:
        rows = pd.util.hash_pandas_object(qrels, index=False).to_numpy(np.uint64)
    except (TypeError, ValueError, NotImplementedError):  # (an Arrow type pandas cannot hash: string_view)
        return None
    head = json.dumps([[repr(c), _dtype_text(t)] for c, t in qrels.dtypes.items()])  # names by repr, as columns'
    return _digest(f"qrels/2|{head}|{len(qrels)}|{hashlib.sha256(rows.tobytes()).hexdigest()}")


def _arrow_qrels_digest(qrels: pd.DataFrame) -> str | None:
    """:func:`qrels_digest` from the columns' buffers
    (:func:`~kolm_search.engine.column_digest.update_with_column`: numbers, strings, categoricals
    without missing values), or None (then by ``hash_pandas_object``, in another namespace)."""
    sha = hashlib.sha256(f"qrels/arrow/5|{len(qrels)}|{len(qrels.columns)}".encode())
    for name, column in qrels.items():
        if update_with_column(sha, name, column) is None:
            return None
    return sha.hexdigest()[:40]


def settings_digest(settings: dict[str, Any]) -> str | None:
    """A digest of the measuring's settings (JSON values only: None when one is not), with this
    format's version."""
    try:
        text = json.dumps({"format": _FORMAT, "version": _VERSION, **settings}, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return _digest(text)


def _checksum(values: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(values).data)


def _string_parts(column: pa.Array) -> tuple[bytes, np.ndarray]:
    """A string array without nulls (string or large_string) as what tells its entries apart:
    its offsets from 0 as int64 bytes, and its bytes (:func:`~kolm_search.engine.arrow_strings.buffers`)."""
    offsets, data = buffers(column)
    wide = offsets.astype(np.int64)
    return (wide - wide[0]).tobytes(), data[int(wide[0]):int(wide[-1])]


def _strings_checksum(column: pa.Array) -> int:
    """CRC-32 of a string column's offsets (from 0) and then its bytes (any string type)."""
    offsets, data = _string_parts(column)
    return zlib.crc32(data.tobytes(), zlib.crc32(offsets))


def _per_query_frames(qid: pa.ChunkedArray, keys: Sequence[str], names: Sequence[str],
                      scores: Sequence[Sequence[np.ndarray]]) -> dict[str, pd.DataFrame]:
    """``per_query`` of a stored table: for each metric ``keys[i]`` a DataFrame qid x run of the
    checked columns ``scores[i]`` (float64 (n_queries,) each)."""
    index = pd.Index(qid.to_pandas(), name="qid")
    return {metric: pd.DataFrame(np.column_stack(scores[i]), index=index, columns=list(names)) if names
            else pd.DataFrame(index=index) for i, metric in enumerate(keys)}


def _curve_columns(names: Sequence[str]) -> list[str]:
    """The stored curves' columns: ``recall`` (the levels), then each run by its position
    (``"0"``, ``"1"``, ...; a run may be named ``recall``)."""
    return ["recall", *(str(j) for j in range(len(names)))]


def _curves_frame(curves: dict[str, Any], names: Sequence[str]) -> pd.DataFrame:
    """``curves`` of a stored table (DataFrame recall level x run) from its checked JSON columns."""
    frame = frame_of(checked_columns(curves, _curve_columns(names)), index="recall")
    frame.columns = pd.Index(list(names))
    return frame


def same_table(a: ComparisonTable, b: ComparisonTable) -> bool:
    """True when two measure tables are equal whole: the frame (values, dtypes, index, columns),
    ``attrs``, ``per_query`` and ``curves``."""
    def equal(x: pd.DataFrame, y: pd.DataFrame) -> bool:
        try:
            pd.testing.assert_frame_equal(x, y, check_exact=True)
        except AssertionError:
            return False
        return True

    per_a, per_b = getattr(a, "per_query", None), getattr(b, "per_query", None)
    if type(a) is not type(b) or a.attrs != b.attrs or not equal(a, b) or not equal(a.curves, b.curves) \
            or not isinstance(per_a, dict) or not isinstance(per_b, dict) or list(per_a) != list(per_b):
        return False
    return all(equal(per_a[m], per_b[m]) for m in per_a)


@dataclass(frozen=True)
class _Decoded:
    """A file's bytes and what every check of them gave. Each :meth:`table` is a table of its
    own: its frame a deep copy (pandas' copy on write does not see a write through a column's
    ``.array``, the block's own buffer), its ``attrs`` parsed again, its ``per_query`` and
    ``curves`` made from the checked columns when first read; no caller's edit reaches
    another's."""

    data: pa.Buffer
    frame: ComparisonTable  # never given out
    attrs: str  # JSON
    qid: pa.ChunkedArray
    keys: list[str]
    names: list[str]
    scores: list[list[np.ndarray]]  # [metric][run] (n_queries,) float64, read-only
    curves: dict[str, Any]  # the JSON columns, checked

    def table(self) -> ComparisonTable:
        table = ComparisonTable(self.frame, copy=True)
        table.attrs.update(json.loads(self.attrs))
        table.defer(per_query=lambda: _per_query_frames(self.qid, self.keys, self.names, self.scores),
                    curves=lambda: _curves_frame(self.curves, self.names))
        return table


#: the tables of the files read last in this process, by what was asked of them: a file read
#: again whose bytes are the very ones decoded is not decoded again (its table is copied)
_DECODED: cachetools.LRUCache[tuple[Any, ...], _Decoded] = cachetools.LRUCache(
    maxsize=128 * 2**20, getsizeof=lambda entry: max(1, entry.data.size))
_DECODED_LOCK = threading.Lock()


def clear_decoded() -> None:
    """Forget the tables decoded in this process: the next read of each file decodes it (as a
    new process would)."""
    with _DECODED_LOCK:
        _DECODED.clear()


def _decoded(data: pa.Buffer, runs_fp: str, settings_fp: str, names: list[str], keys: list[str]) -> _Decoded:
    """The decoded file of bytes ``data`` asked for the runs ``names`` measured by ``keys``
    (``KolmValueError`` when a check fails): decoded once while those bytes are read again."""
    asked = (runs_fp, settings_fp, tuple(names), tuple(keys))
    with _DECODED_LOCK:
        found = _DECODED.get(asked)
    if found is not None and found.data.equals(data):
        return found
    decoded = _decode(data, runs_fp, settings_fp, names, keys)
    if decoded.data.size <= _DECODED.maxsize:
        with _DECODED_LOCK:
            _DECODED[asked] = decoded
    return decoded


def _decode(data: pa.Buffer, runs_fp: str, settings_fp: str, names: list[str], keys: list[str]) -> _Decoded:
    """A file's bytes decoded, every check made (``KolmValueError`` if one fails)."""
    stored = pa.ipc.open_file(data).read_all()
    meta_raw = (stored.schema.metadata or {}).get(_KEY)
    if meta_raw is None:
        raise KolmValueError("no kolm_search metadata")
    meta = json.loads(meta_raw)
    expected = {"format": _FORMAT, "version": _VERSION, "runs": runs_fp, "settings": settings_fp,
                "names": names, "metrics": keys, "rows": stored.num_rows}
    for key, value in expected.items():
        if meta.get(key) != value:
            raise KolmValueError(f"metadata {key!r} is {meta.get(key)!r}, expected {value!r}")
    columns = ["qid", *(f"{i}:{j}" for i in range(len(keys)) for j in range(len(names)))]
    if stored.column_names != columns:
        raise KolmValueError(f"columns {stored.column_names[:4]}..., expected {columns[:4]}...")
    payload = meta.get("payload")
    if not isinstance(payload, str) or zlib.crc32(payload.encode("utf-8", "surrogatepass")) != meta.get("crc32"):
        raise KolmValueError("the checksum of the table does not match the one recorded")
    body = json.loads(payload)
    qid = stored.column("qid")
    if not (pa.types.is_string(qid.type) or pa.types.is_large_string(qid.type)) or qid.null_count:
        raise KolmValueError(f"column 'qid' is {qid.type} with nulls")
    crcs = meta.get("columns_crc32")
    if not isinstance(crcs, list) or len(crcs) != len(columns) - 1:
        raise KolmValueError(f"metadata 'columns_crc32' is {crcs!r}")
    if _strings_checksum(qid.combine_chunks()) != meta.get("qid_crc32"):
        raise KolmValueError("the checksum of column 'qid' does not match the one recorded")
    scores: list[list[np.ndarray]] = []  # [metric][run] (n_queries,) float64, checked
    for i in range(len(keys)):
        scores.append([])
        for j in range(len(names)):
            column = stored.column(f"{i}:{j}")
            if column.type != pa.float64() or column.null_count:
                raise KolmValueError(f"column {i}:{j} is {column.type} with nulls")
            array = column.to_numpy()
            if _checksum(array) != crcs[i * len(names) + j]:
                raise KolmValueError(f"the checksum of column {i}:{j} does not match the one recorded")
            scores[-1].append(read_only_view(array))
    frame = decode_frame(body.get("table"), kind=ComparisonTable)
    assert isinstance(frame, ComparisonTable)
    curves = body.get("curves")
    checked_columns(curves, _curve_columns(names))  # checked now, the frame made when read
    attrs = body.get("attrs")
    if not isinstance(attrs, dict):
        raise KolmValueError("no attrs")
    return _Decoded(data, frame, json.dumps(attrs), qid, list(keys), list(names), scores, curves)


def _compact(data: pa.Buffer) -> pa.Buffer:
    """``data`` in a buffer of its own size (a writer's grows by doubling: the table kept from
    it, counted by its size, would hold up to twice that)."""
    compact = pa.allocate_buffer(data.size)
    pa.FixedSizeBufferWriter(compact).write(data)
    return compact


class TableCache(CacheFolder):
    """A folder of measure tables (see the module doc and
    :class:`~kolm_search.compose.cache.CacheFolder`; the pair is (the runs' key, the settings'
    digest))."""

    suffix = ".arrow"

    def get(self, runs_fp: str, settings_fp: str, names: Sequence[str], keys: Sequence[str]) -> ComparisonTable | None:
        """The stored table of the runs ``names`` measured by ``keys``, or None when there is
        none or it is damaged (warned)."""
        path = self.file_for(runs_fp, settings_fp)
        return self.read_checked(path, lambda: self._read(path, runs_fp, settings_fp, list(names), list(keys)),
                                 "measure table", "measuring the runs again")

    @staticmethod
    def _read(path: Path, runs_fp: str, settings_fp: str, names: list[str], keys: list[str]) -> ComparisonTable:
        with pa.OSFile(str(path)) as src:
            data = src.read_buffer()
        return _decoded(data, runs_fp, settings_fp, names, keys).table()

    def put(self, runs_fp: str, settings_fp: str, table: ComparisonTable) -> bool:
        """Store ``table`` (atomically replacing any file of the pair); True when it was stored
        (only a table that reads back equal, whose run names are strings, is)."""
        names, keys = [str(n) for n in table.curves.columns], list(table.per_query)
        if list(table.curves.columns) != names or any(list(t.columns) != names for t in table.per_query.values()):
            return False
        indexes = list(table.per_query.values())
        if not indexes or any(not t.index.equals(indexes[0].index) for t in indexes):
            return False
        index = indexes[0].index
        if index.name != "qid" or not all(isinstance(q, str) for q in index):
            return False
        try:
            curves = table.curves.set_axis(_curve_columns(names)[1:], axis=1).reset_index()
            body = {"table": encode_frame(pd.DataFrame(table)), "curves": encode_frame(curves),
                    "attrs": table.attrs}
            payload = json.dumps(body)
        except (TypeError, ValueError):
            return False
        qid = pa.array(list(index), pa.large_string())
        arrays: dict[str, Any] = {"qid": qid}
        crcs = []
        for i, metric in enumerate(keys):
            for j, name in enumerate(names):
                values = np.ascontiguousarray(table.per_query[metric][name].to_numpy(np.float64))
                arrays[f"{i}:{j}"] = values
                crcs.append(_checksum(values))
        meta = {"format": _FORMAT, "version": _VERSION, "runs": runs_fp, "settings": settings_fp, "names": names,
                "metrics": keys, "rows": len(index), "columns_crc32": crcs,
                "qid_crc32": _strings_checksum(qid),
                "payload": payload, "crc32": zlib.crc32(payload.encode("utf-8", "surrogatepass"))}
        stored = pa.table(arrays).replace_schema_metadata({_KEY: json.dumps(meta).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, stored.schema) as writer:
            writer.write_table(stored)
        data = _compact(sink.getvalue())
        try:  # stored only when its bytes decode as this very table
            back = _decoded(data, runs_fp, settings_fp, names, keys).table()
        except KolmValueError:
            return False
        if not same_table(table, back):
            return False
        path = self.writable(self.file_for(runs_fp, settings_fp))
        if path is None:
            return False
        with replacing(path) as tmp:
            tmp.write_bytes(memoryview(data))
        self.writes += 1
        return True

    def __repr__(self) -> str:
        return f"TableCache({str(self.path)!r})"
