"""Test collections through ir_datasets (extra ``irds``): ``load_dataset("irds:<id>")``.

An ir_datasets id (``"beir/scifact/test"``, ``"vaswani"``, ``"msmarco-passage/dev/small"``)
becomes the same :class:`~kolm_search.io.Dataset` a BEIR folder gives:

- ``corpus``: ``id``, ``title`` (the document's ``title`` field, else None), ``content`` (its
  ``text`` field, else ``body``, else ir_datasets' ``default_text()``) and, when a document
  has other fields, ``metadata`` (a dict of them; BEIR's own ``metadata`` dict as is);
  TREC's ``marked_up_doc`` is left out;
- ``queries``: ``qid``, ``query`` (``text``, else ``default_text()``, e.g. a TREC topic's title);
- ``qrels``: ``qid, doc_id, relevance`` as :func:`~kolm_search.io.read_qrels` gives them
  (categorical ids, int64 grades; ``iteration`` dropped).

ir_datasets downloads what it needs on first use into ``$IR_DATASETS_HOME``
(``~/.ir_datasets``); ids under ``beir/`` get ``drop_self_hits`` as BEIR's own datasets do.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

import pandas as pd

from kolm_search.engine.runs import relevance_column
from kolm_search.errors import DownloadError, FrameValidationError, KolmValueError
from kolm_search.io.beir import Dataset, report_unknown_queries

__all__ = ["is_irds_id", "load_irds"]

_SKIPPED_FIELDS = {"doc_id", "text", "title", "marked_up_doc"}


def _irds() -> Any:
    from kolm_search._extras import require

    return require("ir_datasets", "irds")


def is_irds_id(name: str) -> bool:
    """Whether ``name`` is a registered ir_datasets id (False when ir_datasets is not installed)."""
    import importlib.util

    if importlib.util.find_spec("ir_datasets") is None:
        return False
    try:
        _irds().registry[name]
    except KeyError:
        return False
    return True


def _lookup(irds: Any, dataset_id: str) -> Any:
    try:
        return irds.registry[dataset_id]
    except KeyError:
        close = difflib.get_close_matches(dataset_id, list(irds.registry), n=5, cutoff=0.6)
        raise KolmValueError(f"{dataset_id!r} is not an ir_datasets id"
                             + (f"; close ones: {close}" if close else "")) from None


def _read(dataset_id: str, what: str, items: Any) -> list[Any]:
    """Every record of one of the dataset's iterators; failures name the id and the part."""
    try:
        return list(items())
    except OSError as exc:  # includes ir_datasets' download failures and missing local files
        raise DownloadError(f"ir_datasets {dataset_id!r}: fetching its {what} failed: {exc}") from exc
    except Exception as exc:  # a malformed source file: ir_datasets raises many kinds
        raise FrameValidationError(f"ir_datasets {dataset_id!r}: reading its {what} failed "
                                   f"({type(exc).__name__}: {exc})") from exc


def _text(record: Any, fields: Iterable[str], what: str) -> str:
    for field in fields:
        value = getattr(record, field, None)
        if isinstance(value, str):
            return value
    method = getattr(record, "default_text", None)
    value = method() if callable(method) else None
    if not isinstance(value, str):
        raise FrameValidationError(f"{what} has no text field (fields: {list(getattr(record, '_fields', []))})")
    return value


def _unique(frame: pd.DataFrame, column: str, what: str) -> pd.DataFrame:
    dup = frame[column].duplicated()
    if dup.any():
        raise FrameValidationError(f"{what}: duplicate id {frame[column][dup].iloc[0]!r}")
    return frame


def _corpus(docs: list[Any], dataset_id: str) -> pd.DataFrame:
    ids, titles, texts, extra = [], [], [], []
    for doc in docs:
        ids.append(str(doc.doc_id))
        title = getattr(doc, "title", None)
        titles.append(title if isinstance(title, str) and title else None)
        texts.append(_text(doc, ("text", "body"), f"ir_datasets {dataset_id!r} document {doc.doc_id!r}"))
        meta = {f: getattr(doc, f) for f in doc._fields if f not in _SKIPPED_FIELDS}
        if set(meta) == {"metadata"} and isinstance(meta["metadata"], dict):
            meta = meta["metadata"]
        extra.append(meta or None)
    corpus = pd.DataFrame({"id": ids, "title": titles, "content": texts})
    if any(m is not None for m in extra):
        corpus["metadata"] = extra
    return _unique(corpus, "id", f"ir_datasets {dataset_id!r} documents")


def _queries(records: list[Any], dataset_id: str) -> pd.DataFrame:
    rows = [(str(q.query_id), _text(q, ("text",), f"ir_datasets {dataset_id!r} query {q.query_id!r}")) for q in records]
    return _unique(pd.DataFrame(rows, columns=["qid", "query"]), "qid", f"ir_datasets {dataset_id!r} queries")


def _qrels(records: list[Any], dataset_id: str) -> pd.DataFrame:
    what = f"ir_datasets {dataset_id!r} qrels"
    frame = pd.DataFrame([(str(r.query_id), str(r.doc_id), r.relevance) for r in records],
                         columns=["qid", "doc_id", "relevance"])
    frame["relevance"] = relevance_column(frame, what)
    dup = frame.duplicated(["qid", "doc_id"])
    if dup.any():
        row = frame[dup].iloc[0]
        raise FrameValidationError(f"{what}: duplicate judgement for query {row.qid!r}, document {row.doc_id!r}")
    return frame.astype({"qid": "category", "doc_id": "category"})


def load_irds(dataset_id: str, split: str | None = None) -> Dataset:
    """The ir_datasets collection ``dataset_id`` as a :class:`~kolm_search.io.Dataset`.

    ``split`` appends to the id (``load_irds("beir/quora", "dev")`` is ``beir/quora/dev``);
    without it the id must have documents, queries and qrels itself.

    Raises
    ------
    ImportError
        ir_datasets is not installed (``pip install 'kolm-search[irds]'``).
    KolmValueError
        Unknown id (close ids suggested), or one without documents, queries or qrels (its
        sub-ids listed).
    DownloadError, FrameValidationError
        ir_datasets could not fetch or parse a part, naming the id and the part.
    """
    irds = _irds()
    if split is not None:
        if not is_irds_id(f"{dataset_id}/{split}"):
            raise KolmValueError(f"ir_datasets has no {dataset_id}/{split!s} (split {split!r} is appended to the id); "
                                 f"ids under {dataset_id!r}: {_children(irds, dataset_id)}")
        dataset_id = f"{dataset_id}/{split}"
    ds = _lookup(irds, dataset_id)
    missing = [part for part in ("docs", "queries", "qrels") if not getattr(ds, f"has_{part}")()]
    if missing:
        raise KolmValueError(f"ir_datasets {dataset_id!r} provides no {' or '.join(missing)}; an evaluation needs "
                             f"all three: pick one of {_children(irds, dataset_id)}")
    dataset = Dataset(corpus=_corpus(_read(dataset_id, "documents", ds.docs_iter), dataset_id),
                      queries=_queries(_read(dataset_id, "queries", ds.queries_iter), dataset_id),
                      qrels=_qrels(_read(dataset_id, "qrels", ds.qrels_iter), dataset_id), name=dataset_id)
    dataset.drop_self_hits = dataset_id.startswith("beir/")
    report_unknown_queries(dataset.qrels, dataset.queries, f"ir_datasets {dataset_id!r}")
    return dataset


def _children(irds: Any, dataset_id: str) -> list[str]:
    return sorted(k for k in irds.registry if k.startswith(dataset_id.rstrip("/") + "/"))[:20]
