"""A sharded index on disk: one manifest naming every shard, each shard an index folder.

The folder of a sharded index built by :mod:`.shard_build`::

    manifest.json        {"format": "kolm-search/sharded-bm25" | "kolm-search/sharded-dense",
                          "version", "generation", "config", "n_docs",
                          "shards": [{"folder": "build-<id>/shard-000", "n_docs", "generation"}, ...],
                          "files": {...}}          (BM25: the merged vocab.json and df.npy)
    build-<id>/shard-000/ ...                      each a saved BM25Retriever / DenseRetriever

The manifest is written last, all or nothing (:func:`~kolm_search.retrievers._persist.save_index`),
after every shard of the build was saved, so it never names a shard that is missing or
incomplete. Loading checks what it can before any search: every shard is loaded by a task on
a worker and must be a complete index whose manifest ``generation`` (a random id per save) and
size are the ones recorded, weighted with external statistics (BM25); a shard that is missing,
damaged, replaced or of another build raises naming it. So a search always merges every shard
of one build, never a part taken for the whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kolm_search.errors import KolmValueError
from kolm_search.retrievers._persist import Payload, save_index
from kolm_search.retrievers._saved import SavedFiles, check_manifest, open_index, read_json

__all__ = ["FORMATS", "ShardEntry", "ShardedManifest", "checked_shard", "open_sharded", "save_sharded"]

FORMATS = {"bm25": "kolm-search/sharded-bm25", "dense": "kolm-search/sharded-dense"}
_VERSION = 1
_FOLDER = re.compile(r"build-[0-9a-f]{32}/shard-[0-9]{3,}")
_GENERATION = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest records it: its folder (relative), size and save generation."""

    folder: str
    n_docs: int
    generation: str

    def as_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "n_docs": self.n_docs, "generation": self.generation}


@dataclass(frozen=True)
class ShardedManifest:
    """A checked sharded manifest: ``root``, ``kind``, ``config``, ``shards``, ``n_docs`` and the
    top-level files (``files``: BM25's merged statistics)."""

    root: Path
    kind: str
    config: dict[str, Any]
    shards: tuple[ShardEntry, ...]
    n_docs: int
    files: SavedFiles
    body: dict[str, Any]

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n_shards + 1,): shard ``i`` holds the collection's documents ``[o[i], o[i+1])``."""
        out = np.zeros(len(self.shards) + 1, np.int64)
        np.cumsum([s.n_docs for s in self.shards], out=out[1:])
        return out


def save_sharded(root: Path, kind: str, config: dict[str, Any], shards: Sequence[ShardEntry], *,
                 meta: dict[str, Any] | None = None, arrays: dict[str, np.ndarray] | None = None,
                 blobs: dict[str, Any] | None = None) -> None:
    """Write the manifest of a sharded index (the switch to a new build)."""
    body = {"config": config, "n_docs": int(sum(s.n_docs for s in shards)),
            "shards": [s.as_json() for s in shards], **(meta or {})}
    save_index(root, Payload(FORMATS[kind], _VERSION, body, arrays=dict(arrays or {}), blobs=dict(blobs or {})))


_OPTIONAL = ("stats", "index", "dim")  # BM25's merged statistics; a dense index's type and dimension


def open_sharded(root: Path, kind: str) -> ShardedManifest:
    """The checked manifest of the sharded index in folder ``root``.

    Raises
    ------
    KolmValueError
        No manifest, another format, or a shard entry that is not a folder of this index's builds
        (named by its position).
    """
    body, files = open_index(root, files_since=1)
    where = root / "manifest.json"
    body = check_manifest(where, body, FORMATS[kind], _VERSION, ("config", "n_docs", "shards", *files.manifest_keys),
                          optional=_OPTIONAL)
    shards = body["shards"]
    if not isinstance(shards, list) or not shards:
        raise KolmValueError(f"{where}: key 'shards' must be a non-empty list")
    entries = []
    for i, s in enumerate(shards):
        ok = (isinstance(s, dict) and set(s) == {"folder", "n_docs", "generation"}
              and isinstance(s["folder"], str) and _FOLDER.fullmatch(s["folder"]) is not None
              and type(s["n_docs"]) is int and s["n_docs"] >= 0
              and isinstance(s["generation"], str) and _GENERATION.fullmatch(s["generation"]) is not None)
        if not ok:
            raise KolmValueError(f"{where}: shards[{i}] must be {{folder: 'build-<id>/shard-<i>', n_docs, generation}}, "
                                 f"got {str(s)[:120]}")
        entries.append(ShardEntry(s["folder"], s["n_docs"], s["generation"]))
    if body["n_docs"] != sum(e.n_docs for e in entries):
        raise KolmValueError(f"{where}: n_docs {body['n_docs']} is not the sum of the shards' sizes")
    if not isinstance(body["config"], dict):
        raise KolmValueError(f"{where}: key 'config' must be an object")
    return ShardedManifest(root, kind, body["config"], tuple(entries), body["n_docs"], files, body)


def checked_shard(root: str, entry: ShardEntry, shard: int, n_docs: int, config: dict[str, Any] | None) -> None:
    """Refuse a loaded shard (of ``n_docs`` documents, saved with ``config``) that is not the one
    the sharded manifest in ``root`` records as shard ``shard``."""
    folder = Path(root) / entry.folder
    body = read_json(folder / "manifest.json")
    generation = body.get("generation") if isinstance(body, dict) else None
    if generation != entry.generation:
        raise KolmValueError(f"{folder}: shard {shard} was saved as generation {generation!r}, the sharded index "
                             f"records {entry.generation!r} (replaced or from another build: rebuild the index)")
    if n_docs != entry.n_docs:
        raise KolmValueError(f"{folder}: shard {shard} holds {n_docs} documents, the sharded index records "
                             f"{entry.n_docs}")
    if config is not None and body.get("config") != config:
        raise KolmValueError(f"{folder}: shard {shard} was built with another configuration than the sharded "
                             "index records")
