"""Text files read line by line, plain or gzip, with errors that name the file and the line."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kolm_search.errors import FrameValidationError

__all__ = ["BROKEN", "text_lines"]

BROKEN = (OSError, EOFError, zlib.error, UnicodeDecodeError)  # gzip.BadGzipFile is an OSError


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line, decoded as UTF-8 (a leading byte-order mark
    dropped); undecodable bytes and a truncated or corrupt ``.gz`` raise
    :class:`FrameValidationError` naming the file and the line."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
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
