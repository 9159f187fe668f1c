"""Saving and loading a :class:`~kolm_search.retrievers.dense.DenseRetriever`: the payload
:meth:`~DenseFiles.save` writes all or nothing (:mod:`kolm_search.retrievers._persist`: the
configuration, the document vectors, a faiss index beside them and the documents), and
:meth:`~DenseFiles.load`, which checks every file it reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from kolm_search.contract.ports import Embedder
from kolm_search.engine.doctable import DocumentTable
from kolm_search.retrievers import _validate as check
from kolm_search.retrievers._persist import Payload, save_index
from kolm_search.retrievers._saved import SavedFiles, Verify, check_manifest, open_index, retrying
from kolm_search.retrievers.ann_spec import AnnSpec

__all__ = ["DenseFiles", "FORMAT", "VERSION"]

S = TypeVar("S", bound="DenseFiles")
FORMAT = "kolm-search/dense"
VERSION = 3  # 3: a documents file (Arrow IPC, memory-mapped); 2: a file map (kolm_search.retrievers._persist);
# versions 1-2 still load


class DenseFiles:
    """``save``, ``load`` and the payload of a dense index, for a class that has its ``table``,
    configuration, ``embeddings``, ``ann_spec``/``ann``, ``merge()``, ``_configure(...)`` and
    ``_start_index(table)`` (:class:`~kolm_search.retrievers.dense.DenseRetriever`)."""

    if TYPE_CHECKING:
        table: DocumentTable
        metric: Any
        fields: tuple[str, ...]
        fusion_k: float
        embeddings: npt.NDArray[np.float32]
        ann_spec: AnnSpec | None
        ann: Any
        _vector_digest: tuple[Any, str] | None

        @property
        def dim(self) -> int: ...

        def merge(self) -> None: ...

        def _configure(self, embedder: Embedder | None, *, metric: Any, fields: Sequence[str], fusion_k: float,
                       n_threads: int | None, embed_queries: bool) -> None: ...

        def _start_index(self, table: DocumentTable) -> None: ...

    def _payload(self) -> Payload:
        """What :meth:`save` writes, pending changes merged (nothing written)."""
        self.merge()
        config = {"metric": self.metric, "fields": list(self.fields), "fusion_k": self.fusion_k}
        meta: dict[str, Any] = {"config": config, "n_docs": len(self.table), "dim": self.dim}
        arrays = {"embeddings": np.asarray(self.embeddings, np.float32)}
        if self.ann_spec is not None:  # the faiss index beside the embeddings (kolm_search.retrievers.ann_store)
            from kolm_search.retrievers.ann_store import ann_arrays, ann_meta

            meta["ann"] = ann_meta(self.ann_spec, self.ann)
            arrays.update(ann_arrays(self.ann))
        return Payload(FORMAT, VERSION, meta, arrays=arrays, tables={"documents": self.table})

    def save(self, path: str | Path) -> None:
        """Write to folder ``path`` (embeddings, documents, manifest), replacing any index there
        all or nothing (:meth:`BM25Retriever.save`); pending changes are merged first. The
        embedder is not saved: pass it to :meth:`load`."""
        save_index(path, self._payload())

    @classmethod
    def load(cls: type[S], path: str | Path, embedder: Embedder | None = None, *, mmap: bool = True,
             n_threads: int | None = None, verify: Verify = "auto") -> S:
        """Load a retriever written by :meth:`save` (embeddings memory-mapped by default).

        Every file is checked first (manifest keys and types, each file's size and sha256, a
        known metric, the embeddings' dtype, shape and finiteness): a damaged index raises
        ``KolmValueError`` naming the file and the key or position. ``verify`` as
        :meth:`BM25Retriever.load` takes it: ``"quick"`` skips the digests and reads the
        embeddings' file block by block for their checks (no mapped page stays resident),
        ``"auto"`` (default) is ``"full"`` up to 256 MiB. Versions 1 and 2 still load.
        """
        root = Path(path)

        def read() -> S:
            body, files = open_index(root, files_since=2, verify=verify)
            return cls._from_saved(files, body, embedder, mmap=mmap, n_threads=n_threads)

        return retrying(root, read)

    @classmethod
    def _from_saved(cls: type[S], files: SavedFiles, body: dict[str, Any], embedder: Embedder | None = None, *,
                    mmap: bool = True, n_threads: int | None = None) -> S:
        """The retriever of one manifest ``body`` (or a composite's child), checked here, and its files."""
        body = check_manifest(files.where, body, FORMAT, (1, 2, VERSION), ("n_docs", "dim", *files.manifest_keys),
                              optional=("ann",))
        cfg = check.dense_config(files.where, body["config"])
        n_docs = check.integer(files.where, "n_docs", body["n_docs"])
        dim = check.integer(files.where, "dim", body["dim"], 0, 1 << 20)
        files.expect(("documents", "embeddings"), ("ann", "ann_live") if "ann" in body else ())
        path_emb = files.path("embeddings", "npy")
        emb = files.array("embeddings", "float", 2, mmap=mmap)
        if files.full or not mmap:
            emb = check.dense_embeddings(path_emb, emb, n_docs, dim, cfg["metric"])
        else:
            emb = check.dense_embeddings_in_blocks(path_emb, emb, n_docs, dim, cfg["metric"], n_threads)
        table = files.table("documents", n_docs, mmap=mmap)
        self = cls.__new__(cls)
        self._configure(embedder, metric=cfg["metric"], fields=cfg["fields"], fusion_k=cfg["fusion_k"],
                        n_threads=n_threads, embed_queries=False)
        self._start_index(table)
        self.embeddings = emb
        self._vector_digest = None
        self.ann_spec, self.ann = None, None
        if "ann" in body:
            from kolm_search.retrievers.ann_store import load_ann

            self.ann_spec, self.ann = load_ann(files, body["ann"], n_docs, dim)
        return self

