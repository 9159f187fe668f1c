"""Whether two document tables give their codes to the same documents: what lets the frames
of two indexes be combined code by code (the operators of :mod:`kolm_search.compose`, a
fusion's children).

Two tables agree when they are one object or hold the same ids in the same order (their texts
may differ: a dense index over titles and BM25 over the full text of one corpus agree). Tables
are immutable (an incremental index makes a new one at every change), so each table's digest of
its ids is made once, on the first comparison with another table, and kept while the table
lives: comparing again costs a dictionary lookup, not a pass over the ids.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import numpy as np
import pyarrow as pa

from kolm_search.engine.arrow_strings import buffers

__all__ = ["ids_digest", "same_documents"]

#: each table's digest of its ids, while the table lives
_DIGESTS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def ids_digest(table: Any) -> str:
    """A digest of ``table``'s ids in code order (a :class:`~kolm_search.engine.doctable.DocumentTable`):
    sha256 of each id's UTF-8 length and bytes, made once per table."""
    found = _DIGESTS.get(table)
    if found is None:
        values = table.ids
        sha = hashlib.sha256(f"ids[{len(values)}]".encode())
        try:
            ids = pa.array(values, pa.large_string())
        except (pa.ArrowException, UnicodeEncodeError):  # an id Arrow cannot encode (a lone surrogate)
            encoded = [v.encode("utf-8", "surrogatepass") for v in values]
            sha.update(np.array([len(e) for e in encoded], np.int64).tobytes())
            sha.update(b"".join(encoded))
        else:
            offsets, data = buffers(ids)
            sha.update(np.diff(offsets).tobytes())
            sha.update(data[int(offsets[0]):int(offsets[-1])].tobytes())
        found = _DIGESTS[table] = sha.hexdigest()
    return found


def same_documents(a: Any, b: Any) -> bool:
    """Whether tables ``a`` and ``b`` name the same document by every code: the same object, or
    as many ids, equal in order (:func:`ids_digest`)."""
    return a is b or (len(a) == len(b) and ids_digest(a) == ids_digest(b))
