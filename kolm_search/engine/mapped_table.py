"""Document tables on disk: a documents file, memory-mapped, read for the rows asked for.

The documents file is an Arrow IPC file (the random-access format, uncompressed) of the six
string columns :meth:`DocumentTable.to_arrow` makes (``id, content, title, source, tags,
metadata``; tags and metadata as JSON text), in record batches of at most
:data:`BATCH_ROWS` rows and about :data:`BATCH_BYTES` bytes of text
(:class:`DocumentsWriter`, :func:`write_documents`).

:class:`MappedDocumentTable` serves such a file without reading it: opening maps it and reads
the footer and each batch's metadata (O(batches), no text). A batch's column is read, and
checked in full (Arrow's full validation: offsets within the data, valid UTF-8, null counts;
no missing id or content) the first time a row of it is asked for, so a damaged file is a
:class:`~kolm_search.errors.KolmValueError` naming the file, the batch and its rows, never a
crash. What stays off the Python heap:

=====================  ==========================================================
call                   reads
=====================  ==========================================================
``len``                nothing
``ids_of(codes)``      the id column of the batches holding ``codes``
``documents(codes)``   every column of those batches' rows asked for
``codes(ids)``         every id once, to a sorted array of 64-bit hashes and the
                       rows in that order (16 bytes a document, no Python strings;
                       duplicates refused then); then the ids asked for
``take(rows)``         those rows (an in-memory :class:`DocumentTable`)
=====================  ==========================================================

What needs every document as Python objects (``frame``, ``ids``, ``texts()``, filters on a
field, ``concat``) makes it on first use, once: a memory-mapped table is a
:class:`DocumentTable` in every respect, with results equal to the in-memory table of the
same rows. It pickles by value (the rows travel; nothing points at the file).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.engine.arrow_strings import buffers, string_ranks
from kolm_search.engine.doc_fields import (
    DOCUMENT_FIELDS,
    arrow_digest,
    concat_strings,
    decoded,
    joined_array,
    joined_texts,
    make_documents,
)
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.read_only import read_only_view
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument

__all__ = ["BATCH_BYTES", "BATCH_ROWS", "DocumentsWriter", "MappedDocumentTable", "in_memory", "write_documents"]

BATCH_ROWS = 65_536  # rows of a record batch at most: the unit read and checked
BATCH_BYTES = 64 << 20  # and about this many bytes of text (at least one row)
_FIELD = {name: i for i, name in enumerate(DOCUMENT_FIELDS)}
_TEXT_FIELDS = {"id", "content", "title", "source"}  # the columns stored as the text itself


def _string_dtype() -> Any:
    """The dtype of a DataFrame column of Python strings in this pandas (``str`` on Arrow from
    pandas 3, else object)."""
    return pd.Series(np.array(["a"], dtype=object)).dtype


class DocumentsWriter:
    """Writes tables one after the other to a documents file (a binary file object ``fp``).

    Use as a context manager; :meth:`write` takes a :class:`DocumentTable` or the
    ``pyarrow.Table`` its :meth:`~DocumentTable.to_arrow` makes."""

    def __init__(self, fp: BinaryIO | str | Path) -> None:
        import pyarrow as pa

        self.schema = pa.schema([(c, pa.string()) for c in DOCUMENT_FIELDS])
        self._writer = pa.ipc.new_file(str(fp) if isinstance(fp, (str, Path)) else fp, self.schema)
        self.rows = 0

    def write(self, table: DocumentTable | Any) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        arrow = table.to_arrow() if isinstance(table, DocumentTable) else table
        arrow = arrow.select(list(DOCUMENT_FIELDS)).cast(self.schema)
        sizes = np.zeros(arrow.num_rows, np.int64)
        for column in arrow.columns:
            sizes += np.asarray(pc.fill_null(pc.binary_length(column), 0), dtype=np.int64)
        for lo, hi in _cuts(sizes):
            for batch in arrow.slice(lo, hi - lo).combine_chunks().to_batches():
                self._writer.write_batch(pa.record_batch(batch.columns, schema=self.schema))
        self.rows += arrow.num_rows

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> DocumentsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cuts(sizes: npt.NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """Row ranges of at most :data:`BATCH_ROWS` rows and about :data:`BATCH_BYTES` bytes (a
    range holds at least one row)."""
    lo, n = 0, len(sizes)
    total = np.concatenate([[0], np.cumsum(sizes)])
    while lo < n:
        hi = int(np.searchsorted(total, total[lo] + BATCH_BYTES, side="right")) - 1
        hi = min(max(hi, lo + 1), lo + BATCH_ROWS, n)
        yield lo, hi
        lo = hi


def write_documents(table: DocumentTable, fp: BinaryIO | str | Path) -> None:
    """Write ``table`` as a documents file to ``fp`` (a binary file object or a path)."""
    with DocumentsWriter(fp) as writer:
        writer.write(table)


class MappedDocumentTable(DocumentTable):
    """A :class:`DocumentTable` over a documents file, memory-mapped (see the module).

    Parameters
    ----------
    path : str or Path
        The documents file.
    n_docs : int, optional
        The rows it must hold (a saved index's ``n_docs``).

    Raises
    ------
    KolmValueError
        Not a readable Arrow IPC file, another schema, a missing id or content, or other than
        ``n_docs`` rows; each names the file (and the batch).
    """

    def __init__(self, path: str | Path, *, n_docs: int | None = None) -> None:
        import pyarrow as pa

        self.path = Path(path)
        try:
            reader = pa.ipc.open_file(pa.memory_map(str(self.path), "r"))
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise KolmValueError(f"{self.path}: not a readable documents file (Arrow IPC): {exc}") from exc
        self._setup(reader.schema, batches, n_docs)

    @classmethod
    def of_arrow(cls, table: Any, where: str) -> MappedDocumentTable:
        """A table over the batches of ``table``, a ``pyarrow.Table`` of :meth:`DocumentTable.to_arrow`'s
        columns (``where`` names it in errors): a streamed chunk whose texts stay in Arrow."""
        self = cls.__new__(cls)
        self.path = Path(where)
        self._setup(table.schema, table.to_batches(), None)
        return self

    def _setup(self, schema: Any, batches: list[Any], n_docs: int | None) -> None:
        if schema.names != list(DOCUMENT_FIELDS) or not all(str(t) in ("string", "large_string") for t in schema.types):
            raise KolmValueError(f"{self.path}: a documents file holds the string columns {list(DOCUMENT_FIELDS)}; "
                                 f"this one has {schema}")
        self._schema, self._batches = schema, batches
        self._starts = np.concatenate([[0], np.cumsum([b.num_rows for b in batches], dtype=np.int64)]).astype(np.int64)
        for b, batch in enumerate(batches):
            for name in ("id", "content"):
                if batch.column(_FIELD[name]).null_count:
                    raise KolmValueError(f"{self._where(b)}: a document without {name!r}")
        self._n = int(self._starts[-1])
        if n_docs is not None and self._n != n_docs:
            raise KolmValueError(f"{self.path}: holds {self._n} documents; manifest.json key 'n_docs' says {n_docs}")
        self._checked = np.zeros((len(DOCUMENT_FIELDS), len(batches)), bool)
        self._full: DocumentTable | None = None  # every row in memory, made on first need
        self._all_ids: npt.NDArray[np.object_] | None = None
        self._hashes: tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]] | None = None
        self._start()

    # -- reading batches ---------------------------------------------------------------
    def _where(self, b: int) -> str:
        return f"{self.path}: record batch {b} (rows {int(self._starts[b])}-{int(self._starts[b + 1]) - 1})"

    def _array(self, field: str, b: int) -> Any:
        """Column ``field`` of batch ``b``, checked in full the first time."""
        import pyarrow as pa

        f = _FIELD[field]
        arr = self._batches[b].column(f)
        if not self._checked[f, b]:
            try:
                arr.validate(full=True)
            except (pa.ArrowException, ValueError) as exc:
                raise KolmValueError(f"{self._where(b)}: column {field!r} is damaged: {exc}") from exc
            self._checked[f, b] = True
        return arr

    def _column(self, field: str) -> Iterator[Any]:
        return (self._array(field, b) for b in range(len(self._batches)))

    def _gather(self, field: str, codes: npt.ArrayLike) -> Any:
        """Column ``field`` at rows ``codes`` (int (m,), in ``[0, n)``), a ``pyarrow`` array in
        that order; only the batches holding them are read."""
        import pyarrow as pa

        codes = np.asarray(codes, dtype=np.int64).ravel()
        if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= self._n):
            raise IndexError(f"document codes must lie in [0, {self._n}), got {int(codes.min())}..{int(codes.max())}")
        if len(codes) == 0:
            return pa.array([], pa.string())
        batch = np.searchsorted(self._starts, codes, side="right") - 1
        grouped = bool(np.all(batch[1:] >= batch[:-1]))
        order = np.arange(len(codes)) if grouped else np.argsort(batch, kind="stable")
        cuts = np.flatnonzero(np.diff(batch[order])) + 1
        pieces = []
        for part in np.split(order, cuts):
            b = int(batch[part[0]])
            pieces.append(self._array(field, b).take(pa.array(codes[part] - self._starts[b])))
        out = concat_strings(pieces)
        if grouped:
            return out
        inverse = np.empty(len(order), np.int64)
        inverse[order] = np.arange(len(order))
        return out.take(pa.array(inverse))

    def _decoded(self, field: str, codes: npt.ArrayLike | None = None) -> list[Any]:
        """Python values of ``field`` (as an in-memory table holds them) at ``codes`` (default all)."""
        if codes is None:
            values = [v for arr in self._column(field) for v in arr.to_pylist()]
        else:
            values = self._gather(field, codes).to_pylist()
        try:
            return decoded(field, values, codes)
        except KolmValueError as exc:
            raise KolmValueError(f"{self.path}: {exc}") from exc

    def check(self) -> None:
        """Read every row once and check it: every column of every batch (Arrow's full
        validation), tags and metadata JSON of their kinds, ids unique (what a full load does).

        Raises
        ------
        KolmValueError
            The first problem, naming the file and the batch or row.
        """
        for field in ("tags", "metadata"):
            for b in range(len(self._batches)):
                arr = self._array(field, b)
                present = np.asarray(arr.is_valid())
                if not present.any():
                    continue
                try:
                    decoded(field, arr.filter(present).to_pylist(), self._starts[b] + np.flatnonzero(present))
                except KolmValueError as exc:
                    raise KolmValueError(f"{self.path}: {exc}") from exc
        for field in ("id", "content", "title", "source"):
            for _ in self._column(field):
                pass
        self._hash_index()

    # -- DocumentTable -----------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def _materialized(self) -> DocumentTable:
        if self._full is None:
            frame = pd.DataFrame({f: pd.Series(self._decoded(f), dtype=object) for f in DOCUMENT_FIELDS})
            try:
                self._full = DocumentTable(frame)
            except KolmValueError as exc:
                raise KolmValueError(f"{self.path}: {exc}") from exc
        return self._full

    @property
    def frame(self) -> pd.DataFrame:
        return self._materialized().frame

    @property
    def ids(self) -> npt.NDArray[np.object_]:
        if self._all_ids is None:
            ids = [arr.to_numpy(zero_copy_only=False) for arr in self._column("id")]
            self._all_ids = read_only_view(np.concatenate(ids).astype(object) if ids else np.zeros(0, object))
        return self._all_ids

    def ids_of(self, codes: npt.ArrayLike) -> Any:
        dtype = _string_dtype()
        taken = self._gather("id", codes)
        if isinstance(dtype, pd.StringDtype):
            return pd.array(taken, dtype=dtype)
        return pd.array(taken.to_numpy(zero_copy_only=False), dtype=dtype)

    def id_ranks(self, codes: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return string_ranks(self._gather("id", codes))

    def _lookup(self, ids: Sequence[str] | npt.ArrayLike) -> npt.NDArray[np.int64]:
        import pyarrow as pa

        from kolm_search._kernels import load

        values = [v if isinstance(v, str) else None for v in np.asarray(ids, dtype=object).ravel()]
        out = np.full(len(values), -1, np.int64)
        known = np.array([v is not None for v in values], bool)
        if not known.any() or self._n == 0:
            return out
        sorted_h, order = self._hash_index()
        wanted = [v for v in values if v is not None]
        h = np.empty(len(wanted), np.uint64)
        load("strings").hash_all(*buffers(pa.array(wanted, pa.large_string())), h)
        lo, hi = np.searchsorted(sorted_h, h, side="left"), np.searchsorted(sorted_h, h, side="right")
        found = np.full(len(wanted), -1, np.int64)
        hit = np.flatnonzero(hi > lo)
        if len(hit):
            first = order[lo[hit]]
            same = np.asarray(self._gather("id", first).to_pylist(), dtype=object) == np.asarray(wanted, object)[hit]
            found[hit[same]] = first[same]
            for i in hit[~same]:  # another id with the same hash came first: the rest of the run
                rest = order[lo[i] + 1:hi[i]]
                match = [int(c) for c, v in zip(rest, self._gather("id", rest).to_pylist(), strict=True) if v == wanted[i]]
                found[i] = match[0] if match else -1
        out[known] = found
        return out

    def _hash_index(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """Every id's hash, sorted, and the rows in that order (made once); a duplicate id raises."""
        from kolm_search._kernels import load

        if self._hashes is None:
            h = np.empty(self._n, np.uint64)
            for b, arr in enumerate(self._column("id")):
                load("strings").hash_all(*buffers(arr), h[self._starts[b]:self._starts[b + 1]])
            order = np.argsort(h, kind="stable")
            sorted_h = h[order]
            same = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
            if len(same):
                pairs = self._gather("id", np.concatenate([order[same], order[same + 1]])).to_pylist()
                for a, b in zip(pairs[:len(same)], pairs[len(same):], strict=True):
                    if a == b:
                        raise KolmValueError(f"{self.path}: duplicate document id {a!r} (ids must be unique)")
            self._hashes = (sorted_h, order.astype(np.int64))
        return self._hashes

    def texts(self, fields: Sequence[str] = ("title", "content")) -> list[str]:
        out: list[str] = []
        for b in range(len(self._batches)):
            columns = [decoded(f, self._array(f, b).to_pylist()) for f in fields]
            out += joined_texts(columns, self._batches[b].num_rows)
        return out

    def text_array(self, fields: Sequence[str] = ("title", "content")) -> Any:
        if not set(fields) <= _TEXT_FIELDS:  # tags or metadata: as Python values
            return super().text_array(fields)
        return concat_strings([joined_array([self._array(f, b) for f in fields], self._batches[b].num_rows)
                               for b in range(len(self._batches))])

    def digest(self) -> str:
        if self._digest is None:
            self._digest = arrow_digest([self._array(f, b) for f in DOCUMENT_FIELDS] for b in range(len(self._batches)))
        return self._digest

    def documents(self, codes: npt.ArrayLike, scores: npt.ArrayLike | None = None) -> list[SearchDocument]:
        codes = np.asarray(codes, dtype=np.int64).ravel()
        rows = zip(*(self._decoded(f, codes) for f in DOCUMENT_FIELDS), strict=True)
        return make_documents(rows, scores, len(codes))

    def take(self, rows: npt.ArrayLike) -> DocumentTable:
        rows = np.asarray(rows)
        codes = np.flatnonzero(rows) if rows.dtype == bool else rows.astype(np.int64)
        frame = pd.DataFrame({f: pd.Series(self._decoded(f, codes), dtype=object) for f in DOCUMENT_FIELDS})
        return DocumentTable._checked_rows(frame, frame["id"].to_numpy(dtype=object))

    def _column_values(self, field: str) -> list[Any]:
        return self._decoded(field)

    def to_arrow(self) -> Any:
        import pyarrow as pa

        for field in DOCUMENT_FIELDS:  # every column checked before anything copies it
            for _ in self._column(field):
                pass
        return pa.Table.from_batches(self._batches, self._schema)

    def save(self, path: str | Path | BinaryIO) -> None:
        import pyarrow.parquet as pq

        pq.write_table(self.to_arrow(), path)

    def __repr__(self) -> str:
        return f"MappedDocumentTable({len(self)} documents, {str(self.path)!r})"



def in_memory(table: MappedDocumentTable) -> DocumentTable:
    """Every row of ``table`` read and checked, as an in-memory :class:`DocumentTable` (ids
    checked unique, content text); errors name the file."""
    return table._materialized()
