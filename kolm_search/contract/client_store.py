"""``SearchClient.save`` / ``SearchClient.load``: a client's index and configuration in one folder,
built on the retrievers' own ``save``/``load`` (nothing here writes an index file itself).

Layout of ``path``::

    client.json           the manifest: format, version, the retriever tree, the planner,
                          the options, and the modules that must be passed again to load
    retriever-<id>/       the retriever's own save (its manifest and files)

Saved: a retriever of a kind registered with :func:`~kolm_search.contract.saved_kinds.saved_kind`
(of the built-ins: :class:`BM25Retriever`, :class:`DenseRetriever`, :class:`FeedbackRetriever`,
:class:`CompositeRetriever` and ``Fuse``), each by its own ``save`` (all or nothing, one manifest); a
:class:`DefaultQueryPlanner`; the options that are plain values. Not saved, and asked for by name
at load: the embedder (a model: pass ``embedder=``), and any other module or option the client
had (a reranker, a cache, a logger, schemas...). Another retriever or planner is refused at save,
naming its class.

A save writes the new index beside the old one (a fresh ``retriever-<id>`` folder), then replaces
``client.json`` whole (a temporary file renamed over it), then removes the old folder: stopped at
any point, the folder loads as the old client or the new one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.contract.saved_kinds import class_of_kind, kind_of
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["FORMAT", "load_client", "save_client"]

FORMAT, VERSION = "kolm_search.client", 1
_MANIFEST = "client.json"
_PLAIN_OPTIONS = ("default_limit", "default_mode", "cache_ttl_seconds", "max_query_length", "stage_timeout_seconds",
                  "stage_timeouts", "cache_timeout_seconds", "telemetry_timeout_seconds")
_OBJECT_OPTIONS = ("logger", "input_schema", "output_schema")
_MODULES = ("embedder", "deduplicator", "reranker", "synthesizer", "intent_classifier", "cache", "telemetry")
_KINDS = ("bm25", "dense", "feedback", "composite")


def _save_retriever(retriever: Any, folder: Path) -> dict[str, Any]:
    """The retriever written by its own ``save`` (all or nothing) into ``folder``; its kind."""
    kind = kind_of(retriever)
    if kind is None:
        raise KolmTypeError(f"SearchClient.save cannot save a retriever of type {type(retriever).__name__}: it saves "
                            f"the retriever kinds registered with saved_kind ({', '.join(_KINDS)} of the built-ins)")
    if kind == "composite" and retriever.logger is not None:
        raise KolmValueError("SearchClient.save: the CompositeRetriever has a logger, which is not saved; build the "
                             "client again with it after load")
    retriever.save(folder)
    return {"kind": kind}


def _load_retriever(spec: Any, folder: Path, embedder: Any, where: str) -> Any:
    cls = class_of_kind(spec.get("kind")) if isinstance(spec, dict) else None
    if cls is None:
        raise KolmValueError(f"{where}: unknown retriever entry {spec!r}")
    kind = spec["kind"]
    if kind in ("bm25", "feedback"):
        return cls.load(folder)  # type: ignore[attr-defined]
    if embedder is None and kind == "dense":
        raise KolmValueError(f"{where}: the client has a dense retriever; pass embedder= (the model it was built "
                             "with) to SearchClient.load")
    return cls.load(folder, embedder)  # type: ignore[attr-defined]


def save_client(client: Any, path: str | Path) -> None:
    """Write ``client`` to folder ``path`` (see the module); refuses, before writing anything, a
    retriever or planner it cannot save."""
    modules, options = client.modules, client.options
    if type(modules.planner) is not DefaultQueryPlanner:
        raise KolmTypeError(f"SearchClient.save saves a DefaultQueryPlanner only, not a {type(modules.planner).__name__}"
                            "; save the retriever and build the client again")
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    old = _manifest(root) if (root / _MANIFEST).exists() else None
    folder = f"retriever-{uuid.uuid4().hex[:12]}"
    try:
        tree = _save_retriever(modules.retriever, root / folder)
    except BaseException:
        shutil.rmtree(root / folder, ignore_errors=True)
        raise
    needed = [name for name in _MODULES if getattr(modules, name) is not None]
    needed += [f"options.{name}" for name in _OBJECT_OPTIONS if getattr(options, name) is not None]
    manifest = {"format": FORMAT, "version": VERSION, "folder": folder, "retriever": tree,
                "planner": "DefaultQueryPlanner",
                "options": {name: _plain(getattr(options, name)) for name in _PLAIN_OPTIONS}, "pass_at_load": needed}
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".client.", suffix=".json.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=1)
        _switch(Path(tmp), root / _MANIFEST)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        shutil.rmtree(root / folder, ignore_errors=True)
        raise
    if old is not None and old.get("folder") != folder and isinstance(old.get("folder"), str):
        shutil.rmtree(root / old["folder"], ignore_errors=True)


def _switch(new: Path, manifest: Path) -> None:
    """The one step that makes the new client the saved one: the manifest renamed over the old."""
    os.replace(new, manifest)


def _plain(value: Any) -> Any:
    return dict(value) if hasattr(value, "items") else value


def _manifest(root: Path) -> dict[str, Any]:
    where = str(root / _MANIFEST)
    try:
        manifest = json.loads((root / _MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KolmValueError(f"{str(root)!r} holds no saved client ({_MANIFEST} is missing)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KolmValueError(f"{where}: cannot read the manifest ({type(exc).__name__}: {exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise KolmValueError(f"{where}: not a kolm_search client manifest of version {VERSION}")
    folder = manifest.get("folder")
    if not isinstance(folder, str) or not folder.startswith("retriever-") or "/" in folder or "\\" in folder:
        raise KolmValueError(f"{where}: bad retriever folder {folder!r}")
    return manifest


def load_client(path: str | Path, **modules: Any) -> tuple[Any, Any]:
    """The modules and options of the client saved in ``path`` (``SearchClient.load`` builds
    the client of them); ``modules`` give what was not saved (``embedder=`` for a dense
    retriever, and every module or option the manifest lists under ``pass_at_load``, as
    ``reranker=...`` or ``logger=...``)."""
    root = Path(path)
    manifest = _manifest(root)
    where = str(root / _MANIFEST)
    needed = manifest.get("pass_at_load", [])
    given = {k.removeprefix("options."): v for k, v in modules.items()}
    unknown = sorted(set(given) - set(_MODULES) - set(_OBJECT_OPTIONS))
    if unknown:
        raise KolmValueError(f"SearchClient.load: unknown module(s) {unknown}; it takes {[*_MODULES, *_OBJECT_OPTIONS]}")
    missing = [n for n in needed if n.removeprefix("options.") not in given]
    if missing:
        raise KolmValueError(f"SearchClient.load: the saved client had {missing}, which are not saved; pass them "
                             f"({', '.join(m.removeprefix('options.') + '=...' for m in missing)})")
    retriever = _load_retriever(manifest["retriever"], root / manifest["folder"], given.get("embedder"), where)
    options = SearchPipelineOptions.coerce({**manifest.get("options", {}),
                                            **{k: v for k, v in given.items() if k in _OBJECT_OPTIONS}})
    parts = {k: v for k, v in given.items() if k in _MODULES}
    return SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=retriever, **parts), options
