"""The BEIR layout: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.io._text import text_lines
from kolm_search.io.trec import read_qrels

__all__ = ["Dataset", "SELF_HITS_ATTR", "load_beir"]

SELF_HITS_ATTR = "drop_self_hits"
"""Key in a qrels frame's ``attrs`` saying documents whose id is the query's are dropped from
runs before scoring (BEIR's ``ignore_identical_ids``); see :attr:`Dataset.drop_self_hits`."""


@dataclass
class Dataset:
    """A test collection.

    Attributes
    ----------
    corpus : DataFrame ``id, title, content`` (+ metadata columns)
    queries : DataFrame ``qid, query``
    qrels : DataFrame ``qid, doc_id, relevance`` (int)
    name : str
    drop_self_hits : bool
        Whether evaluation drops, from a run, the documents whose id equals the query id before
        scoring, as BEIR's evaluation does (``EvaluateRetrieval.evaluate`` with its default
        ``ignore_identical_ids=True``). On for BEIR's datasets (loaded by name, from a folder
        named like one, or as ``irds:beir/...``), where it matters for ArguAna and Quora, whose
        queries are documents of the corpus; off otherwise. Stored in ``qrels.attrs``, so it
        travels with the qrels frame: ``evaluate(run, ds.qrels)`` applies it too.
    """

    corpus: pd.DataFrame
    queries: pd.DataFrame
    qrels: pd.DataFrame
    name: str = ""

    @property
    def drop_self_hits(self) -> bool:
        return bool(self.qrels.attrs.get(SELF_HITS_ATTR, False))

    @drop_self_hits.setter
    def drop_self_hits(self, value: bool) -> None:
        self.qrels.attrs[SELF_HITS_ATTR] = bool(value)

    def judged_queries(self) -> pd.DataFrame:
        """The queries that have at least one judgement (what BEIR evaluates)."""
        return self.queries[self.queries["qid"].isin(set(self.qrels["qid"]))].reset_index(drop=True)

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}: {len(self.corpus)} documents, {len(self.queries)} queries, "
                f"{len(self.qrels)} judgements{', self-hits dropped' if self.drop_self_hits else ''})")


def _find(root: Path, stem: str) -> Path:
    for candidate in (root / stem, root / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    raise KolmValueError(f"{str(root)!r} is not a BEIR folder: {stem}[.gz] is missing")


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FrameValidationError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict) or "_id" not in obj:
            raise FrameValidationError(f"{path}:{lineno}: expected an object with '_id'")
        if not isinstance(obj["_id"], (str, int)) or isinstance(obj["_id"], bool) or obj["_id"] == "":
            raise FrameValidationError(f"{path}:{lineno}: '_id' must be a non-empty string or integer, got {obj['_id']!r}")
        yield lineno, obj


def _read_corpus(path: Path) -> pd.DataFrame:
    ids, titles, texts, extra = [], [], [], []
    for lineno, obj in _jsonl(path):
        text = obj.get("text")
        if not isinstance(text, str):
            raise FrameValidationError(f"{path}:{lineno}: document {obj['_id']!r} has no string 'text'")
        ids.append(str(obj["_id"]))
        titles.append(obj.get("title") or None)
        texts.append(text)
        meta = obj.get("metadata")
        extra.append(meta if isinstance(meta, dict) and meta else None)
    corpus = pd.DataFrame({"id": ids, "title": titles, "content": texts})
    if any(m is not None for m in extra):
        corpus["metadata"] = extra
    dup = corpus["id"].duplicated()
    if dup.any():
        raise FrameValidationError(f"{path}: duplicate document id {corpus['id'][dup].iloc[0]!r}")
    return corpus


def _read_queries(path: Path) -> pd.DataFrame:
    rows = []
    for lineno, obj in _jsonl(path):
        if not isinstance(obj.get("text"), str):
            raise FrameValidationError(f"{path}:{lineno}: query {obj['_id']!r} has no string 'text'")
        rows.append((str(obj["_id"]), obj["text"]))
    queries = pd.DataFrame(rows, columns=["qid", "query"])
    dup = queries["qid"].duplicated()
    if dup.any():
        raise FrameValidationError(f"{path}: duplicate query id {queries['qid'][dup].iloc[0]!r}")
    return queries


def load_beir(path: str | Path, split: str = "test") -> Dataset:
    """Read a BEIR folder into a :class:`Dataset` (``drop_self_hits`` on when the folder is
    named like a BEIR dataset of the download registry, e.g. ``arguana``).

    Raises ``KolmValueError``/``FrameValidationError`` naming the file and line for a missing
    file, malformed JSON or TSV, duplicate ids, or a non-integer relevance.
    """
    root = Path(path)
    if not root.is_dir():
        raise KolmValueError(f"BEIR folder {str(root)!r} does not exist")
    qrels_path = next((p for p in (root / "qrels" / f"{split}.tsv", root / "qrels" / f"{split}.tsv.gz") if p.is_file()),
                      None)
    if qrels_path is None:
        found = (root / "qrels").glob("*.tsv*") if (root / "qrels").is_dir() else []
        available = sorted({p.name.removesuffix(".gz").removesuffix(".tsv") for p in found})
        raise KolmValueError(f"{str(root)!r} has no qrels for split {split!r}; available: {available}")
    dataset = Dataset(corpus=_read_corpus(_find(root, "corpus.jsonl")), queries=_read_queries(_find(root, "queries.jsonl")),
                      qrels=read_qrels(qrels_path), name=root.name)
    dataset.drop_self_hits = _is_beir_name(root.name)
    return dataset


def _is_beir_name(name: str) -> bool:
    """A BEIR dataset (its evaluation drops self-hits): a name of the download registry."""
    from kolm_search.io.download import beir_registry

    return name.lower() in beir_registry()
