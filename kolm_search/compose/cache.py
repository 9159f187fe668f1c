"""``StageCache``: stage outputs on disk, one parquet file per (stage fingerprint, input
fingerprint), so that a second experiment over the same folder runs no stage it has run.

A file holds one candidate frame (``query`` int32, ``doc`` int64, ``score`` float64, ``rank``
int32, and ``f0 .. f{k-1}`` float64 for features) and, in the parquet key-value metadata
``kolm_search``, the two fingerprints, the batch size, the row count and a digest of the
entries. A file is used only when all of it checks (it parses, the fingerprints are the
ones asked for, the columns have their types, the frame follows the schema, the digest
matches); otherwise a ``RuntimeWarning`` names it and the output is computed again and the
file replaced. Writes go to a temporary file renamed into place (all or nothing).

An output that is the very frame of another entry (``a >> r`` returns ``r``'s) is stored as
an *alias*: a file of no rows whose metadata names the other entry and the digest of its
entries; it is read through that entry (and is damaged when that one is).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kolm_search.compose.fingerprints import frame_digest
from kolm_search.engine.candidate_frame import CandidateFrame
from kolm_search.errors import KolmValueError
from kolm_search.io._atomic import replacing, sweep_leftovers

__all__ = ["CacheFolder", "StageCache", "cache_root"]

_FORMAT = "kolm-search/stage-output"
_VERSION = 1
_KEY = b"kolm_search"
_T = TypeVar("_T")
_TYPES = {"query": pa.int32(), "doc": pa.int64(), "score": pa.float64(), "rank": pa.int32()}


def _file_name(stage_fp: str, input_fp: str, suffix: str) -> str:
    name = hashlib.sha256(f"{stage_fp}\x1f{input_fp}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"{name}{suffix}"


def cache_root(cache_dir: str | os.PathLike[str] | None) -> Path | None:
    """A ``cache_dir=`` argument as a folder path (None: no cache; ``~`` expanded). An empty or
    blank string is refused (``Path("")`` would be the current folder, filled without a word):
    pass ``"."`` for that."""
    if cache_dir is None:
        return None
    if isinstance(cache_dir, str) and not cache_dir.strip():
        raise KolmValueError(f"cache_dir={cache_dir!r} names no folder; pass '.' for the current folder, "
                             "or None for no cache")
    return Path(cache_dir).expanduser()


class CacheFolder:
    """A folder of files, one per (stage fingerprint, input fingerprint) pair, named by a hash
    of the two and ending in :attr:`suffix`.

    Parameters
    ----------
    path : str or Path
        The folder (made when missing; the temporary files that writes killed midway left in it
        are removed, see :func:`~kolm_search.io._atomic.sweep_leftovers`).

    Attributes
    ----------
    reads, writes, damaged : int
        Files read back, written, and found damaged (recomputed) by this object.
    """

    suffix = ".parquet"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():  # (one stat when the folder is there, as on every rerun)
            if self.path.exists():
                raise KolmValueError(f"cache_dir {str(self.path)!r} is a file, not a folder")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file on the way (cache_dir/x where cache_dir is a file), no permission
                raise KolmValueError(f"cache_dir {str(self.path)!r} cannot be made a folder: {exc}") from exc
        sweep_leftovers(self.path)  # what writes killed midway left (once per folder and process)
        self.reads = self.writes = self.damaged = 0

    def file_for(self, stage_fp: str, input_fp: str) -> Path:
        """The file of one (stage, input) pair."""
        return self.path / _file_name(stage_fp, input_fp, self.suffix)

    def read_checked(self, path: Path, read: Callable[[], _T | None], what: str, redo: str) -> _T | None:
        """``read()``, the entry in ``path``; None when there is no file, when ``read`` returns
        None (an entry it does not take, not damaged), or when it raises: then the entry is
        damaged, counted and warned (a ``RuntimeWarning`` naming the ``what`` cache's file and
        what is done instead, ``redo``), never used (a symbolic link that leads nowhere, or round
        in a loop, is damaged too). Entries read are counted in :attr:`reads`."""
        if not path.exists() and not path.is_symlink():
            return None
        try:
            value = read()
        except Exception as exc:  # any failure to read or check means: do not use it
            self.damaged += 1
            warnings.warn(f"{what} cache file {path} is damaged ({type(exc).__name__}: {exc}); {redo}",
                          RuntimeWarning, stacklevel=4)
            return None
        if value is not None:
            self.reads += 1
        return value

    def writable(self, path: Path) -> Path | None:
        """``path`` (a :meth:`file_for`), or None when a folder stands where its file goes (no
        rename can replace it): the entry is then not stored, with a ``RuntimeWarning`` naming
        the folder (what was computed is still used; the folder is left as it is)."""
        if path.is_dir():
            warnings.warn(f"cache file {path} is a folder; the entry is not stored (remove the folder to let the "
                          "cache store it)", RuntimeWarning, stacklevel=4)
            return None
        return path


class StageCache(CacheFolder):
    """A folder of stage outputs (see the module doc and :class:`CacheFolder`)."""

    def get(self, stage_fp: str, input_fp: str, n_queries: int) -> CandidateFrame | None:
        """The stored frame, or None when there is none or it is damaged (warned)."""
        path = self.file_for(stage_fp, input_fp)
        return self.read_checked(path, lambda: self._read(path, stage_fp, input_fp, n_queries), "stage",
                                 "computing the output again")

    @staticmethod
    def _read(path: Path, stage_fp: str, input_fp: str, n_queries: int, depth: int = 0) -> CandidateFrame:
        table = pq.read_table(path)
        meta_raw = (table.schema.metadata or {}).get(_KEY)
        if meta_raw is None:
            raise KolmValueError("no kolm_search metadata")
        meta = json.loads(meta_raw)
        alias = meta.get("alias")
        expected = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "input": input_fp, "n_queries": n_queries,
                    "rows": table.num_rows if alias is None else 0}
        for key, value in expected.items():
            if meta.get(key) != value:
                raise KolmValueError(f"metadata {key!r} is {meta.get(key)!r}, expected {value!r}")
        if alias is not None:
            if not (isinstance(alias, list) and len(alias) == 2 and all(isinstance(a, str) for a in alias)) or depth > 8:
                raise KolmValueError(f"metadata 'alias' is {alias!r} (at depth {depth})")
            target = path.parent / _file_name(alias[0], alias[1], StageCache.suffix)
            frame = StageCache._read(target, alias[0], alias[1], n_queries, depth + 1)
            if frame_digest(frame) != meta.get("digest"):
                raise KolmValueError(f"the entry {alias!r} it refers to has other entries than the ones recorded")
            return frame
        n_features = meta.get("features")
        if not isinstance(n_features, int) or n_features < 0:
            raise KolmValueError(f"metadata 'features' is {n_features!r}")
        names = [*_TYPES, *(f"f{i}" for i in range(n_features))]
        if table.column_names != names:
            raise KolmValueError(f"columns {table.column_names}, expected {names}")
        for name in names:
            want = _TYPES.get(name, pa.float64())
            if table.schema.field(name).type != want or table.column(name).null_count:
                raise KolmValueError(f"column {name!r} is {table.schema.field(name).type} with nulls or not {want}")
        cols = {name: table.column(name).to_numpy() for name in names}
        features = np.column_stack([cols[f"f{i}"] for i in range(n_features)]) if n_features else None
        frame = CandidateFrame(query=cols["query"], doc=cols["doc"], score=cols["score"], rank=cols["rank"],
                               n_queries=n_queries, features=features)
        if frame_digest(frame) != meta.get("digest"):
            raise KolmValueError("the entries' digest does not match the one recorded")
        return frame

    def put(self, stage_fp: str, input_fp: str, frame: CandidateFrame, *,
            same_as: tuple[str, str] | None = None) -> None:
        """Store ``frame`` (atomically replacing any file of the pair); with ``same_as``, the
        (stage, input) pair already stored with this very frame, as an alias of that entry."""
        if same_as is not None:
            meta = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "input": input_fp,
                    "n_queries": frame.n_queries, "rows": 0, "alias": list(same_as), "digest": frame_digest(frame)}
            self._write(stage_fp, input_fp, pa.table({"query": pa.array([], pa.int32())}), meta)
            return
        n_features = 0 if frame.features is None else int(frame.features.shape[1])
        arrays = {"query": frame.query.astype(np.int32), "doc": frame.doc.astype(np.int64),
                  "score": frame.score.astype(np.float64), "rank": frame.rank.astype(np.int32)}
        for i in range(n_features):
            arrays[f"f{i}"] = np.ascontiguousarray(frame.features[:, i], np.float64)  # type: ignore[index]
        meta = {"format": _FORMAT, "version": _VERSION, "stage": stage_fp, "input": input_fp,
                "n_queries": frame.n_queries, "rows": len(frame), "features": n_features, "digest": frame_digest(frame)}
        self._write(stage_fp, input_fp, pa.table(arrays), meta)

    def _write(self, stage_fp: str, input_fp: str, table: pa.Table, meta: dict[str, object]) -> None:
        table = table.replace_schema_metadata({_KEY: json.dumps(meta).encode()})
        path = self.writable(self.file_for(stage_fp, input_fp))
        if path is None:
            return
        with replacing(path) as tmp:
            pq.write_table(table, tmp)
        self.writes += 1

    def __repr__(self) -> str:
        return f"StageCache({str(self.path)!r})"
