"""A corpus on disk cut into contiguous parts, each read alone (by one worker of a sharded build).

:func:`corpus_files` lists what a source holds from metadata only (file sizes, parquet footers);
:func:`plan_parts` cuts it into ``n`` parts of about equal bytes, each a list of
:class:`Piece` s in corpus order, so that the parts one after another are the corpus that
:func:`~kolm_search.io.corpus_stream.corpus_chunks` reads, document for document:

==========================  =====================================================================
file                        a piece is
==========================  =====================================================================
``.jsonl``, ``.tsv``        a byte range; it holds the lines that start in it (so every line is
                            read by exactly one piece), numbered from its ``first_line``
``.jsonl.gz``, ``.tsv.gz``  a line range (gzip cannot seek: the piece decompresses the file from
                            its start, and cutting the file needs its line count first)
parquet file or folder      a range of row groups of one file (a row group is never cut)
==========================  =====================================================================

Line numbers of a plain file's later pieces depend on the lines before them: the caller counts
them (:meth:`Piece.line_starts`, each piece by its own reader) and numbers the pieces
(:func:`number_lines`) before reading. Errors name the file and the line, or the file, row group
and row, exactly as the single-machine read names them.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kolm_search._params import positive_int
from kolm_search.errors import FrameValidationError, KolmTypeError
from kolm_search.io._text import count_line_starts, count_lines
from kolm_search.io.corpus_stream import (
    _BATCH_ROWS,
    _CHUNK_CHARS,
    CorpusChunk,
    corpus_file,
    is_path_list,
    jsonl_chunks,
    parquet_layout,
    row_group_chunks,
    tsv_chunks,
)

__all__ = ["CorpusFile", "Piece", "corpus_files", "gz_to_count", "line_count", "number_lines", "pieces_to_count",
           "plan_parts"]


@dataclass(frozen=True)
class CorpusFile:
    """One file of a corpus source, as :func:`corpus_files` lists it.

    Attributes
    ----------
    path : str
        As the single-machine read names it in errors.
    kind : {"jsonl", "tsv", "parquet"}
    gz : bool
    weight : int
        Bytes on disk (text), or the sum of ``groups``.
    groups : tuple of int
        Parquet: each row group's uncompressed bytes.
    beir, columns, schema
        Parquet: BEIR's columns or not, the columns read, the dataset's schema.
    """

    path: str
    kind: str
    gz: bool
    weight: int
    groups: tuple[int, ...] = ()
    beir: bool = False
    columns: tuple[str, ...] = ()
    schema: Any = None


@dataclass(frozen=True)
class Piece:
    """A contiguous part of one corpus file.

    Attributes
    ----------
    path, kind, gz, beir, columns, schema
        Of its :class:`CorpusFile`.
    start, stop : int
        Bytes ``[start, stop)`` of a plain text file, lines ``[start, stop)`` (1-based) of a
        gzip'd one (``stop`` 0: to the end), row groups ``[start, stop)`` of a parquet file.
    first_line : int
        Plain text: the number of the first line that starts in the range.
    """

    path: str
    kind: str
    gz: bool
    start: int
    stop: int
    first_line: int = 1
    beir: bool = False
    columns: tuple[str, ...] = ()
    schema: Any = None

    @property
    def by_bytes(self) -> bool:
        return self.kind != "parquet" and not self.gz

    def line_starts(self) -> int:
        """Lines that start in a plain text piece (reading its bytes only)."""
        return count_line_starts(Path(self.path), self.start, self.stop)

    def chunks(self, chunk_size: int | None = None, chunk_chars: int | None = None) -> Iterator[CorpusChunk]:
        """The piece's documents in chunks (as :func:`~kolm_search.io.corpus_stream.corpus_chunks`)."""
        size = positive_int("chunk_size", chunk_size, none=True)
        chars = positive_int("chunk_chars", chunk_chars, none=True) or _CHUNK_CHARS
        path = Path(self.path)
        if self.kind == "parquet":
            yield from self._row_groups(path, size, chars)
            return
        if self.by_bytes:
            span: dict[str, Any] = {"byte_range": (self.start, self.stop), "first_line": self.first_line}
        else:
            span = {"line_range": (self.start, self.stop)} if self.stop else {}
        yield from (jsonl_chunks if self.kind == "jsonl" else tsv_chunks)(path, size, chars, **span)

    def _row_groups(self, path: Path, size: int | None, chars: int) -> Iterator[CorpusChunk]:
        import pyarrow as pa
        import pyarrow.dataset as ds

        try:
            fragment = next(iter(ds.dataset(str(path), format="parquet", schema=self.schema).get_fragments()))
            groups = fragment.split_by_row_group()
        except (OSError, pa.ArrowException, StopIteration) as exc:
            raise FrameValidationError(f"{path}: cannot read it as parquet ({type(exc).__name__}: {exc})") from exc
        for group in groups:
            gid = group.row_groups[0].id
            if self.start <= gid < self.stop:
                batches = functools.partial(group.to_batches, columns=list(self.columns), batch_size=size or _BATCH_ROWS)
                yield from row_group_chunks(batches, f"{self.path} row group {gid}", self.beir, size, chars)


def corpus_files(source: Any) -> list[CorpusFile]:
    """The files of ``source`` (a path as :func:`~kolm_search.io.corpus_stream.corpus_chunks`
    takes one, or a list of them), in order, from metadata only.

    Raises
    ------
    KolmValueError, FrameValidationError
        A path that does not exist or is of no known kind; a parquet file that cannot be read
        or lacks a corpus's columns.
    KolmTypeError
        A source that is not a path or a list of paths.
    """
    if isinstance(source, (str, Path)):
        paths = [source]
    elif is_path_list(source):
        paths = list(source)
    else:
        raise KolmTypeError(f"a sharded build reads files: a path or a list of paths, got {type(source).__name__}")
    out: list[CorpusFile] = []
    for item in paths:
        path, kind = corpus_file(Path(item).expanduser())
        if kind != "parquet":
            out.append(CorpusFile(str(path), kind, path.suffix == ".gz", path.stat().st_size))
            continue
        dataset, beir, columns = parquet_layout(path)
        for fragment in dataset.get_fragments():
            meta = fragment.metadata
            groups = tuple(int(meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups))
            out.append(CorpusFile(fragment.path, "parquet", False, sum(groups), groups, beir, tuple(columns),
                                  dataset.schema))
    return out


def _cuts(files: Sequence[CorpusFile], n: int) -> list[int]:
    total = sum(f.weight for f in files)
    return [total * i // n for i in range(n + 1)]


def gz_to_count(files: Sequence[CorpusFile], n: int) -> list[str]:
    """The gzip'd text files that a cut into ``n`` parts falls inside (their lines must be
    counted, :func:`~kolm_search.io._text.count_lines`, before :func:`plan_parts`)."""
    cuts, start, out = _cuts(files, n), 0, []
    for f in files:
        if f.gz and any(start < c < start + f.weight for c in cuts):
            out.append(f.path)
        start += f.weight
    return out


def plan_parts(files: Sequence[CorpusFile], n: int, lines: Mapping[str, int]) -> list[list[Piece]]:
    """Cut ``files`` into ``n`` parts of about equal weight (a part may be empty: a row group
    is never cut); ``lines`` counts the lines of each file of :func:`gz_to_count`. Plain text
    pieces after the first of their file still need :func:`number_lines`."""
    n = positive_int("n", n)
    cuts = _cuts(files, n)
    parts: list[list[Piece]] = [[] for _ in range(n)]

    def part_of(pos: int) -> int:
        return min(bisect.bisect_right(cuts, pos) - 1, n - 1)

    start = 0
    for f in files:
        base = Piece(f.path, f.kind, f.gz, 0, 0, 1, f.beir, f.columns, f.schema)
        if f.kind == "parquet":
            pos = start
            for gid, w in enumerate(f.groups):
                k = part_of(pos + w // 2)
                last = parts[k][-1] if parts[k] else None
                if last is not None and last.path == f.path and last.stop == gid:
                    parts[k][-1] = dataclasses.replace(last, stop=gid + 1)
                else:
                    parts[k].append(dataclasses.replace(base, start=gid, stop=gid + 1))
                pos += w
        elif f.weight:
            inner = [c - start for c in cuts if start < c < start + f.weight]
            bounds = [0, *inner, f.weight]
            for lo, hi in itertools.pairwise(bounds):
                k = part_of(start + lo)
                if not f.gz:
                    parts[k].append(dataclasses.replace(base, start=lo, stop=hi))
                elif not inner:
                    parts[k].append(dataclasses.replace(base, start=1, stop=0))
                else:
                    n_lines = lines[f.path]
                    a, b = 1 + lo * n_lines // f.weight, 1 + hi * n_lines // f.weight
                    if a < b:
                        parts[k].append(dataclasses.replace(base, start=a, stop=b))
        start += f.weight
    return parts


def number_lines(parts: Sequence[Sequence[Piece]], starts: Mapping[tuple[str, int], int]) -> list[list[Piece]]:
    """``parts`` with each plain text piece's ``first_line`` set; ``starts[(path, start)]`` is
    :meth:`Piece.line_starts` of every plain piece that another piece of its file follows."""
    following: dict[str, int] = {}
    out: list[list[Piece]] = []
    for part in parts:
        out.append([])
        for p in part:
            if p.by_bytes:
                p = dataclasses.replace(p, first_line=following.get(p.path, 1))
                if (p.path, p.start) in starts:
                    following[p.path] = p.first_line + starts[(p.path, p.start)]
            out[-1].append(p)
    return out


def pieces_to_count(parts: Sequence[Sequence[Piece]]) -> list[tuple[int, Piece]]:
    """``(part, piece)`` of every plain text piece that another piece of its file follows."""
    flat = [(k, p) for k, part in enumerate(parts) for p in part]
    last = {p.path: i for i, (_, p) in enumerate(flat)}
    return [(k, p) for i, (k, p) in enumerate(flat) if p.by_bytes and last[p.path] > i]


def line_count(path: str) -> int:
    """Lines of a text file (plain or gzip'd)."""
    return count_lines(Path(path))
