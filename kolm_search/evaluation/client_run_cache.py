"""A client pipeline's run in an :class:`~kolm_search.evaluation.Experiment`'s ``cache_dir``: a
parquet file per (dataset, pipeline name, limit, judged queries) that the experiment names
(a client has no fingerprint). A file records a CRC of every page, the name it was written as
and a digest of the run; it is used only when it parses, every checksum matches, it was written
as this very file, it is a run ``qid, doc_id, rank, score`` without nulls and its rows are the
ones written (a file rewritten whole, its metadata kept, has pages without checksums); otherwise a ``RuntimeWarning`` names it
and the run is searched again and the file replaced. Writes are all or nothing (a rename).
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kolm_search.engine.runs import as_run
from kolm_search.errors import KolmValueError
from kolm_search.io._atomic import replacing

__all__ = ["read_client_run", "write_client_run"]

_COLUMNS = ["qid", "doc_id", "rank", "score"]
_KEY = b"kolm_search"
_DIGEST = b"kolm_search_digest"


def _digest(run: pd.DataFrame) -> bytes:
    """A digest of a run as read back: its columns' dtypes and every value of every row."""
    sha = hashlib.sha256(repr([(str(c), str(t)) for c, t in run.dtypes.items()]).encode())
    sha.update(pd.util.hash_pandas_object(run, index=False).to_numpy(np.uint64).tobytes())
    return sha.hexdigest().encode()


def read_client_run(path: Path) -> pd.DataFrame | None:
    """A client's cached run, or None when there is no file or it is damaged: it does not parse,
    a page's checksum does not match (:func:`write_client_run` records them), it was written
    for another file (another pipeline's, copied over it), it is not a run ``qid, doc_id,
    rank, score`` without nulls, or its rows are not the ones written (the digest recorded). A damaged file is warned about (a ``RuntimeWarning`` naming
    it), never used; the run is searched again and the file replaced."""
    if (not path.exists() and not path.is_symlink()) or path.is_dir():  # (a link leading nowhere, or in a loop,
        return None  # is damaged; a folder is never read, as a dataset of its files: write_client_run warns of it)
    try:
        table = pq.read_table(path, page_checksum_verification=True)
        written_as = (table.schema.metadata or {}).get(_KEY)
        if written_as != path.name.encode("utf-8", "surrogatepass"):
            raise KolmValueError(f"it was written as {written_as!r}, not as this file")
        run = table.to_pandas()
        if list(run.columns) != _COLUMNS or bool(run.isna().to_numpy().any()):
            raise KolmValueError(f"columns {list(run.columns)} with nulls or not {_COLUMNS}")
        as_run(run)
        if (table.schema.metadata or {}).get(_DIGEST) != _digest(run):
            raise KolmValueError("its rows are not the ones written (the digest recorded does not match)")
    except Exception as exc:  # any failure to read or check means: do not use it
        warnings.warn(f"run cache file {path} is damaged ({type(exc).__name__}: {exc}); searching again",
                      RuntimeWarning, stacklevel=3)
        return None
    return run


def write_client_run(path: Path, run: pd.DataFrame) -> None:
    """``run`` stored in ``path`` with a checksum of every page, the file's name (its key) and a
    digest of its rows, all or nothing; not stored when a folder stands where the file goes (no rename can replace
    it), with a ``RuntimeWarning`` naming it (the folder is left as it is)."""
    if path.is_dir():
        warnings.warn(f"run cache file {path} is a folder; the run is not stored (remove the folder to let the "
                      "cache store it)", RuntimeWarning, stacklevel=3)
        return
    table = pa.Table.from_pandas(run, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           _KEY: path.name.encode("utf-8", "surrogatepass"),
                                           _DIGEST: _digest(table.to_pandas())})  # (the run as it reads back)
    with replacing(path) as tmp:
        pq.write_table(table, tmp, write_page_checksum=True)
