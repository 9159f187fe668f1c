"""The document table: the corpus as columns, string ids interned to dense int codes once.

Schema (a pandas DataFrame, one row per document, row position == document code):

=========  ===========  =====================================================
column     dtype        meaning
=========  ===========  =====================================================
id         str          unique document id
content    str          text
title      str or None
source     str or None
tags       list or None
metadata   dict or None arbitrary metadata; filters match its keys (kolm_search.engine.filters)
=========  ===========  =====================================================

Everything below the edge speaks codes (``int64`` row positions), never string ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.engine.arrow_strings import string_ranks
from kolm_search.engine.doc_fields import DOCUMENT_FIELDS, arrow_digest, decoded, joined_texts, make_documents
from kolm_search.engine.filters import FieldColumn, compile_filter, date_text, parse_filter, select_filter
from kolm_search.engine.read_only import read_only_view
from kolm_search.engine.selection import Selection, Selections
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.types import SearchDocument

__all__ = ["DOCUMENT_FIELDS", "DocumentTable", "IndexesDocuments", "checked_codes"]



def _as_list(value: Any) -> list[Any] | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, str):
        return [value]
    return list(value)


@runtime_checkable
class IndexesDocuments(Protocol):
    """An index over a :class:`DocumentTable` (a built or loaded ``BM25Retriever``,
    ``DenseRetriever``, ``FeedbackRetriever``): wherever documents are taken, its table is."""

    @property
    def table(self) -> DocumentTable: ...


class DocumentTable:
    """An immutable corpus with dense codes ``0..n-1`` (row positions).

    Build with :meth:`from_documents` or :meth:`from_frame`.
    """

    def __init__(self, frame: pd.DataFrame) -> None:
        missing = [c for c in ("id", "content") if c not in frame.columns]
        if missing:
            raise KolmValueError(f"document table needs columns {missing}; got {list(frame.columns)}")
        # the table's own copy of the caller's columns: the caller's frame may share its arrays, and a
        # write through a column's .array (which pandas' copy on write does not see) would reach the table
        frame = frame[[c for c in DOCUMENT_FIELDS if c in frame.columns]].copy(deep=True).reset_index(drop=True)
        for col in DOCUMENT_FIELDS[2:]:
            if col not in frame.columns:
                frame[col] = None
        ids = frame["id"]
        bad = ~ids.map(lambda v: isinstance(v, str)).astype(bool)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise KolmValueError(f"document ids must be strings; row {row} has {ids.iloc[row]!r}")
        dup = ids.duplicated()
        if dup.any():
            raise KolmValueError(f"duplicate document id {ids[dup].iloc[0]!r} (ids must be unique)")
        content = frame["content"]
        badc = ~content.map(lambda v: isinstance(v, str)).astype(bool)
        if badc.any():
            row = int(np.flatnonzero(badc.to_numpy())[0])
            raise KolmValueError(f"document content must be str; document {ids.iloc[row]!r} has {content.iloc[row]!r}")
        self._frame: pd.DataFrame = frame[list(DOCUMENT_FIELDS)]
        self._ids: npt.NDArray[np.object_] = read_only_view(ids.to_numpy(dtype=object))  # (looked up, digested once)
        self._start()

    def _start(self) -> None:
        """The caches every table starts with (empty)."""
        self._index: pd.Index | None = None  # ids -> codes, made on the first lookup
        self._id_array: Any = None  # the ids as a run's doc_id column holds them
        self._id_ranks: npt.NDArray[np.int64] | None = None  # each id's rank in code point order
        self._digest: str | None = None
        self._columns: dict[str, FieldColumn] = {}
        #: the last batch's filter trees and selections (see retrievers._batching.filter_selections)
        self.last_selections: tuple[Any, Selections] | None = None

    @property
    def frame(self) -> pd.DataFrame:
        """The whole table as a pandas DataFrame (columns :data:`DOCUMENT_FIELDS`, object dtype).

        A memory-mapped table (:class:`~kolm_search.engine.mapped_table.MappedDocumentTable`)
        makes it on first use: every document as Python objects. A copy on write of the table's
        own (a write into it through ``loc``, ``iloc``, ``at`` or a column assignment changes the
        caller's frame alone; under pandas' copy on write, pandas 3)."""
        return self._frame.copy(deep=False)

    @property
    def ids(self) -> npt.NDArray[np.object_]:
        """Every document id, object (n_docs,), read-only; row ``i`` is the id of code ``i``. Prefer
        :meth:`ids_of` for some codes (a memory-mapped table makes this array on first use)."""
        return self._ids

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_documents(cls, documents: Iterable[SearchDocument | Mapping[str, Any]]) -> DocumentTable:
        """From ``SearchDocument``s (or dicts with their keys)."""
        rows = []
        for i, d in enumerate(documents):
            try:
                doc = d if isinstance(d, SearchDocument) else SearchDocument.from_dict(d)
            except (KolmTypeError, KolmValueError) as exc:
                raise type(exc)(f"document {i}: {exc}") from exc
            rows.append((doc.id, doc.content, doc.title, doc.source, doc.tags, doc.metadata))
        return cls(pd.DataFrame(rows, columns=list(DOCUMENT_FIELDS)))

    @classmethod
    def coerce(cls, documents: Any) -> DocumentTable:
        """A table from what the retrievers and presets take: a ``DocumentTable`` (itself), a
        built or loaded index (an :class:`IndexesDocuments`: its table), a DataFrame
        (:meth:`from_frame`) or an iterable of ``SearchDocument``s or dicts (:meth:`from_documents`).

        Raises
        ------
        KolmTypeError
            A single document, a string, a mapping or anything not iterable.
        KolmValueError
            Documents that do not make a table (bad fields, duplicate ids, ...).
        """
        if isinstance(documents, DocumentTable):
            return documents
        if isinstance(documents, IndexesDocuments) and isinstance(documents.table, DocumentTable):
            return documents.table
        if isinstance(documents, pd.DataFrame):
            return cls.from_frame(documents)
        if isinstance(documents, (str, bytes, Mapping, SearchDocument)) or not hasattr(documents, "__iter__"):
            raise KolmTypeError("documents must be a list of documents, a DataFrame or a DocumentTable, "
                                f"got {type(documents).__name__}")
        try:
            return cls.from_documents(documents)
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, (KolmTypeError, KolmValueError)):
                raise
            raise KolmValueError(f"invalid documents: {exc}") from exc

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, *, id_column: str = "id", content_column: str = "content") -> DocumentTable:
        """From a DataFrame with ``id`` and ``content`` (optional ``title``, ``source``, ``tags``).

        Any other column becomes a metadata key (missing values dropped).
        """
        if not isinstance(frame, pd.DataFrame):
            raise KolmTypeError(f"expected a pandas DataFrame, got {type(frame).__name__}")
        df = frame.rename(columns={id_column: "id", content_column: "content"})
        extra = [c for c in df.columns if c not in DOCUMENT_FIELDS]
        out = pd.DataFrame({c: df[c] for c in DOCUMENT_FIELDS if c in df.columns})
        if "tags" in out.columns:
            out["tags"] = out["tags"].map(_as_list)
        if extra:
            records = df[extra].to_dict(orient="records")
            meta = [{k: v for k, v in r.items() if not _is_missing(v)} | dict(m or {})
                    for r, m in zip(records, df["metadata"] if "metadata" in df.columns else [None] * len(df), strict=True)]
            out["metadata"] = [m or None for m in meta]
        return cls(out)

    # -- access ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    def codes(self, ids: Sequence[str] | npt.ArrayLike, *, missing: str = "raise") -> npt.NDArray[np.int64]:
        """Codes of ``ids``; unknown ids raise (``missing="raise"``) or map to -1 (``"ignore"``)."""
        return checked_codes(self._lookup(ids), ids, missing)

    def _lookup(self, ids: Sequence[str] | npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Codes of ``ids``, -1 where unknown."""
        if self._index is None:
            self._index = pd.Index(self.ids)
        return self._index.get_indexer(pd.Index(ids)).astype(np.int64)

    def ids_of(self, codes: npt.ArrayLike) -> Any:
        """The ids of ``codes`` (int (m,)) as a DataFrame column of them holds them (pandas'
        string array): what a run's ``doc_id`` column is made of."""
        if self._id_array is None:
            self._id_array = pd.Series(self.ids).array
        return self._id_array.take(np.asarray(codes, dtype=np.int64))

    def id_ranks(self, codes: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Ranks int64 ``(m,)`` of the ids of ``codes`` (int ``(m,)``) in code point order,
        comparable within one call: a larger id, a larger rank; equal ranks for equal codes
        (trec_eval's tie-break compares document ids so). Here every id is ranked once, then
        looked up; a memory-mapped table ranks the ids of ``codes`` alone."""
        if self._id_ranks is None:
            self._id_ranks = string_ranks(self.ids)
        return self._id_ranks[np.asarray(codes, dtype=np.int64)]

    def texts(self, fields: Sequence[str] = ("title", "content")) -> list[str]:
        """One string per document: the given fields joined by a space (missing and empty skipped)."""
        return joined_texts([self._frame[f].tolist() for f in fields], len(self))

    def text_array(self, fields: Sequence[str] = ("title", "content")) -> Any:
        """:meth:`texts` as a ``pyarrow`` large_string array (what a streaming build tokenises)."""
        import pyarrow as pa

        return pa.array(self.texts(fields), pa.large_string())

    def digest(self) -> str:
        """A digest of every field of every document (as :meth:`to_arrow` writes them), the same
        for equal tables however they are stored; made once (tables are immutable)."""
        if self._digest is None:
            self._digest = arrow_digest([self.to_arrow().columns])
        return self._digest

    def documents(self, codes: npt.ArrayLike, scores: npt.ArrayLike | None = None) -> list[SearchDocument]:
        """``SearchDocument``s for ``codes`` (the edge conversion), carrying ``scores``."""
        codes = np.asarray(codes, dtype=np.int64)
        return make_documents(self._frame.iloc[codes].itertuples(index=False, name=None), scores, len(codes))

    # -- new tables (incremental indexes) -----------------------------------------------
    @classmethod
    def _checked_rows(cls, frame: pd.DataFrame, ids: npt.NDArray[np.object_]) -> DocumentTable:
        """A table of rows taken from tables (already validated): only id uniqueness is checked."""
        index = pd.Index(ids)
        if not index.is_unique:
            raise KolmValueError(f"duplicate document id {index[index.duplicated()][0]!r} (ids must be unique)")
        self = cls.__new__(cls)
        self._frame, self._ids = frame.reset_index(drop=True), read_only_view(ids)
        self._start()
        self._index = index
        return self

    def take(self, rows: npt.ArrayLike) -> DocumentTable:
        """A new table of the rows ``rows`` (int64 codes or a bool mask (n_docs,)), in order."""
        rows = np.asarray(rows)
        codes = np.flatnonzero(rows) if rows.dtype == bool else rows.astype(np.int64)
        return DocumentTable._checked_rows(self._frame.iloc[codes], self.ids[codes])

    @classmethod
    def concat(cls, tables: Sequence[DocumentTable]) -> DocumentTable:
        """A new table holding the rows of ``tables`` one after the other (ids must stay unique)."""
        if not tables:
            return cls(pd.DataFrame(columns=list(DOCUMENT_FIELDS)))
        frames = [t.frame for t in tables if len(t)] or [tables[0].frame]  # empty frames: pandas warns
        return cls._checked_rows(pd.concat(frames, ignore_index=True), np.concatenate([t.ids for t in tables]))

    # -- filters (grammar and semantics: kolm_search.engine.filters) ----------------------------
    def field_values(self, name: str) -> list[Any]:
        """One value per document of field ``name``: a document field, else a metadata key
        (``metadata.<key>`` names a metadata key explicitly), else a dotted path into nested
        metadata dicts (``author.name``); ``None`` where absent.

        Raises ``KolmValueError`` when no document has the field.
        """
        if name in DOCUMENT_FIELDS and name != "metadata":
            return self._column_values(name)
        key = name[len("metadata."):] if name.startswith("metadata.") else name
        metas = self._column_values("metadata")
        if "." in key and not any(isinstance(m, Mapping) and key in m for m in metas):
            path = key.split(".")  # a path into nested dicts ("author.name"), when no key is spelt so
            values = [_nested(m, path) for m in metas]
            if any(v is not _ABSENT for v in values):
                return [None if v is _ABSENT else v for v in values]
        if not any(isinstance(m, Mapping) and key in m for m in metas):
            fields = sorted(set(DOCUMENT_FIELDS) - {"metadata"} | {k for m in metas if isinstance(m, Mapping) for k in m})
            raise KolmValueError(f"unknown filter field {name!r}; known fields: {fields[:20]}")
        return [m.get(key) if isinstance(m, Mapping) else None for m in metas]

    def _column_values(self, field: str) -> list[Any]:
        """Every document's value of the field ``field`` (one of :data:`DOCUMENT_FIELDS`)."""
        return self._frame[field].tolist()

    def field_column(self, name: str) -> FieldColumn:
        """The elements of field ``name`` laid out for filtering (built once, then cached)."""
        column = self._columns.get(name)
        if column is None:
            column = self._columns[name] = FieldColumn.build(name, self.field_values(name), self.ids)
        return column

    def filter_mask(self, filters: Mapping[str, Any] | None) -> npt.NDArray[np.bool_] | None:
        """Boolean mask (n_docs,) of the documents matching ``filters``; ``None`` for no filter.

        ``filters`` follows :mod:`kolm_search.engine.filters` (MongoDB-style operators; a bare value
        means ``$eq``, a list ``$in``; on list fields such as ``tags`` any element may match).
        Raises ``KolmValueError``/``KolmTypeError`` naming the field and operator for an
        unknown field or operator or an operand of the wrong type.
        """
        if not filters:
            return None
        return self.compile(parse_filter(filters))

    def compile(self, tree: Any) -> npt.NDArray[np.bool_]:
        """The mask (n_docs,) of a filter tree from :func:`kolm_search.engine.filters.parse_filter`."""
        return compile_filter(tree, self.field_column, len(self))

    def select(self, tree: Any) -> Selection:
        """The :class:`~kolm_search.engine.selection.Selection` of a filter tree (its matching rows
        when they are few, else a mask)."""
        return select_filter(tree, self.field_column, len(self))

    # -- persistence (parquet, no pickle) ----------------------------------------------
    def save(self, path: str | Path | BinaryIO) -> None:
        """Write to a parquet file, or a binary file object (tags and metadata as JSON text)."""
        df = self._frame.copy()
        df["tags"] = df["tags"].map(lambda v: None if v is None else json.dumps(list(v), default=_json_value))
        df["metadata"] = df["metadata"].map(lambda v: None if v is None else json.dumps(v, default=_json_value))
        df.to_parquet(path, index=False)

    def to_arrow(self) -> Any:
        """The columns :meth:`save` writes, as a ``pyarrow.Table`` of six string columns (tags and
        metadata as JSON text): what :meth:`load` reads back, one schema for any rows (a streaming
        build writes chunks of a corpus with it, :mod:`kolm_search.retrievers.stream_build`)."""
        import pyarrow as pa

        def text(values: list[Any]) -> list[str | None]:
            return [v if isinstance(v, str) else None for v in values]

        def as_json(values: list[Any]) -> list[str | None]:
            return [None if v is None else json.dumps(v, default=_json_value) for v in values]

        f = self._frame
        columns = [text(f[c].tolist()) for c in DOCUMENT_FIELDS[:4]]
        columns += [as_json([None if v is None else list(v) for v in f["tags"].tolist()]), as_json(f["metadata"].tolist())]
        return pa.table(columns, schema=pa.schema([(c, pa.string()) for c in DOCUMENT_FIELDS]))

    @classmethod
    def load(cls, path: str | Path) -> DocumentTable:
        """Read a table written by :meth:`save`."""
        try:
            df = pd.read_parquet(path)
        except Exception as exc:
            raise KolmValueError(f"cannot read document table {str(path)!r}: {exc}") from exc
        missing = [c for c in DOCUMENT_FIELDS if c not in df.columns]
        if missing:
            raise KolmValueError(f"document table {str(path)!r} lacks columns {missing}")
        return cls(pd.DataFrame({c: pd.Series(decoded(c, df[c].tolist()), dtype=object) for c in DOCUMENT_FIELDS}))

    def __repr__(self) -> str:
        return f"DocumentTable({len(self)} documents)"


_ABSENT = object()


def checked_codes(codes: npt.NDArray[np.int64], ids: Any, missing: str) -> npt.NDArray[np.int64]:
    """``codes`` (-1 where unknown) of ``ids``; an unknown id raises with ``missing="raise"``."""
    if missing == "raise" and (codes < 0).any():
        unknown = np.asarray(ids, dtype=object)[codes < 0]
        raise KolmValueError(f"{int((codes < 0).sum())} unknown document id(s), e.g. {unknown[0]!r}")
    return codes


def _nested(value: Any, path: list[str]) -> Any:
    """``value[path[0]][path[1]]...`` through dicts; ``_ABSENT`` where the path breaks off."""
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _json_value(v: Any) -> Any:
    """A value JSON cannot write: numpy scalars and arrays as the Python values they hold, dates
    as the text filters compare (so a filter matches them alike before and after a save),
    anything else as its text."""
    if v is pd.NaT or (isinstance(v, np.datetime64) and np.isnat(v)):
        return None  # missing, as filters see it
    text = date_text(v)
    if text is not None:
        return text
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False
