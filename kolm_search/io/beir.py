"""The BEIR layout: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.io._text import text_lines
from kolm_search.io.trec import read_qrels

__all__ = ["Dataset", "load_beir"]


@dataclass
class Dataset:
    """A test collection.

    Attributes
    ----------
    corpus : DataFrame ``id, title, content`` (+ metadata columns)
    queries : DataFrame ``qid, query``
    qrels : DataFrame ``qid, doc_id, relevance`` (int)
    name : str
    """

    corpus: pd.DataFrame
    queries: pd.DataFrame
    qrels: pd.DataFrame
    name: str = ""

    def judged_queries(self) -> pd.DataFrame:
        """The queries that have at least one judgement (what BEIR evaluates)."""
        return self.queries[self.queries["qid"].isin(set(self.qrels["qid"]))].reset_index(drop=True)

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}: {len(self.corpus)} documents, {len(self.queries)} queries, "
                f"{len(self.qrels)} judgements)")


def _find(root: Path, stem: str) -> Path:
    for candidate in (root / stem, root / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    raise KolmValueError(f"{str(root)!r} is not a BEIR folder: {stem}[.gz] is missing")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _jsonl(path: Path, fields: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line; ``_id`` checked, and ``fields`` that
    hold strings checked to be Unicode text (JSON's ``\\ud800`` escapes can write a lone
    surrogate, which no UTF-8 consumer can take)."""
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FrameValidationError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        except (ValueError, RecursionError) as exc:  # a number past the int digits limit, nesting too deep
            raise FrameValidationError(f"{path}:{lineno}: invalid JSON ({type(exc).__name__}: {exc})") from exc
        if not isinstance(obj, dict) or "_id" not in obj:
            raise FrameValidationError(f"{path}:{lineno}: expected an object with '_id'")
        if not isinstance(obj["_id"], (str, int)) or isinstance(obj["_id"], bool) or obj["_id"] == "":
            raise FrameValidationError(f"{path}:{lineno}: '_id' must be a non-empty string or integer, got {obj['_id']!r}")
        if _SURROGATE_ESCAPE.search(line):
            for name in ("_id", *fields):
                value = obj.get(name)
                if not isinstance(value, str):
                    continue
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise FrameValidationError(f"{path}:{lineno}: {name!r} holds a lone surrogate "
                                               f"({value[exc.start]!a}), not Unicode text") from exc
        yield lineno, obj


def _read_corpus(path: Path) -> pd.DataFrame:
    ids, titles, texts, extra = [], [], [], []
    for lineno, obj in _jsonl(path, ("text", "title")):
        text, title = obj.get("text"), obj.get("title")
        if not isinstance(text, str):
            raise FrameValidationError(f"{path}:{lineno}: document {obj['_id']!r} has no string 'text'")
        if title is not None and not isinstance(title, str):
            raise FrameValidationError(f"{path}:{lineno}: document {obj['_id']!r} has a 'title' that is not a string")
        ids.append(str(obj["_id"]))
        titles.append(title or None)
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
    for lineno, obj in _jsonl(path, ("text",)):
        if not isinstance(obj.get("text"), str):
            raise FrameValidationError(f"{path}:{lineno}: query {obj['_id']!r} has no string 'text'")
        rows.append((str(obj["_id"]), obj["text"]))
    queries = pd.DataFrame(rows, columns=["qid", "query"])
    dup = queries["qid"].duplicated()
    if dup.any():
        raise FrameValidationError(f"{path}: duplicate query id {queries['qid'][dup].iloc[0]!r}")
    return queries


def load_beir(path: str | Path, split: str = "test") -> Dataset:
    """Read a BEIR folder into a :class:`Dataset`.

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
    return Dataset(corpus=_read_corpus(_find(root, "corpus.jsonl")), queries=_read_queries(_find(root, "queries.jsonl")),
                   qrels=read_qrels(qrels_path), name=root.name)
