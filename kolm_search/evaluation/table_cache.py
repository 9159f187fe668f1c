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
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from kolm_search.compose.cache import CacheFolder
from kolm_search.engine.arrow_strings import buffers
from kolm_search.errors import KolmValueError
from kolm_search.evaluation.report import ComparisonTable
from kolm_search.io._atomic import replacing

__all__ = ["TableCache", "qrels_digest", "settings_digest"]

_FORMAT = "kolm-search/measure-table"
_VERSION = 2  # 2: the qid column's checksum over its Arrow offsets and bytes
_KEY = b"kolm_search"
_DTYPES = ("float64", "int64", "bool", "object", "str")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _dtype_text(dtype: Any) -> str:
    """A column's dtype for a digest: a categorical by the dtype of its categories (its values
    are digested decoded; ``str`` of a categorical dtype would print every category)."""
    if isinstance(dtype, pd.CategoricalDtype):
        return f"category[{dtype.categories.dtype}]"
    return str(dtype)


def qrels_digest(qrels: pd.DataFrame) -> str | None:
    """A digest of a qrels DataFrame (its columns, their dtypes and every value, by
    ``pandas.util.hash_pandas_object``), or None when it cannot be made alike each time (not a
    DataFrame, an object column holding anything but strings, where ``1`` and ``"1"`` would
    hash alike)."""
    if not isinstance(qrels, pd.DataFrame):
        return None
    fast = _arrow_qrels_digest(qrels)
    if fast is not None:
        return fast
    for name in qrels.columns:
        column = qrels[name]
        if column.dtype == object and pd.api.types.infer_dtype(column, skipna=False) not in ("string", "empty"):
            return None
    try:
        rows = pd.util.hash_pandas_object(qrels, index=False).to_numpy(np.uint64)
    except (TypeError, ValueError):
        return None
    head = json.dumps([[str(c), _dtype_text(t)] for c, t in qrels.dtypes.items()])
    return _digest(f"qrels/1|{head}|{len(qrels)}|{hashlib.sha256(rows.tobytes()).hexdigest()}")


def _arrow_qrels_digest(qrels: pd.DataFrame) -> str | None:
    """:func:`qrels_digest` from the Arrow buffers of the columns (offsets and bytes of strings,
    values of numbers), when every column is strings, integers or floats without nulls (a
    categorical by its codes and its categories' buffers: equal values under other categories
    are another entry, never the same one); None otherwise (then by ``hash_pandas_object``, in
    another namespace)."""
    import pyarrow as pa

    sha = hashlib.sha256(f"qrels/arrow/3|{len(qrels)}|{len(qrels.columns)}".encode())
    for name in qrels.columns:
        series = qrels[name]
        sha.update(f"\x1e{json.dumps([str(name), _dtype_text(series.dtype)])}".encode("utf-8", "surrogatepass"))
        try:
            if isinstance(series.dtype, pd.CategoricalDtype):
                codes = np.asarray(series.array.codes)
                if len(codes) and int(codes.min()) < 0:  # a missing value
                    return None
                sha.update(b"\x1dcodes")
                sha.update(codes.astype(np.int64).tobytes())
                column = pa.array(series.dtype.categories, from_pandas=True)
            else:
                column = pa.array(series, from_pandas=True)
            if isinstance(column, pa.ChunkedArray):
                column = pa.concat_arrays(column.chunks)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
        except (pa.ArrowException, TypeError, ValueError):
            return None
        if column.null_count or not _digest_column(sha, column):
            return None
    return sha.hexdigest()[:40]


def _digest_column(sha: Any, column: Any) -> bool:
    """Add a string or number Arrow array (its type, then offsets and bytes or values) to
    ``sha``; False for another type."""
    import pyarrow as pa

    sha.update(f"\x1d{column.type}".encode())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        for part in _string_parts(column):
            sha.update(part)
        return True
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        sha.update(np.ascontiguousarray(column.to_numpy(zero_copy_only=False)).tobytes())
        return True
    return False


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


def _encode_frame(frame: pd.DataFrame) -> dict[str, Any]:
    """A small DataFrame with a default index as JSON values (raises ValueError when a dtype is
    not one this format keeps)."""
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.start != 0 or frame.index.step != 1:
        raise ValueError("not a default index")
    dtypes = [str(t) for t in frame.dtypes]
    if any(t not in _DTYPES for t in dtypes):
        raise ValueError(f"dtypes {dtypes}")
    return {"columns": [str(c) for c in frame.columns], "dtypes": dtypes,
            "values": [frame[c].tolist() for c in frame.columns]}


def _decode_frame(data: Any, columns: Sequence[str] | None = None, *, index: str | None = None,
                  kind: type[pd.DataFrame] = pd.DataFrame) -> pd.DataFrame:
    """A frame :func:`_encode_frame` wrote, checked (``KolmValueError``), of class ``kind``, with
    column ``index`` as its index."""
    return _frame_of(_checked_columns(data, columns), index=index, kind=kind)


def _checked_columns(data: Any, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """The columns of a frame :func:`_encode_frame` wrote, by name (``columns`` when given), each
    checked against its dtype and made an array of it (``KolmValueError`` when one fails)."""
    if not isinstance(data, dict) or not isinstance(data.get("columns"), list):
        raise KolmValueError("a table is not a JSON object with columns")
    names, dtypes, values = data["columns"], data.get("dtypes"), data.get("values")
    if columns is not None and names != list(columns):
        raise KolmValueError(f"columns {names}, expected {list(columns)}")
    if not isinstance(dtypes, list) or not isinstance(values, list) or not len(dtypes) == len(values) == len(names):
        raise KolmValueError("a table's dtypes or values do not match its columns")
    lengths = {len(v) if isinstance(v, list) else -1 for v in values}
    if len(lengths) > 1 or -1 in lengths:
        raise KolmValueError("a table's columns are not lists of one length")
    out: dict[str, Any] = {}
    for name, dtype, column in zip(names, dtypes, values, strict=True):
        if dtype not in _DTYPES:
            raise KolmValueError(f"column {name!r} has dtype {dtype!r}")
        if dtype in ("object", "str"):
            if not all(isinstance(v, str) for v in column):
                raise KolmValueError(f"column {name!r} holds a value that is not a string")
            out[name] = pd.array(column, dtype="str") if dtype == "str" else np.array(column, dtype=object)
        else:
            kinds = (bool,) if dtype == "bool" else (int,) if dtype == "int64" else (int, float)
            if not all(isinstance(v, kinds) and (dtype == "int64" or dtype == "bool" or not isinstance(v, bool))
                       for v in column):
                raise KolmValueError(f"column {name!r} holds a value that is not {dtype}")
            if dtype == "int64" and any(isinstance(v, bool) for v in column):
                raise KolmValueError(f"column {name!r} holds a value that is not {dtype}")
            out[name] = np.array(column, dtype=dtype)
    return out


def _frame_of(out: dict[str, Any], *, index: str | None = None, kind: type[pd.DataFrame] = pd.DataFrame) -> pd.DataFrame:
    """The frame of :func:`_checked_columns`' columns, column ``index`` as its index."""
    rest = [n for n in out if n != index]
    at = None if index is None else pd.Index(out[index], name=index)  # that column as the index
    if rest and all(out[n].dtype == np.float64 for n in rest):  # one float block: no per-column assembly
        return kind(np.column_stack([out[n] for n in rest]), index=at, columns=rest)
    return kind({n: out[n] for n in rest}, index=at)  # the dict keeps the order (columns= would reindex: ~2x slower)


def _per_query_frames(qid: pa.ChunkedArray, keys: Sequence[str], names: Sequence[str],
                      scores: Sequence[Sequence[np.ndarray]]) -> dict[str, pd.DataFrame]:
    """``per_query`` of a stored table: for each metric ``keys[i]`` a DataFrame qid x run of the
    checked columns ``scores[i]`` (float64 (n_queries,) each)."""
    index = pd.Index(qid.to_pandas(), name="qid")
    return {metric: pd.DataFrame(np.column_stack(scores[i]), index=index, columns=list(names)) if names
            else pd.DataFrame(index=index) for i, metric in enumerate(keys)}


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
        return TableCache._decode(data, runs_fp, settings_fp, names, keys)

    @staticmethod
    def _decode(data: pa.Buffer, runs_fp: str, settings_fp: str, names: list[str], keys: list[str]) -> ComparisonTable:
        """The table of a file's bytes, every check of :meth:`_read` made (``KolmValueError`` if one fails)."""
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
                scores[-1].append(array)
        table = _decode_frame(body.get("table"), kind=ComparisonTable)
        assert isinstance(table, ComparisonTable)
        curves = _checked_columns(body.get("curves"), ["recall", *names])  # checked now, the frame made when read
        attrs = body.get("attrs")
        if not isinstance(attrs, dict):
            raise KolmValueError("no attrs")
        table.attrs.update(attrs)
        table.defer(per_query=lambda: _per_query_frames(qid, keys, names, scores),
                    curves=lambda: _frame_of(curves, index="recall"))
        return table

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
            curves = table.curves.reset_index()
            body = {"table": _encode_frame(pd.DataFrame(table)), "curves": _encode_frame(curves),
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
        data = sink.getvalue()
        try:  # stored only when its bytes decode as this very table
            back = self._decode(data, runs_fp, settings_fp, names, keys)
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
