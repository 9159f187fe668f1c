"""A JSONL corpus read in blocks by Arrow's JSON reader, each block checked as the line-by-line
reader checks it, and read line by line where it is not certain to give the same documents.

:func:`jsonl_block_chunks` yields the chunks that :func:`~kolm_search.io.corpus_stream.jsonl_chunks`
yields (the same documents, cut at the same places, the same errors naming the file and line),
with each chunk's table over Arrow columns (``MappedDocumentTable.of_arrow``): no Python
object per document. The file (plain or ``.gz``) is read in blocks of whole lines; a block is
parsed by ``pyarrow.json`` only when the answer cannot differ from ``json.loads`` line by line:

- the block is valid UTF-8 with no byte-order mark, no JSON escape of a surrogate (a lone one
  is refused by name) and no blank or whitespace-only line, and Arrow gives one row per line
  (its row ``i`` is line ``first + i``);
- ``_id`` is a column of strings (none empty) or of integers (written as Python writes them),
  never missing; ``text`` strings, never missing; ``title`` strings or missing (empty and
  missing titles are None); ``metadata`` absent, or never a non-empty object (the line reader
  keeps only non-empty objects);
- Arrow parses it at all: duplicate keys, numbers past 64 bits, ``NaN`` in a field read,
  control characters in strings and anything else Arrow refuses send the block to the line
  reader, which accepts it or names the line as it would anyway.

Any other block goes through the line reader (:func:`~kolm_search.io.beir.jsonl_records`,
the same checks as reading the whole file line by line), and a read error (a truncated or
corrupt ``.gz``) hands the rest of the file to it, re-read from its start, so the error names
the line it would name.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.engine.doc_fields import DOCUMENT_FIELDS
from kolm_search.engine.mapped_table import MappedDocumentTable
from kolm_search.errors import FrameValidationError
from kolm_search.io._text import BROKEN, _opener, text_lines
from kolm_search.io.beir import _text_and_title, jsonl_records

__all__ = ["jsonl_block_chunks"]

BLOCK_BYTES = 16 << 20  # bytes of lines parsed at a time
_BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_BLANK = re.compile(rb"\n[ \t\r]*\n")  # a blank line after the first (no alternation: a fast scan)
_BLANK_FIRST = re.compile(rb"[ \t\r]*\n")
_OPENS = re.compile(rb"[ \t\r]*\{")  # the first value an object


def _arrow_block(block: bytes) -> Any:
    """The documents of a block of whole lines as a ``pyarrow.Table`` of the six string columns,
    or None when the line reader must read it (see the module)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    last = block[block.rfind(b"\n") + 1:]  # a line without a newline (the file's last)
    if not _OPENS.match(block):  # pyarrow 26's read_json crashes (SIGSEGV) on a block whose first value is null
        return None
    if _BOM in block or _SURROGATE.search(block) or _BLANK.search(block) or _BLANK_FIRST.match(block) or (last and not last.strip(b" \t\r")):
        return None
    try:
        pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, len(block)], np.int32)), pa.py_buffer(block)) \
            .validate(full=True)  # UTF-8 (the line reader decodes every line)
        schema = pa.schema([("text", pa.string()), ("title", pa.string())])
        table = pj.read_json(io.BytesIO(block), read_options=pj.ReadOptions(use_threads=False, block_size=len(block) + 1),
                             parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer"))
    except (pa.ArrowException, ValueError, RecursionError):
        return None
    lines = block.count(b"\n") + (not block.endswith(b"\n"))
    names = table.schema.names
    if table.num_rows != lines or "_id" not in names:
        return None
    ids, text, title = table.column("_id"), table.column("text"), table.column("title")
    if ids.null_count or text.null_count:
        return None
    if pa.types.is_integer(ids.type):
        ids = ids.cast(pa.string())
    elif not pa.types.is_string(ids.type) or pc.any(pc.equal(ids, "")).as_py():
        return None
    if "metadata" in names:
        meta = table.schema.field("metadata").type
        if pa.types.is_struct(meta) and meta.num_fields:
            return None  # a non-empty object would be kept: the line reader writes it
    title = pc.if_else(pc.equal(title, ""), pa.scalar(None, pa.string()), title)
    empty = pa.nulls(table.num_rows, pa.string())
    columns = {"id": ids, "content": text, "title": title, "source": empty, "tags": empty, "metadata": empty}
    return pa.table([columns[c] for c in DOCUMENT_FIELDS], names=list(DOCUMENT_FIELDS))


def _line_block(path: Path, lines: Iterator[tuple[int, str]]) -> tuple[Any, npt.NDArray[np.int64], Exception | None]:
    """Records read line by line: a ``pyarrow.Table`` of the six columns (None if none), their
    lines, and the error that stopped the reading (raised once the rows before it are cut into
    chunks, as the line reader raises it)."""
    import pyarrow as pa

    ids: list[str] = []
    texts: list[str] = []
    titles: list[str | None] = []
    metas: list[str | None] = []
    numbers: list[int] = []
    error: Exception | None = None
    try:
        for lineno, obj in jsonl_records(path, lines, ("text", "title")):
            text, title = _text_and_title(path, lineno, obj)
            meta = obj.get("metadata")
            ids.append(str(obj["_id"]))
            texts.append(text)
            titles.append(title or None)
            metas.append(json.dumps(meta) if isinstance(meta, dict) and meta else None)  # as DocumentTable.to_arrow
            numbers.append(lineno)
    except FrameValidationError as exc:
        error = exc
    empty = [None] * len(ids)
    columns = {"id": ids, "content": texts, "title": titles, "source": empty, "tags": empty, "metadata": metas}
    table = pa.table([pa.array(columns[c], pa.string()) for c in DOCUMENT_FIELDS], names=list(DOCUMENT_FIELDS)) \
        if ids else None
    return table, np.asarray(numbers, np.int64), error


def _decoded_lines(path: Path, block: bytes, first: int) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a block as :func:`~kolm_search.io._text.text_lines` gives them."""
    parts = [part + b"\n" for part in block.split(b"\n")]  # lines keep their newline, as a file's do
    last = parts.pop()[:-1]
    if last:
        parts.append(last)
    for lineno, raw in enumerate(parts, start=first):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameValidationError(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        yield lineno, line.removeprefix("\ufeff") if lineno == 1 else line


def _segments(path: Path) -> Iterator[tuple[Any, npt.NDArray[np.int64], Exception | None]]:
    """``(table or None, line numbers, error or None)`` of the file's blocks, in order; the
    last one, if the file is refused, carries the error."""
    first, rest = 1, b""
    try:
        fh = _opener(path)(path, "rb")
    except BROKEN as exc:
        raise FrameValidationError(f"{path}:1: cannot read the file ({type(exc).__name__}: {exc})") from exc
    with fh:
        while True:
            try:
                data = fh.read(BLOCK_BYTES)
            except BROKEN:  # the line reader, from the first line not yet read, names the place
                table, numbers, error = _line_block(path, text_lines(path, line_range=(first, sys.maxsize)))
                yield table, numbers, error or FrameValidationError(f"{path}: the file could not be read (a build bug)")
                return
            if not data:
                block, rest = rest, b""
            else:
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest += data
                    continue
                block, rest = rest + data[:cut + 1], data[cut + 1:]
            if block:
                n_lines = block.count(b"\n") + (not block.endswith(b"\n"))
                table = _arrow_block(block)
                if table is not None:
                    yield table, np.arange(first, first + n_lines, dtype=np.int64), None
                else:
                    table, numbers, error = _line_block(path, _decoded_lines(path, block, first))
                    yield table, numbers, error
                    if error is not None:
                        return
                first += n_lines
            if not data:
                return


def jsonl_block_chunks(path: Path, size: int | None, chars: int) -> Iterator[tuple[MappedDocumentTable, npt.NDArray[np.int64]]]:
    """The documents of a whole JSONL file in chunks of at most ``size`` documents, each ending
    at the document that brings its text (content and title, in characters) to ``chars``, as
    :func:`~kolm_search.io.corpus_stream.jsonl_chunks` cuts them: ``(table, line numbers)``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    held: list[Any] = []
    numbers: list[npt.NDArray[np.int64]] = []
    n_rows = n_chars = 0
    for table, lines, error in _segments(path):
        if table is None or not table.num_rows:
            if error is not None:
                raise error
            continue
        sizes = np.asarray(pc.add(pc.utf8_length(table.column("content")),
                                  pc.fill_null(pc.utf8_length(table.column("title")), 0)), np.int64)
        lo = 0
        while lo < len(sizes):
            ends = n_chars + np.cumsum(sizes[lo:])
            stop = int(np.searchsorted(ends, chars, side="left"))  # the first row that fills it
            if size is not None:
                stop = min(stop, size - n_rows - 1)
            if stop >= len(ends):  # the chunk is not full yet
                held.append(table.slice(lo))
                numbers.append(lines[lo:])
                n_rows, n_chars = n_rows + len(ends), int(ends[-1])
                break
            held.append(table.slice(lo, stop + 1))
            numbers.append(lines[lo:lo + stop + 1])
            yield MappedDocumentTable.of_arrow(pa.concat_tables(held), str(path)), np.concatenate(numbers)
            held, numbers, n_rows, n_chars = [], [], 0, 0
            lo += stop + 1
        if error is not None:
            raise error
    if held:
        yield MappedDocumentTable.of_arrow(pa.concat_tables(held), str(path)), np.concatenate(numbers)
