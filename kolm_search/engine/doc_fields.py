"""The document fields as a saved table stores them and as a table holds them.

A saved table stores each field of :data:`DOCUMENT_FIELDS` as text (``tags`` and ``metadata``
as JSON; :meth:`DocumentTable.to_arrow <kolm_search.engine.doctable.DocumentTable.to_arrow>`);
:func:`decoded` reads them back, :func:`joined_texts` makes the one text per document that
indexes read, :func:`make_documents` the ``SearchDocument`` s of rows, and :func:`arrow_digest`
a digest of stored rows from their Arrow buffers. Shared by the in-memory table and the
memory-mapped one (:mod:`kolm_search.engine.mapped_table`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument

__all__ = ["DOCUMENT_FIELDS", "arrow_digest", "concat_strings", "decoded", "joined_array", "joined_texts",
           "make_documents"]

DOCUMENT_FIELDS = ("id", "content", "title", "source", "tags", "metadata")


def decoded(field: str, values: list[Any], rows: npt.ArrayLike | None = None) -> list[Any]:
    """The values of field ``field`` as a table holds them, from the text a saved table stores
    (:meth:`DocumentTable.to_arrow`): strings, None for anything else; ``tags`` (a JSON array)
    and ``metadata`` (a JSON object) decoded. ``rows`` numbers the values in messages (default
    their positions).

    Raises
    ------
    KolmValueError
        Tags or metadata that are not JSON of their kind, naming the row.
    """
    texts = [v if isinstance(v, str) else None for v in values]
    if field not in ("tags", "metadata"):
        return texts
    kind, name = (list, "array") if field == "tags" else (dict, "object")
    out: list[Any] = []
    for i, text in enumerate(texts):
        value = None
        if text is not None:
            try:
                value = json.loads(text)
            except (ValueError, RecursionError) as exc:
                row = i if rows is None else int(np.asarray(rows).ravel()[i])
                raise KolmValueError(f"row {row}: field {field!r} is not JSON: {exc}") from exc
            if value is not None and not isinstance(value, kind):
                row = i if rows is None else int(np.asarray(rows).ravel()[i])
                raise KolmValueError(f"row {row}: field {field!r} must be a JSON {name}, got {text[:40]!r}")
        out.append(value)
    return out


def joined_texts(columns: list[list[Any]], n: int) -> list[str]:
    """One string per document of ``n``: its values in ``columns`` (one list per field) that are
    non-empty strings, joined by a space (``""`` when none is)."""
    cols = [[v if isinstance(v, str) and v else None for v in c] for c in columns]
    cols = [c for c in cols if any(v is not None for v in c)]  # fields with some text
    if len(cols) < 2:  # one field (or none): no joining
        return [str(v) if v is not None else "" for v in cols[0]] if cols else [""] * n
    return [" ".join([str(v) for v in vals if v is not None]) for vals in zip(*cols, strict=True)]


def joined_array(columns: list[Any], n: int) -> Any:
    """:func:`joined_texts` of ``pyarrow`` string columns (nulls allowed), as a string array of
    ``n`` texts without nulls: each row's non-empty values joined by a space, computed by Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = [c for c in columns if c.null_count < len(c) and pc.any(pc.greater(pc.binary_length(c), 0)).as_py()]
    if len(texts) == 1:  # one field with text (titles are often empty): no copy but of its nulls
        return pc.fill_null(texts[0], "") if texts[0].null_count else texts[0]
    out = None
    for column in texts:
        values = pc.fill_null(column.cast(pa.large_string()), "")
        if out is None:
            out = values
            continue
        joined = pc.binary_join_element_wise(out, values, pa.scalar(" ", pa.large_string()))
        out = pc.if_else(pc.equal(out, ""), values, pc.if_else(pc.equal(values, ""), out, joined))
    return pa.array([""] * n, pa.large_string()) if out is None else out


def concat_strings(parts: list[Any]) -> Any:
    """``pyarrow`` string or large_string arrays as one array: large_string when their types
    differ or their bytes could overflow a string array's 32-bit offsets (or there are none)."""
    import pyarrow as pa

    if len({p.type for p in parts}) != 1 or sum(p.nbytes for p in parts) >= 1 << 30:
        parts = [p.cast(pa.large_string()) for p in parts] or [pa.array([], pa.large_string())]
    return pa.concat_arrays(parts) if len(parts) > 1 else parts[0]


def arrow_digest(parts: Iterable[Sequence[Any]]) -> str:
    """``"<n>:<hex>"``: a digest of documents given as parts, each the six ``pyarrow`` string
    arrays (or chunked arrays) of :meth:`DocumentTable.to_arrow` in :data:`DOCUMENT_FIELDS`
    order; parts of any sizes give the same digest. Per field, sha256 of the UTF-8 bytes of its
    values one after the other and of their byte lengths (-1 where missing), from the arrays'
    buffers (no Python strings)."""
    import pyarrow as pa

    streams = [(hashlib.sha256(), hashlib.sha256()) for _ in DOCUMENT_FIELDS]
    n = 0
    for part in parts:
        for (data, lengths), column in zip(streams, part, strict=True):
            for arr in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
                wide = arr.cast(pa.large_string())
                offsets = np.frombuffer(wide.buffers()[1], np.int64)[wide.offset:wide.offset + len(wide) + 1] \
                    if len(wide) else np.zeros(1, np.int64)
                sizes = np.diff(offsets)
                if wide.null_count:
                    sizes = np.where(np.asarray(wide.is_null()), -1, sizes)
                lengths.update(sizes.astype("<i8").tobytes())
                if len(wide) and offsets[-1] > offsets[0]:
                    data.update(memoryview(wide.buffers()[2])[int(offsets[0]):int(offsets[-1])])
        n += len(part[0])
    total = hashlib.sha256()
    for data, lengths in streams:
        total.update(data.digest() + lengths.digest())
    return f"{n}:{total.hexdigest()[:32]}"


def make_documents(rows: Iterable[tuple[Any, ...]], scores: npt.ArrayLike | None, n: int) -> list[SearchDocument]:
    """``SearchDocument``s of ``n`` rows (values of :data:`DOCUMENT_FIELDS` in order, as a table
    holds them), carrying ``scores`` (n,) or none."""
    sc = [None] * n if scores is None else np.asarray(scores, dtype=np.float64).tolist()
    out = []
    for (i, c, t, s, tg, m), score in zip(rows, sc, strict=True):
        out.append(SearchDocument(
            id=i, content=c, title=t if isinstance(t, str) else None, source=s if isinstance(s, str) else None,
            tags=None if tg is None else list(tg), metadata=None if m is None else dict(m), score=score,
        ))
    return out
