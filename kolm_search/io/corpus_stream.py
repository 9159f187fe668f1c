"""A corpus read in chunks of documents, from a file, a folder or an iterable, never whole.

:func:`corpus_chunks` yields :class:`CorpusChunk` s, each a :class:`DocumentTable` of some
documents checked as an in-memory index checks them, and where each came from, so that a
streaming build (:mod:`kolm_search.retrievers.stream_build`) holds one chunk of text at a time.

Sources and the columns read:

=================================  ===========================================================
source                             documents
=================================  ===========================================================
``*.jsonl``, ``*.jsonl.gz``        BEIR records ``_id``, ``text``, ``title``, ``metadata``
                                   (as :func:`~kolm_search.io.load_beir` reads them)
a BEIR folder                      its ``corpus.jsonl[.gz]`` (or ``corpus.parquet``)
``*.parquet``, a parquet folder    ``_id``, ``text``, ``title`` (Hugging Face's BEIR layout) or
                                   ``id``, ``content`` and any columns a DataFrame may have;
                                   read in record batches of each row group (pyarrow.dataset)
``*.tsv``, ``*.tsv.gz``            ``id<TAB>text`` per line (MS MARCO's ``collection.tsv``)
a list of paths                    each as above, one after another
a DataFrame, or an iterable of     as :meth:`DocumentTable.from_frame` takes them
DataFrames
an iterable of dicts or            as :meth:`DocumentTable.from_documents` takes them
``SearchDocument`` s
=================================  ===========================================================

A document that does not make a table row (a broken JSON line, a missing or non-text field)
raises :class:`~kolm_search.errors.FrameValidationError` naming the file and the line (JSONL,
TSV), the file, row group and row (parquet) or the document's position (iterables).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._params import positive_int
from kolm_search.engine.doctable import DOCUMENT_FIELDS, DocumentTable
from kolm_search.errors import FrameValidationError, KolmTypeError, KolmValueError
from kolm_search.io._text import text_lines
from kolm_search.io.beir import _find, _jsonl, _text_and_title
from kolm_search.io.jsonl_blocks import jsonl_block_chunks

__all__ = ["CorpusChunk", "corpus_chunks"]

_CHUNK_CHARS = 32_000_000  # default characters of text per chunk
_BATCH_ROWS = 65_536  # parquet rows per record batch when no chunk size is given


@dataclass(frozen=True)
class CorpusChunk:
    """Some documents of a corpus, in corpus order.

    Attributes
    ----------
    table : DocumentTable
        The documents, checked as an in-memory index checks them (ids unique within the chunk).
    where : str
        The file (``"corpus.jsonl.gz"``; ``"x.parquet row group 3"``) or ``"documents"``.
    unit : str
        What :attr:`numbers` count: ``"line"``, ``"row"`` (within the row group) or ``"document"``.
    numbers : int64 (len(table),)
        Each document's line, row or position.
    """

    table: DocumentTable
    where: str
    unit: str
    numbers: npt.NDArray[np.int64]

    def place(self, row: int) -> str:
        """Where document ``row`` of the chunk came from: ``"corpus.jsonl: line 12"``."""
        return f"{self.where}: {self.unit} {int(self.numbers[row])}"


def corpus_chunks(source: Any, *, chunk_size: int | None = None,
                  chunk_chars: int | None = None) -> Iterator[CorpusChunk]:
    """The documents of ``source`` (see the module's table) in chunks, in order.

    Parameters
    ----------
    source : str, Path, list of paths, DataFrame or iterable
    chunk_size : int, optional
        Most documents per chunk.
    chunk_chars : int, optional
        Most characters of text per chunk (default 32 M); a chunk holds at least one document.

    Raises
    ------
    FrameValidationError
        A document that makes no table row, naming where it is (before its chunk is yielded).
    KolmValueError, KolmTypeError
        A path that does not exist or is of no known kind; a source of another type.
    """
    size = positive_int("chunk_size", chunk_size, none=True)
    chars = positive_int("chunk_chars", chunk_chars, none=True) or _CHUNK_CHARS
    if isinstance(source, (str, Path)):
        yield from _path_chunks(Path(source).expanduser(), size, chars)
    elif is_path_list(source):
        for item in source:
            yield from _path_chunks(Path(item).expanduser(), size, chars)
    elif isinstance(source, pd.DataFrame):
        yield from _frame_chunks([source], size)
    elif isinstance(source, (bytes, DocumentTable)) or not isinstance(source, Iterable):
        raise KolmTypeError("a corpus is a path, a DataFrame or an iterable of documents or DataFrames, "
                            f"got {type(source).__name__}")
    else:
        yield from _iterable_chunks(iter(source), size, chars)


def is_path_list(source: Any) -> bool:
    """A list or tuple of paths (files or folders read one after another)."""
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(s, (str, Path)) for s in source)


def corpus_file(path: Path) -> tuple[Path, str]:
    """The file a corpus path names (a BEIR folder's corpus file, a parquet folder itself) and
    its kind: ``"jsonl"``, ``"tsv"`` or ``"parquet"``."""
    if path.is_dir():
        if any(path.glob("*.parquet")) and not any(path.glob("corpus.*")):
            return path, "parquet"
        path = _find(path, "corpus.jsonl")
    if not path.is_file():
        raise KolmValueError(f"corpus {str(path)!r} does not exist")
    name = path.name.removesuffix(".gz")
    for kind in ("jsonl", "parquet", "tsv"):
        if name.endswith(f".{kind}"):
            return path, kind
    raise KolmValueError(f"{path}: a corpus file is .jsonl[.gz], .parquet or .tsv[.gz]")


def _path_chunks(path: Path, size: int | None, chars: int) -> Iterator[CorpusChunk]:
    path, kind = corpus_file(path)
    if kind == "jsonl":
        yield from jsonl_chunks(path, size, chars)
    elif kind == "parquet":
        yield from _parquet_chunks(path, size, chars)
    else:
        yield from tsv_chunks(path, size, chars)


def _table(frame: pd.DataFrame, where: str, unit: str, numbers: npt.NDArray[np.int64], *,
           direct: bool = False) -> DocumentTable:
    """A chunk's table (``direct``: of a frame of the table's own columns, else as
    :meth:`DocumentTable.from_frame` takes one); a duplicate id names both places, another
    error ``where`` and the chunk's first document."""
    if "id" in frame.columns:
        _check_unique(frame["id"], where, unit, numbers)
    try:
        return DocumentTable(frame) if direct else DocumentTable.from_frame(frame)
    except (KolmValueError, KolmTypeError) as exc:
        raise FrameValidationError(f"{where} (chunk from {unit} {numbers[0] if len(numbers) else 0}): {exc}") from exc


def _check_unique(ids: pd.Series, where: str, unit: str, numbers: npt.NDArray[np.int64]) -> None:
    """Refuse a duplicate among a chunk's ``ids``, naming both places."""
    dup = ids.duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        doc_id = ids.iloc[row]
        first = int(np.flatnonzero((ids == doc_id).to_numpy())[0])
        raise FrameValidationError(f"{where}: {unit} {numbers[row]}: duplicate document id {doc_id!r} "
                                   f"(first at {where}: {unit} {numbers[first]})")


class _Rows:
    """Rows of a chunk being gathered (the columns of :data:`DOCUMENT_FIELDS`), and when it is full."""

    def __init__(self, size: int | None, chars: int) -> None:
        self.size, self.chars = size, chars
        self.rows: list[tuple[Any, ...]] = []
        self.numbers: list[int] = []
        self.n_chars = 0

    def add(self, number: int, doc_id: str, content: str, title: str | None, source: str | None = None,
            tags: Any = None, metadata: Any = None) -> bool:
        """Append a row; True when the chunk is full."""
        self.rows.append((doc_id, content, title, source, tags, metadata))
        self.numbers.append(number)
        self.n_chars += len(content) + len(title or "")
        return (self.size is not None and len(self.rows) >= self.size) or self.n_chars >= self.chars

    def chunk(self, where: str, unit: str) -> CorpusChunk:
        """The rows gathered as a chunk (and a fresh start)."""
        frame = pd.DataFrame(self.rows, columns=list(DOCUMENT_FIELDS))
        numbers = np.asarray(self.numbers, np.int64)
        out = CorpusChunk(_table(frame, where, unit, numbers, direct=True), where, unit, numbers)
        self.rows, self.numbers, self.n_chars = [], [], 0
        return out


def jsonl_chunks(path: Path, size: int | None, chars: int, **span: Any) -> Iterator[CorpusChunk]:
    """BEIR records, read as :func:`~kolm_search.io.load_beir` reads them (of a part of the
    file: ``span`` as :func:`~kolm_search.io._text.text_lines` takes it)."""
    if not span:  # the whole file: in blocks, by Arrow where it reads as the lines do
        for table, numbers in jsonl_block_chunks(path, size, chars):
            _check_unique(pd.Series(table.ids), str(path), "line", numbers)
            yield CorpusChunk(table, str(path), "line", numbers)
        return
    rows = _Rows(size, chars)
    for lineno, obj in _jsonl(path, ("text", "title"), **span):
        text, title = _text_and_title(path, lineno, obj)
        meta = obj.get("metadata")
        if rows.add(lineno, str(obj["_id"]), text, title or None, metadata=meta if isinstance(meta, dict) and meta else None):
            yield rows.chunk(str(path), "line")
    if rows.rows:
        yield rows.chunk(str(path), "line")


def tsv_chunks(path: Path, size: int | None, chars: int, **span: Any) -> Iterator[CorpusChunk]:
    """``id<TAB>text`` lines (blank lines skipped; ``span`` as :func:`jsonl_chunks` takes it)."""
    rows = _Rows(size, chars)
    for lineno, line in text_lines(path, **span):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        doc_id, tab, text = line.partition("\t")
        if not tab or not doc_id:
            raise FrameValidationError(f"{path}:{lineno}: expected 'id<TAB>text', got {line[:60]!r}")
        if rows.add(lineno, doc_id, text, None):
            yield rows.chunk(str(path), "line")
    if rows.rows:
        yield rows.chunk(str(path), "line")


def parquet_layout(path: Path) -> tuple[Any, bool, list[str]]:
    """The pyarrow dataset of a parquet file or folder, whether it has BEIR's columns, and the
    columns a corpus reads; a file that is not parquet or lacks the columns raises naming it."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    try:
        dataset = ds.dataset(str(path), format="parquet")
        schema = dataset.schema
    except (OSError, pa.ArrowException) as exc:
        raise FrameValidationError(f"{path}: cannot read it as parquet ({type(exc).__name__}: {exc})") from exc
    beir = "_id" in schema.names
    need = ("_id", "text") if beir else ("id", "content")
    missing = [c for c in need if c not in schema.names]
    if missing:
        raise FrameValidationError(f"{path}: lacks column(s) {missing}; has {schema.names} "
                                   "(a corpus has _id, text[, title] or id, content, ...)")
    columns = [c for c in ("_id", "text", "title") if c in schema.names] if beir else list(schema.names)
    return dataset, beir, columns


def _parquet_chunks(path: Path, size: int | None, chars: int) -> Iterator[CorpusChunk]:
    """Record batches of each row group of each file of a parquet file or folder."""
    dataset, beir, columns = parquet_layout(path)
    for fragment in dataset.get_fragments():
        for group in fragment.split_by_row_group():
            where = f"{fragment.path} row group {group.row_groups[0].id}"
            yield from row_group_chunks(functools.partial(group.to_batches, columns=columns,
                                                          batch_size=size or _BATCH_ROWS), where, beir, size, chars)


def row_group_chunks(batches: Callable[[], Iterable[Any]], where: str, beir: bool, size: int | None,
                     chars: int) -> Iterator[CorpusChunk]:
    """The documents of one row group, read as ``batches()`` gives its record batches (of
    ``size`` rows, default 65,536), in chunks; rows are numbered within the row group."""
    import pyarrow as pa

    start = 0
    try:
        for batch in batches():
            frame = _checked_batch(batch, where, start, beir)
            n = len(frame)
            step = size or max(1, int(n * chars / max(1, frame["content"].str.len().sum() or 1)))
            for lo in range(0, n, step):
                part = frame.iloc[lo:lo + step]
                numbers = np.arange(start + lo, start + lo + len(part), dtype=np.int64)
                yield CorpusChunk(_table(part, where, "row", numbers), where, "row", numbers)
            start += n
    except pa.ArrowException as exc:
        raise FrameValidationError(f"{where}: cannot read it ({type(exc).__name__}: {exc})") from exc


def _checked_batch(batch: Any, where: str, start: int, beir: bool) -> pd.DataFrame:
    """A record batch as a frame ``id, content, title, ...``; a column of another type or a
    missing id or text raises naming ``where`` and the row."""
    import pyarrow as pa

    id_col, text_col = ("_id", "text") if beir else ("id", "content")
    for name in (id_col, text_col, "title"):
        if name not in batch.schema.names:
            continue
        kind = batch.schema.field(name).type
        ok = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind) or (
            name == "_id" and pa.types.is_integer(kind))
        if not ok:
            raise FrameValidationError(f"{where}: column {name!r} has type {kind}; expected strings")
        if name != "title" and batch.column(name).null_count:
            row = int(np.flatnonzero(batch.column(name).is_null().to_numpy(zero_copy_only=False))[0])
            raise FrameValidationError(f"{where}: row {start + row}: {name!r} is missing")
    frame = batch.to_pandas()
    if beir:
        title = frame["title"].map(lambda t: t if isinstance(t, str) and t else None) if "title" in frame else None
        frame = pd.DataFrame({"id": frame["_id"].astype(str), "title": title, "content": frame["text"]})
    return frame


def _frame_chunks(frames: Iterable[Any], size: int | None) -> Iterator[CorpusChunk]:
    start = 0
    for k, frame in enumerate(frames):
        if not isinstance(frame, pd.DataFrame):
            raise KolmTypeError(f"documents: item {k} is a {type(frame).__name__}; an iterable of DataFrames "
                                "holds only DataFrames")
        step = size or max(len(frame), 1)
        for lo in range(0, len(frame), step):
            part = frame.iloc[lo:lo + step]
            where = f"documents (DataFrame {k})"
            numbers = np.arange(start, start + len(part), dtype=np.int64)
            yield CorpusChunk(_table(part, where, "document", numbers), where, "document", numbers)
            start += len(part)


def _iterable_chunks(items: Iterator[Any], size: int | None, chars: int) -> Iterator[CorpusChunk]:
    first = next(items, None)
    if first is None:
        return
    if isinstance(first, pd.DataFrame):
        yield from _frame_chunks(_prepend(first, items), size)
        return
    batch: list[Any] = []
    start = n_chars = 0
    for item in _prepend(first, items):
        batch.append(item)
        content = item.get("content") if isinstance(item, Mapping) else getattr(item, "content", None)
        n_chars += len(content) if isinstance(content, str) else 0
        if (size is not None and len(batch) >= size) or n_chars >= chars:
            yield _documents_chunk(batch, start)
            start += len(batch)
            batch, n_chars = [], 0
    if batch:
        yield _documents_chunk(batch, start)


def _documents_chunk(batch: list[Any], start: int) -> CorpusChunk:
    """Documents (dicts or ``SearchDocument`` s) ``start ..`` as a chunk; an error names the document."""
    numbers = np.arange(start, start + len(batch), dtype=np.int64)
    try:
        table = DocumentTable.from_documents(batch)
    except (KolmValueError, KolmTypeError) as exc:
        singles = []
        for i, item in enumerate(batch):  # which document: each one alone
            try:
                singles.append(DocumentTable.from_documents([item]))
            except (KolmValueError, KolmTypeError) as one:
                raise FrameValidationError(f"documents: document {start + i}: {one}") from one
        _check_unique(pd.Series([t.ids[0] for t in singles]), "documents", "document", numbers)
        raise FrameValidationError(f"documents (chunk from document {start}): {exc}") from exc
    return CorpusChunk(table, "documents", "document", numbers)


def _prepend(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
