"""Text files read line by line, plain or gzip, with errors that name the file and the line.

A part of a file can be read alone (a worker of a sharded build reads its part only):
``byte_range=(a, b)`` of a plain file gives the lines that *start* at a byte in ``[a, b)``
(so consecutive ranges split the file into whole lines, each read once), numbered from
``first_line`` (:func:`count_line_starts` of the ranges before it tells it);
``line_range=(i, j)`` gives lines ``i .. j - 1`` (1-based) of any file, a ``.gz`` one
decompressed from its start (gzip cannot seek).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from kolm_search.errors import FrameValidationError, KolmValueError

__all__ = ["BROKEN", "count_line_starts", "count_lines", "holds_any", "text_lines"]

BROKEN = (OSError, EOFError, zlib.error, UnicodeDecodeError)  # gzip.BadGzipFile is an OSError
_BLOCK = 1 << 24


def _opener(path: Path) -> Any:
    return gzip.open if path.suffix == ".gz" else open


def holds_any(path: Path, needles: tuple[bytes, ...]) -> bool:
    """True when the file (decompressed, for a ``.gz``) holds any of the one-byte ``needles``;
    read in blocks (a broken file raises one of :data:`BROKEN`)."""
    with _opener(path)(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            if any(needle in block for needle in needles):
                return True
    return False


def text_lines(path: Path, *, byte_range: tuple[int, int] | None = None, first_line: int = 1,
               line_range: tuple[int, int] | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line (or of a part: see the module), decoded as UTF-8 (a
    leading byte-order mark dropped); undecodable bytes and a truncated or corrupt ``.gz`` raise
    :class:`FrameValidationError` naming the file and the line."""
    if byte_range is not None and path.suffix == ".gz":
        raise KolmValueError(f"{path}: a gzip file is read by line ranges, not byte ranges")
    lineno = first_line - 1
    try:
        with _opener(path)(path, "rb") as fh:
            lines: Iterable[bytes] = fh if byte_range is None else _starting_in(fh, *byte_range)
            for lineno, raw in enumerate(lines, start=first_line):
                if line_range is not None:
                    if lineno < line_range[0]:
                        continue
                    if lineno >= line_range[1]:
                        break
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise FrameValidationError(
                        f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
                yield lineno, line.removeprefix("\ufeff") if lineno == 1 else line
    except FrameValidationError:
        raise
    except BROKEN as exc:
        raise FrameValidationError(f"{path}:{lineno + 1}: cannot read the file ({type(exc).__name__}: {exc})") from exc


def _starting_in(fh: BinaryIO, start: int, stop: int) -> Iterator[bytes]:
    """The lines of ``fh`` that start at a byte in ``[start, stop)``."""
    if start > 0:
        fh.seek(start - 1)
        if fh.read(1) != b"\n":
            fh.readline()  # the rest of a line that started before ``start``
    pos = fh.tell()
    while pos < stop:
        raw = fh.readline()
        if not raw:
            return
        yield raw
        pos += len(raw)


def count_line_starts(path: Path, start: int, stop: int) -> int:
    """How many lines of plain file ``path`` start at a byte in ``[start, stop)`` (what
    ``text_lines(path, byte_range=(start, stop))`` yields), reading only those bytes."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            lo, hi = max(start - 1, 0), min(stop, size) - 1  # a line starts after each '\n' at [lo, hi)
            count = 1 if start == 0 < min(stop, size) else 0
            fh.seek(lo)
            while lo < hi:
                block = fh.read(min(_BLOCK, hi - lo))
                if not block:
                    break
                count += block.count(b"\n")
                lo += len(block)
            return count
    except OSError as exc:
        raise FrameValidationError(f"{path}: cannot read the file ({type(exc).__name__}: {exc})") from exc


def count_lines(path: Path) -> int:
    """Lines of ``path`` (plain or ``.gz``), as :func:`text_lines` numbers them."""
    count, last = 0, b"\n"
    try:
        with _opener(path)(path, "rb") as fh:
            while block := fh.read(_BLOCK):
                count += block.count(b"\n")
                last = block[-1:]
    except BROKEN as exc:
        raise FrameValidationError(f"{path}: cannot read the file ({type(exc).__name__}: {exc})") from exc
    return count + (last != b"\n")
