"""TREC run files through pyarrow's CSV reader and writer: the fast path of
:func:`~kolm_search.io.read_run` and :func:`~kolm_search.io.write_run`.

Reading parses the file with one space between fields (what every writer of run files writes),
on every core, then checks what pyarrow's parse does not: no empty field, no tab inside a field
(the general reader splits at runs of spaces and tabs), finite scores, ranks whose 0-based form
fits int64 (read off the bytes, :mod:`kolm_search.engine.arrow_strings`), and no document twice
for one query (each query's documents screened by their hashes in one pass, the exact search
only when two hash alike). Every column is parsed as plain strings but the score: dictionaries
would hash every row. A file
that does not pass returns ``None``, and the caller's general reader (pandas' C parser, then a
line-by-line scan naming the line) reads it instead, so the result or the error is the one that
reader gives. Writing formats every column with Arrow (scores in the shortest text that reads
back to the same float64) and streams it out in batches, each batch formatted on a worker
thread while the one before it is written.

Both show a progress bar on stderr (tqdm) for files above :data:`PROGRESS_BYTES` unless
``progress=False`` (``True`` forces it).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from kolm_search.engine.arrow_strings import buffers
from kolm_search.errors import FrameValidationError

__all__ = ["PROGRESS_BYTES", "PROGRESS_ROWS", "read_run_arrow", "write_run_arrow"]

PROGRESS_BYTES = 256 * 2**20  # files above this show a progress bar by default
PROGRESS_ROWS = 4_000_000  # runs above this many rows show one when written
_FIELDS = ["qid", "q0", "doc_id", "rank", "score", "tag"]
_BATCH_ROWS = 1 << 19
_AHEAD = 2  # batches formatted ahead of the writer
# every character Python's str.isspace() accepts: an id must hold none of them
_ASCII_SPACE = np.zeros(256, bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True  # the ASCII characters str.isspace() accepts
_SPACE_CLASS = ("[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
                "\\x{202f}\\x{205f}\\x{3000}]")


class _Counting:
    """A binary file whose bytes read are counted, for a progress bar."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.count, self.closed = fh, 0, False

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self.count += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fh, name)


def _show(progress: bool | None, size: int, threshold: int) -> bool:
    return bool(progress) if progress is not None else size > threshold


def _with_progress(fn: Any, counter: _Counting, total: int, desc: str, show: bool) -> Any:
    """``fn()`` with a byte progress bar fed by ``counter`` from a watching thread."""
    if not show:
        return fn()
    from tqdm.auto import tqdm

    done = threading.Event()
    with tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False, file=None) as bar:
        def watch() -> None:
            while not done.wait(0.2):
                bar.update(min(counter.count, total) - bar.n)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            return fn()
        finally:
            done.set()
            watcher.join()
            bar.update(min(counter.count, total) - bar.n)


def _parse(path: Path, progress: bool | None) -> pa.Table | None:
    size = path.stat().st_size
    options = {
        "read_options": pcsv.ReadOptions(column_names=_FIELDS, block_size=1 << 20),
        "parse_options": pcsv.ParseOptions(delimiter=" ", quote_char=False, escape_char=False, double_quote=False,
                                           newlines_in_values=False, ignore_empty_lines=True),
        "convert_options": pcsv.ConvertOptions(
            # large_string ids: what pandas' str dtype holds (a string column would be cast)
            column_types={"qid": pa.string(), "q0": pa.string(), "doc_id": pa.large_string(), "rank": pa.string(),
                          "score": pa.float64(), "tag": pa.string()}, strings_can_be_null=False, quoted_strings_can_be_null=False, null_values=[],
            true_values=[], false_values=[])}
    show = _show(progress, size, PROGRESS_BYTES)
    if not show:  # by path: pyarrow's own reader (read-ahead, decompression by extension) is the fastest
        try:
            return pcsv.read_csv(str(path), **options)
        except (pa.ArrowException, OSError, EOFError, UnicodeError, ValueError):  # the general reader says why
            return None
    with path.open("rb") as raw:
        counter = _Counting(raw)
        source: Any = pa.PythonFile(counter, mode="r")
        if path.suffix == ".gz":
            source = pa.CompressedInputStream(source, "gzip")
        try:
            return _with_progress(lambda: pcsv.read_csv(source, **options), counter, size, f"reading {path.name}",
                                  True)
        except (pa.ArrowException, OSError, EOFError, UnicodeError, ValueError):
            return None
        finally:
            source.close()


def _bad_chunk(chunk: pa.Array) -> bool:
    """An empty string or one holding a tab in a string array, read off its buffers (offsets,
    then the bytes once: cheaper than a compute pass per condition over millions of ids)."""
    if len(chunk) == 0:
        return False
    if chunk.null_count:  # a missing field is an empty one
        return True
    offsets, data = buffers(chunk)
    if bool((offsets[1:] == offsets[:-1]).any()):
        return True
    if offsets[-1] == offsets[0]:
        return False
    view = data[int(offsets[0]):int(offsets[-1])]
    return int(view.min()) <= 9 and bytes(view).find(b"\t") != -1  # a tab is byte 9: most files have none below 32


def _query_codes(qid: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Each row's query code (the smallest signed integers that hold them, as pandas keeps a
    categorical's codes; categories in order of appearance), where each run of
    equal query ids starts (int64 (runs + 1,), pointers), and the distinct ids: only the first
    row of each run is hashed (a run file lists a query's rows together)."""
    heads, starts, at = [], [], 0
    for chunk in qid.chunks:
        m = len(chunk)
        if not m:
            continue
        differs = pc.not_equal(chunk.slice(1), chunk.slice(0, m - 1)).to_numpy(zero_copy_only=False)
        first = np.concatenate([[0], np.flatnonzero(differs) + 1])
        heads.append(chunk.take(pa.array(first)))
        starts.append(first + at)
        at += m
    if not heads:
        return np.zeros(0, np.int64), np.zeros(1, np.int64), pa.array([], pa.string())
    encoded = pa.concat_arrays(heads).dictionary_encode()
    bounds = np.append(np.concatenate(starts), at)
    head_codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    # runs cut at parse blocks are joined again where the same query goes on
    keep = np.concatenate([[True], head_codes[1:] != head_codes[:-1]])
    head_codes, bounds = head_codes[keep], np.append(bounds[:-1][keep], at)
    n_codes = len(encoded.dictionary)
    small = next(t for t in (np.int8, np.int16, np.int32, np.int64) if n_codes < np.iinfo(t).max)
    return np.repeat(head_codes.astype(small), np.diff(bounds)), bounds, encoded.dictionary


def _duplicate(q: np.ndarray, runs: np.ndarray, doc: pa.ChunkedArray, ids: pa.Array) -> int | None:
    """The first row whose (query, document) pair came before, or None. When every query's rows
    are together (``runs``: where each run of one query starts) the documents of each query are
    screened by their hashes in one pass (:func:`~kolm_search.engine.arrow_strings.may_repeat_within_groups`);
    the exact search (:func:`_exact_duplicate`) runs only when a query repeats a hash or a
    query's rows are in two places."""
    from kolm_search.engine.arrow_strings import may_repeat_within_groups

    together = len(runs) - 1 == len(np.unique(q[runs[:-1]])) if len(q) else True
    if together and not may_repeat_within_groups(ids, runs):
        return None
    return _exact_duplicate(q, doc)


def _exact_duplicate(q: np.ndarray, doc: pa.ChunkedArray) -> int | None:
    """The first row whose (query, document) pair came before, or None: documents coded within
    their query by :func:`~kolm_search.engine.ids.codes_within_groups` (small hash tables, in parallel),
    then the pairs checked for a repeat."""
    from kolm_search.engine.ids import codes_within_groups

    q = q.astype(np.int64)
    (codes,), bound, _ = codes_within_groups([pd.Series(doc.to_pandas(), copy=False)], [q], names=["doc_id"],
                                          with_ids=False)
    keys = q * np.int64(max(bound, 1)) + codes
    if not _any_repeat(keys, q):
        return None
    return int(np.argmax(pd.Series(keys, copy=False).duplicated().to_numpy()))  # found only if need be


def _any_repeat(keys: np.ndarray, q: np.ndarray) -> bool:
    """Whether a key repeats: sorted (cheaper than a hash table of every pair), in two halves on
    two threads when every query's rows are together (no key is then in both halves)."""
    def repeats(part: np.ndarray) -> bool:
        ordered = np.sort(part)  # numpy releases the GIL while it sorts
        return bool((ordered[1:] == ordered[:-1]).any())

    n = len(keys)
    if n < 1 << 20:
        return repeats(keys)
    changes = np.flatnonzero(q[1:] != q[:-1]) + 1
    if len(changes) + 1 != len(np.unique(q)) or not len(changes):  # a query in two places: one sort over all
        return repeats(keys)
    cut = int(changes[np.searchsorted(changes, n // 2).clip(0, len(changes) - 1)])
    with ThreadPoolExecutor(max_workers=2) as pool:
        return any(pool.map(repeats, (keys[:cut], keys[cut:])))


def _ranks(column: pa.ChunkedArray) -> np.ndarray | None:
    """The rank column as 0-based int64, or None (the general reader then names the line)
    unless every text is a decimal integer (``-?[0-9]+``) whose 0-based value fits int64
    (pyarrow's own integer parser would also take ``0x1``, which ``int()`` and trec_eval refuse)."""
    from kolm_search.engine.arrow_strings import parse_integers

    chunks = [chunk for chunk in column.chunks if len(chunk)]
    if len(column) < _BATCH_ROWS or len(chunks) < 2:
        parts = [parse_integers(chunk, -1) for chunk in chunks]
    else:  # the kernel releases the GIL: the parse blocks on two threads
        with ThreadPoolExecutor(max_workers=2) as pool:
            parts = list(pool.map(lambda chunk: parse_integers(chunk, -1), chunks))
    if any(p is None for p in parts):
        return None
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)  # type: ignore[arg-type]


def read_run_arrow(path: Path, progress: bool | None = None, check_duplicates: bool = True) -> pd.DataFrame | None:
    """``qid`` (categorical), ``doc_id`` (Arrow strings), ``rank`` (0-based int64), ``score``
    (float64) of a run file, or None when the general reader must read it (see the module);
    raises FrameValidationError for a document given twice for a query."""
    table = _parse(path, progress)
    if table is None:
        return None
    if any(_bad_chunk(chunk) for c in ("qid", "q0", "tag", "doc_id") for chunk in table.column(c).chunks):
        return None
    score = table.column("score").to_numpy()  # the blocks concatenated; one block's is a view of its buffer:
    if not score.flags.writeable:  # read-only, which a later plain write through loc would fail on (8 bytes a row)
        score = score.copy()
    rank = _ranks(table.column("rank"))
    if rank is None or not np.isfinite(score).all():
        return None
    q, runs, dictionary = _query_codes(table.column("qid"))
    doc = table.column("doc_id")
    # one chunk of ids: later takes (ties, selections) need not stitch hundreds of parse blocks
    ids = doc.combine_chunks() if doc.num_chunks != 1 else doc.chunk(0)
    dup = _duplicate(q, runs, doc, ids) if check_duplicates else None
    if dup is not None:
        raise FrameValidationError(f"{path}: document {doc[dup].as_py()!r} appears twice for query "
                                   f"{dictionary[int(q[dup])].as_py()!r}")
    categories = pd.Index(dictionary.to_pandas())
    return pd.DataFrame({"qid": pd.Categorical.from_codes(q, categories=categories),
                         "doc_id": pa.chunked_array([ids]).to_pandas(), "rank": rank, "score": score}, copy=False)


def _unwritable(strings: Any) -> bool:
    """An empty id, or one holding white space (as ``str.isspace`` counts it) or starting with a
    byte-order mark: read off the buffers (lengths, then the bytes), the regular expression only
    for chunks with bytes outside ASCII."""
    for chunk in strings.chunks if isinstance(strings, pa.ChunkedArray) else [strings]:
        if len(chunk) == 0:
            continue
        if chunk.null_count:  # a missing id is an empty one
            return True
        offsets, data = buffers(chunk)
        if bool((offsets[1:] == offsets[:-1]).any()):
            return True
        view = data[int(offsets[0]):int(offsets[-1])]
        if not len(view):
            continue
        low, high = int(view.min()), int(view.max())  # one pass each, no array the size of the ids
        if low <= 32 and bool(_ASCII_SPACE[view].any()):
            return True
        if high >= 0x80 and (pc.any(pc.match_substring_regex(chunk, _SPACE_CLASS)).as_py()
                             or pc.any(pc.starts_with(chunk, "\ufeff")).as_py()):
            return True
    return False


def _id_array(column: pd.Series) -> Any:
    """An id column as Arrow strings (a categorical as a dictionary array), or None when an id
    is empty, holds white space or starts with a byte-order mark, or is not text (bytes, text
    that is not UTF-8): the general writer then names it."""
    values = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) else column
    try:
        if pd.api.types.is_integer_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype):
            strings = pc.cast(pa.array(np.asarray(values)), pa.string())
        elif not isinstance(values.dtype, pd.StringDtype) and pd.api.types.infer_dtype(values, skipna=False) != "string":
            strings = None  # bytes, mixed types, floats: the general writer converts or names them
        else:
            strings = pa.array(values.array if isinstance(values.dtype, pd.StringDtype) else
                               np.asarray(values, dtype=object), type=pa.string(), from_pandas=True)
    except (pa.ArrowException, UnicodeError, TypeError, ValueError):
        strings = None
    if strings is None or strings.null_count or _unwritable(strings):
        return None
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = np.asarray(column.cat.codes)
        if (codes < 0).any():
            return None
        return pa.DictionaryArray.from_arrays(pa.array(codes), strings)
    return strings


def _csv_blocks(table: pa.Table, tag: str, options: pcsv.WriteOptions) -> Iterator[tuple[int, pa.Buffer]]:
    """The run ``table`` (``qid, doc_id, rank, score``) as the lines of a run file tagged
    ``tag``, one ``(rows, buffer)`` per batch of :data:`_BATCH_ROWS` rows, in order: each batch formatted by
    Arrow's CSV writer on a worker thread (the writer releases the GIL) while the main thread
    writes the one before it, so formatting the scores (most of a write) runs on both cores.
    ``Q0`` and the tag are slices of one batch-long column each (a column the length of the run
    would be memory touched for nothing). The bytes are those one writer over the whole run gives."""
    width = min(_BATCH_ROWS, table.num_rows)
    q0, tags = (pa.repeat(pa.scalar(text, pa.string()), width) for text in ("Q0", tag))

    def text(batch: pa.RecordBatch) -> tuple[int, pa.Buffer]:
        m = batch.num_rows
        lines = pa.record_batch([batch.column(0), q0.slice(0, m), batch.column(1), batch.column(2), batch.column(3),
                                 tags.slice(0, m)], names=_FIELDS)
        out = pa.BufferOutputStream()
        pcsv.write_csv(lines, out, write_options=options)
        return m, out.getvalue()

    batches = [b for b in table.to_batches(max_chunksize=_BATCH_ROWS) if b.num_rows]
    with ThreadPoolExecutor(max_workers=2) as pool:
        ahead = deque(pool.submit(text, b) for b in batches[:_AHEAD])
        for later in batches[_AHEAD:]:
            done = ahead.popleft()
            ahead.append(pool.submit(text, later))
            yield done.result()
        while ahead:
            yield ahead.popleft().result()


def write_run_arrow(qid: pd.Series, doc_id: pd.Series, rank: np.ndarray, score: np.ndarray, tag: str, path: Path,
                    progress: bool | None = None, name: str | None = None) -> bool:
    """Write the run to ``path`` (plain, or gzip for ``.gz``) in one pass (``name`` on the
    progress bar); False (nothing written) when an id needs the general writer's checks to be
    named."""
    q, d = _id_array(qid), _id_array(doc_id)
    if q is None or d is None:
        return False
    n = len(rank)
    table = pa.table({"qid": q, "doc_id": d, "rank": pa.array(rank, pa.int64()),
                      "score": pa.array(score, pa.float64())})  # formatted per batch
    options = pcsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    bar = None
    if _show(progress, n, PROGRESS_ROWS):
        from tqdm.auto import tqdm

        bar = tqdm(total=n, unit=" rows", unit_scale=True, desc=f"writing {name or path.name}", leave=False)

    try:
        sink: Any = pa.OSFile(str(path), "wb")
        if path.suffix == ".gz":
            sink = pa.CompressedOutputStream(sink, "gzip")
        with sink:
            for rows, block in _csv_blocks(table, tag, options):
                sink.write(block)
                if bar is not None:
                    bar.update(rows)
    finally:
        if bar is not None:
            bar.close()
    return True
