"""Writes that replace a file all or nothing: a temporary file beside the target, renamed over it
when complete (removed otherwise), so a reader sees the old file or the new one, never a part.
Used by the run and qrels writers, the reports and the command line's ``-o``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replacing", "write_text"]


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix), renamed over ``path`` when the block ends
    without error, removed otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp" + "".join(path.suffixes[-1:]))
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8) written to ``path`` whole, through :func:`replacing`."""
    with replacing(Path(path)) as tmp:
        tmp.write_text(text, encoding="utf-8")
