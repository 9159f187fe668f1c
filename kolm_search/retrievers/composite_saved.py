"""Saving and loading a :class:`~kolm_search.retrievers.composite.CompositeRetriever` (and a
``Fuse``): one manifest holding the fusion's settings (:meth:`CompositeRetriever.settings`) and
every child's payload, each child a BM25, dense, feedback or composite index, written all or
nothing (:mod:`kolm_search.retrievers._persist`) and checked, each child as its own ``load``
checks it, when read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kolm_search.contract.ports import Embedder, Logger
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers import _validate as check
from kolm_search.retrievers._persist import Payload, save_index
from kolm_search.retrievers._saved import SavedFiles, Verify, check_manifest, open_index, retrying

__all__ = ["SavedComposite"]

S = TypeVar("S", bound="SavedComposite")
_FORMAT = "kolm-search/composite"
_VERSION = 1
_CONFIG = ("k", "strategy", "weights", "method", "norm", "depth")
_OPTIONAL = ("params",)  # written since params were taken; a file without them has none


class SavedComposite:
    """``save``, ``load`` and the payload of a composite, for a class that has its children
    ``retrievers``, ``merge()``, ``settings()`` and ``assemble(children, settings, logger)``
    (:class:`~kolm_search.retrievers.composite.CompositeRetriever`)."""

    if TYPE_CHECKING:
        retrievers: list[Any]

        def merge(self) -> None: ...

        def settings(self) -> dict[str, Any]: ...

        @classmethod
        def assemble(cls: type[S], children: Sequence[Any], settings: dict[str, Any],
                     logger: Logger | None = None) -> S: ...

    def _payload(self) -> Payload:
        """What :meth:`save` writes: the fusion parameters and every child (nothing written)."""
        from kolm_search.retrievers.bm25 import BM25Retriever
        from kolm_search.retrievers.dense import DenseRetriever
        from kolm_search.retrievers.feedback import FeedbackRetriever

        kinds = (BM25Retriever, DenseRetriever, FeedbackRetriever, SavedComposite)
        for i, child in enumerate(self.retrievers):
            if not isinstance(child, kinds):
                raise KolmTypeError(f"CompositeRetriever.save: retrievers[{i}] ({type(child).__name__}) cannot be "
                                    "saved; a saved composite holds BM25Retriever, DenseRetriever, FeedbackRetriever "
                                    "and CompositeRetriever children")
        self.merge()
        config = self.settings()
        return Payload(_FORMAT, _VERSION, {"config": config},
                       children=[child._payload() for child in self.retrievers])

    def save(self, path: str | Path) -> None:
        """Write the composite (fusion parameters and every child, in one manifest) to folder
        ``path``, all or nothing (:meth:`BM25Retriever.save`). A child of another kind raises
        ``KolmTypeError`` before anything is written; the logger is not saved."""
        save_index(path, self._payload())

    @classmethod
    def load(cls: type[S], path: str | Path, embedder: Embedder | None = None, *, logger: Logger | None = None,
             mmap: bool = True, n_threads: int | None = None, verify: Verify = "auto") -> S:
        """Load a composite written by :meth:`save`; ``embedder`` goes to every dense child (as
        :meth:`DenseRetriever.load` takes it), each child checked as its own ``load`` checks it."""
        root = Path(path)

        def read() -> S:
            body, files = open_index(root, files_since=1, verify=verify)
            return cls._from_saved(files, body, embedder, logger=logger, mmap=mmap, n_threads=n_threads)

        return retrying(root, read)

    @classmethod
    def _from_saved(cls: type[S], files: SavedFiles, body: Any, embedder: Embedder | None = None, *,
                    logger: Logger | None = None, mmap: bool = True, n_threads: int | None = None,
                    ) -> S:
        from kolm_search.retrievers.bm25 import BM25Retriever
        from kolm_search.retrievers.dense import DenseRetriever
        from kolm_search.retrievers.feedback import FeedbackRetriever

        where = files.where
        body = check_manifest(where, body, _FORMAT, _VERSION, ("children", *files.manifest_keys))
        files.expect(())
        cfg = check.check_keys(where, "config", body["config"], _CONFIG, optional=_OPTIONAL)
        children: list[Any] = []
        for child, child_files in files.children(body):
            fmt = child.get("format") if isinstance(child, dict) else None
            if fmt == "kolm-search/dense":
                children.append(DenseRetriever._from_saved(child_files, child, embedder, mmap=mmap,
                                                           n_threads=n_threads))
            elif fmt in ("kolm-search/bm25", "kolm-search/feedback"):
                kind = BM25Retriever if fmt == "kolm-search/bm25" else FeedbackRetriever
                children.append(kind._from_saved(child_files, child, mmap=mmap, n_threads=n_threads))
            elif fmt == _FORMAT:
                children.append(cls._from_saved(child_files, child, embedder, logger=logger, mmap=mmap,
                                                n_threads=n_threads))
            else:
                raise KolmValueError(f"{child_files.where}: key 'format' is {fmt!r}; a composite's children are "
                                     "kolm-search/bm25, dense, feedback or composite indexes")
        try:
            return cls.assemble(children, cfg, logger)
        except (KolmValueError, KolmTypeError) as exc:
            raise KolmValueError(f"{where}: key 'config': {exc}") from exc
